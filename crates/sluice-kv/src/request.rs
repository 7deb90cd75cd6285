//! A connection's requests as a worker runs them: parsed from what the
//! connection has read, each run inside its request context (the one the
//! client sent with `SLUICE.WITH`, or the connection's tenant with an id of
//! the server's own sequence), their replies encoded for the connection to
//! send.
//!
//! sluice-io keeps a request's context on the thread that runs it (RCP's
//! enlightenment API, `ctx_begin/ctx_end`), and the store blocks in its
//! I/O: so requests run here, on a worker thread, from parse to reply,
//! while the connection's socket stays with the server's poller.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::time::Instant;

use sluice_core::Ctx;
use sluice_resp::request_context;

use crate::commands::{deferring, execute, noauth, Session};
use crate::resp::{Reply, RequestParser};
use crate::shared::Shared;
use crate::Unsynced;

/// A connection's bytes: `input[start..]` is read and not run,
/// `output[sent..]` is not yet written.
#[derive(Default)]
pub(crate) struct Buffers {
    pub input: Vec<u8>,
    pub start: usize,
    pub output: Vec<u8>,
    pub sent: usize,
    /// Finds the request at `input[start..]`, resuming across reads.
    parser: RequestParser,
}

impl Buffers {
    /// Replies encoded and not yet written.
    pub fn unsent(&self) -> usize {
        self.output.len() - self.sent
    }

    /// Input read and not yet run.
    pub fn unrun(&self) -> usize {
        self.input.len() - self.start
    }

    /// Drops run input; emptied, the buffer goes to the thread's spares.
    fn consumed(&mut self) {
        if drop_done(&mut self.input, &mut self.start) {
            release(&mut self.input);
        }
    }

    /// Drops written output; emptied, the buffer is freed (replies are
    /// mostly small, and may be written from the committing thread).
    pub fn written(&mut self, n: usize) {
        self.sent += n;
        if drop_done(&mut self.output, &mut self.sent) {
            self.output = Vec::new();
        }
    }
}

thread_local! {
    /// Input buffers connections emptied on this thread, for the next
    /// connection it serves: an idle connection holds no buffer, and a busy
    /// worker moves a few between the connections it serves rather than
    /// allocating and freeing a read buffer (16 KiB) per request: malloc
    /// and free were 8% of the server's CPU under durable SET.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Buffers a thread keeps, and the largest it keeps: a pipeline's input
/// may grow to megabytes, which are given back.
const SPARE_BUFFERS: usize = 4;
const SPARE_BYTES: usize = 64 << 10;

/// Gives `buf` room for `room` more bytes; a buffer of none comes from
/// the thread's spares.
pub(crate) fn reserve(buf: &mut Vec<u8>, room: usize) {
    if buf.capacity() == 0 {
        if let Some(spare) = SPARE.with(|s| s.borrow_mut().pop()) {
            *buf = spare;
        }
    }
    buf.reserve(room);
}

/// Takes an emptied buffer from its connection, kept as a spare if the
/// thread has room for it.
fn release(buf: &mut Vec<u8>) {
    let mut spare = std::mem::take(buf);
    if spare.capacity() <= SPARE_BYTES {
        spare.clear();
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_BUFFERS {
                s.push(spare);
            }
        });
    }
}

/// Drops `buf[..*done]`; true if that empties it, for the caller to give
/// the buffer up, so that an idle connection holds none. What is left is
/// moved to the front once that costs no more than what was done.
fn drop_done(buf: &mut Vec<u8>, done: &mut usize) -> bool {
    if *done == buf.len() {
        *done = 0;
        return true;
    }
    if *done > buf.len() / 2 {
        buf.drain(..*done);
        *done = 0;
    }
    false
}

/// What [`run_requests`] did.
pub(crate) struct Ran {
    /// It stopped for the replies not yet sent: input may hold whole
    /// requests still.
    pub stalled: bool,
    /// Writes applied and not yet durable: none of the replies from
    /// `answered` on may be sent before they are synced.
    pub unsynced: Vec<Unsynced>,
    /// Length of the output before this run.
    pub answered: usize,
}

/// Runs whole requests from the connection's input while its unsent
/// replies stay under `output_held`.
///
/// Their writes are applied and made durable together afterwards
/// ([`Ran::unsynced`]), with one sync of the WAL for this connection's batch
/// and those of every other connection ready at the same time: a pipeline
/// of writes costs one sync, not one each, and so do many clients' writes.
pub(crate) fn run_requests(shared: &Shared, session: &mut Session, b: &mut Buffers, output_held: usize) -> Ran {
    let answered = b.output.len();
    let (stalled, unsynced) = deferring(|| {
        while !session.quit {
            if b.unsent() >= output_held {
                return true;
            }
            let limits = if session.authenticated {
                shared.options.limits
            } else {
                shared.options.limits.before_auth()
            };
            // A blocked request runs again before anything sent after it.
            let args = match &session.block {
                Some(block) => block.request.clone(),
                None => match b.parser.parse(&b.input[b.start..], &limits) {
                    Ok(Some((args, n))) => {
                        b.start += n;
                        args
                    }
                    Ok(None) => break,
                    Err(e) => {
                        Reply::error(e).encode(&mut b.output);
                        session.quit = true;
                        break;
                    }
                },
            };
            if args.is_empty() {
                continue;
            }
            let reply = run_request(shared, session, &args);
            if let Some(block) = &mut session.block {
                // Blocked: no reply yet, and nothing after it runs.
                if block.request.is_empty() {
                    block.request = args;
                }
                break;
            }
            // What the command published to this connection itself comes
            // before its reply, as Redis writes it.
            if session.subscriptions() > 0 {
                if let Some(Ok(messages)) = session.mailbox.as_ref().map(|m| m.take()) {
                    for m in messages {
                        m.encode_as(&mut b.output, session.resp3);
                    }
                }
            }
            reply.encode_as(&mut b.output, session.resp3);
        }
        false
    });
    b.consumed();
    Ran {
        stalled,
        unsynced,
        answered,
    }
}

/// Runs one request as foreground work, in its [`request_ctx`].
fn run_request(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let started = Instant::now();
    shared.commands.fetch_add(1, Ordering::Relaxed);
    // Deadlines are compared with the I/O runtime's clock in its queues.
    let rt = shared.db.runtime();
    let arrival = rt.now();
    let (mut ctx, command, ios) = match request_ctx(shared, session, args, arrival) {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    // A request this command does not continue has ended.
    if let Some(open) = session.open.take_if(|open| ios.is_none() || open.id != ctx.id) {
        rt.request_finished(&open);
    }
    let own = session.tenant;
    let (reply, finished) = match ios {
        // One request of several commands: it arrives with its first and
        // finishes with the one that leaves it no I/O, so its I/O policies
        // count it in the system between its commands.
        Some(left) => {
            ctx = ctx.with_est_ios(left);
            if session.open.take().is_none() {
                rt.request_arrived(&ctx);
            }
            let request = sluice_io::enter(ctx);
            let reply = execute(shared, session, command);
            // The client's last command says 1, whatever it read.
            let finished = left == 1 || request.ios() >= left;
            drop(request);
            if finished {
                rt.request_finished(&ctx);
            } else {
                session.open = Some(ctx);
            }
            (reply, finished)
        }
        None => {
            let estimated = ctx.deadline.is_some();
            if estimated {
                ctx = ctx.with_est_ios(shared.io_estimates.estimate(command));
            }
            let request = rt.enter(ctx);
            let reply = execute(shared, session, command);
            if estimated {
                shared.io_estimates.learn(command, request.ios());
            }
            (reply, true)
        }
    };
    // The connection's work counts for the tenant it is now (AUTH counts
    // for the user it names); work of a tenant the client named, for that.
    let tenant = if ctx.tenant.0 == own {
        session.tenant
    } else {
        ctx.tenant.0
    };
    let failed = matches!(reply, Reply::Error(_));
    // A request's deadline is met or missed once, when it finishes.
    let missed = ctx.deadline.filter(|_| finished).map(|d| rt.now() > d);
    shared.record(tenant, started.elapsed().as_nanos() as u64, failed, missed);
    reply
}

/// A request's context, its command, and the I/Os it has left if it
/// spans several commands.
type Contexted<'a> = (Ctx, &'a [Vec<u8>], Option<u32>);

/// The context a request arriving at `arrival` runs in, its command, and
/// the I/Os it has left if it spans several commands: the context the
/// client sent with it ([`sluice_resp::request_context`]), or the
/// session's tenant with an id of the server's own sequence.
fn request_ctx<'a>(
    shared: &Shared,
    session: &Session,
    args: &'a [Vec<u8>],
    arrival: u64,
) -> Result<Contexted<'a>, Reply> {
    let sent = match request_context::unwrap(args) {
        Ok(None) => return Ok((own_ctx(shared, session.tenant, arrival), args, None)),
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
    Ok((ctx, sent.command, sent.ios))
}

/// A context of `tenant`'s, with an id of the server's own sequence.
pub(crate) fn own_ctx(shared: &Shared, tenant: u32, arrival: u64) -> Ctx {
    let id = shared.next_request.fetch_add(1, Ordering::Relaxed);
    Ctx::new(id, arrival).with_tenant(tenant, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> (Shared, tempfile::TempDir) {
        Shared::for_test()
    }

    fn words(w: &[&str]) -> Vec<Vec<u8>> {
        w.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_sent_context_is_the_requests_and_a_bare_command_gets_the_servers_own() {
        let (shared, _dir) = shared();
        let session = Session::new(1, shared.tenant("client-1"), true);
        let wrapped = words(&["SLUICE.WITH", "900", "2.5", "alice", "GET", "k"]);
        let (ctx, command, ios) = request_ctx(&shared, &session, &wrapped, 1_000).unwrap();
        assert_eq!(
            (ctx.id.0, ctx.arrival, ctx.deadline),
            (900, 1_000, Some(1_000 + 2_500_000))
        );
        assert_eq!(ctx.tenant.0, shared.tenant("alice"));
        assert_eq!((command, ios), (&wrapped[4..], None));

        let defaults = words(&["SLUICE.WITH", "901", "-", "-", "PING"]);
        let (ctx, _, _) = request_ctx(&shared, &session, &defaults, 1_000).unwrap();
        assert_eq!((ctx.id.0, ctx.deadline, ctx.tenant.0), (901, None, session.tenant));

        let bare = words(&["GET", "k"]);
        let (first, _, _) = request_ctx(&shared, &session, &bare, 5).unwrap();
        let (second, command, _) = request_ctx(&shared, &session, &bare, 6).unwrap();
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

    /// A request sent as several commands (`IOS n`) stays open between
    /// them and ends with the one that says it is the last, with a command
    /// of another request, or with a bare command; its deadline is counted
    /// once.
    #[test]
    fn a_request_of_several_commands_is_one_request() {
        let (shared, _dir) = shared();
        let mut session = Session::new(1, shared.tenant("client-1"), true);
        run_request(&shared, &mut session, &words(&["SET", "a", "v"]));
        let part = |id: &str, left: &str| words(&["SLUICE.WITH", id, "50", "-", "IOS", left, "GET", "a"]);
        run_request(&shared, &mut session, &part("7", "3"));
        assert_eq!(session.open.map(|c| (c.id.0, c.est_ios)), Some((7, 3)));
        run_request(&shared, &mut session, &part("7", "2"));
        assert_eq!(session.open.map(|c| (c.id.0, c.est_ios)), Some((7, 2)));
        run_request(&shared, &mut session, &part("7", "1"));
        assert_eq!(session.open, None, "the last part ends it");

        run_request(&shared, &mut session, &part("8", "2"));
        run_request(&shared, &mut session, &part("9", "2"));
        assert_eq!(
            session.open.map(|c| c.id.0),
            Some(9),
            "another request's part ends the open one"
        );
        run_request(&shared, &mut session, &words(&["GET", "a"]));
        assert_eq!(session.open, None, "so does a command of no request");
        let counted =
            shared.with_tenants(|mut t| Iterator::find(&mut t, |s| s.name == "client-1").map(|s| (s.ops, s.deadlines)));
        assert_eq!(
            counted,
            Some((7, 1)),
            "seven commands, one request finished with its deadline"
        );
    }
}
