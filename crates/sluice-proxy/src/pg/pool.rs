//! Server connections (backends) and, opt-in, transaction pooling.
//!
//! By default (`pool = "session"`) a client keeps the backend it logged in
//! on for its whole session, so that its session state is PostgreSQL's own.
//! With `pool = "transaction"` a client holds a backend only while a
//! request (a statement, or a transaction block, up to ReadyForQuery 'I';
//! see [`super::session`]) is in flight, as PgBouncer's
//! transaction mode does; between requests the backend waits in the pool
//! for any client whose StartupMessage is byte for byte the same (same
//! user, database and startup options, hence the same session defaults).
//!
//! Why depart from a backend per client: with one per client, 512
//! clients keep 512 backends, and PostgreSQL runs the admitted work among
//! all of them: every transaction lands on a backend whose caches went cold
//! while 511 others ran. That rotation and the idle backends themselves
//! cost ~30% of throughput at P = 16 (docs/BENCHMARKS.md, "512 users: where
//! the distance to PgBouncer comes from"), which no admission order can win
//! back.
//! The pool hands out the most recently used backend first (LIFO), so the
//! P admitted requests run on a few warm backends, and a task closes
//! backends left idle longer than `server_idle_timeout_secs`. Among idle
//! backends, those whose socket the leasing worker watches come first
//! (`crate::workers`): at 256 users this gave 1.03–1.05× the throughput of
//! plain LIFO and 5.2 context switches per transaction instead of 6.2. One
//! leased by a session of another worker moves to that worker's reactor
//! with it (plain connections; TLS streams stay where they were opened).
//!
//! Where the pool can open a login's backends itself (the login was let in
//! without a password, or the auth_file answers for its user), the login's
//! idle backends beyond the gate's P are closed when a backend comes back:
//! more can never be in use at once, and those a burst of logins brings
//! would otherwise hold server memory until they time out. Throughput did
//! not move with it (pgbench at 256 users: 0.97–1.03× without it, with 16
//! pooled backends instead of 46; docs/BENCHMARKS.md, "pgbench's own runs:
//! the model between runs, and pooled backends beyond P").
//!
//! Authentication is PostgreSQL's first: a login goes to a fresh backend,
//! relayed byte for byte (any method, SCRAM included), and that backend then
//! joins the pool. When the pool has no idle backend for a request, it
//! opens one by replaying the StartupMessage; a server that asks a password
//! of that connection gets the user's from the `auth_file`
//! ([`super::auth_file`], answered by [`super::password`]). Without one the
//! request is refused with SQLSTATE 08001, and the pool of a login the
//! server asks a password of grows only by logins. A login the server let
//! in is answered from the pool for a while after, without a backend of its
//! own ([`Pool::welcome`]); if the server asked it for a password, only
//! where the user's auth_file line gives the password the server took: the
//! proxy then asks for it, and judges it as the server did
//! ([`super::verifier`]).
//!
//! Named prepared statements (protocol-level Parse) follow their client
//! from backend to backend ([`super::prepared`]), and SQL that drops them
//! drops the client's own; `LISTEN` is refused with an error naming session
//! pooling ([`super::sql`]). Other session state set outside a transaction
//! block (SET, PREPARE in SQL, temporary tables, session advisory locks)
//! may be gone, or met by another client, at the next request, as with any
//! transaction pooler: docs/transaction-pooling.md has the whole table. A client that disconnects in the middle of a request takes
//! its backend with it: it is closed, never pooled.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;
use thiserror::Error;
use tokio::io::AsyncWrite;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio_util::either::Either;

use super::auth_file::{self, AuthFileError, Secret};
use super::frame::{self, BackendKey, Startup};
use super::password::{self, AuthError, Login};
use super::prepared::Made;
use super::reported::Reported;
use super::scram::ClientKey;
use super::upstream_tls::{ServerStream, UpstreamTls};
use super::verifier::{Exchange, Verifier};
use crate::socket::{self, Peer, Socket};
use crate::stats::Stats;

/// How long opening a pooled backend may take, login included.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// AuthenticationOk, whole.
const AUTHENTICATION_OK: &[u8] = b"R\0\0\0\x08\0\0\0\0";
/// Reported settings that are the server's state rather than a session's:
/// no `SET` changes them, and a change (a standby promoted) holds for
/// every login at once.
const SERVER_STATE: [&[u8]; 1] = [b"in_hot_standby"];

/// One server connection.
pub(crate) struct Backend {
    stream: ServerStream,
    peer: Peer,
    /// From its BackendKeyData, for forwarding cancels.
    key: OnceLock<BackendKey>,
    /// The prepared statements made on it for pooled clients.
    pub made: Made,
    /// The settings it last reported that follow their client (see
    /// [`super::reported`]).
    reported: Mutex<Reported>,
    /// Cancels sent for it that the server has not yet taken (see
    /// [`Link::cancel_target`]), and their being taken.
    cancels: AtomicUsize,
    cancels_taken: Notify,
    /// The worker whose reactor its socket is registered with.
    worker: Option<usize>,
}

impl Backend {
    /// Connects to `upstream`, inside TLS if `tls` is set and the server
    /// accepts it (see [`super::upstream_tls`]).
    pub async fn connect(upstream: &str, tls: Option<&UpstreamTls>) -> io::Result<Backend> {
        let socket = Socket(socket::connect_stream(upstream).await?);
        let peer = socket.peer()?;
        let stream = match (tls, socket) {
            (None, socket) => ServerStream::Plain(socket),
            (Some(tls), Socket(Either::Left(tcp))) => tls.open(tcp).await?,
            (Some(_), Socket(Either::Right(_))) => {
                return Err(io::Error::other(
                    "upstream_tls over a Unix socket (the configuration check should have refused it)",
                ))
            }
        };
        Ok(Backend {
            stream,
            peer,
            key: OnceLock::new(),
            made: Made::default(),
            reported: Mutex::default(),
            cancels: AtomicUsize::new(0),
            cancels_taken: Notify::new(),
            worker: crate::workers::current(),
        })
    }

    /// This backend, its socket watched by the calling worker from now on
    /// ([`crate::socket::Socket::register_here`]). A TLS stream stays with
    /// the worker that opened it: tokio-rustls takes a client stream apart
    /// but cannot put it back together.
    fn moved_here(self) -> io::Result<Backend> {
        match self.stream {
            ServerStream::Plain(socket) => Ok(Backend {
                stream: ServerStream::Plain(socket.register_here()?),
                worker: crate::workers::current(),
                ..self
            }),
            ServerStream::Tls(_) => Ok(self),
        }
    }

    /// Remembers the key its BackendKeyData carried.
    pub fn set_key(&self, key: BackendKey) {
        // A second BackendKeyData would be a server's protocol error; the
        // first key is the one cancels need.
        let _ = self.key.set(key);
    }

    /// The settings it last reported that follow their client.
    pub fn reported(&self) -> MutexGuard<'_, Reported> {
        self.reported.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a CancelRequest for the query running on it goes.
    pub fn cancel_target(&self) -> Option<(BackendKey, Peer)> {
        self.key.get().map(|&key| (key, self.peer.clone()))
    }

    /// A cancel sent for it was taken: the server closed the cancel's
    /// connection, having signalled the backend (or the proxy gave up).
    pub fn cancel_taken(&self) {
        if self.cancels.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.cancels_taken.notify_waiters();
        }
    }

    /// Whether a cancel sent for it may still reach it.
    pub fn cancel_pending(&self) -> bool {
        self.cancels.load(Ordering::Acquire) > 0
    }

    /// Waits until no cancel sent for it may still reach it.
    pub async fn cancels_taken(&self) {
        // Most backends have none: no waiter is registered for them.
        if !self.cancel_pending() {
            return;
        }
        loop {
            let mut taken = pin!(self.cancels_taken.notified());
            taken.as_mut().enable();
            if !self.cancel_pending() {
                return;
            }
            taken.await;
        }
    }

    /// Reads what the server sent into `buf`; 0 when it closed.
    pub async fn read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.stream.poll_read(cx, buf)).await
    }

    /// The next whole message the server sends: its tag and body.
    async fn next_message(&self, buf: &mut BytesMut) -> io::Result<(u8, Bytes)> {
        loop {
            let header = frame::parse_header(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if let Some(header) = header.filter(|h| h.len <= buf.len()) {
                let body = buf.split_to(header.len).freeze().slice(5..);
                return Ok((header.tag, body));
            }
            if self.read_buf(buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    async fn write_all(&self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match std::future::poll_fn(|cx| self.stream.poll_write(cx, bytes)).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                written => bytes = &bytes[written..],
            }
        }
        std::future::poll_fn(|cx| self.stream.poll_flush(cx)).await
    }
}

/// The backend a session uses now: its own for the whole session, or under
/// transaction pooling the one leased for the request in flight. Cancels
/// are forwarded to whatever backend it holds at the time, and stop the
/// session's request while it is on its way to a backend (at the gate, or
/// being given one), where no backend has its query.
#[derive(Default)]
pub(crate) struct Link {
    state: Mutex<Linked>,
    /// Wakes the request on its way to a backend.
    cancel: Notify,
}

#[derive(Default)]
struct Linked {
    backend: Option<Arc<Backend>>,
    /// A request set out and has not arrived.
    on_its_way: bool,
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, Linked> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request sets out for a backend: the returned future resolves once
    /// a cancel comes before it [`arrive`](Self::arrive)s. A cancel that
    /// came before is not kept, as PostgreSQL keeps none that reaches an
    /// idle backend.
    pub fn set_out(&self) -> Notified<'_> {
        let cancelled = self.cancel.notified();
        self.lock().on_its_way = true;
        cancelled
    }

    /// The request that set out arrives, with the `backend` it was given
    /// if any (under transaction pooling), which becomes the session's.
    /// Fails, handing the backend back, if a cancel came first: checked
    /// under the lock a cancel takes, so that a cancel either stops the
    /// request here or finds its backend.
    pub fn arrive(
        &self,
        cancelled: Pin<&mut Notified<'_>>,
        backend: Option<Arc<Backend>>,
    ) -> Result<(), Option<Arc<Backend>>> {
        let mut state = self.lock();
        state.on_its_way = false;
        if cancelled.enable() {
            return Err(backend);
        }
        if backend.is_some() {
            state.backend = backend;
        }
        Ok(())
    }

    /// A cancel came: stops the request on its way to a backend, if one
    /// is, and says whether it did.
    pub fn cancel_on_its_way(&self) -> bool {
        let state = self.lock();
        if state.on_its_way {
            self.cancel.notify_waiters();
        }
        state.on_its_way
    }

    pub fn get(&self) -> Option<Arc<Backend>> {
        self.lock().backend.clone()
    }

    /// The backend the session uses now and where a CancelRequest for it
    /// goes, the cancel counted pending on it until
    /// [`Backend::cancel_taken`]. Counted under the link's lock, so that a
    /// session that gives the backend back ([`Link::take`]) sees it.
    pub fn cancel_target(&self) -> Option<(Arc<Backend>, BackendKey, Peer)> {
        let state = self.lock();
        let backend = state.backend.as_ref()?;
        let (key, peer) = backend.cancel_target()?;
        backend.cancels.fetch_add(1, Ordering::AcqRel);
        Some((Arc::clone(backend), key, peer))
    }

    pub fn set(&self, backend: Arc<Backend>) {
        self.lock().backend = Some(backend);
    }

    pub fn take(&self) -> Option<Arc<Backend>> {
        self.lock().backend.take()
    }

    /// Writes go to the current backend; with none (between requests of a
    /// pooled session) they are dropped: only messages that ask the server
    /// for nothing are sent then (see `session::starts_request`).
    pub fn writer(&self) -> LinkWriter<'_> {
        LinkWriter(self)
    }
}

pub(crate) struct LinkWriter<'a>(&'a Link);

impl AsyncWrite for LinkWriter<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.0.get() {
            Some(backend) => backend.stream.poll_write(cx, buf),
            None => Poll::Ready(Ok(buf.len())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.get() {
            Some(backend) => backend.stream.poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Why the pool could not give a request a backend.
#[derive(Debug, Error)]
pub(crate) enum PoolError {
    #[error("sluice: cannot open a server connection to {upstream}: {source}")]
    Connect { upstream: String, source: io::Error },
    #[error("sluice: no idle server connection for this login, and opening one failed: {0}")]
    Auth(#[from] AuthError),
    #[error("sluice: no idle server connection for this login, and opening one needs {0}")]
    AuthFile(#[from] AuthFileError),
    #[error("sluice: the server refused a pooled connection: {message}")]
    Refused { sqlstate: String, message: String },
    #[error("sluice: opening a pooled connection: {0}")]
    Protocol(String),
}

impl PoolError {
    pub fn sqlstate(&self) -> &str {
        match self {
            PoolError::Connect { .. } => "08006",
            // sqlclient_unable_to_establish_sqlconnection
            PoolError::Auth(_) | PoolError::AuthFile(_) => "08001",
            PoolError::Refused { sqlstate, .. } => sqlstate,
            PoolError::Protocol(_) => "08P01",
        }
    }
}

/// One login's idle backends with the time each became idle, most recently
/// used last.
type Idle = VecDeque<(Arc<Backend>, Instant)>;

/// What a pool is started with.
pub(crate) struct PoolSettings {
    pub upstream: String,
    /// A backend idle longer than this is closed.
    pub idle_timeout: Duration,
    /// Prepared statements one backend keeps for clients.
    pub max_prepared: usize,
    /// Passwords to open backends with ([`super::auth_file`]), read at
    /// each dial.
    pub auth_file: Option<PathBuf>,
    /// TLS to the server, if configured.
    pub tls: Option<Arc<UpstreamTls>>,
}

/// What a login of one StartupMessage is answered from the pool with.
#[derive(Clone)]
pub(crate) struct Welcome {
    /// The server's answers up to and with ReadyForQuery: from
    /// AuthenticationOk where the proxy asks for the password.
    pub answers: Bytes,
    /// The password the server asked for, as the proxy judges it; `None`
    /// if the server let the login in without one.
    pub verifier: Option<Arc<Verifier>>,
    /// When the server let in the login these were kept from.
    at: Instant,
}

/// Idle backends by StartupMessage.
pub(crate) struct Pool {
    settings: PoolSettings,
    /// Hashed with Fx, not SipHash: a key is a login the server accepted,
    /// not bytes any client can choose, and hashing it is on every
    /// request's path.
    idle: Mutex<FxHashMap<Bytes, Idle>>,
    /// By StartupMessage, the answers to give a login from the pool (see
    /// [`Pool::welcome`]).
    welcomes: Mutex<FxHashMap<Bytes, Welcome>>,
    /// Answers forgotten so far, counted under the `welcomes` lock (see
    /// [`Pool::remember_welcome`]).
    forgets: AtomicU64,
    /// The last ParameterStatus of the server's own state ([`SERVER_STATE`])
    /// any backend or login reported, applied to answers as they are kept.
    /// Taken before the `welcomes` lock, never after it.
    server_state: Mutex<Vec<Bytes>>,
    /// By user, for users whose auth_file line is a SCRAM secret: the
    /// ClientKey a relayed login's proof revealed, to open backends with
    /// (see [`super::scram`]). Kept while the proxy runs, as PgBouncer
    /// keeps it; a key the secret no longer hashes to is not used.
    client_keys: Mutex<HashMap<String, ClientKey>>,
    /// Where the number of idle backends is shown.
    stats: Arc<Stats>,
}

impl Pool {
    /// An empty pool, with a task that closes backends idle longer than
    /// `idle_timeout` (checked every half timeout, between 0.1 and 1 s)
    /// for as long as the pool lives.
    pub fn start(settings: PoolSettings, stats: Arc<Stats>) -> Arc<Pool> {
        let every = (settings.idle_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(1));
        let pool = Arc::new(Pool {
            settings,
            idle: Mutex::default(),
            welcomes: Mutex::default(),
            forgets: AtomicU64::new(0),
            server_state: Mutex::default(),
            client_keys: Mutex::default(),
            stats,
        });
        let weak = Arc::downgrade(&pool);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(pool) = weak.upgrade() else { return };
                pool.close_idle();
            }
        });
        pool
    }

    /// Prepared statements one backend keeps for clients.
    pub fn max_prepared(&self) -> usize {
        self.settings.max_prepared
    }

    fn lock(&self) -> MutexGuard<'_, FxHashMap<Bytes, Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn welcomes(&self) -> MutexGuard<'_, FxHashMap<Bytes, Welcome>> {
        self.welcomes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many kept answers were forgotten so far: a login notes it as it
    /// begins, for [`Pool::remember_welcome`].
    pub fn forgets(&self) -> u64 {
        self.forgets.load(Ordering::Relaxed)
    }

    /// A login of `startup` was let in and answered `answers`, up to and
    /// with its ReadyForQuery; if the server asked it for a password,
    /// `exchange` is how that went. Later logins of `startup` are answered
    /// so while the pool can judge their passwords as the server did
    /// ([`super::verifier`]). Nothing is kept if answers were forgotten
    /// since the login began (`forgets_before`): a login refused meanwhile
    /// may have been refused for reasons this one was let in without.
    pub fn remember_welcome(&self, startup: &Bytes, answers: Bytes, exchange: Option<&Exchange>, forgets_before: u64) {
        let verifier = match exchange {
            None => None,
            // The proxy's own password exchange goes first, and the
            // answers follow it: they must begin where the server's
            // exchange ended.
            Some(_) if !answers.starts_with(AUTHENTICATION_OK) => return,
            Some(exchange) => {
                let Some(verifier) = self.verifier(startup, exchange) else {
                    return;
                };
                Some(verifier)
            }
        };
        let state = self.server_state();
        let welcome = Welcome {
            answers: with_server_state(answers, &state),
            verifier,
            at: Instant::now(),
        };
        let mut welcomes = self.welcomes();
        if self.forgets() == forgets_before {
            welcomes.insert(startup.clone(), welcome);
        }
    }

    fn server_state(&self) -> MutexGuard<'_, Vec<Bytes>> {
        self.server_state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a relayed `exchange` proves for `startup`'s user: the verifier
    /// kept for it if that proves it (no PBKDF2), else one derived from the
    /// user's auth_file secret. A SCRAM exchange proved also gives the
    /// ClientKey to open backends with where the line is a SCRAM secret.
    fn verifier(&self, startup: &[u8], exchange: &Exchange) -> Option<Arc<Verifier>> {
        let user = user_of(startup);
        let kept = self.welcomes().get(startup).and_then(|w| w.verifier.clone());
        let verifier = match kept.filter(|kept| kept.proves(&user, exchange)) {
            Some(kept) => kept,
            None => Arc::new(Verifier::proved(
                &user,
                Some(&self.secret(&user).ok()?.ok()?),
                exchange,
            )?),
        };
        if let Verifier::Scram(secret) = &*verifier {
            if let Some(key) = exchange.client_key(secret) {
                self.client_keys().insert(user, key);
            }
        }
        Some(verifier)
    }

    fn client_keys(&self) -> MutexGuard<'_, HashMap<String, ClientKey>> {
        self.client_keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A login of `startup` was refused, by the server or by the proxy:
    /// later ones are relayed, until the server lets one in again.
    pub fn forget_welcome(&self, startup: &[u8]) {
        let mut welcomes = self.welcomes();
        self.forgets.fetch_add(1, Ordering::Relaxed);
        welcomes.remove(startup);
    }

    /// The server asked a login of `startup` for a password: answers kept
    /// from one it let in without are forgotten.
    pub fn forget_passwordless_welcome(&self, startup: &[u8]) {
        let mut welcomes = self.welcomes();
        if welcomes.get(startup).is_some_and(|w| w.verifier.is_none()) {
            self.forgets.fetch_add(1, Ordering::Relaxed);
            welcomes.remove(startup);
        }
    }

    /// The pool logged a backend of `startup` in, and the server answered
    /// `answers` up to its ReadyForQuery: answers kept for `startup` become
    /// these, so that a login answered from the pool is told what the server
    /// says now (a `server_version` after an upgrade, a default set by
    /// `ALTER ROLE ... SET`). How the password is judged stays as the
    /// server's own login of it showed; answers that do not begin where
    /// that judgement ends (AuthenticationOk) are not taken for one.
    fn refresh_welcome(&self, startup: &[u8], answers: Bytes) {
        let state = self.server_state();
        if let Some(welcome) = self.welcomes().get_mut(startup) {
            if welcome.verifier.is_none() || answers.starts_with(AUTHENTICATION_OK) {
                welcome.answers = with_server_state(answers, &state);
            }
        }
    }

    /// A backend or a relayed login reported a setting (a ParameterStatus
    /// `body`): where that is the server's own state ([`SERVER_STATE`]: a
    /// standby promoted reports `in_hot_standby` off on each backend, at
    /// the end of its next request), every kept answer is told the new
    /// value, since a driver picking a primary (libpq's
    /// `target_session_attrs`) decides by it at login.
    pub fn reported(&self, body: &[u8]) {
        let Some(name) = server_state_name(body) else {
            return;
        };
        let mut state = self.server_state();
        match state.iter_mut().find(|known| server_state_name(known) == Some(name)) {
            Some(known) if &known[..] == body => return,
            Some(known) => *known = Bytes::copy_from_slice(body),
            None => state.push(Bytes::copy_from_slice(body)),
        }
        for welcome in self.welcomes().values_mut() {
            if let Some(told) = with_status(&welcome.answers, name, body) {
                welcome.answers = told;
            }
        }
    }

    /// The answers to give a login of `startup` from the pool, without a
    /// backend of its own: those of a login of it that the server let in
    /// less than the idle timeout ago, while the pool holds a live idle
    /// backend of it. A login the server asked for a password is answered
    /// so only where the pool can judge the password as the server did
    /// ([`super::verifier`]): the proxy asks for it first. The server sees
    /// every client of the proxy come from the proxy's address, so a
    /// StartupMessage it let in it lets in again, with the same password,
    /// until its rules or the role change; a change (`pg_hba.conf`, a
    /// password, `NOLOGIN`, `CONNECT` revoked, a connection limit) reaches
    /// logins within the idle timeout, when one is relayed to the server
    /// again, or at once where a login of it relayed or opened by the pool
    /// is refused, or the proxy refuses a password.
    /// What the server reports at login follows it sooner where the pool
    /// sees it: the answers become those of each backend the pool logs in,
    /// and a change of the server's own state reaches them once any backend
    /// or relayed login reports it ([`Pool::reported`]).
    /// Answers kept from a login let in without a password are forgotten
    /// too where one is asked for a password. A login costs the server a
    /// process of its own (a fork, and memory until the pool closes it);
    /// answered from the pool it costs a lookup, as PgBouncer answers
    /// logins itself.
    pub fn welcome(&self, startup: &[u8]) -> Option<Welcome> {
        let idle = self.lock();
        if !idle
            .get(startup)
            .is_some_and(|stack| stack.iter().rev().any(|(b, _)| b.stream.is_alive()))
        {
            return None;
        }
        drop(idle);
        let welcomes = self.welcomes();
        let welcome = welcomes.get(startup)?;
        (welcome.at.elapsed() < self.settings.idle_timeout).then(|| welcome.clone())
    }

    /// The most recently used live backend for `startup`, or a new one.
    /// One whose socket the calling worker watches comes first; one that
    /// another worker watches is moved to this one's reactor (two
    /// `epoll_ctl` calls), since left there the server's every answer on
    /// it would wake that worker, which then wakes this one.
    pub async fn lease(&self, startup: &Bytes) -> Result<Arc<Backend>, PoolError> {
        let worker = crate::workers::current();
        loop {
            // A backend a cancel is on its way to comes last, and is waited
            // for rather than a new one dialled (a pool that cannot log in
            // by itself would refuse the request): see `pg::cancel`.
            let rank = |(b, _): &(Arc<Backend>, Instant)| match (b.cancel_pending(), b.worker == worker) {
                (false, true) => 0,
                (false, false) => 1,
                (true, _) => 2,
            };
            let taken = self.lock().get_mut(startup).and_then(|stack| take_newest(stack, rank));
            let Some((backend, _)) = taken else {
                break;
            };
            self.stats.pool_idle_taken(1);
            backend.cancels_taken().await;
            if !backend.stream.is_alive() {
                continue;
            }
            if backend.worker == worker {
                return Ok(backend);
            }
            // Idle in the pool, nothing else holds it; a failed move lost
            // the connection, as a dead one is lost.
            match Arc::try_unwrap(backend) {
                Ok(backend) => match backend.moved_here() {
                    Ok(moved) => return Ok(Arc::new(moved)),
                    Err(_) => continue,
                },
                Err(shared) => return Ok(shared),
            }
        }
        // Boxed: dialling is rare, and unboxed its state would make every
        // session's future larger by it, idle or not (docs/BENCHMARKS.md,
        // "Idle PostgreSQL clients").
        Box::pin(self.dial(startup)).await.map(Arc::new)
    }

    /// Takes back a backend whose session is idle (ReadyForQuery 'I', all
    /// answered), and closes the least recently used of its login's idle
    /// backends beyond `keep`.
    pub fn release(&self, startup: &Bytes, backend: Arc<Backend>, keep: usize) {
        let surplus: Vec<_> = {
            let mut idle = self.lock();
            let stack = match idle.get_mut(startup) {
                Some(stack) => stack,
                None => idle.entry(startup.clone()).or_default(),
            };
            stack.push_back((backend, Instant::now()));
            let over = stack.len().saturating_sub(keep.max(1));
            stack.drain(..over).collect()
        };
        self.stats.pool_idle_added(1);
        self.stats.pool_idle_taken(surplus.len());
    }

    /// Closes the backends idle longer than the timeout: the least recently
    /// used, at the front of each login's stack.
    fn close_idle(&self) {
        let now = Instant::now();
        let mut closed = 0;
        self.lock().retain(|_, stack| {
            while stack
                .front()
                .is_some_and(|(_, since)| now - *since > self.settings.idle_timeout)
            {
                stack.pop_front();
                closed += 1;
            }
            !stack.is_empty()
        });
        self.stats.pool_idle_taken(closed);
        self.welcomes()
            .retain(|_, welcome| now - welcome.at < self.settings.idle_timeout);
    }

    /// Opens a backend by replaying `startup` and reading up to its first
    /// ReadyForQuery.
    async fn dial(&self, startup: &[u8]) -> Result<Backend, PoolError> {
        let connect = |source| PoolError::Connect {
            upstream: self.settings.upstream.clone(),
            source,
        };
        let login = async {
            let backend = Backend::connect(&self.settings.upstream, self.settings.tls.as_deref())
                .await
                .map_err(connect)?;
            backend.write_all(startup).await.map_err(connect)?;
            self.login(&backend, startup).await?;
            Ok(backend)
        };
        let dialled = tokio::time::timeout(DIAL_TIMEOUT, login).await.unwrap_or_else(|_| {
            Err(connect(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no ReadyForQuery within {DIAL_TIMEOUT:?}"),
            )))
        });
        if dialled.is_err() {
            // Refused, or the server is gone: no login is answered for it.
            self.forget_welcome(startup);
        }
        dialled
    }

    /// Reads a fresh backend's answer to its StartupMessage (`startup`) up
    /// to ReadyForQuery: password requests are answered from the auth_file,
    /// the key its BackendKeyData carries is kept.
    async fn login(&self, backend: &Backend, startup: &[u8]) -> Result<(), PoolError> {
        let user = user_of(startup);
        let mut login: Option<Login> = None;
        let mut buf = BytesMut::new();
        let mut out = BytesMut::new();
        // What the server tells the login but for its password exchange,
        // as a relayed login's answers are kept.
        let mut answers = BytesMut::new();
        let mut authenticated = false;
        loop {
            let (tag, body) = backend
                .next_message(&mut buf)
                .await
                .map_err(|e| PoolError::Protocol(format!("reading the server's answer to a login: {e}")))?;
            let challenge = tag == b'R' && !body.starts_with(&password::OK.to_be_bytes());
            if !challenge {
                frame::write_message(&mut answers, tag, &body);
            }
            match tag {
                b'R' => {
                    let (method, data) = body.split_first_chunk::<4>().ok_or(AuthError::Malformed)?;
                    let method = u32::from_be_bytes(*method);
                    if method == password::OK {
                        // A SCRAM exchange ends with the server's proof.
                        if let Some(login) = &login {
                            login.finished()?;
                        }
                        authenticated = true;
                        continue;
                    }
                    // The server asks this login for a password now: a
                    // login it let in without one is no guide any more.
                    self.forget_passwordless_welcome(startup);
                    let login = match login.as_mut() {
                        Some(login) => login,
                        None => {
                            let client_key = self.client_keys().get(&user).cloned();
                            login.insert(Login::new(&user, self.secret(&user)?, client_key))
                        }
                    };
                    login.answer(method, data, &mut out)?;
                    backend
                        .write_all(&out)
                        .await
                        .map_err(|e| PoolError::Protocol(format!("answering the server's password request: {e}")))?;
                    out.clear();
                }
                b'K' => {
                    if let Some(key) = BackendKey::from_body(&body) {
                        backend.set_key(key);
                    }
                }
                b'S' => {
                    backend.reported().note(&body);
                    self.reported(&body);
                }
                b'E' => {
                    return Err(PoolError::Refused {
                        sqlstate: frame::error_field(&body, b'C').unwrap_or("08006").into(),
                        message: frame::error_field(&body, b'M').unwrap_or("no message").into(),
                    })
                }
                b'Z' => {
                    if authenticated {
                        self.refresh_welcome(startup, answers.freeze());
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
    }

    /// Whether the auth_file, read now, opens backends for the user
    /// `startup` names: a password or md5 hash, or a SCRAM secret whose
    /// ClientKey a login revealed.
    pub fn answers_for(&self, startup: &[u8]) -> bool {
        let user = user_of(startup);
        match self.secret(&user) {
            Ok(Ok(Secret::Scram(secret))) => self.client_keys().get(&user).is_some_and(|key| secret.opens_with(key)),
            Ok(Ok(_)) => true,
            _ => false,
        }
    }

    /// `user`'s secret from the auth_file, read now, or why there is none.
    fn secret(&self, user: &str) -> Result<Result<Secret, String>, AuthFileError> {
        let Some(path) = &self.settings.auth_file else {
            return Ok(Err("no auth_file is set".into()));
        };
        let mut secrets = auth_file::read(path)?;
        Ok(secrets
            .remove(user)
            .ok_or_else(|| format!("auth_file {} has no line for this user", path.display())))
    }
}

/// Takes the newest of the entries of `stack` with the lowest `rank`.
fn take_newest<T>(stack: &mut VecDeque<T>, rank: impl Fn(&T) -> u8) -> Option<T> {
    let mut best: Option<(usize, u8)> = None;
    for (i, item) in stack.iter().enumerate().rev() {
        let r = rank(item);
        if best.is_none_or(|(_, b)| r < b) {
            best = Some((i, r));
            if r == 0 {
                break;
            }
        }
    }
    stack.remove(best?.0)
}

/// The name of the setting a well-formed ParameterStatus `body` (name,
/// NUL, value, NUL) reports, if it is the server's own state.
fn server_state_name(body: &[u8]) -> Option<&[u8]> {
    let mut fields = body.split(|&b| b == 0);
    let (name, _value, end, after) = (fields.next()?, fields.next()?, fields.next()?, fields.next());
    let well_formed = end.is_empty() && after.is_none();
    SERVER_STATE.iter().copied().find(|known| well_formed && *known == name)
}

/// `answers` with the server's state reported last (`state`, ParameterStatus
/// bodies) in place of what they were told of it.
fn with_server_state(mut answers: Bytes, state: &[Bytes]) -> Bytes {
    for body in state {
        if let Some(told) = server_state_name(body).and_then(|name| with_status(&answers, name, body)) {
            answers = told;
        }
    }
    answers
}

/// `answers` (whole messages) with the ParameterStatus of setting `name`
/// replaced by one of `body`; `None` if it has none, or has that body
/// already.
fn with_status(answers: &[u8], name: &[u8], body: &[u8]) -> Option<Bytes> {
    // Where the answers were told that value already, which is the usual
    // case, nothing is copied.
    let mut told_at = None;
    let mut rest = answers;
    while let Ok(Some(header)) = frame::parse_header(rest) {
        let (message, after) = rest.split_at_checked(header.len)?;
        let old = &message[5..];
        if header.tag == b'S' && old.split(|&b| b == 0).next() == Some(name) && old != body {
            told_at = Some((answers.len() - rest.len(), header.len));
        }
        rest = after;
    }
    let (at, len) = told_at.filter(|_| rest.is_empty())?;
    let mut told = BytesMut::with_capacity(answers.len() + body.len());
    told.extend_from_slice(&answers[..at]);
    frame::write_message(&mut told, b'S', body);
    told.extend_from_slice(&answers[at + len..]);
    Some(told.freeze())
}

/// The user a StartupMessage names ("" if none: the server refuses that).
fn user_of(startup: &[u8]) -> String {
    match frame::parse_startup(startup) {
        Ok(Some((Startup::Message(params), _))) => params.user.unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_setting_is_replaced_in_kept_answers_only_where_it_changed() {
        let mut answers = BytesMut::from(AUTHENTICATION_OK);
        frame::write_message(&mut answers, b'S', b"in_hot_standby\0on\0");
        frame::write_message(&mut answers, b'S', b"TimeZone\0UTC\0");
        frame::write_message(&mut answers, b'Z', b"I");
        let mut want = BytesMut::from(AUTHENTICATION_OK);
        frame::write_message(&mut want, b'S', b"in_hot_standby\0off\0");
        frame::write_message(&mut want, b'S', b"TimeZone\0UTC\0");
        frame::write_message(&mut want, b'Z', b"I");
        let off = b"in_hot_standby\0off\0";
        assert_eq!(
            with_status(&answers, b"in_hot_standby", off).as_deref(),
            Some(&want[..])
        );
        assert_eq!(with_status(&want, b"in_hot_standby", off), None, "told already");
        assert_eq!(
            with_status(&answers, b"server_version", b"server_version\0x\0"),
            None,
            "not told"
        );
        assert_eq!(
            with_status(&answers[..answers.len() - 1], b"in_hot_standby", off),
            None,
            "cut short"
        );
    }

    #[test]
    fn only_a_well_formed_report_of_the_servers_state_is_applied() {
        assert_eq!(
            server_state_name(b"in_hot_standby\0off\0"),
            Some(&b"in_hot_standby"[..])
        );
        for body in [
            &b"TimeZone\0UTC\0"[..],
            b"in_hot_standby",
            b"in_hot_standby\0off",
            b"in_hot_standby\0off\0x\0",
        ] {
            assert_eq!(server_state_name(body), None, "{body:?}");
        }
        let mut answers = BytesMut::from(AUTHENTICATION_OK);
        frame::write_message(&mut answers, b'S', b"in_hot_standby\0on\0");
        let state = [Bytes::from_static(b"in_hot_standby\0off\0")];
        let told = with_server_state(answers.freeze(), &state);
        assert!(told.ends_with(b"in_hot_standby\0off\0"), "{told:?}");
    }

    #[test]
    fn the_newest_preferred_backend_goes_first_else_the_newest() {
        let mut stack = VecDeque::from([(1, 'a'), (2, 'b'), (3, 'a'), (4, 'b')]);
        let rank = |&(_, w): &(u8, char)| u8::from(w != 'a') + 2 * u8::from(w == 'c');
        stack.push_front((0, 'c'));
        assert_eq!(take_newest(&mut stack, rank), Some((3, 'a')));
        assert_eq!(take_newest(&mut stack, rank), Some((1, 'a')));
        assert_eq!(take_newest(&mut stack, rank), Some((4, 'b')));
        assert_eq!(take_newest(&mut stack, rank), Some((2, 'b')));
        assert_eq!(take_newest(&mut stack, rank), Some((0, 'c')), "the worst rank last");
        assert_eq!(take_newest(&mut VecDeque::<(u8, char)>::new(), rank), None);
    }

    #[tokio::test]
    async fn a_backend_opened_by_one_worker_and_leased_by_another_moves_to_its_reactor() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = server.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut conn, _) = server.accept().await.unwrap();
            let mut buf = [0u8; 4];
            conn.read_exact(&mut buf).await.unwrap();
            conn.write_all(&buf).await.unwrap();
        });
        let workers = crate::workers::Workers::start(2).unwrap();
        let dial = upstream.clone();
        let opened = workers
            .next()
            .spawn(async move { Backend::connect(&dial, None).await.unwrap() });
        let opened = opened.await.unwrap();
        assert_eq!(opened.worker, Some(0));
        let settings = PoolSettings {
            upstream,
            idle_timeout: Duration::from_secs(60),
            max_prepared: 0,
            auth_file: None,
            tls: None,
        };
        let pool = Pool::start(settings, Arc::default());
        let startup = Bytes::from_static(b"login");
        pool.release(&startup, Arc::new(opened), 4);
        let leased = workers.next().spawn(async move {
            let backend = pool.lease(&startup).await.unwrap();
            backend.write_all(b"ping").await.unwrap();
            let mut answer = BytesMut::with_capacity(16);
            while answer.len() < 4 {
                assert_ne!(
                    backend.read_buf(&mut answer).await.unwrap(),
                    0,
                    "the server closed early"
                );
            }
            (backend.worker, answer)
        });
        let (worker, answer) = leased.await.unwrap();
        assert_eq!(worker, Some(1), "the lease moved the backend to the leasing worker");
        assert_eq!(
            &answer[..],
            b"ping",
            "the moved connection still carries bytes both ways"
        );
    }
}
