//! What the server's connections share: the store, the server's options,
//! the per-key write locks, SCAN's cursors and the live tenants with their
//! statistics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use slab::Slab;
use sluice_core::metrics::LatencyHistogram;
use sluice_io::{Background, TaskKind};
use sluice_resp::slot::SlotRanges;

use crate::blocked::Waiters;
use crate::cursors::Cursors;
use crate::io_estimate::IoEstimates;
use crate::keyspace::{KeyLocks, RESERVED};
use crate::pubsub::PubSub;
use crate::resp::Limits;
use crate::Db;

/// Stripes of the per-key write locks: enough that unrelated keys rarely
/// share one among a few hundred connections.
const KEY_LOCK_STRIPES: usize = 1024;

#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub limits: Limits,
    /// If set, clients must `AUTH` with it before any other command.
    pub password: Option<String>,
    /// Worker threads: commands in progress at once, each on a worker of
    /// its own; a connection with whole requests waits for a free worker.
    /// Workers beyond `active_workers` take over from workers blocked in
    /// the store, so that requests doing I/O are in flight together.
    pub workers: usize,
    /// Workers serving connections at once between blocking (see the
    /// poller's turns): one per core by default, as an event loop per
    /// core, so that a busy server takes every ready client in one pass
    /// rather than waking a worker per request.
    pub active_workers: usize,
    /// Longest a Lua script runs before it is stopped: it holds every
    /// writer while it runs.
    pub script_time_limit: std::time::Duration,
    /// Clients connected at once (Redis's `maxclients`): the next is told
    /// so in RESP and closed, so that a flood of connections cannot take
    /// the descriptors and memory the clients already in are served with.
    pub max_clients: usize,
}

/// Workers by default: four per core. One per core serves at a time
/// ([`ServerOptions::active_workers`]); the others take over from workers
/// blocked on the disk, so a few keep the cores busy while some wait. A
/// store on a slow device, whose I/O scheduler needs many requests in
/// flight to order, wants as many workers as its clients.
pub fn default_workers() -> usize {
    4 * cores()
}

/// The cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            limits: Limits::default(),
            password: None,
            workers: default_workers(),
            active_workers: cores(),
            script_time_limit: std::time::Duration::from_secs(5),
            max_clients: sluice_resp::MAX_CLIENTS,
        }
    }
}

/// What a tenant has done, for `INFO`.
pub(crate) struct TenantStats {
    pub name: String,
    pub ops: u64,
    pub errors: u64,
    pub latency: LatencyHistogram,
    /// Requests with a deadline, and those that finished after it.
    pub deadlines: u64,
    pub missed: u64,
}

pub(crate) struct Shared {
    pub db: Arc<Db>,
    pub options: ServerOptions,
    /// Per-key write locks for read-modify-write commands.
    pub locks: KeyLocks,
    /// SCAN's cursors.
    pub cursors: Cursors,
    /// Live tenants by name and id; a connection's own tenant is forgotten
    /// when it closes, so connection churn does not grow the server.
    tenants: Mutex<(HashMap<String, u32>, Slab<TenantStats>)>,
    pub next_request: AtomicU64,
    pub next_client: AtomicU64,
    /// Connections open now: the poller's count, kept for INFO.
    pub clients: AtomicU64,
    /// Connections refused because `max_clients` were connected.
    pub rejected: AtomicU64,
    /// Commands run since the server started.
    pub commands: AtomicU64,
    pub started: Instant,
    /// N of the requests with a deadline, learned from their predecessors.
    pub io_estimates: IoEstimates,
    /// The expiry sweeper's background task (`crate::sweeper`).
    pub expiry_task: Arc<Background>,
    /// Expired values the sweeper has deleted.
    pub expired_keys: AtomicU64,
    /// Lua scripts by their SHA1 (SCRIPT LOAD, and EVAL's).
    pub scripts: Mutex<HashMap<String, Vec<u8>>>,
    /// Whether the store may hold a sorted set or a list: true if it held
    /// an internal entry when the server started, and from the first one
    /// made. Only then does a write that replaces a value read it first,
    /// for the entries to delete with it (`commands/delete.rs`).
    pub collections: AtomicBool,
    /// Clients blocked in a blocking pop.
    pub waiters: Waiters,
    /// Subscriptions to channels and patterns.
    pub pubsub: PubSub,
    /// The hash slots this store serves as a shard behind `sluice route`
    /// (`CONFIG SET shard-slots`, which the router sends on connecting);
    /// none: every key is its own. A script that reaches a key of another
    /// slot is refused, as a Redis Cluster node refuses it, since the
    /// router would never look for that key here.
    shard_slots: Mutex<Option<SlotRanges>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(db: Arc<Db>, options: ServerOptions) -> Shared {
        Shared {
            options,
            locks: KeyLocks::new(KEY_LOCK_STRIPES),
            cursors: Cursors::new(),
            tenants: Mutex::new((HashMap::new(), Slab::new())),
            next_request: AtomicU64::new(0),
            next_client: AtomicU64::new(1),
            clients: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            started: Instant::now(),
            io_estimates: IoEstimates::default(),
            expiry_task: db
                .runtime()
                .register_background(format!("expiry {}", db.dir().display()), TaskKind::Expiry),
            expired_keys: AtomicU64::new(0),
            scripts: Mutex::new(HashMap::new()),
            // A store that cannot be read here is assumed to hold some.
            collections: AtomicBool::new(db.scan(&[RESERVED], None, 1).map_or(true, |e| !e.is_empty())),
            waiters: Waiters::default(),
            pubsub: PubSub::default(),
            shard_slots: Mutex::new(None),
            db,
        }
    }

    /// The hash slots this store serves, if it is a shard behind a router.
    pub fn shard_slots(&self) -> Option<SlotRanges> {
        lock(&self.shard_slots).clone()
    }

    /// Makes this store a shard serving `slots`, or (none) no shard.
    pub fn set_shard_slots(&self, slots: Option<SlotRanges>) {
        *lock(&self.shard_slots) = slots;
    }

    /// The id of the tenant named `name`, registering it on first use.
    pub fn tenant(&self, name: &str) -> u32 {
        let mut t = lock(&self.tenants);
        if let Some(&id) = t.0.get(name) {
            return id;
        }
        let id = t.1.insert(TenantStats {
            name: name.to_string(),
            ops: 0,
            errors: 0,
            latency: LatencyHistogram::rough(),
            deadlines: 0,
            missed: 0,
        }) as u32;
        t.0.insert(name.to_string(), id);
        id
    }

    /// Drops a tenant and its statistics.
    pub fn forget(&self, tenant: u32) {
        let mut t = lock(&self.tenants);
        if let Some(stats) = t.1.try_remove(tenant as usize) {
            t.0.remove(&stats.name);
        }
    }

    /// A request of `tenant` took `nanos`; `missed` says, for a request
    /// with a deadline, whether it finished after it.
    pub fn record(&self, tenant: u32, nanos: u64, failed: bool, missed: Option<bool>) {
        let mut t = lock(&self.tenants);
        if let Some(s) = t.1.get_mut(tenant as usize) {
            s.ops += 1;
            s.errors += u64::from(failed);
            s.latency.record(nanos);
            if let Some(missed) = missed {
                s.deadlines += 1;
                s.missed += u64::from(missed);
            }
        }
    }

    /// Runs `f` on every live tenant's statistics.
    pub fn with_tenants<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &TenantStats>) -> R) -> R {
        f(&mut lock(&self.tenants).1.iter().map(|(_, t)| t))
    }
}

#[cfg(test)]
impl Shared {
    /// A server's shared state over a store in a new temporary directory.
    pub fn for_test() -> (Shared, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let rt = sluice_io::Runtime::new(sluice_io::RuntimeConfig::default()).expect("a runtime");
        let db = Arc::new(Db::open(rt, dir.path(), crate::Options::default()).expect("a store"));
        (Shared::new(db, ServerOptions::default()), dir)
    }
}
