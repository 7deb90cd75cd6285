//! The relay under the PostgreSQL and Redis sessions, which knows no
//! protocol: the listener's neutral context, admission that never holds
//! back bytes a waiting request depends on, request outcome (the slot comes
//! back however the request ends: completed, failed or its client gone),
//! and the two-direction drive loop with graceful shutdown.
//!
//! A session runs two futures in one task: client → upstream (framing
//! requests, asking the gate) and upstream → client (framing answers,
//! releasing slots). One task rather than two spawned ones keeps wake-ups
//! on one thread; the futures share state through an uncontended mutex.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Notify};

use crate::client::Peer;
use crate::config::TenantKey;
use crate::gate::{Gate, Refusal, Slot, Tenant};
use crate::race::race;
use crate::stats::{Stats, TenantStats};

/// Replies a session holds for a client that has not read them yet, and
/// the bound past which the session stops taking that client's commands.
///
/// A slot is held while the database works, not while a client reads:
/// sessions read their server's replies (and give slots back) whether or
/// not the client keeps up, and hold them here instead. What a slow reader
/// can make a session hold is bounded without holding a slot: past
/// `max_bytes` of unread replies, or `max_replies` commands not yet
/// answered, the session lets no new command through until the client
/// reads. It goes on reading what the client sends (up to its own bound)
/// meanwhile, so a client that writes a whole pipeline before reading the
/// first reply is answered, as Redis answers it. Each bound is overshot by
/// at most the replies of the commands already let through, and those are
/// bounded by P.
pub(crate) struct Backlog {
    /// Commands let through whose replies have not reached the client's
    /// output yet.
    replies: AtomicUsize,
    /// Reply bytes waiting for the client to read them.
    bytes: AtomicUsize,
    max_replies: usize,
    max_bytes: usize,
    room: Notify,
}

impl Backlog {
    pub fn new(max_replies: usize, max_bytes: usize) -> Self {
        Backlog {
            replies: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            max_replies,
            max_bytes,
            room: Notify::new(),
        }
    }

    /// Whether another command may go through now.
    pub fn has_room(&self) -> bool {
        self.replies.load(Ordering::Relaxed) < self.max_replies && self.bytes.load(Ordering::Relaxed) < self.max_bytes
    }

    /// A command went through; its reply is owed.
    pub fn owe(&self) {
        self.replies.fetch_add(1, Ordering::Relaxed);
    }

    /// A reply owed reached the client's output (or was dropped).
    pub fn paid(&self) {
        self.replies.fetch_sub(1, Ordering::Relaxed);
        self.room.notify_one();
    }

    /// `bytes` of replies wait for the client now.
    pub fn set_bytes(&self, bytes: usize) {
        self.bytes.store(bytes, Ordering::Relaxed);
        if bytes < self.max_bytes {
            self.room.notify_one();
        }
    }

    /// Waits until the backlog may have shrunk (a permit left by an earlier
    /// change counts, so no wake-up is lost between `has_room` and here).
    pub async fn changed(&self) {
        self.room.notified().await
    }
}

/// What every session of one listener shares, whatever its protocol;
/// each protocol's context adds its own (`pg::context`, `redis::context`).
pub(crate) struct Context {
    pub gate: Gate,
    pub stats: Arc<Stats>,
    pub upstream: String,
    pub tenant_key: TenantKey,
    /// The largest message (PostgreSQL) or bulk (Redis) a client may send
    /// once logged in (`max_message_bytes`, the server's bound for 0).
    pub max_message: usize,
}

/// The tenant a connection belongs to, and its statistics.
pub(crate) struct Tenancy {
    pub tenant: Tenant,
    pub stats: Arc<TenantStats>,
}

impl Context {
    pub fn who(&self, name: &str) -> Tenancy {
        let tenant = match self.tenant_key {
            TenantKey::Connection => self.gate.connection_tenant(name),
            _ => self.gate.tenant(name),
        };
        let stats = self.stats.tenant(&tenant.name);
        Tenancy { tenant, stats }
    }

    /// The tenant name that the peer address alone decides, if the key is
    /// one of those.
    pub fn tenant_by_address(&self, peer: &Peer) -> Option<String> {
        match self.tenant_key {
            TenantKey::ClientAddress => Some(peer.address()),
            TenantKey::Connection => Some(peer.to_string()),
            _ => None,
        }
    }

    /// A Redis upstream: host:port or a Unix socket's path.
    pub async fn connect_upstream(&self) -> io::Result<crate::socket::Stream> {
        crate::socket::connect_stream(&self.upstream).await
    }
}

/// Where an admitted request's outcome is counted. Its queue wait and
/// latency are the gate's to record (they end when the slot is dropped).
pub(crate) struct Outcome {
    pub stats: Arc<TenantStats>,
}

impl Outcome {
    /// The outcome of a request of `who`'s.
    pub fn of(who: &Tenancy) -> Self {
        Outcome {
            stats: Arc::clone(&who.stats),
        }
    }

    /// The request's answer is complete.
    pub fn finish(self, error: bool) {
        self.stats.record(error);
    }
}

/// Writes all of `bytes` and flushes: a TLS writer keeps what the socket
/// did not take at once until it is flushed, and nothing else would send it.
pub(crate) async fn send<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

/// Asks the gate to let `who`'s request in. When it cannot at once, the
/// `unsent` bytes (earlier requests of this client that already hold slots)
/// are written first: the waiting request may need their slots back; and
/// the wait ends early, as [`Refusal::Cancelled`], once `cancelled`
/// resolves (a client's cancel).
/// Returns the gate's answer, the outcome, and whether `unsent` was written.
pub(crate) async fn admit<W: AsyncWrite + Unpin>(
    gate: &Gate,
    who: &Tenancy,
    upstream: &mut W,
    unsent: &[u8],
    cancelled: impl Future<Output = ()>,
) -> io::Result<(Result<(Slot, Outcome), Refusal>, bool)> {
    let mut admission = pin!(gate.admit(&who.tenant));
    let ready = std::future::poll_fn(|cx| Poll::Ready(admission.as_mut().poll(cx))).await;
    let (answer, flushed) = match ready {
        Poll::Ready(answer) => (answer, false),
        Poll::Pending => {
            let waiting = Instant::now();
            send(upstream, unsent).await?;
            let answer = tokio::select! {
                biased;
                answer = admission => answer,
                () = cancelled => Err(Refusal::Cancelled { waited: waiting.elapsed() }),
            };
            (answer, true)
        }
    };
    Ok((admitted(who, answer), flushed))
}

/// The gate's answer for `who`'s request: with an outcome to count when it
/// was let in, counted as refused when the gate refused it.
pub(crate) fn admitted(who: &Tenancy, answer: Result<Slot, Refusal>) -> Result<(Slot, Outcome), Refusal> {
    let answer = answer.map(|slot| (slot, Outcome::of(who)));
    if let Err(refusal) = &answer {
        // A client's own cancel is no refusal.
        if !matches!(refusal, Refusal::Cancelled { .. }) {
            who.stats.record_refused();
        }
    }
    answer
}

/// Why the client → upstream direction stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClientEnd {
    /// The client closed or terminated: end the session now.
    Closed,
    /// Shutdown: no new request will start; finish the one in flight.
    Shutdown,
    /// The client broke the protocol: send it the error queued for it, then
    /// close.
    ProtocolError,
    /// The client asked to end the session: deliver what is queued, close.
    Quit,
}

/// Signals from the session to its upstream → client direction.
#[derive(Default)]
pub(crate) struct Flags {
    draining: AtomicBool,
    closing: AtomicBool,
    pub wake: Notify,
}

impl Flags {
    /// Shutdown began: finish what is in flight, start nothing new.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The client broke the protocol: deliver what is queued for it, close.
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// Ends the session as after a protocol error: what is queued for the
    /// client is delivered, then the connection closes.
    pub fn close(&self) {
        self.set(&self.closing);
    }

    fn set(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }
}

/// Runs both directions of a session until it ends. `up` returns why the
/// client side stopped; `down` returns when the upstream closed, or, once
/// draining or closing, when nothing is left in flight.
///
/// The directions and the shutdown watch race in [`crate::race`], so a
/// wake-up polls only the branch it is for. A branch that does not end the
/// session never completes.
pub(crate) async fn drive(
    up: impl Future<Output = io::Result<ClientEnd>>,
    down: impl Future<Output = io::Result<()>>,
    flags: &Flags,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    // Polled first, so a session that starts during shutdown drains at once.
    let watching = pin!(async {
        if !*shutdown.borrow_and_update() {
            // A dropped sender means the server is gone: drain as well.
            let _ = shutdown.changed().await;
        }
        flags.set(&flags.draining);
        std::future::pending().await
    });
    let up = pin!(async {
        match up.await? {
            ClientEnd::Closed => return Ok(()),
            ClientEnd::Shutdown => flags.set(&flags.draining),
            ClientEnd::ProtocolError | ClientEnd::Quit => flags.set(&flags.closing),
        }
        // What is in flight finishes; `down` ends the session.
        std::future::pending().await
    });
    race(watching, up, pin!(down)).await
}
