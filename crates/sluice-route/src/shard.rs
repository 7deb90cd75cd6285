//! A shard as the router sees it: an address, its connections, the gate in
//! front of them, and what was measured of it.
//!
//! A sub-request takes a pass at the gate. To a Redis shard it is then
//! written to the shard's one pipelined connection ([`Pipeline`]), as a
//! Redis client would; to `sluice serve`, which works a connection at a
//! time, it takes an idle connection of a pool (or opens one), sends its
//! command and reads exactly one reply (after its greeting's, on a new
//! connection: below). A connection
//! that fails or times out is closed, never reused, so a late reply cannot
//! be read as the answer to someone else's command; one that answered goes
//! back to the pool. A shard that is down costs each sub-request one
//! refused connect, reported as an error naming the shard, and is used
//! again as soon as a connect succeeds.
//!
//! Each new connection to `sluice serve` tells the shard its slots
//! (`CONFIG SET shard-slots`, written ahead of the connection's first
//! command, so it costs no round trip), so that a script reaching a key
//! the router would look for elsewhere is refused there instead of written
//! where nobody finds it; a shard restarted has forgotten them, and learns
//! them again on the connection that finds it back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_core::Ctx;
use sluice_resp::slot::SlotRanges;
use sluice_resp::{encode_command, parse_reply, request_context, Limits, Reply, ReplyScanner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::ShardKind;
use crate::gate::Gate;
use crate::pipeline::{Keep, Pipeline};
use crate::stats::Histogram;

/// Why a sub-request got no reply.
#[derive(Clone, Debug, thiserror::Error)]
#[error("shard {shard} ({addr}) {what}")]
pub struct ShardError {
    pub shard: String,
    pub addr: String,
    pub what: String,
    /// The command never reached the shard (no connection), so it may be
    /// sent elsewhere without running twice.
    pub unsent: bool,
}

/// A sub-request that got no whole answer: why, and the replies that came
/// before the failure (under [`Keep::All`]: a run's commands that ran and
/// were answered, which must not be reported as failed; else none).
#[derive(Debug)]
pub struct Unfinished {
    pub answered: Vec<u8>,
    pub error: ShardError,
}

impl From<ShardError> for Unfinished {
    fn from(error: ShardError) -> Unfinished {
        Unfinished {
            answered: Vec::new(),
            error,
        }
    }
}

/// How a shard is reached and how long it is waited for.
#[derive(Clone, Debug)]
pub struct ShardOptions {
    pub kind: ShardKind,
    pub password: Option<String>,
    pub pool: usize,
    pub connect_timeout: Duration,
    pub reply_timeout: Duration,
    /// Connections reserved for watching clients at once, at most.
    pub max_watching: usize,
    /// The slots the shard serves, told to a `sluice serve` shard on each
    /// new connection; none in front of Redis.
    pub slots: Option<SlotRanges>,
}

pub struct Shard {
    pub name: String,
    pub addr: String,
    options: ShardOptions,
    gate: Arc<Gate>,
    idle: Mutex<Vec<Conn>>,
    /// A Redis shard's pipelined connection, once opened.
    pipeline: tokio::sync::Mutex<Option<Arc<Pipeline>>>,
    /// The router's own connection, for its control loop.
    control: tokio::sync::Mutex<Option<Conn>>,
    /// Places for watching clients' reserved connections, `max_watching`.
    watching: Arc<tokio::sync::Semaphore>,
    /// `CONFIG SET shard-slots ...`, encoded, if the shard is told its slots.
    greeting: Option<Arc<[u8]>>,
    /// The shard refused its slots once (a `sluice serve` too old to take
    /// them): said once, not at every connection.
    slots_refused: AtomicBool,
    pub stats: ShardStats,
}

/// Counters and latencies of one shard.
#[derive(Default)]
pub struct ShardStats {
    pub in_flight: AtomicU64,
    pub sub_requests: AtomicU64,
    pub errors: AtomicU64,
    /// From sending the command to reading its reply, gate wait excluded.
    pub latency: Histogram,
    /// Waiting at the gate.
    pub gate_wait: Histogram,
}

/// What `ASKING` adds: the command goes to the node importing the slot.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Asking {
    No,
    Yes,
}

impl Shard {
    pub fn new(name: String, addr: String, options: ShardOptions, gate: Arc<Gate>) -> Shard {
        let greeting = options.slots.as_ref().map(|slots| {
            let mut out = Vec::new();
            encode_command(&["CONFIG", "SET", "shard-slots", &slots.to_string()], &mut out);
            Arc::from(out)
        });
        Shard {
            greeting,
            watching: Arc::new(tokio::sync::Semaphore::new(options.max_watching)),
            name,
            addr,
            options,
            gate,
            idle: Mutex::new(Vec::new()),
            pipeline: tokio::sync::Mutex::new(None),
            control: tokio::sync::Mutex::new(None),
            slots_refused: AtomicBool::new(false),
            stats: ShardStats::default(),
        }
    }

    pub(crate) fn error(&self, what: impl std::fmt::Display) -> ShardError {
        ShardError {
            shard: self.name.clone(),
            addr: self.addr.clone(),
            what: what.to_string(),
            unsent: false,
        }
    }

    /// A failure before the command was written: no connection.
    fn unreachable(&self, what: impl std::fmt::Display) -> ShardError {
        ShardError {
            unsent: true,
            ..self.error(what)
        }
    }

    /// Sends `args` for the request `ctx` (with `budget_ms` left, if it has
    /// a budget, and its `tenant`'s name, if it has one) and reads the reply, returned as the bytes that came (the
    /// router passes most replies on untouched). An error reply from the
    /// shard is a reply, not a [`ShardError`].
    pub async fn call(
        &self,
        ctx: Ctx,
        budget_ms: Option<f64>,
        tenant: Option<&[u8]>,
        args: &[&[u8]],
        asking: Asking,
    ) -> Result<Vec<u8>, ShardError> {
        self.call_many(ctx, budget_ms, tenant, &[args], asking).await
    }

    /// [`Shard::call`] for several commands written together on one
    /// connection (a transaction: MULTI, its commands, EXEC), one pass at
    /// the gate; the last one's reply, or the first one's if it is an error.
    pub async fn call_many(
        &self,
        ctx: Ctx,
        budget_ms: Option<f64>,
        tenant: Option<&[u8]>,
        commands: &[&[&[u8]]],
        asking: Asking,
    ) -> Result<Vec<u8>, ShardError> {
        let exchange = self.exchange(ctx, budget_ms, tenant, commands, asking, Keep::Last);
        self.counted(ctx, exchange).await.map_err(|u: Unfinished| u.error)
    }

    /// Several commands written together on one connection, one pass at
    /// the gate, as [`Shard::call_many`]; every command's reply, one after
    /// another as they came (a run of a client's pipeline, which the shard
    /// runs in the order written). If the exchange fails, the replies that
    /// came before go with the error.
    pub async fn call_each(
        &self,
        ctx: Ctx,
        budget_ms: Option<f64>,
        tenant: Option<&[u8]>,
        commands: &[&[&[u8]]],
    ) -> Result<Vec<u8>, Unfinished> {
        let exchange = self.exchange(ctx, budget_ms, tenant, commands, Asking::No, Keep::All);
        self.counted(ctx, exchange).await
    }

    /// A connection of the shard's own for one client, kept from its
    /// `WATCH` to its `EXEC`: the shard holds the client's watched keys on
    /// that connection, so nothing else may be sent on it meanwhile.
    /// At most `max_watching` are reserved at once: each costs the router a
    /// descriptor (and the shard a connection) for as long as the client
    /// cares to watch.
    pub async fn reserve(&self) -> Result<Reserved, ShardError> {
        let slot = self.watching.clone().try_acquire_owned().map_err(|_| {
            self.unreachable(format!(
                "has {} clients watching keys already (pool.max_watching); try again once one has run EXEC",
                self.options.max_watching
            ))
        })?;
        Ok(Reserved {
            conn: self.idle_or_new().await?,
            broken: false,
            _slot: slot,
        })
    }

    /// [`Shard::call_many`] on a reserved connection.
    pub async fn call_reserved(
        &self,
        reserved: &mut Reserved,
        ctx: Ctx,
        budget_ms: Option<f64>,
        tenant: Option<&[u8]>,
        commands: &[&[&[u8]]],
    ) -> Result<Vec<u8>, ShardError> {
        let (out, replies) = self.encode(ctx, budget_ms, tenant, commands, Asking::No);
        let talk = async {
            let result = self
                .talk(
                    &mut reserved.conn,
                    &out,
                    replies,
                    Keep::Last,
                    self.options.reply_timeout,
                )
                .await;
            reserved.broken |= result.is_err();
            result.map_err(|(_, e)| self.failure(e))
        };
        self.counted(ctx, talk).await
    }

    /// Gives a reserved connection back to the pool once the shard has
    /// forgotten its watch (`watch_ended`: after `EXEC`); one that failed,
    /// or whose watch the shard still holds, is closed instead, which ends
    /// the watch.
    pub fn release(&self, reserved: Reserved, watch_ended: bool) {
        if watch_ended && !reserved.broken {
            self.give_back(reserved.conn);
        }
    }

    /// Runs one sub-request's exchange `talk`: a pass at the gate first,
    /// then counted and timed. The pass is waited for at most the reply
    /// timeout too, so that behind a shard that hangs, sub-requests fail
    /// within twice the timeout, not one timeout for each turn of the pool.
    async fn counted<E: From<ShardError>>(
        &self,
        ctx: Ctx,
        talk: impl std::future::Future<Output = Result<Vec<u8>, E>>,
    ) -> Result<Vec<u8>, E> {
        let waited = Instant::now();
        let Ok(_pass) = tokio::time::timeout(self.options.reply_timeout, self.gate.enter(ctx)).await else {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            return Err(self
                .unreachable(format!(
                    "had none of its {} places free within {} ms (the sub-requests there are waiting for it)",
                    self.options.pool,
                    self.options.reply_timeout.as_millis()
                ))
                .into());
        };
        let started = Instant::now();
        self.stats.gate_wait.record(started - waited);
        self.stats.sub_requests.fetch_add(1, Ordering::Relaxed);
        let flying = InFlight::new(&self.stats.in_flight);
        let result = talk.await;
        self.stats.latency.record(started.elapsed());
        drop(flying);
        if result.is_err() {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// A command of the router's control loop (INFO, CONFIG SET), parsed:
    /// on a connection of its own, outside the gate and the shard's
    /// statistics, so that it waits behind none of the sub-requests it is
    /// about. A shard silent for `connect_timeout` fails it.
    pub async fn control(&self, args: &[&[u8]]) -> Result<Reply, ShardError> {
        let mut slot = self.control.lock().await;
        let mut conn = match slot.take() {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        let mut out = Vec::new();
        encode_command(args, &mut out);
        let timeout = self.options.connect_timeout;
        let raw = self
            .talk(&mut conn, &out, 1, Keep::Last, timeout)
            .await
            .map_err(|(_, e)| match e {
                Exchange::TimedOut => self.error(format!(
                    "did not answer the router's {} within {} ms",
                    String::from_utf8_lossy(args.first().copied().unwrap_or_default()),
                    timeout.as_millis()
                )),
                broken => self.failure(broken),
            })?;
        *slot = Some(conn);
        self.parsed(&raw)
    }

    fn parsed(&self, raw: &[u8]) -> Result<Reply, ShardError> {
        parse_reply(raw, &Limits::relay())
            .ok()
            .flatten()
            .map(|(reply, _)| reply)
            .ok_or_else(|| self.error("sent a reply that does not parse"))
    }

    /// [`Shard::call`] parsed, for the router's own commands.
    pub async fn call_parsed(&self, ctx: Ctx, args: &[&[u8]]) -> Result<Reply, ShardError> {
        let raw = self.call(ctx, None, None, args, Asking::No).await?;
        self.parsed(&raw)
    }

    async fn exchange(
        &self,
        ctx: Ctx,
        budget_ms: Option<f64>,
        tenant: Option<&[u8]>,
        commands: &[&[&[u8]]],
        asking: Asking,
        keep: Keep,
    ) -> Result<Vec<u8>, Unfinished> {
        let (out, replies) = self.encode(ctx, budget_ms, tenant, commands, asking);
        if self.options.kind == ShardKind::Redis {
            let pipeline = self.pipeline().await?;
            return pipeline.send(out, replies, keep).await.map_err(|failed| {
                let why = match failed.error.kind() {
                    std::io::ErrorKind::TimedOut => Exchange::TimedOut,
                    _ => Exchange::Broken(failed.error),
                };
                Unfinished {
                    answered: failed.answered,
                    error: self.failure(why),
                }
            });
        }
        let mut conn = self.idle_or_new().await?;
        // The connection goes back to the pool only after a whole exchange.
        let reply = self
            .talk(&mut conn, &out, replies, keep, self.options.reply_timeout)
            .await
            .map_err(|(answered, e)| Unfinished {
                answered,
                error: self.failure(e),
            })?;
        self.give_back(conn);
        Ok(reply)
    }

    /// `commands` as the shard reads them, and how many replies they get.
    fn encode(
        &self,
        ctx: Ctx,
        budget_ms: Option<f64>,
        tenant: Option<&[u8]>,
        commands: &[&[&[u8]]],
        asking: Asking,
    ) -> (Vec<u8>, usize) {
        let size: usize = commands.iter().flat_map(|c| c.iter()).map(|a| a.len() + 16).sum();
        let mut out = Vec::with_capacity(64 * commands.len() + size);
        if asking == Asking::Yes {
            encode_command(&["ASKING"], &mut out);
        }
        let id = ctx.id.0.to_string();
        let budget = budget_ms.map(|b| format!("{b:.3}"));
        for args in commands {
            match self.options.kind {
                // Without a configured tenant the shard's own per-connection
                // tenant stands, so its fair policies share the shard among
                // the router's connections (the paper's cfq analogue).
                ShardKind::Sluice => {
                    encode_command(&request_context::wrap(&id, budget.as_deref(), tenant, args), &mut out)
                }
                ShardKind::Redis => encode_command(args, &mut out),
            }
        }
        (out, commands.len() + usize::from(asking == Asking::Yes))
    }

    fn failure(&self, e: Exchange) -> ShardError {
        match e {
            Exchange::Broken(e) => self.error(format!("failed: {e}")),
            Exchange::TimedOut => self.error(format!(
                "did not answer within {} ms (the command may still run there)",
                self.options.reply_timeout.as_millis()
            )),
        }
    }

    /// The pipelined connection, opened anew if there is none or it broke.
    async fn pipeline(&self) -> Result<Arc<Pipeline>, ShardError> {
        let mut slot = self.pipeline.lock().await;
        if let Some(p) = slot.as_ref().filter(|p| !p.is_broken()) {
            return Ok(p.clone());
        }
        let conn = self.connect().await?;
        // Redis shards are not told slots: no greeting to send first.
        debug_assert!(conn.greeting.is_none());
        let p = Arc::new(Pipeline::start(conn.stream, conn.buf, self.options.reply_timeout));
        *slot = Some(p.clone());
        Ok(p)
    }

    /// An idle connection the shard has not closed since its last use (a
    /// restart, an idle timeout): one whose end has arrived is dropped here,
    /// before a command is written to it, since a command written and then
    /// met by a reset may or may not have run and cannot be sent again.
    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(conn) = idle.pop() {
            match conn.stream.try_read(&mut [0u8; 1]) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(conn),
                // Closed, failed, or bytes nobody asked for: not reusable.
                _ => {}
            }
        }
        None
    }

    /// An idle connection of the pool, or a new one.
    async fn idle_or_new(&self) -> Result<Conn, ShardError> {
        match self.take_idle() {
            Some(conn) => Ok(conn),
            None => self.connect().await,
        }
    }

    fn give_back(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.options.pool {
            idle.push(conn);
        }
    }

    async fn connect(&self) -> Result<Conn, ShardError> {
        let connect = TcpStream::connect(&self.addr);
        let stream = match tokio::time::timeout(self.options.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                return Err(self.unreachable(format!(
                    "could not be reached: the router is out of file descriptors ({e}); raise its open-file limit (ulimit -n)"
                )))
            }
            Ok(Err(e)) => return Err(self.unreachable(format!("is unavailable: {e}"))),
            Err(_) => {
                return Err(self.unreachable(format!(
                    "is unavailable: no connection within {} ms",
                    self.options.connect_timeout.as_millis()
                )))
            }
        };
        stream.set_nodelay(true).map_err(|e| self.error(e))?;
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
            scanner: ReplyScanner::default(),
            scanned: 0,
            greeting: None,
            greeted: None,
        };
        if let Some(password) = &self.options.password {
            let mut out = Vec::new();
            encode_command(&[b"AUTH", password.as_bytes()], &mut out);
            let auth = async {
                conn.stream.write_all(&out).await?;
                conn.read_reply().await
            };
            match tokio::time::timeout(self.options.connect_timeout, auth).await {
                Ok(Ok(raw)) if raw.first() == Some(&b'+') => {}
                Ok(Ok(raw)) => {
                    let said = String::from_utf8_lossy(&raw);
                    return Err(self.error(format!("refused the router's AUTH: {}", said.trim_end())));
                }
                Ok(Err(e)) => return Err(self.error(format!("failed during AUTH: {e}"))),
                Err(_) => return Err(self.error("did not answer AUTH")),
            }
        }
        conn.greeting = self.greeting.clone();
        Ok(conn)
    }

    /// [`talk`], then a word if the shard refused the slots a new
    /// connection told it (once, not at every connection).
    async fn talk(
        &self,
        conn: &mut Conn,
        out: &[u8],
        replies: usize,
        keep: Keep,
        timeout: Duration,
    ) -> Result<Vec<u8>, (Vec<u8>, Exchange)> {
        let reply = talk(conn, out, replies, keep, timeout).await?;
        let refused = conn.greeted.take().filter(|raw| raw.first() != Some(&b'+'));
        if let Some(raw) = refused.filter(|_| !self.slots_refused.swap(true, Ordering::Relaxed)) {
            tracing::warn!(
                "shard {} ({}) refused CONFIG SET shard-slots ({}): scripts there are not checked for keys of other shards",
                self.name,
                self.addr,
                String::from_utf8_lossy(&raw).trim_end()
            );
        }
        Ok(reply)
    }
}

/// Writes `out` on `conn` and reads its `replies` replies, returning those
/// `keep` asks for; if the exchange fails, the replies `Keep::All` had
/// gathered go with the error. A new connection's greeting goes ahead of
/// `out`, its reply kept apart in `conn.greeted`.
async fn talk(
    conn: &mut Conn,
    out: &[u8],
    replies: usize,
    keep: Keep,
    timeout: Duration,
) -> Result<Vec<u8>, (Vec<u8>, Exchange)> {
    let mut answered = Vec::new();
    let exchange = async {
        match conn.greeting.take() {
            Some(greeting) => {
                conn.stream.write_all(&[&greeting[..], out].concat()).await?;
                conn.greeted = Some(conn.read_reply().await?);
            }
            None => conn.stream.write_all(out).await?,
        }
        let mut first = conn.read_reply().await?;
        if keep == Keep::All {
            answered.append(&mut first);
        }
        let mut last = None;
        for _ in 1..replies {
            let reply = conn.read_reply().await?;
            match keep {
                Keep::All => answered.extend_from_slice(&reply),
                Keep::Last => last = Some(reply),
            }
        }
        Ok(match last {
            Some(last) if first.first() != Some(&b'-') => last,
            _ => first,
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(_)) if keep == Keep::All => Ok(answered),
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err((answered, Exchange::Broken(said_before(conn, e)))),
        Err(_) => Err((answered, Exchange::TimedOut)),
    }
}

/// `e`, with the shard's answer to the greeting if it was an error: a shard
/// at its client limit says so there and closes, and that is the reason.
fn said_before(conn: &Conn, e: std::io::Error) -> std::io::Error {
    match conn.greeted.as_deref() {
        Some([b'-', said @ ..]) => std::io::Error::new(
            e.kind(),
            format!(
                "{e}, after answering the router's greeting: {}",
                String::from_utf8_lossy(said).trim_end()
            ),
        ),
        _ => e,
    }
}

/// A connection reserved for one client ([`Shard::reserve`]).
pub struct Reserved {
    conn: Conn,
    /// An exchange on it failed: its state is unknown, so it is closed.
    broken: bool,
    /// One of the shard's `max_watching` places, given back on drop.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

/// One sub-request counted in flight until dropped, however its call ends
/// (a caller that gives up included).
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How an exchange on a connection failed.
enum Exchange {
    Broken(std::io::Error),
    TimedOut,
}

/// One connection to a shard and the bytes read from it not yet parsed.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Frames the reply being read across reads; idle between replies.
    scanner: ReplyScanner,
    /// The bytes of `buf` it has taken.
    scanned: usize,
    /// To be written ahead of the first command ([`Shard::greeting`]).
    greeting: Option<Arc<[u8]>>,
    /// The shard's reply to it, until [`Shard::talk`] reads it.
    greeted: Option<Vec<u8>>,
}

impl Conn {
    /// The bytes of the next reply.
    async fn read_reply(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            let (n, reply) = self
                .scanner
                .advance(&self.buf[self.scanned..])
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            self.scanned += n;
            if reply.is_some() {
                let len = std::mem::take(&mut self.scanned);
                let reply = self.buf[..len].to_vec();
                self.buf.drain(..len);
                crate::pipeline::shrink(&mut self.buf);
                return Ok(reply);
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(16 << 10);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the shard closed the connection",
                ));
            }
        }
    }
}
