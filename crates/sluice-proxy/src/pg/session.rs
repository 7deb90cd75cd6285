//! One PostgreSQL client connection through the proxy: its startup and
//! login, and its requests.
//!
//! Startup: SSLRequest is answered 'S' and the session continues inside
//! TLS when TLS is configured ([`super::tls`]), else 'N'; GSSENCRequest is
//! answered 'N'; a CancelRequest is forwarded to the backend it names; the
//! StartupMessage is relayed to a fresh upstream connection (inside TLS when
//! `[proxy.upstream_tls]` is set, [`super::upstream_tls`]). Authentication
//! (cleartext, MD5, SCRAM-SHA-256) is relayed byte for byte, so the proxy
//! never sees a password it could check or leak (on SCRAM channel binding
//! across TLS on both sides, see [`super::upstream_tls`]). Under transaction pooling
//! ([`super::pool`]) that connection joins the pool once the login is over,
//! each request leases a backend after the gate lets it in and returns it
//! at its end, the client's named prepared statements follow it from
//! backend to backend ([`super::prepared`]; the first Bind of one the
//! client described, on a backend not known to have it with the result
//! the client was told, waits while the proxy makes and describes it
//! there), so do the settings PostgreSQL reports ([`super::reported`]:
//! set on a backend with other values by a Query of the proxy's own ahead
//! of the request), and the client gets a BackendKeyData key of the
//! proxy's making; a query sent before the login finished is a protocol
//! error there.
//!
//! Requests: a request begins with the first message the client sends while
//! no request is in flight (after authentication, or after a ReadyForQuery
//! with status 'I' that answered everything sent) and ends at the
//! ReadyForQuery with status 'I' that answers the last Sync, Query or
//! FunctionCall sent. A transaction block therefore stays one request and
//! is never held back midway, and pipelined extended-protocol batches end
//! only when the server has answered all of them. Which ReadyForQuery that
//! is follows PostgreSQL's own rules ([`super::batch`]): a Query or
//! FunctionCall sent after an extended-protocol message failed, before the
//! next Sync, is skipped with no ReadyForQuery of its own, and Syncs sent
//! while the server reads a COPY FROM STDIN are ignored.
//!
//! A refused request gets an ErrorResponse (severity ERROR, the refusal's
//! SQLSTATE and message) and then ReadyForQuery 'I', as PostgreSQL answers a
//! failed statement: a Query or FunctionCall is answered at once; an
//! extended-protocol batch is discarded up to its Sync, which gets the
//! ReadyForQuery. A malformed message gets ErrorResponse 08P01 and closes
//! that connection only.
//!
//! Waiting on the client: once a request's answers are all in and the last
//! ReadyForQuery says a transaction is open ('T' or 'E'), the request waits
//! on its client. After `idle_in_transaction_release_ms` of that its gate
//! slot is parked (see [`crate::gate`]: P counts work inside the database),
//! and the client's next message takes it back at once. The default, 10 ms,
//! is far above the gap between a ReadyForQuery and the next statement of a
//! client that runs its transaction without pausing (well under 1 ms on one
//! host, a few ms across a LAN), so such transactions keep their slot and
//! never touch the gate between statements, and far below the admission
//! wait other clients would otherwise spend behind one that pauses: a
//! paused slot costs them at most 10 ms once. A request also waits on its
//! client once the server has answered every extended-protocol message
//! sent before a Flush and no Sync is pending: a driver that prepares with
//! Parse, Describe and Flush (asyncpg's `prepare()`), or a cursor between
//! fetches, leaves its session so until it goes on; and once one of them
//! failed with no Sync sent after it, for the server then skips all but a
//! Sync (what the client sends meanwhile is skipped, and the request goes
//! back to waiting on it). PostgreSQL's idle-in-transaction timeout does
//! not run there (it waits for the Sync), and neither does the proxy's. A
//! client that sends such messages with neither Flush nor Sync and then
//! stays quiet `idle_in_transaction_release_ms` is sent a Flush of the
//! proxy's own, so that the server's answers (which the client receives
//! before it asks for them, as PostgreSQL allows) tell whether the work is
//! done; its request then waits on it as after a Flush of its own. A
//! client that stalls mid-request is waited on too: once a write to it has
//! been pending `idle_in_transaction_release_ms` (it does not read, and its
//! socket is full), or a read from it while the server reads its COPY FROM
//! STDIN (it sends nothing, or half a message), its slot is parked until
//! that goes through, for the backend then waits on the client as well
//! (the proxy reads nothing more from it while a write is pending). With
//! `idle_in_transaction_timeout_ms` set, a session that waits on its client
//! in a transaction that long is ended with FATAL 25P03, as PostgreSQL's
//! idle_in_transaction_session_timeout does; its backend goes with it and
//! the server rolls the transaction back.
//!
//! Before login: the whole login (startup packets, TLS handshake,
//! authentication up to the first ReadyForQuery) must complete within
//! `login_timeout_ms` (PostgreSQL's authentication_timeout), or the client
//! gets FATAL 08P01 and is closed (without a word inside an unfinished TLS
//! handshake). A drain does not wait for a login either: once the proxy
//! drains, a client still in the startup phase, the TLS handshake or the
//! proxy's own password request has [`DRAIN_GRACE`] to finish that step,
//! then gets FATAL 57P01 and is closed. A startup packet is at most 10,000
//! bytes (PostgreSQL's MAX_STARTUP_PACKET_LENGTH) and any other message
//! before the login completes at most [`MAX_LOGIN_MESSAGE_LEN`]
//! (PostgreSQL's limit for authentication messages), so an unauthenticated
//! client cannot make the proxy buffer more; after login a message may be
//! as long as PostgreSQL allows.
//!
//! When the server goes away under a session, its client is told with FATAL
//! 08006 (unless the server said why itself), whichever direction noticed.
//!
//! # States
//!
//! A session is in one of these states; the messages that move it are
//! named as PostgreSQL's protocol names them. Two halves run a session
//! after startup, polled together in one task ([`crate::relay::drive`]):
//! [`ToUpstream`] (client → server) and [`ToClient`] (server → client);
//! the state they share is in [`State`], and the table says which fields
//! hold each state.
//!
//! | state | held as | on | next |
//! |---|---|---|---|
//! | startup | [`startup`] running | SSLRequest | 'S' and a TLS handshake, then startup again; 'N' without TLS |
//! | | | GSSENCRequest | 'N', startup again |
//! | | | CancelRequest | stops the named session's request if it is on its way to a backend (57014), else forwarded to the backend that session uses; closed |
//! | | | StartupMessage | relayed: authenticating; under transaction pooling, one the server let in lately is answered from the pool instead ([`super::pool::Pool::welcome`]), its password asked and judged by the proxy if the server asked one ([`super::verifier`]): idle |
//! | | | `login_timeout_ms` passes, or the proxy drains (and the step does not finish within [`DRAIN_GRACE`]), before the StartupMessage or while the proxy asks the password | FATAL 08P01 or 57P01 (nothing inside an unfinished TLS handshake); closed |
//! | authenticating | `State::authenticating` | AuthenticationRequest, password or SASL messages | relayed byte for byte, authenticating |
//! | | | the first ReadyForQuery | idle |
//! | | | `login_timeout_ms` passes | FATAL 08P01; closed |
//! | idle | `State::request` is `None` | a client message other than Flush and the Copy messages | admission: the gate gives a slot (in request) or refuses (ErrorResponse and ReadyForQuery 'I'; idle) |
//! | in request | `State::request` is `Some`; `State::batches` awaits an answer | Query, FunctionCall or Sync | forwarded, a batch's end to answer (none for a Query or FunctionCall the server skips after an error) |
//! | | | Parse, Bind, Execute, Describe, Close | forwarded, to be answered before the next Sync, Query or FunctionCall |
//! | | | Flush, CopyData, CopyDone, CopyFail | forwarded |
//! | | | the client quiet `idle_in_transaction_release_ms` after Parse, Bind, Execute, Describe or Close with no Flush, Sync, Query or FunctionCall since | a Flush of the proxy's own to the server |
//! | | | ReadyForQuery 'I' answering every Sync, Query and FunctionCall | the slot is given back (and under transaction pooling the backend): idle |
//! | | | ReadyForQuery 'T' or 'E' answering all of them | waiting on the client |
//! | | | the last answer to the messages before a Flush, or an ErrorResponse to one of them, with no Sync pending | waiting on the client (no timeout) |
//! | waiting on the client | `State::idle_since` is `Some` | a client message | in request (the slot kept, or taken back) |
//! | | | `idle_in_transaction_release_ms` passes | parked |
//! | parked | `ToClient::parked` | a client message | in request: the slot is taken back at once, even above P |
//! | | | (parked while a write to the client, or a read of its COPY data, is pending) it goes through | in request |
//! | | | `idle_in_transaction_timeout_ms` passes | FATAL 25P03; closed |
//! | any | | Terminate, the client or the server gone, a malformed message (08P01), the proxy draining with no request in flight (57P01) | closed |

use std::future::Future;
use std::io;
use std::mem;
use std::ops::Range;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Notify};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsAcceptor;

use super::batch::Batches;
use super::cancel::CancelGuard;
use super::context::PgContext;
use super::frame::{self, BackendKey, PgError, Startup, StartupParams};
use super::pool::{Backend, Link, LinkWriter, Pool, PoolError};
use super::prepared::Statements;
use super::reported::Reported;
use super::verifier::{Check, Exchange, Refusal, Verifier};
use crate::buffer::room_to_read;
use crate::client::Peer;
use crate::config::TenantKey;
use crate::gate::Slot;
use crate::relay::{admit, drive, send, ClientEnd, Flags, Outcome, Tenancy};
use crate::socket::{self, Stream};

/// Longest message other than a startup packet accepted before the login
/// completes: PostgreSQL reads an authentication message of at most
/// PG_MAX_AUTH_TOKEN_LENGTH (65,535) bytes, plus its tag and length.
pub const MAX_LOGIN_MESSAGE_LEN: usize = 65_535 + 5;

/// The most reserved at once for the rest of a client's message, so that a
/// client declaring a long message and sending little of it (or many such
/// clients) cannot make the proxy ask for gigabytes it may not get.
const MAX_RESERVE: usize = 1 << 20;

/// What a request cancelled after the gate let it in, before it had a
/// backend, is told (PostgreSQL's words, then where it stopped).
const CANCELLED_ON_ITS_WAY: &str =
    "canceling statement due to user request (sluice: before it reached a server connection)";

/// What PostgreSQL tells a client binding a prepared statement whose
/// result a schema change altered (SQLSTATE 0A000); under transaction
/// pooling the proxy tells it where a backend made the statement anew with
/// the new result.
const RESULT_CHANGED: &str = "cached plan must not change result type";

/// Where the idle timer stands, never polled, while no request waits on
/// its client.
const UNARMED: Duration = Duration::from_secs(24 * 60 * 60);

/// A request inside the database.
struct Request {
    slot: Slot,
    outcome: Outcome,
    error: bool,
}

/// What the two directions share.
struct State {
    authenticating: bool,
    /// Under transaction pooling, the password exchange of a login relayed
    /// to the server, as it goes (see [`super::verifier`]).
    exchange: Exchange,
    request: Option<Request>,
    /// What the client sent that the server has yet to answer.
    batches: Batches,
    /// The proxy's own messages to the client, written at the next message
    /// boundary of the server's stream.
    outbox: BytesMut,
    /// Under transaction pooling: the client's named prepared statements.
    statements: Statements,
    /// Under transaction pooling: the reported settings as the client was
    /// last told them, which follow it from backend to backend.
    reported: Reported,
    /// Since when the request waits on its client inside a transaction;
    /// cleared by the client's next message.
    idle_since: Option<Instant>,
    /// Writing to the server failed: it is gone.
    upstream_gone: bool,
}

struct Shared {
    state: Mutex<State>,
    flags: Flags,
    /// The backend in use. Under transaction pooling it is taken from the
    /// link, with the state locked, before the request is cleared: the
    /// client side leases a new one only once it sees no request in flight.
    link: Arc<Link>,
    pooling: Option<Pooling>,
    /// Under transaction pooling: the result a held Bind waits for is told
    /// (see [`Statements::holding`]).
    decided: Notify,
    /// The server began to read a COPY FROM STDIN: a read from the client
    /// that waits is to be waited on as a stall.
    copy_began: Notify,
    /// Under transaction pooling: Queries of the proxy's own that set the
    /// client's reported settings on its backend, not yet answered. Each
    /// went ahead of the client's request, so the server's next answers
    /// are theirs; the client sees none of their CommandComplete,
    /// ErrorResponse or ReadyForQuery.
    restoring: AtomicU32,
}

/// Transaction pooling: where this session's backends come from.
struct Pooling {
    pool: Arc<Pool>,
    /// The client's StartupMessage, which names its pool.
    login: Bytes,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues the proxy's own message for the client.
    fn answer(&self, write: impl FnOnce(&mut BytesMut)) {
        write(&mut self.lock().outbox);
        self.flags.wake.notify_one();
    }
}

/// Serves one client from its first byte: inside TLS if it asks for it and
/// TLS is configured (see [`super::tls`]).
pub(crate) async fn serve(
    mut client: Stream,
    peer: &Peer,
    ctx: &PgContext,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut buf = BytesMut::new();
    let deadline = Instant::now() + ctx.limits.login_timeout;
    let begun = login_step(
        deadline,
        &mut shutdown,
        startup(&mut client, &mut buf, ctx.tls.is_some()),
    )
    .await;
    let begun = match begun {
        Ok(begun) => begun,
        Err(cut) => return cut.tell(&mut client, ctx).await,
    };
    match (begun?, &ctx.tls) {
        (StartupEnd::Session(startup), _) => {
            let (rd, wr) = socket::split(&mut client);
            session(rd, wr, buf, startup, peer, ctx, deadline, shutdown).await
        }
        // Boxed: a TLS session's state (the TLS connection's and its own)
        // would otherwise size every plain session's future too, and an
        // idle client holds its future whole.
        (StartupEnd::Tls, Some(acceptor)) => {
            Box::pin(serve_tls(acceptor, client, buf, peer, ctx, deadline, shutdown)).await
        }
        (StartupEnd::Cancel(key), _) => {
            forward_cancel(ctx, key).await;
            Ok(())
        }
        (StartupEnd::Tls, None) | (StartupEnd::Done, _) => Ok(()),
    }
}

/// Forwards a CancelRequest, outside the login deadline: the forward waits
/// for the server to take the cancel (see [`super::cancel`]), and one cut
/// short by a small `login_timeout_ms` would let the backend go to another
/// client before the cancel reached it.
async fn forward_cancel(ctx: &PgContext, key: BackendKey) {
    if let Err(e) = ctx.cancels.forward(key).await {
        tracing::debug!("forwarding a CancelRequest failed: {e}");
    }
}

fn login_timed_out(ctx: &PgContext) -> String {
    format!(
        "sluice: the login did not complete within login_timeout_ms = {}",
        ctx.limits.login_timeout.as_millis()
    )
}

/// Why a login step was cut short.
enum Cut {
    /// The login deadline passed.
    TimedOut,
    /// The proxy began to drain.
    Draining,
}

impl Cut {
    /// Tells the client why its login ends.
    async fn tell<W: AsyncWrite + Unpin>(self, client: &mut W, ctx: &PgContext) -> io::Result<()> {
        match self {
            Cut::TimedOut => fatal(client, "08P01", &login_timed_out(ctx)).await,
            Cut::Draining => fatal(client, "57P01", SHUTTING_DOWN).await,
        }
    }
}

/// What a client hears when the proxy drains before its session is done.
const SHUTTING_DOWN: &str = "sluice: the proxy is shutting down";

/// How long a login step may still take once the proxy drains: long enough
/// for what the client sent as the drain began (a StartupMessage, a
/// CancelRequest, the rest of a TLS handshake, a password) to arrive, so a
/// cancel is forwarded and the client is told inside TLS, not cut off.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// Runs one step of a login before the proxy relays it (the startup phase,
/// the TLS handshake, the proxy's own password exchange) until `deadline`,
/// or until [`DRAIN_GRACE`] after the proxy begins to drain: a client that
/// sits at such a step has no request in flight, and would otherwise hold
/// a drain for up to `login_timeout_ms`. A dropped sender drains too, as in
/// [`crate::relay::drive`].
async fn login_step<T>(
    deadline: Instant,
    shutdown: &mut watch::Receiver<bool>,
    step: impl Future<Output = T>,
) -> Result<T, Cut> {
    let mut step = pin!(timeout_at(deadline, step));
    tokio::select! {
        biased;
        done = &mut step => return done.map_err(|_| Cut::TimedOut),
        _ = shutdown.wait_for(|draining| *draining) => {}
    }
    let grace = deadline.min(Instant::now() + DRAIN_GRACE);
    match timeout_at(grace, step).await {
        Ok(done) => done.map_err(|_| Cut::TimedOut),
        Err(_) => Err(Cut::Draining),
    }
}

/// Serves a client that was answered 'S' to its SSLRequest: the TLS
/// handshake, then the session inside it.
async fn serve_tls(
    acceptor: &TlsAcceptor,
    client: Stream,
    mut buf: BytesMut,
    peer: &Peer,
    ctx: &PgContext,
    deadline: Instant,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    // An unfinished handshake has no channel to say why on.
    let Ok(handshake) = login_step(deadline, &mut shutdown, acceptor.accept(client)).await else {
        return Ok(());
    };
    let mut client = handshake?;
    let begun = match login_step(deadline, &mut shutdown, startup(&mut client, &mut buf, false)).await {
        Ok(begun) => begun,
        Err(cut) => return cut.tell(&mut client, ctx).await,
    };
    match begun? {
        StartupEnd::Session(startup) => {
            let (rd, wr) = tokio::io::split(client);
            session(rd, wr, buf, startup, peer, ctx, deadline, shutdown).await
        }
        StartupEnd::Cancel(key) => {
            forward_cancel(ctx, key).await;
            Ok(())
        }
        StartupEnd::Tls | StartupEnd::Done => Ok(()),
    }
}

/// How the startup phase ended.
enum StartupEnd {
    /// A StartupMessage: its parameters and length, the message itself
    /// still at the start of the buffer (to be relayed).
    Session((StartupParams, usize)),
    /// The client asked for TLS and was answered 'S'.
    Tls,
    /// A CancelRequest, to be forwarded.
    Cancel(BackendKey),
    /// An early close, or a malformed packet (answered).
    Done,
}

/// Relays one session once its StartupMessage is in `buf`; the login must
/// complete by `login_deadline`.
#[allow(clippy::too_many_arguments)]
async fn session<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut client_rd: R,
    mut client_wr: W,
    mut buf: BytesMut,
    (params, startup_len): (StartupParams, usize),
    peer: &Peer,
    ctx: &PgContext,
    login_deadline: Instant,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    // Under transaction pooling a login the server let in before is
    // answered from the pool, its password (if it was asked one) judged by
    // the proxy (see `Pool::welcome`).
    let welcome = ctx.pool.as_ref().and_then(|pool| pool.welcome(&buf[..startup_len]));
    let forgets_before = ctx.pool.as_ref().map_or(0, |pool| pool.forgets());
    if let Some((pool, verifier)) = ctx
        .pool
        .as_ref()
        .zip(welcome.as_ref().and_then(|w| w.verifier.as_deref()))
    {
        let mut rest = buf.split_off(startup_len);
        let login = (&buf[..], params.user.as_deref().unwrap_or_default());
        let asked = ask_password(&mut client_rd, &mut client_wr, &mut rest, verifier, pool, login);
        match login_step(login_deadline, &mut shutdown, asked).await {
            Ok(Ok(true)) => buf.unsplit(rest),
            Ok(Ok(false)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(cut) => return cut.tell(&mut client_wr, ctx).await,
        }
    }
    let link = Arc::new(Link::default());
    if welcome.is_none() {
        // A login that began as the proxy drained is told so before it
        // costs the server a process.
        if *shutdown.borrow() {
            return Cut::Draining.tell(&mut client_wr, ctx).await;
        }
        let backend = match Backend::connect(&ctx.upstream, ctx.upstream_tls.as_deref()).await {
            Ok(backend) => backend,
            Err(e) => {
                let msg = format!("sluice: cannot reach the upstream server {}: {e}", ctx.upstream);
                return fatal(&mut client_wr, "08006", &msg).await;
            }
        };
        link.set(Arc::new(backend));
    }
    let pooling = ctx.pool.as_ref().map(|pool| Pooling {
        pool: Arc::clone(pool),
        login: Bytes::copy_from_slice(&buf[..startup_len]),
    });
    let name = tenant_name(ctx, peer, &params);
    let shared = Shared {
        state: Mutex::new(State {
            authenticating: true,
            exchange: Exchange::default(),
            request: None,
            batches: Batches::default(),
            outbox: BytesMut::new(),
            statements: Statements::new(pooling.as_ref().map_or(0, |p| p.pool.max_prepared())),
            reported: Reported::default(),
            idle_since: None,
            upstream_gone: false,
        }),
        flags: Flags::default(),
        link,
        pooling,
        decided: Notify::new(),
        copy_began: Notify::new(),
        restoring: AtomicU32::new(0),
    };
    let to_upstream = ToUpstream {
        client: client_rd,
        upstream: shared.link.writer(),
        buf,
        startup_len,
        shared: &shared,
        ctx,
        who: ctx.who(&name),
        discarding: false,
        out: BytesMut::new(),
        rewritten: BytesMut::new(),
        login_deadline,
        logged_in: false,
        unflushed: false,
        welcomed: welcome.is_some(),
    };
    let login_answers = (shared.pooling.is_some() && welcome.is_none()).then(BytesMut::new);
    let to_client = ToClient {
        client: client_wr,
        buf: welcome.map(|w| BytesMut::from(&w.answers[..])).unwrap_or_default(),
        login_answers,
        forgets_before,
        shared: &shared,
        ctx,
        cancel: None,
        last_tag: 0,
        challenged: false,
        reopens: false,
        idle: None,
        parked: false,
        flushed: false,
        batch_answered: 0,
        replacement: BytesMut::new(),
        describing: false,
        restore_failed: false,
    };
    drive(to_upstream.run(), to_client.run(), &shared.flags, shutdown).await
}

/// Asks the client for its password as the server asked when it let this
/// login (its StartupMessage and user) in, and judges the responses
/// ([`super::verifier`]); `buf` holds what the client sent after its
/// StartupMessage. Returns whether the password was proved; a client
/// refused is told why, and a wrong password sends the next login of it
/// to the server, in case the server's password changed.
async fn ask_password<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    client_rd: &mut R,
    client_wr: &mut W,
    buf: &mut BytesMut,
    verifier: &Verifier,
    pool: &Pool,
    (startup, user): (&[u8], &str),
) -> io::Result<bool> {
    let mut out = BytesMut::new();
    let mut check = Check::ask(verifier, user, &mut out);
    loop {
        send(client_wr, &out).await?;
        out.clear();
        let header = loop {
            match frame::parse_header(buf) {
                Ok(Some(header)) if header.len > MAX_LOGIN_MESSAGE_LEN => {
                    let e = format!(
                        "sluice: a password message of {} bytes (at most {MAX_LOGIN_MESSAGE_LEN})",
                        header.len
                    );
                    fatal(client_wr, "08P01", &e).await?;
                    return Ok(false);
                }
                Ok(Some(header)) if header.len <= buf.len() => break header,
                Ok(_) => {
                    if client_rd.read_buf(buf).await? == 0 {
                        return Ok(false);
                    }
                }
                Err(e) => {
                    fatal(client_wr, e.sqlstate(), &e.to_string()).await?;
                    return Ok(false);
                }
            }
        };
        let message = buf.split_to(header.len);
        let judged = match header.tag {
            b'p' => check.answer(&message[5..], &mut out),
            _ => Err(Refusal::Malformed("a message other than a password message")),
        };
        match judged {
            Ok(false) => {}
            Ok(true) => {
                send(client_wr, &out).await?;
                return Ok(true);
            }
            Err(refusal) => {
                if matches!(refusal, Refusal::Wrong(_)) {
                    pool.forget_welcome(startup);
                }
                fatal(client_wr, refusal.sqlstate(), &refusal.to_string()).await?;
                return Ok(false);
            }
        }
    }
}

/// Runs the startup phase: answers SSLRequest ('S' if `offer_tls`, else
/// 'N') and GSSENCRequest ('N'), hands back a CancelRequest, and answers a
/// malformed packet with a FATAL error.
async fn startup<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut S,
    buf: &mut BytesMut,
    offer_tls: bool,
) -> io::Result<StartupEnd> {
    loop {
        let (packet, len) = match frame::parse_startup(buf) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => {
                if client.read_buf(buf).await? == 0 {
                    return Ok(StartupEnd::Done);
                }
                continue;
            }
            Err(e) => {
                fatal(client, e.sqlstate(), &e.to_string()).await?;
                return Ok(StartupEnd::Done);
            }
        };
        match packet {
            Startup::Ssl | Startup::GssEnc => {
                buf.advance(len);
                // The client must wait for the answer before it sends more:
                // bytes already here would be read as if encrypted.
                if !buf.is_empty() {
                    let e = PgError::BadPacket {
                        what: "SSLRequest",
                        problem: "data followed it before the answer",
                    };
                    fatal(client, e.sqlstate(), &e.to_string()).await?;
                    return Ok(StartupEnd::Done);
                }
                if offer_tls && matches!(packet, Startup::Ssl) {
                    send(client, b"S").await?;
                    return Ok(StartupEnd::Tls);
                }
                send(client, b"N").await?;
            }
            Startup::Cancel(key) => return Ok(StartupEnd::Cancel(key)),
            Startup::Message(params) => return Ok(StartupEnd::Session((params, len))),
        }
    }
}

fn tenant_name(ctx: &PgContext, peer: &Peer, params: &StartupParams) -> String {
    let chosen = match ctx.tenant_key {
        TenantKey::User => params.user.clone(),
        // PostgreSQL's default database is the user's name.
        TenantKey::Database => params.database.clone().or_else(|| params.user.clone()),
        TenantKey::ApplicationName => params.application_name.clone(),
        _ => ctx.tenant_by_address(peer),
    };
    chosen.filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into())
}

/// Sends a FATAL ErrorResponse; the connection closes after it.
async fn fatal<W: AsyncWrite + Unpin>(client: &mut W, sqlstate: &str, message: &str) -> io::Result<()> {
    let mut out = BytesMut::new();
    frame::write_error(&mut out, "FATAL", sqlstate, message);
    send(client, &out).await
}

/// Client → upstream: frames messages, asks the gate at each request's
/// first message, forwards.
struct ToUpstream<'a, R> {
    client: R,
    upstream: LinkWriter<'a>,
    /// Starts with the StartupMessage, relayed first.
    buf: BytesMut,
    startup_len: usize,
    shared: &'a Shared,
    ctx: &'a PgContext,
    who: Tenancy,
    /// A refused extended-protocol batch is being dropped up to its Sync.
    discarding: bool,
    /// Kept between reads so as not to allocate: see [`Pending`].
    out: BytesMut,
    /// A message rewritten under transaction pooling, before it joins `out`.
    rewritten: BytesMut,
    login_deadline: Instant,
    /// The login completed (seen once, so as not to ask the state again).
    logged_in: bool,
    /// Extended-protocol messages went to the server with no Flush, Sync,
    /// Query or FunctionCall after them: it holds their answers back.
    unflushed: bool,
    /// The login is answered from the pool: no server is sent the
    /// StartupMessage.
    welcomed: bool,
}

/// What to do with one message.
enum Action {
    Forward,
    Skip,
    /// Forward it, then stop.
    Last(ClientEnd),
    /// Drop it and stop.
    Stop(ClientEnd),
}

impl<R: AsyncRead + Unpin> ToUpstream<'_, R> {
    async fn run(mut self) -> io::Result<ClientEnd> {
        if !self.welcomed {
            if let Err(e) = send(&mut self.upstream, &self.buf[..self.startup_len]).await {
                return Ok(self.upstream_failed(&e));
            }
        }
        self.buf.advance(self.startup_len);
        // Registered once, not at every read (see `ToClient::run`).
        let shared = self.shared;
        let mut copy_began = pin!(shared.copy_began.notified());
        loop {
            match self.forward().await {
                Ok(Some(end)) => return Ok(end),
                Ok(None) => {}
                // Only writes to the server fail in `forward`.
                Err(e) => return Ok(self.upstream_failed(&e)),
            }
            room_to_read(&mut self.buf);
            if !self.logging_in() {
                // A server reading a COPY FROM STDIN waits on the client;
                // one that begins to while this read waits wakes it, to
                // read again so.
                let copying = shared.lock().batches.copying_in();
                let idle_release = self.ctx.limits.idle_release;
                // A client quiet after messages whose answers the server
                // holds back is sent them: its request then waits on it,
                // and its slot is parked, as after a Flush of its own.
                let flush_at = (!copying && self.unflushed).then(|| Instant::now() + idle_release);
                let read = self.client.read_buf(&mut self.buf);
                let read = if copying {
                    parked_while_stalled(shared, idle_release, read).await?
                } else {
                    tokio::select! {
                        biased;
                        read = read => read?,
                        () = copy_began.as_mut() => {
                            copy_began.set(shared.copy_began.notified());
                            continue;
                        }
                        () = sleep_until_some(flush_at) => {
                            self.unflushed = false;
                            if let Err(e) = send(&mut self.upstream, FLUSH).await {
                                return Ok(self.upstream_failed(&e));
                            }
                            continue;
                        }
                    }
                };
                if read == 0 {
                    return Ok(ClientEnd::Closed);
                }
                continue;
            }
            match timeout_at(self.login_deadline, self.client.read_buf(&mut self.buf)).await {
                Ok(read) => {
                    if read? == 0 {
                        return Ok(ClientEnd::Closed);
                    }
                }
                Err(_) if self.logging_in() => {
                    let e = login_timed_out(self.ctx);
                    self.shared.answer(|out| frame::write_error(out, "FATAL", "08P01", &e));
                    return Ok(ClientEnd::ProtocolError);
                }
                // The login completed while the client was quiet.
                Err(_) => {}
            }
        }
    }

    /// Whether the login is still going on.
    fn logging_in(&mut self) -> bool {
        if !self.logged_in {
            self.logged_in = !self.shared.lock().authenticating;
        }
        !self.logged_in
    }

    /// Writing to the server failed: the session ends, its client told by
    /// the other direction (see [`ToClient::finished`]).
    fn upstream_failed(&self, e: &io::Error) -> ClientEnd {
        tracing::debug!("writing to the upstream server failed: {e}");
        self.shared.lock().upstream_gone = true;
        ClientEnd::ProtocolError
    }

    /// The longest message the client may send now: held whole before it
    /// goes on, so bounded before the login and by `max_message_bytes`.
    fn message_limit(&mut self) -> usize {
        if self.logging_in() {
            MAX_LOGIN_MESSAGE_LEN
        } else {
            self.ctx.max_message
        }
    }

    fn too_long(&mut self, tag: u8, len: usize) -> String {
        let tag = char::from(tag).escape_default();
        if self.logging_in() {
            format!("sluice: message too long before login: '{tag}' of {len} bytes (at most {MAX_LOGIN_MESSAGE_LEN} until the login completes)")
        } else {
            format!(
                "sluice: message '{tag}' of {len} bytes exceeds max_message_bytes = {}",
                self.ctx.max_message
            )
        }
    }

    /// Handles every complete message in the buffer; forwarded messages go
    /// upstream in as few writes as possible.
    async fn forward(&mut self) -> io::Result<Option<ClientEnd>> {
        let mut buf = mem::take(&mut self.buf);
        let mut pending = Pending::new(mem::take(&mut self.out));
        let mut pos = 0;
        let outcome = loop {
            let header = match frame::parse_header(&buf[pos..]) {
                Ok(Some(header)) if header.len > self.message_limit() => {
                    let e = self.too_long(header.tag, header.len);
                    self.shared.answer(|out| frame::write_error(out, "FATAL", "08P01", &e));
                    break Some(ClientEnd::ProtocolError);
                }
                Ok(Some(header)) if header.len <= buf.len() - pos => header,
                Ok(Some(header)) => {
                    // The declared length is the client's word: memory follows
                    // the bytes that arrive, at most MAX_RESERVE ahead of them.
                    buf.reserve((header.len - (buf.len() - pos)).min(MAX_RESERVE));
                    break None;
                }
                Ok(None) => break None,
                Err(e) => {
                    self.shared
                        .answer(|out| frame::write_error(out, "FATAL", e.sqlstate(), &e.to_string()));
                    break Some(ClientEnd::ProtocolError);
                }
            };
            let message = pos..pos + header.len;
            if header.tag == b'p' && self.shared.pooling.is_some() && !self.welcomed && self.logging_in() {
                // Noted before it goes on: the server's next request, or
                // its AuthenticationOk, finds it here. More responses than
                // SCRAM's two prove nothing, so no more are kept.
                let responses = &mut self.shared.lock().exchange.responses;
                if responses.len() < 3 {
                    responses.push(Bytes::copy_from_slice(&buf[message.start + 5..message.end]));
                }
            }
            let action = self.message(header.tag, &buf, &mut pending).await?;
            pos = message.end;
            let relayed = matches!(action, Action::Forward | Action::Last(_));
            if relayed && self.relay(header.tag, &buf, message, &mut pending) {
                self.release_held(&buf, &mut pending).await?;
            }
            if let Action::Last(end) | Action::Stop(end) = action {
                break Some(end);
            }
        };
        send(&mut self.upstream, pending.bytes(&buf)).await?;
        self.out = pending.into_buffer();
        buf.advance(pos);
        self.buf = buf;
        Ok(outcome)
    }

    /// Adds a message to what goes upstream, as it is or under transaction
    /// pooling with the names of the client's prepared statements
    /// rewritten, and counts what goes in the batches the server is to
    /// answer. Returns whether it left a Bind held (see
    /// [`ToUpstream::release_held`]).
    fn relay(&mut self, tag: u8, buf: &[u8], message: Range<usize>, pending: &mut Pending) -> bool {
        match tag {
            b'P' | b'B' | b'D' | b'E' | b'C' => self.unflushed = true,
            b'H' | b'S' | b'Q' | b'F' => self.unflushed = false,
            _ => {}
        }
        // Without a backend (between a pooled session's requests) only
        // messages that ask the server for nothing are sent, and dropped.
        let backend = self.shared.pooling.as_ref().and_then(|_| self.shared.link.get());
        let mut state = self.shared.lock();
        let state = &mut *state;
        let body = &buf[message.start + 5..message.end];
        // A message the server skips changes none of the client's
        // statements.
        let skipped = state.batches.skips(tag);
        let rewritten = backend
            .is_some_and(|backend| !skipped && state.statements.rewrite(tag, body, &backend.made, &mut self.rewritten));
        let ignored = if rewritten {
            frame::tags(&self.rewritten).map(|tag| state.batches.sent(tag)).sum()
        } else {
            state.batches.sent(tag)
        };
        if ignored > 0 {
            state.statements.syncs_ignored(ignored);
            // The copy's Syncs were read as data: the server holds the
            // answer to its Execute until the next.
            self.unflushed = true;
        }
        if skipped {
            // The server answers nothing: the other direction decides
            // whether the request waits on its client again.
            self.shared.flags.wake.notify_one();
        }
        if !rewritten {
            pending.push(buf, message);
            return false;
        }
        pending.push_rewritten(buf, &self.rewritten);
        self.rewritten.clear();
        state.statements.holding()
    }

    /// Under transaction pooling, a Bind held until the server tells the
    /// result of the statement it binds: what is pending goes now, and the
    /// Bind once the other direction has the answer.
    async fn release_held(&mut self, buf: &[u8], pending: &mut Pending) -> io::Result<()> {
        send(&mut self.upstream, pending.bytes(buf)).await?;
        pending.clear();
        loop {
            let decided = self.shared.decided.notified();
            {
                let mut state = self.shared.lock();
                let state = &mut *state;
                if state.statements.decided() {
                    state.statements.release(&mut self.rewritten);
                    for tag in frame::tags(&self.rewritten) {
                        state.batches.sent(tag);
                    }
                    break;
                }
            }
            decided.await;
        }
        pending.push_rewritten(buf, &self.rewritten);
        self.rewritten.clear();
        Ok(())
    }

    /// Decides what one message does: start a request (asking the gate),
    /// join the one in flight, or be dropped. The `pending` bytes are
    /// written while waiting for the gate.
    async fn message(&mut self, tag: u8, buf: &[u8], pending: &mut Pending) -> io::Result<Action> {
        if tag == b'X' {
            return Ok(Action::Last(ClientEnd::Closed));
        }
        if self.discarding {
            if tag == b'S' {
                self.discarding = false;
                self.shared.answer(|out| frame::write_ready_for_query(out, b'I'));
            }
            return Ok(Action::Skip);
        }
        let authenticating = {
            let mut state = self.shared.lock();
            if state.request.is_some() || !starts_request(tag, state.authenticating) {
                // The client went on: a request that waited on it counts
                // toward P again at once.
                if state.idle_since.take().is_some() {
                    if let Some(request) = state.request.as_mut() {
                        request.slot.unpark();
                    }
                }
                return Ok(Action::Forward);
            }
            state.authenticating
        };
        if authenticating && self.shared.pooling.is_some() {
            let e = "sluice: a query before the login finished (transaction pooling needs ReadyForQuery first)";
            self.shared.answer(|out| frame::write_error(out, "FATAL", "08P01", e));
            return Ok(Action::Stop(ClientEnd::ProtocolError));
        }
        if self.shared.flags.draining() {
            return Ok(Action::Stop(ClientEnd::Shutdown));
        }
        let link = &*self.shared.link;
        let mut cancelled = pin!(link.set_out());
        let admission = admit(
            &self.ctx.gate,
            &self.who,
            &mut self.upstream,
            pending.bytes(buf),
            cancelled.as_mut(),
        )
        .await;
        let (answer, flushed) = match admission {
            Ok(admission) => admission,
            Err(e) => {
                let _ = link.arrive(cancelled.as_mut(), None);
                return Err(e);
            }
        };
        if flushed {
            pending.clear();
        }
        let (slot, outcome) = match answer {
            Ok(admitted) => admitted,
            Err(refusal) => {
                let _ = link.arrive(cancelled.as_mut(), None);
                return Ok(self.refuse(tag, refusal.sqlstate(), &refusal.to_string()));
            }
        };
        // Leasing may dial a new backend: a cancel meanwhile stops it too.
        let leased = tokio::select! {
            biased;
            leased = self.lease() => Some(leased),
            () = cancelled.as_mut() => None,
        };
        let (backend, failed) = match leased {
            Some(Ok(backend)) => (backend, None),
            Some(Err(e)) => (None, Some(e)),
            // Cancelled while leasing: `arrive` finds the cancel.
            None => (None, None),
        };
        let pooled = backend.is_some();
        let refusal = match (link.arrive(cancelled.as_mut(), backend), failed) {
            (_, Some(e)) => Some((e.sqlstate().to_string(), e.to_string())),
            (Err(backend), None) => {
                self.give_back(backend);
                Some(("57014".to_string(), CANCELLED_ON_ITS_WAY.to_string()))
            }
            (Ok(()), None) => {
                if pooled {
                    self.restore_reported(buf, pending);
                    self.shared.flags.wake.notify_one();
                }
                None
            }
        };
        if let Some((sqlstate, message)) = refusal {
            drop(slot);
            outcome.finish(true);
            return Ok(self.refuse(tag, &sqlstate, &message));
        }
        self.shared.lock().request = Some(Request {
            slot,
            outcome,
            error: false,
        });
        Ok(Action::Forward)
    }

    /// Transaction pooling, a backend just leased: where the settings it
    /// last reported differ from those the client was told, a Query of the
    /// proxy's own sets the client's first (see [`super::reported`]).
    fn restore_reported(&mut self, buf: &[u8], pending: &mut Pending) {
        let Some(backend) = self.shared.link.get() else {
            return;
        };
        let mut query = Vec::new();
        let mut state = self.shared.lock();
        if !state.reported.restore_on(&backend.reported(), &mut query) {
            return;
        }
        query.push(0);
        frame::write_message(&mut self.rewritten, b'Q', &query);
        pending.push_rewritten(buf, &self.rewritten);
        self.rewritten.clear();
        state.batches.sent(b'Q');
        backend.made.unnamed_dropped();
        self.shared.restoring.fetch_add(1, Ordering::Relaxed);
    }

    /// Transaction pooling: a backend for the request just admitted (the
    /// client's prepared statements are made on it as they are used);
    /// `None` in session mode, where the session keeps its own.
    async fn lease(&self) -> Result<Option<Arc<Backend>>, PoolError> {
        let Some(pooling) = &self.shared.pooling else {
            return Ok(None);
        };
        pooling.pool.lease(&pooling.login).await.map(Some)
    }

    /// A backend leased for a request that was cancelled before it ran
    /// goes back to the pool, idle.
    fn give_back(&self, backend: Option<Arc<Backend>>) {
        if let (Some(pooling), Some(backend)) = (&self.shared.pooling, backend) {
            pooling.pool.release(&pooling.login, backend, usize::MAX);
        }
    }

    /// Answers a request that will not run as PostgreSQL answers a failed
    /// one; an extended-protocol batch is dropped up to its Sync.
    fn refuse(&mut self, tag: u8, sqlstate: &str, message: &str) -> Action {
        let ends = matches!(tag, b'Q' | b'F' | b'S');
        self.discarding = !ends;
        self.shared.answer(|out| {
            frame::write_error(out, "ERROR", sqlstate, message);
            if ends {
                frame::write_ready_for_query(out, b'I');
            }
        });
        Action::Skip
    }
}

/// Whether a message sent while no request is in flight starts one. Not:
/// authentication responses; COPY data, which may trail a COPY the server
/// already failed and answered; and Flush, which asks for no work.
fn starts_request(tag: u8, authenticating: bool) -> bool {
    match tag {
        b'd' | b'c' | b'f' | b'H' => false,
        b'p' => !authenticating,
        _ => true,
    }
}

/// Runs `io`, a write to the client, or a read from it while the server
/// waits on its data (a COPY FROM STDIN). A client that leaves it pending
/// `release` long (it does not read, and its socket is full; or it sends
/// nothing, or half a message) has its request's slot parked until it
/// goes through, as a request waiting on its client inside a transaction:
/// the backend then waits on the client, not on the database (the proxy
/// reads nothing more from it while a write is pending), and P counts work
/// inside the database. A client that stalls so holds no one back. The
/// slot is parked again each `release` the client side took it back
/// meanwhile.
async fn parked_while_stalled<T>(
    shared: &Shared,
    release: Duration,
    io: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let mut io = pin!(io);
    // A client that keeps up, as most do, costs no timer.
    if let Poll::Ready(done) = std::future::poll_fn(|cx| Poll::Ready(io.as_mut().poll(cx))).await {
        return done;
    }
    let mut parked = false;
    loop {
        tokio::select! {
            biased;
            done = io.as_mut() => {
                if parked {
                    if let Some(request) = shared.lock().request.as_mut() {
                        request.slot.unpark();
                    }
                }
                return done;
            }
            () = tokio::time::sleep(release) => {
                let mut state = shared.lock();
                if let Some(request) = state.request.as_mut().filter(|request| !request.slot.is_parked()) {
                    request.slot.park();
                    parked = true;
                }
            }
        }
    }
}

/// Whether a server message is the last of its answer to a Parse ('1'),
/// Bind ('2'), Close ('3'), Describe ('T' or 'n') or Execute ('C', 's' if
/// suspended, 'I' if empty).
fn completes_extended(tag: u8) -> bool {
    matches!(tag, b'1' | b'2' | b'3' | b'T' | b'n' | b'C' | b's' | b'I')
}

/// The bytes of one read buffer going upstream: a range of it, relayed
/// without a copy, or once a message was rewritten, copies in `out`.
struct Pending {
    range: Range<usize>,
    /// When not empty, holds everything pending (and `range` is empty).
    out: BytesMut,
}

impl Pending {
    fn new(out: BytesMut) -> Pending {
        Pending { range: 0..0, out }
    }

    fn push(&mut self, buf: &[u8], message: Range<usize>) {
        if self.out.is_empty() && self.range.is_empty() {
            self.range = message;
        } else if self.out.is_empty() && self.range.end == message.start {
            self.range.end = message.end;
        } else {
            self.copy_range(buf);
            self.out.extend_from_slice(&buf[message]);
        }
    }

    fn push_rewritten(&mut self, buf: &[u8], message: &[u8]) {
        self.copy_range(buf);
        self.out.extend_from_slice(message);
    }

    fn copy_range(&mut self, buf: &[u8]) {
        self.out.extend_from_slice(&buf[mem::replace(&mut self.range, 0..0)]);
    }

    fn bytes<'b>(&'b self, buf: &'b [u8]) -> &'b [u8] {
        if self.out.is_empty() {
            &buf[self.range.clone()]
        } else {
            &self.out
        }
    }

    fn clear(&mut self) {
        self.range = 0..0;
        self.out.clear();
    }

    /// The copy buffer, emptied, for the next read.
    fn into_buffer(mut self) -> BytesMut {
        self.out.clear();
        self.out
    }
}

/// What one message from the server meant.
struct Inspected {
    /// The client is to see it.
    relay: bool,
    /// The backend went back to the pool.
    released: bool,
}

/// Upstream → client: frames messages, ends requests at ReadyForQuery,
/// remembers the backend key for cancels, forwards.
struct ToClient<'a, W> {
    client: W,
    buf: BytesMut,
    shared: &'a Shared,
    ctx: &'a PgContext,
    cancel: Option<CancelGuard>,
    last_tag: u8,
    /// The server asked the client's login for a password.
    challenged: bool,
    /// Under transaction pooling, the server's answers to the client's
    /// login so far, its password requests aside (those go to
    /// `State::exchange`): kept by the pool, once the login is over, to
    /// answer later logins of the same StartupMessage with.
    login_answers: Option<BytesMut>,
    /// [`Pool::forgets`] as the login began: the answers are kept only if
    /// none was forgotten since, as a refusal may have outdated them.
    forgets_before: u64,
    /// Under transaction pooling, decided at the end of the login: the pool
    /// can open backends for this login itself (no password was asked, or
    /// the auth_file answers for its user), so its idle backends beyond P
    /// may be closed. Otherwise the pool grows only by logins, and keeps
    /// what they bring until the idle timeout.
    reopens: bool,
    /// Since when the request waits on its client in a transaction, as this
    /// side last set it (the client side clears the shared one).
    idle: Option<Instant>,
    /// Its slot was parked in this wait.
    parked: bool,
    /// This wait follows a Flush, not a ReadyForQuery: the server's
    /// idle-in-transaction timeout does not run there, so neither does the
    /// proxy's.
    flushed: bool,
    /// Messages answered since the backend's last ReadyForQuery, the
    /// proxy's own included: an ErrorResponse tells the batches (and under
    /// transaction pooling the prepared statements) which message failed,
    /// and the batches whether the server waits on the client.
    batch_answered: u32,
    /// What the client is told instead of the message just inspected, when
    /// not empty.
    replacement: BytesMut,
    /// A ParameterDescription came: the RowDescription or NoData that
    /// completes a statement's Describe is to come.
    describing: bool,
    /// The client's reported settings could not be set on its backend: the
    /// session ends, and the client sees nothing the server sends after.
    restore_failed: bool,
}

impl<W: AsyncWrite + Unpin> ToClient<'_, W> {
    async fn run(mut self) -> io::Result<()> {
        let wake = &self.shared.flags.wake;
        // The wake-up registration and the idle timer outlive each turn:
        // made afresh every turn, each costs locks in tokio's Notify and
        // timer wheel on every message inside a transaction, where the
        // timer is armed. Moved later, an armed timer is only marked (no
        // lock); see docs/BENCHMARKS.md, "Fewer registrations a turn".
        let mut woken = pin!(wake.notified());
        let never = Instant::now() + UNARMED;
        let mut idle_timer = pin!(tokio::time::sleep_until(never));
        // A login answered from the pool: its answers are here already.
        if !self.buf.is_empty() {
            self.forward().await?;
        }
        loop {
            if let Some(last) = self.finished() {
                return send(&mut self.client, &last).await;
            }
            room_to_read(&mut self.buf);
            let backend = self.shared.link.get();
            self.forget_idle_if_client_went_on();
            let idle_deadline = self.idle_deadline();
            match idle_deadline {
                Some(deadline) if idle_timer.deadline() != deadline => idle_timer.as_mut().reset(deadline),
                // Replaced, not moved later: left in the wheel, it would
                // wake the runtime at its old deadline for nothing.
                None if idle_timer.deadline() != never => idle_timer.set(tokio::time::sleep_until(never)),
                _ => {}
            }
            tokio::select! {
                biased;
                read = read_from(backend.as_deref(), &mut self.buf) => match read {
                    Ok(0) => return self.upstream_closed(None).await,
                    Ok(_) => {}
                    Err(e) => return self.upstream_closed(Some(e)).await,
                },
                () = &mut woken => woken.set(wake.notified()),
                () = &mut idle_timer, if idle_deadline.is_some() => {
                    if let Some(last) = self.waited_on_client() {
                        return send(&mut self.client, &last).await;
                    }
                }
            }
            self.forward().await?;
        }
    }

    /// The client sent its next message since the request began to wait
    /// on it: no timer is to run until the next wait.
    fn forget_idle_if_client_went_on(&mut self) {
        if self.idle.is_some() && self.shared.lock().idle_since != self.idle {
            self.idle = None;
        }
    }

    /// When the wait on the client next calls for something: parking the
    /// slot, then the idle-in-transaction timeout.
    fn idle_deadline(&self) -> Option<Instant> {
        let since = self.idle?;
        let limits = &self.ctx.limits;
        if self.parked {
            limits
                .idle_timeout
                .filter(|_| !self.flushed)
                .map(|timeout| since + timeout)
        } else {
            Some(since + limits.idle_release)
        }
    }

    /// The idle deadline passed: parks the slot, or when the timeout is up,
    /// returns the last bytes for the client.
    fn waited_on_client(&mut self) -> Option<BytesMut> {
        let since = self.idle?;
        let mut state = self.shared.lock();
        if state.idle_since != Some(since) {
            // The client went on meanwhile.
            self.idle = None;
            return None;
        }
        if !self.parked {
            self.parked = true;
            if let Some(request) = state.request.as_mut() {
                request.slot.park();
            }
            return None;
        }
        let timeout = self.ctx.limits.idle_timeout.unwrap_or_default();
        let mut last = mem::take(&mut state.outbox);
        let e = format!(
            "sluice: terminating connection due to idle-in-transaction timeout (idle_in_transaction_timeout_ms = {})",
            timeout.as_millis()
        );
        frame::write_error(&mut last, "FATAL", "25P03", &e);
        Some(last)
    }

    /// The last bytes for the client when the session is to end now: after
    /// a protocol error, or when draining and no request is in flight.
    fn finished(&self) -> Option<BytesMut> {
        let flags = &self.shared.flags;
        if !(flags.closing() || flags.draining()) {
            return None;
        }
        let mut state = self.shared.lock();
        if flags.closing() {
            let mut last = mem::take(&mut state.outbox);
            if state.upstream_gone {
                self.tell_closed(&mut last, None);
            }
            return Some(last);
        }
        if flags.draining() && state.request.is_none() {
            let mut last = mem::take(&mut state.outbox);
            frame::write_error(&mut last, "FATAL", "57P01", SHUTTING_DOWN);
            return Some(last);
        }
        None
    }

    /// Forwards every complete message the client is to see, then the
    /// proxy's own messages.
    async fn forward(&mut self) -> io::Result<()> {
        let mut buf = mem::take(&mut self.buf);
        let mut pos = 0;
        // buf[from..pos] is to be written.
        let mut from = 0;
        let mut released = false;
        loop {
            match frame::parse_header(&buf[pos..]).map_err(invalid_data)? {
                Some(header) if header.len <= buf.len() - pos => {
                    let seen = self.inspect(header.tag, &mut buf[pos + 5..pos + header.len]);
                    released |= seen.released;
                    if !seen.relay {
                        let write = self.client.write_all(&buf[from..pos]);
                        parked_while_stalled(self.shared, self.ctx.limits.idle_release, write).await?;
                        if !self.replacement.is_empty() {
                            let write = self.client.write_all(&self.replacement);
                            parked_while_stalled(self.shared, self.ctx.limits.idle_release, write).await?;
                            self.replacement.clear();
                        }
                        from = pos + header.len;
                    }
                    pos += header.len;
                }
                Some(header) => {
                    buf.reserve(header.len - (buf.len() - pos));
                    break;
                }
                None => break,
            }
        }
        let write = self.client.write_all(&buf[from..pos]);
        parked_while_stalled(self.shared, self.ctx.limits.idle_release, write).await?;
        buf.advance(pos);
        if released {
            // The rest came from a backend now back in the pool: a message
            // cut short there can never be completed here.
            buf.clear();
        }
        self.buf = buf;
        let outbox = {
            let mut state = self.shared.lock();
            self.wait_after_flush(&mut state);
            mem::take(&mut state.outbox)
        };
        let write = send(&mut self.client, &outbox);
        parked_while_stalled(self.shared, self.ctx.limits.idle_release, write).await
    }

    /// Once the server has answered every message sent since the last
    /// batch's end and no end is pending (a driver that prepares with
    /// Parse, Describe and Flush, or a cursor between fetches), or one of
    /// them failed and no Sync is sent, the server waits for the client:
    /// the request waits on its client, as after a ReadyForQuery inside a
    /// transaction, so that its slot is parked after
    /// `idle_in_transaction_release_ms` instead of holding P for as long as
    /// the client pauses.
    fn wait_after_flush(&mut self, state: &mut State) {
        if state.batches.flushed(self.batch_answered) && state.request.is_some() && state.idle_since.is_none() {
            let now = Instant::now();
            state.idle_since = Some(now);
            self.idle = Some(now);
            self.parked = false;
            self.flushed = true;
        }
    }

    /// Notes what a message means for the session.
    fn inspect(&mut self, tag: u8, body: &mut [u8]) -> Inspected {
        if let Some(answers) = self.login_answers.as_mut() {
            // Refused: the pool answers no login of this StartupMessage
            // until the server lets one in again; asked for a password:
            // none without one.
            let challenge = tag == b'R' && body.get(..4).is_some_and(|method| method != [0; 4]);
            if challenge {
                let request = Bytes::copy_from_slice(body);
                self.shared.lock().exchange.requests.push(request);
            } else {
                frame::write_message(answers, tag, body);
            }
            if let Some(pooling) = &self.shared.pooling {
                if tag == b'E' {
                    pooling.pool.forget_welcome(&pooling.login);
                } else if challenge {
                    pooling.pool.forget_passwordless_welcome(&pooling.login);
                }
            }
        }
        if self.restore_failed {
            return Inspected {
                relay: false,
                released: false,
            };
        }
        if self.shared.pooling.is_some() {
            if tag == b'S' {
                self.note_reported(body);
            } else if matches!(tag, b'C' | b'E' | b'Z') && self.shared.restoring.load(Ordering::Relaxed) > 0 {
                return self.restored(tag, body);
            }
        }
        self.last_tag = tag;
        // A statement's Describe is answered by ParameterDescription, then
        // RowDescription or NoData, or an error; asynchronous messages
        // (notices, parameter changes) may come between.
        let described = match tag {
            b'T' | b'n' => mem::take(&mut self.describing),
            b't' | b'E' | b'Z' => {
                self.describing = tag == b't';
                false
            }
            _ => false,
        };
        let relay = self.statement_reply(tag, described, body);
        match tag {
            b'Z' => self.batch_answered = 0,
            tag if completes_extended(tag) => self.batch_answered = self.batch_answered.wrapping_add(1),
            _ => {}
        }
        let mut released = false;
        match tag {
            b'Z' if relay => released = self.ready(body.first().copied().unwrap_or(b'I')),
            // A ReadyForQuery the client does not see answers the proxy's
            // own Sync.
            b'Z' => _ = self.shared.lock().batches.ready(),
            b'C' => self.command_complete(body),
            b'K' => self.backend_key(body),
            b'G' if self.shared.lock().batches.copy_in() => self.shared.copy_began.notify_one(),
            b'R' => self.challenged |= body.get(..4).is_some_and(|method| method != [0; 4]),
            b'E' => {
                let mut state = self.shared.lock();
                if let Some(request) = state.request.as_mut() {
                    request.error = true;
                }
                let failed = state.batches.failed(self.batch_answered);
                if self.shared.pooling.is_some() {
                    state.statements.syncs_ignored(failed.ignored);
                    state.statements.failed(self.batch_answered, failed.skipped);
                    if state.statements.decided() {
                        self.shared.decided.notify_one();
                    }
                    if state.statements.result_changed() {
                        frame::write_error(&mut self.replacement, "ERROR", "0A000", RESULT_CHANGED);
                        return Inspected { relay: false, released };
                    }
                }
            }
            _ => {}
        }
        Inspected { relay, released }
    }

    /// Under transaction pooling, a ParameterStatus: the backend has the
    /// value now, and the client was told it.
    fn note_reported(&self, body: &[u8]) {
        if let Some(backend) = self.shared.link.get() {
            // A statement parsed since the setting changed was named for
            // the settings before (the server reports a change only at the
            // end of its batch), and one parsed before was named for those
            // it was parsed under: the proxy's own restore changes nothing
            // of that, any other change may have.
            let parsing_changed = backend.reported().note(body);
            if parsing_changed && self.shared.restoring.load(Ordering::Relaxed) == 0 {
                backend.made.forget_all();
            }
        }
        let authenticating = {
            let mut state = self.shared.lock();
            let state = &mut *state;
            if state.reported.note(body) {
                state.statements.told(&state.reported);
            }
            state.authenticating
        };
        // Answers kept in the pool are what this login was told from them,
        // not news from the server.
        let kept_answers = authenticating && self.login_answers.is_none();
        if let Some(pooling) = self.shared.pooling.as_ref().filter(|_| !kept_answers) {
            pooling.pool.reported(body);
        }
    }

    /// An answer to a Query of the proxy's own that set the client's
    /// reported settings: the client sees none of it. If it failed (a
    /// cancel meant for the client's statement reached it, the server is
    /// shutting down), the client's statements, sent behind it, run under
    /// another client's settings: the session ends with a FATAL error
    /// instead of showing their results, and its backend, in a state the
    /// proxy cannot tell, is closed with it.
    fn restored(&mut self, tag: u8, body: &[u8]) -> Inspected {
        match tag {
            b'Z' => {
                self.shared.restoring.fetch_sub(1, Ordering::Relaxed);
                self.shared.lock().batches.ready();
            }
            b'E' => {
                let why = frame::error_field(body, b'M').unwrap_or("no message");
                tracing::warn!("setting a client's reported settings on a pooled server connection failed: {why}");
                let e = format!(
                    "sluice: the settings this session was told (TimeZone, DateStyle, ...) could not be set \
                     on a pooled server connection, so it ends rather than run under another client's: {why}"
                );
                let sqlstate = frame::error_field(body, b'C').unwrap_or("XX000");
                frame::write_error(&mut self.shared.lock().outbox, "FATAL", sqlstate, &e);
                self.restore_failed = true;
                self.shared.flags.close();
            }
            _ => {}
        }
        Inspected {
            relay: false,
            released: false,
        }
    }

    /// Under transaction pooling, after the login: what a ParseComplete,
    /// CloseComplete, ReadyForQuery or the answer to a statement's Describe
    /// (`described`: the RowDescription or NoData completing it) means for
    /// the client's prepared statements; returns whether the client is to
    /// see it.
    fn statement_reply(&self, tag: u8, described: bool, body: &[u8]) -> bool {
        if self.shared.pooling.is_none() || !(matches!(tag, b'1' | b'3' | b'Z' | b't') || described) {
            return true;
        }
        let Some(backend) = self.shared.link.get() else {
            return true;
        };
        let mut state = self.shared.lock();
        if state.authenticating {
            return true;
        }
        let relay = state.statements.reply(tag, body, &backend.made);
        if described && state.statements.decided() {
            self.shared.decided.notify_one();
        }
        relay
    }

    /// Under transaction pooling, a `DEALLOCATE ALL` or `DISCARD ALL` that
    /// succeeded dropped every prepared statement on the backend.
    fn command_complete(&self, tag: &[u8]) {
        if self.shared.pooling.is_none() || !matches!(tag, b"DEALLOCATE ALL\0" | b"DISCARD ALL\0") {
            return;
        }
        if let Some(backend) = self.shared.link.get() {
            self.shared.lock().statements.dropped_all(&backend.made);
        }
    }

    /// BackendKeyData: registered for cancels; under transaction pooling
    /// the client is given a key of the proxy's making instead.
    fn backend_key(&mut self, body: &mut [u8]) {
        let Some(key) = BackendKey::from_body(body) else {
            return;
        };
        if let Some(backend) = self.shared.link.get() {
            backend.set_key(key);
        }
        let link = Arc::clone(&self.shared.link);
        self.cancel = Some(if self.shared.pooling.is_some() {
            let (client_key, guard) = self.ctx.cancels.register_new(link);
            body[..8].copy_from_slice(&client_key.to_body());
            guard
        } else {
            self.ctx.cancels.register(key, link)
        });
    }

    /// ReadyForQuery: authentication is over, or a request may have ended.
    /// Under transaction pooling an idle session's backend goes back to the
    /// pool (before the slot is returned, so that the next request admitted
    /// finds it); returns whether it did.
    fn ready(&mut self, status: u8) -> bool {
        let (ended, idle_backend, logged_in) = {
            let mut state = self.shared.lock();
            let logged_in = state.authenticating;
            let ended = if state.authenticating {
                state.authenticating = false;
                None
            } else {
                let answered_all = state.batches.ready();
                if status == b'I' && answered_all {
                    state.idle_since = None;
                    self.idle = None;
                    state.request.take()
                } else {
                    None
                }
            };
            if ended.is_none() && !logged_in && status != b'I' && state.batches.answered_all() {
                // Everything is answered inside a transaction: the request
                // waits on its client.
                let now = Instant::now();
                state.idle_since = state.request.as_ref().map(|_| now);
                self.idle = state.idle_since;
                self.parked = false;
                self.flushed = false;
            }
            let idle = state.request.is_none() && status == b'I';
            let pooled = self.shared.pooling.as_ref().filter(|_| idle);
            (
                ended,
                pooled.and_then(|pooling| Some((pooling, self.shared.link.take()?))),
                logged_in,
            )
        };
        if let Some(pooling) = self.shared.pooling.as_ref().filter(|_| logged_in) {
            if let Some(answers) = self.login_answers.take() {
                let exchange = mem::take(&mut self.shared.lock().exchange);
                let exchange = self.challenged.then_some(&exchange);
                let forgets_before = self.forgets_before;
                pooling
                    .pool
                    .remember_welcome(&pooling.login, answers.freeze(), exchange, forgets_before);
            }
            // After the remembering: a proof it checked may have given the
            // pool the key to open backends with (see `pg::scram`).
            self.reopens = !self.challenged || pooling.pool.answers_for(&pooling.login);
        }
        let released = idle_backend.is_some();
        if let Some((pooling, backend)) = idle_backend {
            let keep = if self.reopens {
                self.ctx.gate.parallelism()
            } else {
                usize::MAX
            };
            pooling.pool.release(&pooling.login, backend, keep);
        }
        if let Some(Request { slot, outcome, error }) = ended {
            drop(slot);
            outcome.finish(error);
        }
        released
    }

    /// The server closed, or reading from it failed (`error`): unless it
    /// said why, the client is told.
    async fn upstream_closed(&mut self, error: Option<io::Error>) -> io::Result<()> {
        let mut last = mem::take(&mut self.shared.lock().outbox);
        self.tell_closed(&mut last, error);
        send(&mut self.client, &last).await
    }

    /// Adds FATAL 08006 for the client to `last`, unless the server's last
    /// message was an error of its own.
    fn tell_closed(&self, last: &mut BytesMut, error: Option<io::Error>) {
        if self.last_tag == b'E' {
            return;
        }
        let message = match error {
            Some(e) => format!("sluice: the upstream server connection failed: {e}"),
            None => "sluice: the upstream server closed the connection".into(),
        };
        frame::write_error(last, "FATAL", "08006", &message);
    }
}

/// A Flush of the proxy's own: it asks the server for no answer, only for
/// those it holds back.
const FLUSH: &[u8] = b"H\0\0\0\x04";

/// Waits until `deadline`; with none, for ever.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Reads from the session's backend; with none, waits for ever (the caller
/// also waits to be woken when one is leased).
async fn read_from(backend: Option<&Backend>, buf: &mut BytesMut) -> io::Result<usize> {
    match backend {
        Some(backend) => backend.read_buf(buf).await,
        None => std::future::pending().await,
    }
}

fn invalid_data(e: PgError) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("message from the upstream server: {e}"),
    )
}
