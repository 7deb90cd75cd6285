//! The router: which shard each part of a request goes to, the request's
//! context sent with every part, and the parts' replies put back together.
//!
//! Every request gets an id from one sequence at its arrival (a run of a
//! client's pipelined commands, one for the run), so ids are
//! the router's global arrival order; each of its sub-requests carries that
//! id (and the time left of its budget) to its shard, inside `SLUICE.WITH`
//! for `sluice serve`, through the order of the shard's gate for a stock
//! Redis. In front of a Redis Cluster, the slot map comes from
//! `CLUSTER SLOTS` and is corrected by the `MOVED` and `ASK` replies of the
//! nodes, as a cluster-aware client corrects it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use sluice_core::policy::PolicySpec;
use sluice_core::time::from_ms;
use sluice_core::{Ctx, Nanos, TenantId};
use sluice_resp::{array_items, parse_reply, reply_len, Limits, Reply};

use crate::command::{keys_of, Merge, Route};
use crate::compaction::Steering;
use crate::config::{Config, ConfigError, ShardKind, TenantConfig};
use crate::gate::Gate;
use crate::scan::ScanCursors;
use crate::shard::{Asking, Reserved, Shard, ShardError, ShardOptions};
use crate::stats::{ClientStats, RequestStats};
use sluice_resp::slot::{slot, SLOTS};

/// `RANGE`'s count when the client gives none, as `sluice serve`'s.
const DEFAULT_RANGE_COUNT: usize = 100;

/// Redirections followed for one sub-request before giving up: a slot
/// that moves more often than this while one command is in flight means
/// the cluster is not settled.
const MAX_REDIRECTS: usize = 5;

/// Most cluster nodes the router keeps a shard for: Redis Cluster's own
/// upper size. Nodes are learnt from `CLUSTER SLOTS` and from redirects,
/// so a node that answers with redirects to ever new addresses would
/// otherwise grow the router without bound.
pub const MAX_NODES: usize = 1000;

/// Times a part refused by a cluster that is changing (`CLUSTERDOWN`, or
/// its node unreachable) is sent again, and the first pause before it
/// (each next pause one longer): 100 + 200 + 300 ms cover a failover's
/// news reaching every node, as Redis Cluster clients allow for it.
const SETTLE_RETRIES: u32 = 3;
const SETTLE_PAUSE: Duration = Duration::from_millis(100);

/// How often a failing cluster's slot map may be read again: a failover
/// moves slots without a `MOVED` from the node that is gone.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The slot map and the shards it names.
struct Topology {
    /// For each slot, its shard's index in `shards`.
    owner: Vec<u16>,
    shards: Vec<Arc<Shard>>,
}

pub struct Router {
    topology: RwLock<Topology>,
    /// Seeds and password of a Redis Cluster; `None` for listed shards.
    cluster: Option<crate::config::ClusterConfig>,
    shard_options: ShardOptions,
    order: PolicySpec,
    budget_ms: Option<f64>,
    tenants: Vec<TenantConfig>,
    next_id: AtomicU64,
    epoch: Instant,
    /// When the slot map was last read (cluster mode), so that failures
    /// re-read it at most once a `REFRESH_EVERY`.
    refreshed: std::sync::Mutex<Option<Instant>>,
    /// SCAN's cursors, each a shard and its cursor.
    scans: ScanCursors,
    pub stats: RequestStats,
    pub clients: ClientStats,
    /// The shards' compactions, if `[compaction]` steers them.
    pub compaction: Option<Arc<Steering>>,
}

/// One part of a request: a shard (by the slot that chose it) and the
/// command it gets, with the positions of its keys in the whole command.
struct Part<'a> {
    slot: u16,
    args: Vec<&'a [u8]>,
    positions: Vec<usize>,
}

/// A run's commands bound for one shard: their indexes in the run, each
/// with its slot.
type ShardsPart = (Arc<Shard>, Vec<(usize, u16)>);

/// Whose a request is and how long it may take: the configured tenant the
/// client named itself after (`CLIENT SETNAME`), and the budget the tenant
/// has, tightened by one the client sent with the request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Origin {
    /// Index of the tenant in the configuration.
    pub tenant: Option<usize>,
    pub budget: Option<Nanos>,
}

/// A client's `WATCH`: a key of its slot, their shard, and the
/// connection the shard keeps the watch on until the client's `EXEC`.
pub struct Watched {
    /// A watched key: it stands for their slot.
    pub key: Vec<u8>,
    shard: Arc<Shard>,
    reserved: Reserved,
}

impl Watched {
    /// Ends the watch: `exec_ran` says the shard ended it itself (EXEC).
    pub fn release(self, exec_ran: bool) {
        self.shard.release(self.reserved, exec_ran);
    }
}

/// What the router answers: a reply it made, or a shard's reply passed on
/// as it came (RESP2).
#[derive(Debug, PartialEq)]
pub enum Answer {
    Reply(Reply),
    Raw(Vec<u8>),
}

impl From<Reply> for Answer {
    fn from(reply: Reply) -> Answer {
        Answer::Reply(reply)
    }
}

impl Router {
    /// A router over the configured shards; in cluster mode, over the slot
    /// map read from the first seed that answers.
    pub async fn new(config: &Config) -> Result<Arc<Router>, ConfigError> {
        let order = config.order()?;
        let shard_options = |kind, password: Option<String>, slots| ShardOptions {
            kind,
            password,
            slots,
            pool: config.pool.size,
            connect_timeout: Duration::from_millis(config.pool.connect_timeout_ms),
            reply_timeout: Duration::from_millis(config.pool.reply_timeout_ms),
            max_watching: config.pool.max_watching,
        };
        let (topology, options) = match &config.cluster {
            None => {
                let owner = config.slot_owners()?;
                let shards = config
                    .shards
                    .iter()
                    .map(|s| {
                        let slots = match s.kind {
                            ShardKind::Sluice => Some(s.ranges()?),
                            ShardKind::Redis => None,
                        };
                        let options = shard_options(s.kind, s.password.clone(), slots);
                        Ok(Arc::new(Shard::new(
                            s.name.clone(),
                            s.addr.clone(),
                            options,
                            Gate::new(config.pool.size, order),
                        )))
                    })
                    .collect::<Result<_, ConfigError>>()?;
                (Topology { owner, shards }, shard_options(ShardKind::Sluice, None, None))
            }
            Some(c) => {
                let empty = Topology {
                    owner: vec![0; SLOTS as usize],
                    shards: Vec::new(),
                };
                (empty, shard_options(ShardKind::Redis, c.password.clone(), None))
            }
        };
        let router = Arc::new(Router {
            topology: RwLock::new(topology),
            cluster: config.cluster.clone(),
            shard_options: options,
            order,
            budget_ms: config.pool.budget_ms,
            tenants: config.tenants.clone(),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            refreshed: std::sync::Mutex::new(None),
            scans: ScanCursors::default(),
            stats: RequestStats::default(),
            clients: ClientStats::default(),
            compaction: match &config.compaction {
                Some(c) => Some(Arc::new(Steering::new(c.clone()).map_err(ConfigError::Invalid)?)),
                None => None,
            },
        });
        if router.cluster.is_some() {
            router.refresh_slots().await.map_err(ConfigError::Invalid)?;
        }
        Ok(router)
    }

    /// Time since the router started.
    pub fn uptime(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// The shards, in configuration order (in cluster mode, as found).
    pub fn shards(&self) -> Vec<Arc<Shard>> {
        self.topology.read().unwrap_or_else(|e| e.into_inner()).shards.clone()
    }

    /// The shard serving `slot`; none is an error of a command not sent.
    fn shard_of_slot(&self, slot: u16) -> Result<Arc<Shard>, ShardError> {
        let t = self.topology.read().unwrap_or_else(|e| e.into_inner());
        t.shards
            .get(t.owner[slot as usize] as usize)
            .cloned()
            .ok_or_else(|| ShardError {
                shard: "-".into(),
                addr: "-".into(),
                what: format!("CLUSTERDOWN Hash slot {slot} not served"),
                unsent: true,
            })
    }

    /// The shard at `addr` in cluster mode, made if new and there is room
    /// (see [`MAX_NODES`]).
    fn shard_at(&self, addr: &str) -> Result<(u16, Arc<Shard>), String> {
        let mut t = self.topology.write().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = t.shards.iter().position(|s| s.addr == addr) {
            return Ok((i as u16, t.shards[i].clone()));
        }
        if t.shards.len() >= MAX_NODES {
            return Err(format!(
                "the cluster named more than {MAX_NODES} nodes; {addr} is not taken up"
            ));
        }
        let shard = Arc::new(Shard::new(
            addr.to_string(),
            addr.to_string(),
            self.shard_options.clone(),
            Gate::new(self.shard_options.pool, self.order),
        ));
        t.shards.push(shard.clone());
        Ok(((t.shards.len() - 1) as u16, shard))
    }

    /// Reads the slot map from the seeds, then from the known nodes, until
    /// one answers.
    pub async fn refresh_slots(&self) -> Result<(), String> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        let mut candidates = cluster.seeds.clone();
        candidates.extend(self.shards().iter().map(|s| s.addr.clone()));
        let mut last = String::from("no seeds");
        for addr in candidates {
            let shard = match self.shard_at(&addr) {
                Ok((_, shard)) => shard,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            match shard.call_parsed(self.context(), &[b"CLUSTER", b"SLOTS"]).await {
                Ok(Reply::Array(ranges)) => match self.apply_slot_map(&ranges) {
                    Ok(()) => return Ok(()),
                    Err(e) => last = format!("{addr}: {e}"),
                },
                Ok(other) => last = format!("{addr} answered CLUSTER SLOTS with {other:?}"),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("no cluster node gave its slot map: {last}"))
    }

    fn apply_slot_map(&self, ranges: &[Reply]) -> Result<(), String> {
        let mut owner: Vec<Option<u16>> = vec![None; SLOTS as usize];
        for range in ranges {
            let Reply::Array(fields) = range else {
                return Err("a CLUSTER SLOTS entry is not an array".into());
            };
            let (Some(Reply::Integer(lo)), Some(Reply::Integer(hi)), Some(Reply::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err("a CLUSTER SLOTS entry lacks its range or master".into());
            };
            let (Some(Reply::Bulk(Some(host))), Some(Reply::Integer(port))) = (master.first(), master.get(1)) else {
                return Err("a CLUSTER SLOTS master lacks its host or port".into());
            };
            let addr = format!("{}:{port}", String::from_utf8_lossy(host));
            let (index, _) = self.shard_at(&addr)?;
            for s in (*lo).max(0)..=(*hi).min(SLOTS as i64 - 1) {
                owner[s as usize] = Some(index);
            }
        }
        let mut t = self.topology.write().unwrap_or_else(|e| e.into_inner());
        // Slots no node claims get an index past every shard: "not served".
        t.owner = owner.into_iter().map(|o| o.unwrap_or(u16::MAX)).collect();
        Ok(())
    }

    /// A new request's context: the next id of the arrival order.
    fn context(&self) -> Ctx {
        self.context_at(Instant::now(), Origin::default())
    }

    /// A request's context: the next id, and the tenant and deadline of
    /// its origin (the tenant as its index + 1; 0: none).
    fn context_at(&self, arrival: Instant, origin: Origin) -> Ctx {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let at = arrival.duration_since(self.epoch).as_nanos() as u64;
        let mut ctx = Ctx::new(id, at);
        ctx.tenant = TenantId(origin.tenant.map_or(0, |i| i as u32 + 1));
        ctx.deadline = origin.budget.map(|b| at.saturating_add(b));
        ctx
    }

    /// The origin of a request from a client named `name` (if it named
    /// itself) that sent `budget` with the request (if it did).
    pub fn origin(&self, name: Option<&[u8]>, budget: Option<Nanos>) -> Origin {
        let tenant = name.and_then(|n| self.tenants.iter().position(|t| t.name.as_bytes() == n));
        let configured = tenant
            .and_then(|i| self.tenants[i].budget_ms)
            .or(self.budget_ms)
            .map(from_ms);
        let budget = match (configured, budget) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Origin { tenant, budget }
    }

    /// Milliseconds left until the request's deadline (0 once it passed).
    fn budget_left(&self, ctx: &Ctx) -> Option<f64> {
        let now = self.epoch.elapsed().as_nanos() as u64;
        ctx.deadline.map(|d| d.saturating_sub(now) as f64 / 1e6)
    }

    /// The tenant's name as sent to the shards.
    fn tenant_name(&self, ctx: &Ctx) -> Option<&[u8]> {
        let i = (ctx.tenant.0 as usize).checked_sub(1)?;
        self.tenants.get(i).map(|t| t.name.as_bytes())
    }

    /// Runs the command `args` (its name `name`, in lower case, routed by
    /// `route`), which is not answered by the router itself.
    pub async fn execute(&self, name: &str, route: Route, args: &[&[u8]], origin: Origin) -> Answer {
        let whole = || args.to_vec();
        // RANGE's count: as sent to every shard, and where the merge cuts.
        let count;
        let mut limit = DEFAULT_RANGE_COUNT;
        let parts = match route {
            Route::Key(_) | Route::Pair | Route::Together { .. } | Route::Counted(_) => {
                match self.slot_of(name, route, args) {
                    Ok(slot) => vec![Part {
                        slot,
                        args: whole(),
                        positions: Vec::new(),
                    }],
                    Err(refused) => return refused,
                }
            }
            Route::Keys { step, .. } => {
                if args.len() < 2 || !(args.len() - 1).is_multiple_of(step) {
                    return arity(name);
                }
                self.split(args, step)
            }
            Route::Range => {
                if !(3..=4).contains(&args.len()) {
                    return arity(name);
                }
                limit = match args.get(3).map(|c| std::str::from_utf8(c).ok()?.parse::<usize>().ok()) {
                    None => DEFAULT_RANGE_COUNT,
                    Some(Some(n)) => n,
                    Some(None) => return Reply::error("value is not an integer or out of range").into(),
                };
                count = limit.to_string().into_bytes();
                self.scatter(&[args[0], args[1], args[2], &count])
            }
            Route::Every | Route::Everywhere | Route::Sum => self.scatter(&whole()),
            Route::Scan => return self.scan(args, origin).await,
            Route::Refused(why) => return Reply::Error(format!("ERR '{name}': {why}")).into(),
            Route::Unknown => {
                return Reply::Error(format!(
                    "ERR sluice route cannot route '{name}': it is not in the router's command table"
                ))
                .into()
            }
            Route::Local => return Reply::error(format!("'{name}' is answered by the client's session")).into(),
        };
        let started = Instant::now();
        let ctx = self.context_at(started, origin);
        let fanout = parts.len() as u64;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.stats.sub_requests.fetch_add(fanout, Ordering::Relaxed);
        self.stats.max_fanout.fetch_max(fanout, Ordering::Relaxed);
        let mut replies = Vec::with_capacity(parts.len());
        if let [part] = parts.as_slice() {
            replies.push(self.call_slot(ctx, part.slot, &part.args).await);
        } else {
            let calls = parts.iter().map(|p| async {
                let reply = self.call_slot(ctx, p.slot, &p.args).await;
                (reply, started.elapsed())
            });
            let results = futures::future::join_all(calls).await;
            let done = results.iter().map(|(_, at)| *at);
            let gap = done.clone().max().unwrap_or_default() - done.min().unwrap_or_default();
            self.stats.gap.record(gap);
            replies.extend(results.into_iter().map(|(reply, _)| reply));
        }
        let replies = match replies.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(replies) => replies,
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                self.stats.latency.record(started.elapsed());
                return failed(e);
            }
        };
        let answer = match route {
            Route::Keys { merge, .. } => merge_parts(merge, &parts, replies, (args.len() - 1) / merge_step(merge)),
            Route::Range => merge_ranges(replies, limit).into(),
            Route::Every => join_arrays(replies),
            Route::Everywhere => same_everywhere(replies),
            Route::Sum => sum_integers(replies),
            _ => Answer::Raw(replies.into_iter().next().unwrap_or_default()),
        };
        self.stats.latency.record(started.elapsed());
        answer
    }

    /// The slot of a command routed to one slot ([`Route::one_slot`]): its
    /// key's, or that of keys which must share one.
    fn slot_of(&self, name: &str, route: Route, args: &[&[u8]]) -> Result<u16, Answer> {
        match route {
            Route::Key(i) => args.get(i).map(|key| slot(key)).ok_or_else(|| arity(name)),
            _ => match keys_of(name, route, args) {
                Ok(keys) => self.place(keys).map_err(Answer::from),
                Err(e) => Err(Reply::Error(format!("ERR {e}")).into()),
            },
        }
    }

    /// Runs a client's pipelined commands, each routed to one slot
    /// ([`Route::one_slot`]; any other makes the run go one command at a
    /// time, through [`Router::execute`]), and returns their answers in
    /// the client's order.
    ///
    /// The commands bound for one shard go to it together, in the client's
    /// order, as one sub-request in the context of the run (one pass at
    /// the gate, one write), and the shard runs them in that order: a
    /// command always runs after the client's earlier commands on its key.
    /// Commands bound for different shards run at once, in no set order
    /// between them, as a Redis Cluster client's pipeline runs. In front of
    /// a cluster, a command answered with a redirect or `CLUSTERDOWN`, or
    /// that surely was not sent, is sent again on its own after the rest,
    /// its redirects followed as for a command sent alone.
    pub async fn execute_run(&self, run: &[(&str, Route, &[&[u8]])], origin: Origin) -> Vec<Answer> {
        if !run.iter().all(|(_, route, _)| route.one_slot()) {
            let mut answers = Vec::with_capacity(run.len());
            for &(name, route, args) in run {
                answers.push(self.execute(name, route, args, origin).await);
            }
            return answers;
        }
        let mut answers: Vec<Option<Answer>> = run.iter().map(|_| None).collect();
        let mut groups: Vec<ShardsPart> = Vec::new();
        // Commands sent again on their own, after the rest, by index.
        let mut again = Vec::new();
        for (i, &(name, route, args)) in run.iter().enumerate() {
            let s = match self.slot_of(name, route, args) {
                Ok(s) => s,
                Err(refused) => {
                    answers[i] = Some(refused);
                    continue;
                }
            };
            match self.shard_of_slot(s) {
                Ok(shard) => match groups.iter_mut().find(|(g, _)| Arc::ptr_eq(g, &shard)) {
                    Some((_, members)) => members.push((i, s)),
                    None => groups.push((shard, vec![(i, s)])),
                },
                // A slot no node serves yet: `call_slot` waits it out.
                Err(e) if e.unsent && self.cluster.is_some() => again.push((i, s)),
                Err(e) => answers[i] = Some(failed(e)),
            }
        }
        let started = Instant::now();
        let ctx = self.context_at(started, origin);
        let sent = groups.iter().map(|(_, members)| members.len()).sum::<usize>() + again.len();
        self.stats.requests.fetch_add(sent as u64, Ordering::Relaxed);
        self.stats.sub_requests.fetch_add(sent as u64, Ordering::Relaxed);
        let calls = groups.iter().map(|(shard, members)| async move {
            let commands: Vec<&[&[u8]]> = members.iter().map(|&(i, _)| run[i].2).collect();
            let (budget, tenant) = (self.budget_left(&ctx), self.tenant_name(&ctx));
            match shard.call_each(ctx, budget, tenant, &commands).await {
                Ok(raw) => match each_reply(&raw) {
                    Ok(replies) if replies.len() == members.len() => (replies, None),
                    Ok(replies) => {
                        let what = format!("sent {} replies to {} commands", replies.len(), members.len());
                        (Vec::new(), Some(shard.error(what)))
                    }
                    Err(what) => (Vec::new(), Some(shard.error(what))),
                },
                // The commands answered before the failure keep their
                // replies: they ran.
                Err(unfinished) => (
                    each_reply(&unfinished.answered).unwrap_or_default(),
                    Some(unfinished.error),
                ),
            }
        });
        let results = futures::future::join_all(calls).await;
        let took = started.elapsed();
        let mut failures = 0;
        for ((_, members), (replies, error)) in groups.iter().zip(results) {
            let answered = replies.len();
            for (k, (&(i, s), reply)) in members.iter().zip(replies).enumerate() {
                if self.cluster.is_some() && self.unsettled(&reply, s, &members[k + 1..], answered - k - 1) {
                    again.push((i, s));
                } else {
                    answers[i] = Some(Answer::Raw(reply));
                }
            }
            let Some(e) = error else { continue };
            for &(i, s) in &members[answered..] {
                if e.unsent && self.cluster.is_some() {
                    again.push((i, s));
                } else {
                    answers[i] = Some(failed(e.clone()));
                    failures += 1;
                }
            }
        }
        again.sort_unstable();
        for _ in 0..sent - again.len() {
            self.stats.latency.record(took);
        }
        for &(i, s) in &again {
            let ctx = self.context_at(Instant::now(), origin);
            answers[i] = Some(match self.call_slot(ctx, s, run[i].2).await {
                Ok(raw) => Answer::Raw(raw),
                Err(e) => {
                    failures += 1;
                    failed(e)
                }
            });
            // Timed from the run's start: its first try is the client's wait too.
            self.stats.latency.record(started.elapsed());
        }
        self.stats.failed.fetch_add(failures, Ordering::Relaxed);
        answers
            .into_iter()
            .map(|a| a.expect("every command of the run is answered"))
            .collect()
    }

    /// Whether a run's command that got `reply` from its node, in front of a
    /// cluster, is sent again on its own: a redirect always (a later command
    /// of its slot on that node was redirected too, so none of them ran
    /// out of order); `CLUSTERDOWN` only if none of the `answered` of
    /// `later` commands of the run on that node shares its slot, since one
    /// that does may have run once the node recovered, and sending this one
    /// after it would reverse them: the client gets `CLUSTERDOWN` then.
    fn unsettled(&self, reply: &[u8], slot: u16, later: &[(usize, u16)], answered: usize) -> bool {
        if reply.starts_with(b"-MOVED ") || reply.starts_with(b"-ASK ") {
            self.stats.redirects.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        reply.starts_with(b"-CLUSTERDOWN") && !later[..answered].iter().any(|&(_, s)| s == slot)
    }

    /// `SCAN cursor [MATCH p] [COUNT n] [TYPE t]` on the shard the cursor
    /// stands for, its next cursor made the router's (see `scan.rs`).
    async fn scan(&self, args: &[&[u8]], origin: Origin) -> Answer {
        if args.len() < 2 {
            return Reply::error("wrong number of arguments for 'scan' command").into();
        }
        let position = match self.scans.position(args[1]) {
            Ok(p) => p,
            Err(e) => return Reply::error(e).into(),
        };
        let shards = self.scatter(&[]);
        let Some(part) = shards.get(position.shard) else {
            return Reply::error("invalid cursor").into();
        };
        let mut command = args.to_vec();
        command[1] = &position.cursor;
        let raw = match self
            .one_part(origin, |ctx| self.call_slot(ctx, part.slot, &command))
            .await
        {
            Ok(raw) => raw,
            Err(failed) => return failed,
        };
        match parse_reply(&raw, &Limits::relay()) {
            Ok(Some((Reply::Array(mut reply), _))) if reply.len() == 2 => {
                let keys = reply.pop().expect("two items");
                let Some(Reply::Bulk(Some(next))) = reply.pop() else {
                    return Reply::error("a shard's SCAN reply has no cursor").into();
                };
                let cursor = self.scans.after(position.shard, shards.len(), &next);
                Reply::Array(vec![Reply::Bulk(Some(cursor)), keys]).into()
            }
            _ if raw.first() == Some(&b'-') => Answer::Raw(raw),
            _ => Reply::error("a shard's SCAN reply does not parse").into(),
        }
    }

    /// Runs `commands` as one transaction (MULTI, them, EXEC, written
    /// together on one connection) on the shard of `slot`; EXEC's reply.
    /// Redirects are not followed: in front of a cluster whose slot moved,
    /// the commands are refused with `MOVED`, EXEC answers `EXECABORT`, and
    /// the client runs the transaction again.
    pub async fn transaction(
        &self,
        slot: u16,
        commands: &[Vec<Vec<u8>>],
        origin: Origin,
        watched: Option<&mut Watched>,
    ) -> Answer {
        let multi: &[&[u8]] = &[b"MULTI"];
        let exec: &[&[u8]] = &[b"EXEC"];
        let queued: Vec<Vec<&[u8]>> = commands.iter().map(|c| c.iter().map(Vec::as_slice).collect()).collect();
        let all: Vec<&[&[u8]]> = std::iter::once(multi)
            .chain(queued.iter().map(Vec::as_slice))
            .chain(std::iter::once(exec))
            .collect();
        if let Some(w) = watched {
            return self.on_watched(w, &all, origin).await;
        }
        let exchange = |ctx: Ctx| async move {
            let shard = self.shard_of_slot(slot)?;
            let (budget, tenant) = (self.budget_left(&ctx), self.tenant_name(&ctx));
            shard.call_many(ctx, budget, tenant, &all, Asking::No).await
        };
        match self.one_part(origin, exchange).await {
            Ok(raw) => Answer::Raw(raw),
            Err(failed) => failed,
        }
    }

    /// Reserves a connection to the shard of `slot` for a client's
    /// `WATCH` ([`Shard::reserve`]).
    pub async fn reserve(&self, key: &[u8]) -> Result<Watched, Answer> {
        let shard = self.shard_of_slot(slot(key)).map_err(failed)?;
        match shard.reserve().await {
            Ok(reserved) => Ok(Watched {
                key: key.to_vec(),
                shard,
                reserved,
            }),
            Err(e) => Err(failed(e)),
        }
    }

    /// Sends `commands` together on a watching client's reserved
    /// connection, as one request of one part; the last one's reply.
    pub async fn on_watched(&self, watched: &mut Watched, commands: &[&[&[u8]]], origin: Origin) -> Answer {
        let Watched { shard, reserved, .. } = watched;
        let exchange = |ctx: Ctx| async move {
            let (budget, tenant) = (self.budget_left(&ctx), self.tenant_name(&ctx));
            shard.call_reserved(reserved, ctx, budget, tenant, commands).await
        };
        match self.one_part(origin, exchange).await {
            Ok(raw) => Answer::Raw(raw),
            Err(failed) => failed,
        }
    }

    /// A request of one part, made by `call` in the request's context:
    /// counted and timed as every request is; its failure is the answer.
    async fn one_part<F>(&self, origin: Origin, call: impl FnOnce(Ctx) -> F) -> Result<Vec<u8>, Answer>
    where
        F: std::future::Future<Output = Result<Vec<u8>, ShardError>>,
    {
        let started = Instant::now();
        let ctx = self.context_at(started, origin);
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.stats.sub_requests.fetch_add(1, Ordering::Relaxed);
        let result = call(ctx).await;
        self.stats.latency.record(started.elapsed());
        result.map_err(|e| {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            failed(e)
        })
    }

    /// Keys (each followed by `step - 1` values) grouped by shard, or in
    /// cluster mode by slot, since a node refuses keys of several slots.
    fn split<'a>(&self, args: &[&'a [u8]], step: usize) -> Vec<Part<'a>> {
        let by_slot = self.cluster.is_some();
        let t = self.topology.read().unwrap_or_else(|e| e.into_inner());
        let mut groups: FxHashMap<u32, usize> = FxHashMap::default();
        let mut parts: Vec<Part> = Vec::new();
        // The items are placed first and each part then sized exactly: one
        // allocation a vector, where growing them key by key cost a
        // hundred-key MGET twenty, and no part sized for every key (in
        // cluster mode a part is a slot, and there may be thousands).
        let mut part_of = Vec::with_capacity((args.len() - 1) / step);
        let mut items = Vec::new();
        for item in args[1..].chunks(step) {
            let s = slot(item[0]);
            let group = if by_slot { s as u32 } else { t.owner[s as usize] as u32 };
            let i = *groups.entry(group).or_insert_with(|| {
                parts.push(Part {
                    slot: s,
                    args: Vec::new(),
                    positions: Vec::new(),
                });
                items.push(0);
                parts.len() - 1
            });
            items[i] += 1;
            part_of.push(i);
        }
        for (part, &n) in parts.iter_mut().zip(&items) {
            part.args.reserve_exact(1 + n * step);
            part.args.push(args[0]);
            part.positions.reserve_exact(n);
        }
        for (n, (item, &i)) in args[1..].chunks(step).zip(&part_of).enumerate() {
            parts[i].args.extend_from_slice(item);
            parts[i].positions.push(n);
        }
        parts
    }

    /// The slot that stands for `keys`: they must share a shard (in cluster
    /// mode a slot), as Redis Cluster requires of a script's or a
    /// transaction's keys.
    pub fn place<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Result<u16, Reply> {
        let mut keys = keys.into_iter();
        let Some(first) = keys.next() else {
            return Ok(0);
        };
        let s = slot(first);
        let t = self.topology.read().unwrap_or_else(|e| e.into_inner());
        let same = |k: &[u8]| {
            let other = slot(k);
            match self.cluster {
                Some(_) => other == s,
                None => t.owner[other as usize] == t.owner[s as usize],
            }
        };
        if keys.all(same) {
            Ok(s)
        } else {
            Err(Reply::Error(
                "CROSSSLOT Keys in request don't hash to the same slot".into(),
            ))
        }
    }

    /// `command` to every shard, each by the first slot it owns.
    fn scatter<'a>(&self, command: &[&'a [u8]]) -> Vec<Part<'a>> {
        let t = self.topology.read().unwrap_or_else(|e| e.into_inner());
        let mut first_slot_of: Vec<Option<u16>> = vec![None; t.shards.len()];
        for (s, &o) in t.owner.iter().enumerate() {
            if let Some(entry) = first_slot_of.get_mut(o as usize) {
                entry.get_or_insert(s as u16);
            }
        }
        first_slot_of
            .into_iter()
            .flatten()
            .map(|slot| Part {
                slot,
                args: command.to_vec(),
                positions: Vec::new(),
            })
            .collect()
    }

    /// Sends a part to the owner of `slot`, following `MOVED` (the map
    /// corrected, then the command resent) and `ASK` (resent once to the
    /// importing node with `ASKING`). In front of a cluster, a part that
    /// fails (its node unreachable, or `CLUSTERDOWN`) is sent again after a
    /// pause, up to [`SETTLE_RETRIES`] times, the slot map read again first
    /// where [`REFRESH_EVERY`] allows: a failover moves slots without a
    /// `MOVED` from the node that is gone, and the surviving nodes learn of
    /// it one by one, each answering `CLUSTERDOWN` until it has.
    async fn call_slot(&self, ctx: Ctx, slot: u16, args: &[&[u8]]) -> Result<Vec<u8>, ShardError> {
        let mut reply = self.call_slot_once(ctx, slot, args).await;
        for retry in 1..=SETTLE_RETRIES {
            // Only a part that surely did not run is sent again.
            let failed = match &reply {
                Err(e) => e.unsent,
                Ok(raw) => raw.starts_with(b"-CLUSTERDOWN"),
            };
            if !failed || self.cluster.is_none() {
                break;
            }
            tokio::time::sleep(SETTLE_PAUSE * retry).await;
            if self.may_refresh() {
                // A map that cannot be read now leaves the old one, which
                // the next try still uses.
                let _ = self.refresh_slots().await;
            }
            reply = self.call_slot_once(ctx, slot, args).await;
        }
        reply
    }

    /// Whether the slot map may be read again now; if so, the time is
    /// taken.
    fn may_refresh(&self) -> bool {
        let mut last = self.refreshed.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    async fn call_slot_once(&self, ctx: Ctx, slot: u16, args: &[&[u8]]) -> Result<Vec<u8>, ShardError> {
        let mut shard = self.shard_of_slot(slot)?;
        let mut asking = Asking::No;
        for _ in 0..=MAX_REDIRECTS {
            let raw = shard
                .call(ctx, self.budget_left(&ctx), self.tenant_name(&ctx), args, asking)
                .await?;
            if self.cluster.is_none() || raw.first() != Some(&b'-') {
                return Ok(raw);
            }
            let text = String::from_utf8_lossy(&raw[1..]);
            let redirect = match text.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["MOVED", s, addr] => s.parse::<u16>().ok().map(|s| (true, s, addr.to_string())),
                ["ASK", s, addr] => s.parse::<u16>().ok().map(|s| (false, s, addr.to_string())),
                _ => None,
            };
            let Some((moved, moved_slot, mut addr)) = redirect else {
                return Ok(raw);
            };
            // Redis 7 may leave the host out (":6381") when it has none to
            // announce: the node is on the host of the one that answered.
            if addr.starts_with(':') {
                let host = shard.addr.rsplit_once(':').map_or("", |(h, _)| h);
                addr = format!("{host}{addr}");
            }
            self.stats.redirects.fetch_add(1, Ordering::Relaxed);
            let (index, target) = self.shard_at(&addr).map_err(|what| ShardError {
                shard: shard.name.clone(),
                addr: shard.addr.clone(),
                what,
                unsent: false,
            })?;
            if moved {
                let mut t = self.topology.write().unwrap_or_else(|e| e.into_inner());
                if let Some(o) = t.owner.get_mut(moved_slot as usize) {
                    *o = index;
                }
                asking = Asking::No;
            } else {
                asking = Asking::Yes;
            }
            shard = target;
        }
        Err(ShardError {
            shard: shard.name.clone(),
            addr: shard.addr.clone(),
            what: format!("redirected the command more than {MAX_REDIRECTS} times"),
            unsent: false,
        })
    }
}

/// The reply to a command with the wrong number of arguments.
fn arity(name: &str) -> Answer {
    Reply::Error(format!("ERR wrong number of arguments for '{name}' command")).into()
}

/// A sub-request's failure as its command's answer.
fn failed(e: ShardError) -> Answer {
    Reply::Error(format!("ERR {e}")).into()
}

/// The replies one after another in `raw`, apart.
fn each_reply(raw: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut replies = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        match reply_len(&raw[at..], &Limits::relay()) {
            Ok(Some(len)) => {
                replies.push(raw[at..at + len].to_vec());
                at += len;
            }
            _ => return Err("sent a reply that does not parse".into()),
        }
    }
    Ok(replies)
}

fn merge_step(merge: Merge) -> usize {
    match merge {
        Merge::Ok => 2,
        Merge::Values | Merge::Sum => 1,
    }
}

/// Puts the replies of a split command back together: an error reply of
/// any part is the reply. MGET's values are spliced as they came, not
/// parsed and encoded again.
fn merge_parts(merge: Merge, parts: &[Part], replies: Vec<Vec<u8>>, keys: usize) -> Answer {
    if let Some(e) = replies.iter().find(|r| r.first() == Some(&b'-')) {
        return Answer::Raw(e.clone());
    }
    let limits = Limits::relay();
    match merge {
        Merge::Sum => {
            let mut sum = 0i64;
            for raw in &replies {
                match parse_reply(raw, &limits) {
                    Ok(Some((Reply::Integer(n), _))) => match sum.checked_add(n) {
                        Some(s) => sum = s,
                        None => return Reply::error("the shards' counts overflow a 64-bit integer").into(),
                    },
                    _ => return Reply::error("a shard answered with something other than an integer").into(),
                }
            }
            Reply::Integer(sum).into()
        }
        Merge::Ok => Reply::ok().into(),
        Merge::Values => {
            let mut values: Vec<&[u8]> = vec![b"$-1\r\n"; keys];
            for (part, raw) in parts.iter().zip(&replies) {
                let items = match array_items(raw, &limits) {
                    Ok(Some(items)) if items.len() == part.positions.len() => items,
                    _ => return Reply::error("a shard answered MGET with something other than one value a key").into(),
                };
                for (&at, item) in part.positions.iter().zip(items) {
                    values[at] = &raw[item];
                }
            }
            let mut out = Vec::with_capacity(16 + values.iter().map(|v| v.len()).sum::<usize>());
            out.extend_from_slice(format!("*{keys}\r\n").as_bytes());
            for v in values {
                out.extend_from_slice(v);
            }
            Answer::Raw(out)
        }
    }
}

/// Every shard's array, joined in shard order; an error reply of any
/// shard is the reply.
fn join_arrays(replies: Vec<Vec<u8>>) -> Answer {
    if let Some(e) = replies.iter().find(|r| r.first() == Some(&b'-')) {
        return Answer::Raw(e.clone());
    }
    let mut all = Vec::new();
    for raw in replies {
        match parse_reply(&raw, &Limits::relay()) {
            Ok(Some((Reply::Array(items), _))) => all.extend(items),
            _ => return Reply::error("a shard answered with something other than a list").into(),
        }
    }
    Reply::Array(all).into()
}

/// The one reply every shard gave; else a shard's error, or an error
/// saying they differ.
fn same_everywhere(mut replies: Vec<Vec<u8>>) -> Answer {
    if let Some(e) = replies.iter().find(|r| r.first() == Some(&b'-')) {
        return Answer::Raw(e.clone());
    }
    let Some(first) = replies.first() else {
        return Reply::error("no shard to send it to").into();
    };
    if replies.iter().all(|r| r == first) {
        return Answer::Raw(replies.swap_remove(0));
    }
    held_everywhere(&replies).map_or_else(|| Reply::error("the shards answered differently").into(), Answer::from)
}

/// Where every shard answered an array of 0s and 1s of one length (SCRIPT
/// EXISTS), 1 at each place where all answered 1: a script is there for a
/// client only if every shard its keys may lead to has it.
fn held_everywhere(replies: &[Vec<u8>]) -> Option<Reply> {
    let mut held: Option<Vec<i64>> = None;
    for raw in replies {
        let Ok(Some((Reply::Array(items), _))) = parse_reply(raw, &Limits::relay()) else {
            return None;
        };
        let flags: Vec<i64> = items
            .into_iter()
            .map(|r| match r {
                Reply::Integer(n @ (0 | 1)) => Some(n),
                _ => None,
            })
            .collect::<Option<_>>()?;
        match &mut held {
            None => held = Some(flags),
            Some(held) if held.len() == flags.len() => held.iter_mut().zip(flags).for_each(|(h, f)| *h = (*h).min(f)),
            Some(_) => return None,
        }
    }
    held.map(|flags| Reply::Array(flags.into_iter().map(Reply::Integer).collect()))
}

/// The integers every shard answered, added; else a shard's error.
fn sum_integers(replies: Vec<Vec<u8>>) -> Answer {
    let mut sum = 0i64;
    for raw in replies {
        match parse_reply(&raw, &Limits::relay()) {
            Ok(Some((Reply::Integer(n), _))) => sum = sum.saturating_add(n),
            Ok(Some((e @ Reply::Error(_), _))) => return e.into(),
            _ => return Reply::error("a shard answered with something other than an integer").into(),
        }
    }
    Reply::Integer(sum).into()
}

/// The sorted key-value pairs of every shard, merged and cut to `count`.
fn merge_ranges(replies: Vec<Vec<u8>>, count: usize) -> Reply {
    let mut pairs: Vec<(Reply, Reply)> = Vec::new();
    for raw in replies {
        let reply = match parse_reply(&raw, &Limits::relay()) {
            Ok(Some((reply, _))) => reply,
            _ => return Reply::error("a shard's RANGE reply does not parse"),
        };
        match reply {
            Reply::Array(items) => {
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
            }
            e @ Reply::Error(_) => return e,
            other => return Reply::error(format!("a shard answered RANGE with {other:?}")),
        }
    }
    let key = |r: &Reply| match r {
        Reply::Bulk(Some(k)) => k.clone(),
        _ => Vec::new(),
    };
    pairs.sort_by_key(|(k, _)| key(k));
    pairs.truncate(count);
    Reply::Array(pairs.into_iter().flat_map(|(k, v)| [k, v]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(reply: Reply) -> Vec<u8> {
        let mut out = Vec::new();
        reply.encode(&mut out);
        out
    }

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn range_parts_merge_in_key_order_and_are_cut() {
        let a = raw(Reply::Array(vec![bulk("a"), bulk("1"), bulk("d"), bulk("4")]));
        let b = raw(Reply::Array(vec![bulk("b"), bulk("2"), bulk("c"), bulk("3")]));
        assert_eq!(
            merge_ranges(vec![a, b], 3),
            Reply::Array(vec![bulk("a"), bulk("1"), bulk("b"), bulk("2"), bulk("c"), bulk("3")])
        );
    }

    #[test]
    fn mget_values_go_back_to_their_keys_places() {
        let parts = vec![
            Part {
                slot: 0,
                args: Vec::new(),
                positions: vec![0, 2],
            },
            Part {
                slot: 1,
                args: Vec::new(),
                positions: vec![1],
            },
        ];
        let replies = vec![
            raw(Reply::Array(vec![bulk("x"), Reply::Bulk(None)])),
            raw(Reply::Array(vec![bulk("y")])),
        ];
        assert_eq!(
            merge_parts(Merge::Values, &parts, replies, 3),
            Answer::Raw(raw(Reply::Array(vec![bulk("x"), bulk("y"), Reply::Bulk(None)])))
        );
        let sums = vec![raw(Reply::Integer(2)), raw(Reply::Integer(1))];
        assert_eq!(
            merge_parts(Merge::Sum, &parts, sums, 3),
            Answer::Reply(Reply::Integer(3))
        );
        let failed = vec![raw(Reply::ok()), raw(Reply::Error("OOM".into()))];
        assert_eq!(
            merge_parts(Merge::Ok, &parts, failed, 2),
            Answer::Raw(b"-OOM\r\n".to_vec())
        );
        let short = vec![raw(Reply::Array(vec![bulk("x")])), raw(Reply::Array(vec![bulk("y")]))];
        assert!(matches!(
            merge_parts(Merge::Values, &parts, short, 3),
            Answer::Reply(Reply::Error(_))
        ));
    }
}
