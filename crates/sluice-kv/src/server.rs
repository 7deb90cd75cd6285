//! The RESP server behind `sluice serve`: one thread per connection, each
//! command run inside a sluice-io request context tagged with the
//! connection's tenant, so that the store's I/O for it is foreground work
//! of that tenant. A tenant is the connection, or the user it names with
//! `AUTH user password`.
//!
//! Departure from the rest of Sluice, whose network code (the proxy) runs
//! on tokio: sluice-io keeps the request context on the calling thread
//! (RCP's enlightenment API, `ctx_begin/ctx_end`), and the store blocks in
//! its I/O; a thread per connection keeps each request on one thread from
//! parse to reply.
//!
//! # Hostile clients
//!
//! Whoever can connect must not be able to stop the server or take its
//! memory:
//!
//! - **Accept errors are never fatal.** When the process runs out of file
//!   descriptors (or threads) the listener's error is logged at most once
//!   per second, with how many were not, and accepting pauses 10 ms,
//!   doubling to 100 ms, so that the server does not spin while it waits
//!   for connections to close; errors that concern one connection only
//!   (aborted before it was accepted) are retried at once.
//! - **Bounds before authentication.** With a password configured, a
//!   client that has not authenticated gets Redis's limits
//!   ([`Limits::before_auth`]: 10 arguments of 16 KiB) and small buffers
//!   ([`UNAUTHENTICATED_HELD`]); past them it is answered with the protocol
//!   error and closed. The server holds well under 1 MiB for it.
//! - **Pipelines flow.** A connection reads and writes at once: its socket
//!   is non-blocking and the thread waits in `poll(2)` for whichever of
//!   reading and writing can go on, so a client that writes a long
//!   pipeline before it reads any reply is not deadlocked against a server
//!   blocked writing replies. While a client does not read, its replies
//!   wait up to a bound ([`Held::output`]); past it the connection stops
//!   executing that client's requests (the others run on their own threads
//!   and do not notice), reads on, and holds the requests read but not
//!   executed up to another bound ([`Held::input`]); past that it stops
//!   reading, and TCP holds the client back. A request still arriving is
//!   bounded by [`Limits`] instead: it is not executed before it is whole.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::Ctx;

use crate::commands::{deferring, execute, noauth, Session};
use crate::resp::{Reply, RequestParser};
pub use crate::shared::ServerOptions;
use crate::shared::Shared;
use crate::Db;
use sluice_resp::request_context;

/// Bytes a connection may hold for its client, beyond the request it is
/// still receiving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Whole requests read but not executed, waiting for the client to
    /// read its replies.
    pub input: usize,
    /// Replies not yet written; past this the connection executes nothing
    /// more for the client until it reads.
    pub output: usize,
}

/// An authenticated client's bounds. Redis lets a client's query buffer
/// reach 1 GiB; with a thread per connection and a few hundred clients
/// that is more memory than the machine has, so 64 MiB: many times the
/// pipelines client libraries send (1,000 SETs of 1 KiB are 1 MiB) and
/// several of the store's largest values (16 MiB by default). 1 MiB of
/// replies keeps the socket fed with few system calls; more would only
/// hold memory.
pub const HELD: Held = Held {
    input: 64 << 20,
    output: 1 << 20,
};

/// A client that has not authenticated (with a password configured): a
/// few of its largest requests (10 arguments of 16 KiB) and replies.
pub const UNAUTHENTICATED_HELD: Held = Held {
    input: 256 << 10,
    output: 64 << 10,
};

/// Bytes a connection reads at a time.
const READ_CHUNK: usize = 64 << 10;

/// The pause after a failed accept, doubling up to the second.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(100));

/// Accept failures are logged at most once per this interval.
const ACCEPT_REPORT_INTERVAL: Duration = Duration::from_secs(1);

pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    pub fn bind(addr: impl ToSocketAddrs, db: Arc<Db>, options: ServerOptions) -> std::io::Result<Server> {
        Ok(Server {
            listener: TcpListener::bind(addr)?,
            shared: Arc::new(Shared::new(db, options)),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections for as long as the process runs: a failure to
    /// accept one, or to start its thread, is logged (at most once per
    /// second) and backed off, never fatal.
    pub fn run(self) {
        let mut pause = ACCEPT_BACKOFF.0;
        let mut reports = Throttle::new(ACCEPT_REPORT_INTERVAL);
        loop {
            let (what, e) = match self.listener.accept() {
                Ok((stream, _)) => {
                    let shared = self.shared.clone();
                    let started = std::thread::Builder::new()
                        .name("sluice-kv client".into())
                        .spawn(move || connection(&shared, stream));
                    match started {
                        Ok(_) => {
                            pause = ACCEPT_BACKOFF.0;
                            continue;
                        }
                        Err(e) => ("starting a thread for a connection", e),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => ("accepting a connection", e),
            };
            let once = one_connection(&e);
            if let Some(unreported) = reports.report(Instant::now()) {
                let retry = if once { Duration::ZERO } else { pause };
                tracing::warn!(
                    "{what} failed: {e}; retrying in {retry:?} ({unreported} more failures since the last report)"
                );
            }
            if !once {
                std::thread::sleep(pause);
                pause = (pause * 2).min(ACCEPT_BACKOFF.1);
            }
        }
    }
}

/// Whether an accept error concerns one connection only (it went away
/// before it was accepted; Linux also passes on a pending network error
/// of the new socket), so that accepting the next needs no pause.
fn one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) || matches!(
        e.raw_os_error(),
        Some(
            libc::EPROTO
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
        )
    )
}

/// Reports of a repeating failure, at most one per interval.
struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    unreported: u64,
}

impl Throttle {
    fn new(interval: Duration) -> Throttle {
        Throttle {
            interval,
            last: None,
            unreported: 0,
        }
    }

    /// Whether a failure at `now` is reported; if so, how many since the
    /// last report were not.
    fn report(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|last| now.duration_since(last) < self.interval) {
            self.unreported += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }
}

/// Serves one client until it quits, disconnects or breaks the protocol
/// (answered with the protocol error, then closed); then forgets the
/// tenant named by the connection (a tenant named by AUTH stays).
fn connection(shared: &Shared, stream: TcpStream) {
    let client = shared.next_client.fetch_add(1, Ordering::Relaxed);
    let own = shared.tenant(&format!("client-{client}"));
    let mut session = Session::new(client, own, shared.options.password.is_none());
    if stream.set_nonblocking(true).is_ok() {
        let _ = stream.set_nodelay(true);
        let _ = serve(shared, &mut session, &mut Conn::new(stream));
    }
    shared.forget(own);
}

/// A connection's socket and buffers: `input[start..]` is read and not
/// executed, `output[sent..]` is not yet written.
struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    start: usize,
    output: Vec<u8>,
    sent: usize,
    /// The client has closed its side: what it sent is still executed and
    /// answered.
    eof: bool,
    /// Finds the request at `input[start..]`, resuming across reads.
    parser: RequestParser,
}

/// Serves the connection until the client leaves or the session ends
/// (QUIT, a protocol error), its last replies written.
fn serve(shared: &Shared, session: &mut Session, c: &mut Conn) -> io::Result<()> {
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let held = if session.authenticated {
            HELD
        } else {
            UNAUTHENTICATED_HELD
        };
        let stalled = run_requests(shared, session, c, held.output);
        c.write()?;
        let unsent = c.sent < c.output.len();
        if stalled && !unsent {
            // The socket took every reply: room to run more at once.
            continue;
        }
        if (session.quit || c.eof) && !unsent {
            let _ = c.stream.shutdown(Shutdown::Write);
            return Ok(());
        }
        // Stalled on its replies, the connection reads on up to its bound.
        let read = !c.eof && !session.quit && (!stalled || c.input.len() - c.start < held.input);
        c.wait(read, unsent)?;
        if read {
            c.read(&mut chunk)?;
        }
    }
}

/// Runs whole requests from the connection's input while its unsent
/// replies stay under `output_held`; true if it stopped for them (input
/// may hold whole requests still), false if it ran out of whole requests.
///
/// Their writes are made durable together at the end, with one sync of
/// the WAL, before any of their replies is sent: a pipeline of writes
/// costs one sync, not one each. If the sync fails, none of the batch's
/// replies is sent and the connection closes, as it would in a crash: no
/// write is acknowledged that may not survive one.
fn run_requests(shared: &Shared, session: &mut Session, c: &mut Conn, output_held: usize) -> bool {
    let answered = c.output.len();
    let (stalled, unsynced) = deferring(|| {
        while !session.quit {
            if c.output.len() - c.sent >= output_held {
                return true;
            }
            let limits = if session.authenticated {
                shared.options.limits
            } else {
                shared.options.limits.before_auth()
            };
            let args = match c.parser.parse(&c.input[c.start..], &limits) {
                Ok(Some((args, n))) => {
                    c.start += n;
                    args
                }
                Ok(None) => break,
                Err(e) => {
                    Reply::error(e).encode(&mut c.output);
                    session.quit = true;
                    break;
                }
            };
            if !args.is_empty() {
                run_request(shared, session, &args).encode_as(&mut c.output, session.resp3);
            }
        }
        false
    });
    if !unsynced.is_empty() {
        let rt = shared.db.runtime();
        let id = shared.next_request.fetch_add(1, Ordering::Relaxed);
        let _request = rt.enter(Ctx::new(id, rt.now()).with_tenant(session.tenant, 1.0));
        if let Err(e) = shared.db.sync_to(&unsynced) {
            tracing::warn!("a connection's writes could not be made durable: {e}; closing it unanswered");
            c.output.truncate(answered);
            session.quit = true;
        }
    }
    c.consumed();
    stalled
}

/// Runs one request as foreground work, in its [`request_ctx`].
fn run_request(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let started = Instant::now();
    // Deadlines are compared with the I/O runtime's clock in its queues.
    let rt = shared.db.runtime();
    let arrival = rt.now();
    let (mut ctx, command) = match request_ctx(shared, session, args, arrival) {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    let estimated = ctx.deadline.is_some();
    if estimated {
        ctx = ctx.with_est_ios(shared.io_estimates.estimate(command));
    }
    let own = session.tenant;
    let reply = {
        let request = rt.enter(ctx);
        let reply = execute(shared, session, command);
        if estimated {
            shared.io_estimates.learn(command, request.ios());
        }
        reply
    };
    // The connection's work counts for the tenant it is now (AUTH counts
    // for the user it names); work of a tenant the client named, for that.
    let tenant = if ctx.tenant.0 == own {
        session.tenant
    } else {
        ctx.tenant.0
    };
    let failed = matches!(reply, Reply::Error(_));
    let missed = ctx.deadline.map(|d| rt.now() > d);
    shared.record(tenant, started.elapsed().as_nanos() as u64, failed, missed);
    reply
}

/// The context a request arriving at `arrival` runs in, and its command:
/// the one the client sent with it ([`sluice_resp::request_context`]), or the
/// session's tenant with an id of the server's own sequence.
fn request_ctx<'a>(
    shared: &Shared,
    session: &Session,
    args: &'a [Vec<u8>],
    arrival: u64,
) -> Result<(Ctx, &'a [Vec<u8>]), Reply> {
    let sent = match request_context::unwrap(args) {
        Ok(None) => {
            let id = shared.next_request.fetch_add(1, Ordering::Relaxed);
            return Ok((Ctx::new(id, arrival).with_tenant(session.tenant, 1.0), args));
        }
        // Naming a tenant registers it: not before authentication.
        Ok(Some(_)) if !session.authenticated => return Err(noauth()),
        Ok(Some(sent)) => sent,
        Err(e) => return Err(Reply::error(e)),
    };
    let tenant = match sent.tenant {
        Some(name) => shared.tenant(&String::from_utf8_lossy(name)),
        None => session.tenant,
    };
    let id = sent
        .id
        .unwrap_or_else(|| shared.next_request.fetch_add(1, Ordering::Relaxed));
    let mut ctx = Ctx::new(id, arrival).with_tenant(tenant, 1.0);
    if let Some(budget) = sent.budget {
        ctx = ctx.with_deadline(arrival.saturating_add(budget));
    }
    Ok((ctx, sent.command))
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            input: Vec::new(),
            start: 0,
            output: Vec::new(),
            sent: 0,
            eof: false,
            parser: RequestParser::default(),
        }
    }

    /// Drops executed input; buffers a burst made large go back to a
    /// chunk's size once empty, so that an idle connection holds little.
    fn consumed(&mut self) {
        if self.start == self.input.len() {
            self.input.clear();
            self.input.shrink_to(READ_CHUNK);
            self.start = 0;
        } else if self.start > self.input.len() / 2 {
            // Moving the rest costs no more than the executed part did.
            self.input.drain(..self.start);
            self.start = 0;
        }
    }

    /// Writes replies until they are all written or the socket is full.
    fn write(&mut self) -> io::Result<()> {
        while self.sent < self.output.len() {
            match self.stream.write(&self.output[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.output.len() {
            self.output.clear();
            self.output.shrink_to(READ_CHUNK);
            self.sent = 0;
        } else if self.sent > self.output.len() / 2 {
            self.output.drain(..self.sent);
            self.sent = 0;
        }
        Ok(())
    }

    /// Reads what has arrived, up to a chunk.
    fn read(&mut self, chunk: &mut [u8]) -> io::Result<()> {
        match self.stream.read(chunk) {
            Ok(0) => self.eof = true,
            Ok(n) => self.input.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Waits until the socket can be read (if `read`) or written (if
    /// `write`), or has failed.
    fn wait(&self, read: bool, write: bool) -> io::Result<()> {
        let mut fd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: if read { libc::POLLIN } else { 0 } | if write { libc::POLLOUT } else { 0 },
            revents: 0,
        };
        loop {
            // SAFETY: one pollfd that lives across the call, for a socket
            // this connection owns.
            if unsafe { libc::poll(&mut fd, 1, -1) } >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> (Shared, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let rt = sluice_io::Runtime::new(sluice_io::RuntimeConfig::default()).unwrap();
        let db = Arc::new(Db::open(rt, dir.path(), crate::Options::default()).unwrap());
        let server = Server::bind("127.0.0.1:0", db, ServerOptions::default()).unwrap();
        let shared = Arc::into_inner(server.shared).expect("no connection holds it");
        (shared, dir)
    }

    fn words(w: &[&str]) -> Vec<Vec<u8>> {
        w.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_sent_context_is_the_requests_and_a_bare_command_gets_the_servers_own() {
        let (shared, _dir) = shared();
        let session = Session::new(1, shared.tenant("client-1"), true);
        let wrapped = words(&["SLUICE.WITH", "900", "2.5", "alice", "GET", "k"]);
        let (ctx, command) = request_ctx(&shared, &session, &wrapped, 1_000).unwrap();
        assert_eq!(
            (ctx.id.0, ctx.arrival, ctx.deadline),
            (900, 1_000, Some(1_000 + 2_500_000))
        );
        assert_eq!(ctx.tenant.0, shared.tenant("alice"));
        assert_eq!(command, &wrapped[4..]);

        let defaults = words(&["SLUICE.WITH", "901", "-", "-", "PING"]);
        let (ctx, _) = request_ctx(&shared, &session, &defaults, 1_000).unwrap();
        assert_eq!((ctx.id.0, ctx.deadline, ctx.tenant.0), (901, None, session.tenant));

        let bare = words(&["GET", "k"]);
        let (first, _) = request_ctx(&shared, &session, &bare, 5).unwrap();
        let (second, command) = request_ctx(&shared, &session, &bare, 6).unwrap();
        assert_eq!(second.id.0, first.id.0 + 1, "the server's own sequence");
        assert_eq!((second.tenant.0, command), (session.tenant, &bare[..]));
    }

    #[test]
    fn a_sent_context_is_refused_before_authentication_and_when_malformed() {
        let (shared, _dir) = shared();
        let mut session = Session::new(1, 0, false);
        let wrapped = words(&["SLUICE.WITH", "1", "-", "mallory", "PING"]);
        let refused = request_ctx(&shared, &session, &wrapped, 0).unwrap_err();
        assert!(
            matches!(&refused, Reply::Error(e) if e.starts_with("NOAUTH")),
            "{refused:?}"
        );
        assert!(
            shared.with_tenants(|mut t| !Iterator::any(&mut t, |s| s.name == "mallory")),
            "no tenant registered"
        );
        session.authenticated = true;
        let bad = words(&["SLUICE.WITH", "1", "-1", "-", "PING"]);
        let refused = request_ctx(&shared, &session, &bad, 0).unwrap_err();
        assert!(
            matches!(&refused, Reply::Error(e) if e.starts_with("ERR SLUICE.WITH: the budget")),
            "{refused:?}"
        );
    }

    #[test]
    fn requests_with_a_deadline_are_estimated_from_their_predecessors_and_an_expired_one_is_served() {
        let (shared, _dir) = shared();
        let mut session = Session::new(1, shared.tenant("client-1"), true);
        for k in ["a", "b"] {
            run_request(&shared, &mut session, &words(&["SET", k, "v"]));
        }
        shared.db.flush().unwrap();
        let scan = words(&["RANGE", "a", "z", "1000"]);
        assert_eq!(
            shared.io_estimates.estimate(&scan),
            1000,
            "nothing learned: an I/O a record"
        );
        let with_deadline = words(&["SLUICE.WITH", "7", "50", "-", "RANGE", "a", "z", "1000"]);
        let reply = run_request(&shared, &mut session, &with_deadline);
        assert!(matches!(reply, Reply::Array(ref keys) if keys.len() == 4), "{reply:?}");
        let learned = shared.io_estimates.estimate(&scan);
        assert!((1..20).contains(&learned), "two records read from one table: {learned}");

        let expired = words(&["SLUICE.WITH", "8", "0", "-", "GET", "a"]);
        let reply = run_request(&shared, &mut session, &expired);
        assert!(matches!(reply, Reply::Bulk(Some(ref v)) if v == b"v"), "{reply:?}");
        let counted = shared
            .with_tenants(|mut t| Iterator::find(&mut t, |s| s.name == "client-1").map(|s| (s.deadlines, s.missed)));
        assert_eq!(
            counted,
            Some((2, 1)),
            "the scan met its 50 ms, the expired GET is a miss"
        );
    }

    #[test]
    fn failures_are_reported_once_per_interval_with_a_count() {
        let mut t = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(t.report(at(0)), Some(0));
        assert_eq!(t.report(at(10)), None);
        assert_eq!(t.report(at(999)), None);
        assert_eq!(t.report(at(1000)), Some(2), "the two in between are counted");
        assert_eq!(t.report(at(2500)), Some(0));
    }

    #[test]
    fn only_errors_of_one_connection_skip_the_pause() {
        assert!(one_connection(&io::ErrorKind::ConnectionAborted.into()));
        assert!(one_connection(&io::Error::from_raw_os_error(libc::EPROTO)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::ENOMEM)));
    }
}
