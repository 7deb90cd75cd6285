//! The gate in front of the database (AppleS §3.3): a request waits in its
//! tenant's FIFO queue until the weighted round robin with round quota ζ
//! (sluice-core's [`Wrr`]) picks it and one of the P slots of delivered
//! parallelism is free. The policy and the slot count are sluice-core's
//! [`Stage`]; this module adds what a network proxy needs around it: async
//! waiting, bounded queues, a wait timeout, slots that come back however a
//! request ends, live changes of P, ζ and weights, and per-tenant statistics.
//!
//! Every request's life is: `admit` (queued) → slot granted (in the
//! database) → `Slot` dropped (done, failed or disconnected). The state sits
//! behind one short-held mutex: each request takes it three times, or twice
//! when it finds a slot free and nobody queued (granted at once, as the
//! round robin would).
//!
//! What P counts: requests the database is working on, not requests that
//! wait on their client. A PostgreSQL transaction block is one request, and
//! between its statements the database does nothing for it while the client
//! thinks; counted there, P such clients would shut every other client out
//! for as long as they think, and a client driving several connections from
//! one thread (pgbench -M prepared, fewer threads than clients) would wait
//! at the gate for slots that only its own blocked thread can give back: a
//! deadlock at any P. So a session waiting on its client inside a request
//! parks its slot ([`Slot::park`]): it stops counting toward P, and the slot
//! goes to the next request the policy picks. When the client goes on,
//! [`Slot::unpark`] counts the request again at once, even if that takes the
//! requests inside above P: it holds locks and a backend inside the
//! database, which the requests let in meanwhile may wait for, and making it
//! queue behind them could deadlock. The excess is brief (it is gone as
//! requests finish, and no new one is let in while it lasts) and is what
//! AppleS means by P: the work inside the database. Invariant: a request is
//! counted in `in_flight` exactly while it holds an unparked slot, in
//! `parked` exactly while it holds a parked one; no request waits at the gate
//! for one that is parked, so any P ≥ 1 is free of deadlock.
//!
//! Tenants are kept once seen, except that [`Gate::forget`] drops an idle
//! one that nothing configures (the proxy forgets a tenant named by its
//! connection when the connection closes; otherwise a proxy serving
//! millions of short connections would keep a record of each).

use std::collections::HashMap;
use std::mem;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use slab::Slab;
use sluice_core::controller::{check_positive, Period, PeriodTenant};
use sluice_core::device::FlatDevice;
use sluice_core::metrics::{LatencyHistogram, Moments, TenantStats};
use sluice_core::policy::wrr::Wrr;
use sluice_core::{Ctx, Job, Stage, TenantId};
use thiserror::Error;
use tokio::sync::oneshot;

/// A tenant as the gate knows it: the name its connections map to (by the
/// configured tenant key) and the weight φ it had when the handle was made.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenant {
    pub name: Arc<str>,
    pub weight: f64,
    id: TenantId,
}

/// Why a request was not let in.
#[derive(Debug, Error, PartialEq)]
pub enum Refusal {
    #[error("sluice: queue of tenant `{tenant}` is full ({limit} requests waiting)")]
    QueueFull { tenant: Arc<str>, limit: usize },
    #[error("sluice: request of tenant `{tenant}` waited {waited:?} for admission and timed out")]
    Timeout { tenant: Arc<str>, waited: Duration },
    /// The client cancelled the request while it waited.
    #[error("canceling statement due to user request (sluice: it waited {waited:?} for admission)")]
    Cancelled { waited: Duration },
}

impl Refusal {
    /// The PostgreSQL SQLSTATE that fits the refusal.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // too_many_connections: the nearest class for "too much load".
            Refusal::QueueFull { .. } => "53300",
            // query_canceled, as statement_timeout and a cancel report it.
            Refusal::Timeout { .. } | Refusal::Cancelled { .. } => "57014",
        }
    }
}

/// Settings of the gate; every one can also be changed while it runs.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GateConfig {
    /// Delivered parallelism P: requests inside the database at once.
    pub parallelism: usize,
    /// Round quota ζ: a tenant of weight φ issues up to φ·ζ requests in a row.
    pub zeta: f64,
    /// Requests one tenant may have waiting.
    pub queue_limit: usize,
    /// How long a request may wait for admission.
    #[serde(rename = "wait_timeout_ms", with = "millis")]
    pub wait_timeout: Duration,
    /// φ by tenant name; tenants not listed get `default_weight`.
    pub weights: HashMap<String, f64>,
    pub default_weight: f64,
    /// Tenants served before all others whenever they have a request
    /// waiting (strict priority; the baseline AppleS §5.3's SLO control is
    /// measured against). Can change while running ([`Gate::set_strict`]).
    pub strict: Vec<String>,
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            parallelism: 16,
            zeta: 1.0,
            queue_limit: 1024,
            wait_timeout: Duration::from_secs(30),
            weights: HashMap::new(),
            default_weight: 1.0,
            strict: Vec::new(),
        }
    }
}

impl GateConfig {
    /// Rejects settings the gate cannot run with, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.parallelism == 0 {
            return Err("gate.parallelism must be at least 1".into());
        }
        if self.queue_limit == 0 {
            return Err("gate.queue_limit must be at least 1".into());
        }
        check_positive("gate.zeta", self.zeta)?;
        check_positive("gate.default_weight", self.default_weight)?;
        for (tenant, &w) in &self.weights {
            check_positive(&format!("gate.weights.{tenant}"), w)?;
        }
        Ok(())
    }
}

/// One tenant's record.
struct TenantRecord {
    name: Arc<str>,
    weight: f64,
    in_flight: usize,
    /// Requests holding a parked slot: waiting on their client.
    parked: usize,
    admitted: u64,
    refused: u64,
    timed_out: u64,
    /// Queue wait: its mean per tenant; the distribution is kept for all
    /// tenants together (`State::wait`), since with every connection its
    /// own tenant a histogram per tenant would cost more than the
    /// connection itself.
    wait: Moments,
    /// Made on first use (about 20 KiB coarse, 3 KiB rough), so a tenant that
    /// never sent a request needs none.
    latency: Option<Box<LatencyHistogram>>,
    /// What `latency` is made with.
    histogram: fn() -> LatencyHistogram,
    /// Completions and latencies since the optimizers last looked.
    period: TenantStats,
    /// Whether it had a request queued or inside during the period.
    busy: bool,
    /// Kept only for tenants with a latency SLO (see `track_percentiles`).
    period_latency: Option<Box<LatencyHistogram>>,
    track_percentiles: bool,
    /// Slots granted to other tenants this period while this one had a
    /// request queued (tracked tenants only).
    passed_over: u64,
    /// Configured (a weight, strict priority) or given a weight or an SLO
    /// while running: never forgotten.
    pinned: bool,
}

struct State {
    stage: Stage<Wrr>,
    /// By `TenantId`; a forgotten tenant's id is given to the next new one.
    tenants: Slab<TenantRecord>,
    by_name: HashMap<Arc<str>, TenantId>,
    waiters: FxHashMap<u64, oneshot::Sender<()>>,
    next_tag: u64,
    /// Requests holding a parked slot (not counted by the stage).
    parked: usize,
    /// Most requests queued or inside at once since the last period.
    peak_demand: usize,
    peak_in_flight: usize,
    /// Time requests spent inside the database this period, seconds.
    service: Moments,
    /// When a request last finished, or the database last went from idle
    /// to busy: where the current stretch without progress began.
    progress_at: Instant,
    /// Longest stretch this period with requests inside and none finishing.
    longest_stall: Duration,
    /// Every tenant's queue wait.
    wait: LatencyHistogram,
    /// Requests ended since the start, every tenant's (tenants' own counts
    /// leave with them).
    completed: u64,
    /// Tenants tracked for an SLO (see `track_percentiles`).
    tracked: Vec<TenantId>,
    /// Names of the tenants with strict priority, seen or not yet.
    strict: Vec<String>,
}

struct Shared {
    state: Mutex<State>,
    queue_limit: usize,
    wait_timeout: Duration,
    default_weight: f64,
    weights: HashMap<String, f64>,
}

/// The admission gate, shared by every connection.
#[derive(Clone)]
pub struct Gate {
    shared: Arc<Shared>,
}

/// A request inside the database. Dropping it returns the slot, whether the
/// request completed, failed, or its client went away; parked, it stops
/// counting toward P until unparked (see the module's doc).
pub struct Slot {
    shared: Arc<Shared>,
    tenant: TenantId,
    arrived: Instant,
    pub admitted: Instant,
    /// Since when it is parked, if it is.
    parked_at: Option<Instant>,
    /// Time spent parked before, left out of its time inside the database.
    parked_for: Duration,
}

/// A request that rides a slot an earlier request of the same client held:
/// a Redis command pipelined on one connection behind one still in the
/// server, which runs them one after another (see [`Slot::hand_over`]). It
/// counts toward nothing; dropping it records its latency as any request's.
pub struct Rider {
    shared: Arc<Shared>,
    tenant: TenantId,
    arrived: Instant,
}

/// A request waiting for its slot; dropping it (the client went away, the
/// wait timed out) takes the request out of the queue, or gives back the
/// slot if it was granted in the meantime.
struct Waiting {
    shared: Arc<Shared>,
    tenant: TenantId,
    tag: u64,
    granted: oneshot::Receiver<()>,
    taken: bool,
}

impl Gate {
    pub fn new(config: GateConfig) -> Result<Self, String> {
        config.validate()?;
        let stage = Stage::new(Box::new(Wrr::new(config.zeta)), config.parallelism).map_err(|e| e.to_string())?;
        let state = State {
            stage,
            tenants: Slab::new(),
            by_name: HashMap::new(),
            waiters: FxHashMap::default(),
            next_tag: 0,
            parked: 0,
            peak_demand: 0,
            peak_in_flight: 0,
            service: Moments::default(),
            progress_at: Instant::now(),
            longest_stall: Duration::ZERO,
            wait: LatencyHistogram::coarse(),
            completed: 0,
            tracked: Vec::new(),
            strict: config.strict,
        };
        let shared = Shared {
            state: Mutex::new(state),
            queue_limit: config.queue_limit,
            wait_timeout: config.wait_timeout,
            default_weight: config.default_weight,
            weights: config.weights,
        };
        Ok(Gate {
            shared: Arc::new(shared),
        })
    }

    /// The tenant named `name`, registered on first use with its configured
    /// weight.
    pub fn tenant(&self, name: &str) -> Tenant {
        self.register(name, LatencyHistogram::coarse)
    }

    /// As [`tenant`](Self::tenant), for a tenant that is one connection of
    /// possibly thousands: its latency distribution is kept to one
    /// significant digit, in about 3 KiB instead of 20, so that a busy
    /// client costs the proxy little more than an idle one.
    pub fn connection_tenant(&self, name: &str) -> Tenant {
        self.register(name, LatencyHistogram::rough)
    }

    fn register(&self, name: &str, histogram: fn() -> LatencyHistogram) -> Tenant {
        let mut st = self.shared.lock();
        if let Some(&id) = st.by_name.get(name) {
            let rec = &st.tenants[id.0 as usize];
            return Tenant {
                name: Arc::clone(&rec.name),
                weight: rec.weight,
                id,
            };
        }
        let configured = self.shared.weights.get(name).copied();
        let strict = st.strict.iter().any(|s| s == name);
        let weight = configured.unwrap_or(self.shared.default_weight);
        let name: Arc<str> = Arc::from(name);
        let mut record = TenantRecord::new(Arc::clone(&name), weight, histogram);
        record.pinned = configured.is_some() || strict;
        let id = TenantId(st.tenants.insert(record) as u32);
        st.by_name.insert(Arc::clone(&name), id);
        if strict {
            st.stage.policy_mut().set_strict(id, true);
        }
        Tenant { name, weight, id }
    }

    /// Waits until `tenant`'s request may enter the database.
    pub async fn admit(&self, tenant: &Tenant) -> Result<Slot, Refusal> {
        let arrived = Instant::now();
        if let Some(slot) = self.admit_at_once(tenant, arrived) {
            return Ok(slot);
        }
        let mut waiting = self.enqueue(tenant)?;
        match tokio::time::timeout(self.shared.wait_timeout, &mut waiting.granted).await {
            Ok(Ok(())) => {
                waiting.taken = true;
                let admitted = Instant::now();
                let wait = nanos(admitted - arrived);
                let mut st = self.shared.lock();
                st.wait.record(wait);
                st.tenants[tenant.id.0 as usize].wait.record(wait as f64);
                Ok(Slot {
                    shared: Arc::clone(&self.shared),
                    tenant: tenant.id,
                    arrived,
                    admitted,
                    parked_at: None,
                    parked_for: Duration::ZERO,
                })
            }
            // A dropped sender would mean the gate forgot the request: treat
            // it as a timeout rather than hang.
            Ok(Err(_)) | Err(_) => {
                self.shared.lock().tenants[tenant.id.0 as usize].timed_out += 1;
                Err(Refusal::Timeout {
                    tenant: Arc::clone(&tenant.name),
                    waited: arrived.elapsed(),
                })
            }
        }
    }

    /// The slot of a request that finds one free and no request queued:
    /// granted as the round robin would grant it, under one lock and with
    /// no waiter, channel or timer (see [`Stage::start_alone`]).
    fn admit_at_once(&self, tenant: &Tenant, arrived: Instant) -> Option<Slot> {
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        if !st.stage.start_alone() {
            return None;
        }
        let rec = &mut st.tenants[tenant.id.0 as usize];
        rec.busy = true;
        rec.wait.record(0.0);
        st.wait.record(0);
        st.note_granted(tenant.id, arrived);
        st.note_demand();
        Some(Slot {
            shared: Arc::clone(&self.shared),
            tenant: tenant.id,
            arrived,
            admitted: arrived,
            parked_at: None,
            parked_for: Duration::ZERO,
        })
    }

    fn enqueue(&self, tenant: &Tenant) -> Result<Waiting, Refusal> {
        let mut st = self.shared.lock();
        if st.stage.policy().queued(tenant.id) >= self.shared.queue_limit {
            st.tenants[tenant.id.0 as usize].refused += 1;
            return Err(Refusal::QueueFull {
                tenant: Arc::clone(&tenant.name),
                limit: self.shared.queue_limit,
            });
        }
        let tag = st.next_tag;
        st.next_tag += 1;
        let (tx, rx) = oneshot::channel();
        st.waiters.insert(tag, tx);
        let rec = &mut st.tenants[tenant.id.0 as usize];
        rec.busy = true;
        let weight = rec.weight;
        let ctx = Ctx::new(tag, 0).with_tenant(tenant.id.0, weight);
        st.stage.push(Job::new(tag, ctx, 0, 0).with_tag(tag), 0);
        st.note_demand();
        st.grant_free_slots();
        Ok(Waiting {
            shared: Arc::clone(&self.shared),
            tenant: tenant.id,
            tag,
            granted: rx,
            taken: false,
        })
    }

    /// Sets P; a lower P takes effect as requests finish.
    pub fn set_parallelism(&self, p: usize) -> Result<(), String> {
        let mut st = self.shared.lock();
        st.stage.set_limit(p).map_err(|e| format!("parallelism: {e}"))?;
        st.grant_free_slots();
        Ok(())
    }

    pub fn set_zeta(&self, zeta: f64) -> Result<(), String> {
        check_positive("zeta", zeta)?;
        self.shared.lock().stage.policy_mut().set_zeta(zeta);
        Ok(())
    }

    /// Sets φ of tenant `name` (registering it if new); queued requests
    /// keep the weight they arrived with.
    pub fn set_weight(&self, name: &str, weight: f64) -> Result<(), String> {
        check_positive(&format!("weight of `{name}`"), weight)?;
        let id = self.tenant(name).id;
        let rec = &mut self.shared.lock().tenants[id.0 as usize];
        rec.weight = weight;
        rec.pinned = true;
        Ok(())
    }

    /// Gives strict priority to exactly the tenants named in `names` (a
    /// reload): tenants already seen move at once, with the requests they
    /// have waiting; those not yet seen get it when they come.
    pub fn set_strict(&self, names: &[String]) {
        let mut st = self.shared.lock();
        st.strict = names.to_vec();
        let st = &mut *st;
        for (name, &id) in &st.by_name {
            let strict = names.iter().any(|n| **n == **name);
            st.stage.policy_mut().set_strict(id, strict);
            st.tenants[id.0 as usize].pinned |= strict;
        }
    }

    /// Drops tenant `name`'s record if nothing waits or runs for it and
    /// nothing configures it (a weight, strict priority, an SLO). Returns
    /// whether it was dropped.
    pub fn forget(&self, name: &str) -> bool {
        let mut st = self.shared.lock();
        let Some(&id) = st.by_name.get(name) else {
            return false;
        };
        let rec = &st.tenants[id.0 as usize];
        if rec.pinned || rec.in_flight > 0 || rec.parked > 0 || st.stage.policy().queued(id) > 0 {
            return false;
        }
        st.tenants.remove(id.0 as usize);
        st.by_name.remove(name);
        st.stage.policy_mut().forget(id);
        true
    }

    pub fn parallelism(&self) -> usize {
        self.shared.lock().stage.limit()
    }

    /// Requests inside the database now.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().stage.in_service()
    }

    /// Requests waiting on their client with their slot parked.
    pub fn parked(&self) -> usize {
        self.shared.lock().parked
    }

    pub fn zeta(&self) -> f64 {
        self.shared.lock().stage.policy().zeta()
    }

    /// Whether the gate holds a record of tenant `name` (seen, or given a
    /// weight or an SLO); the admin port counts the tenants it creates.
    pub fn knows(&self, name: &str) -> bool {
        self.shared.lock().by_name.contains_key(name)
    }

    /// Keeps a per-period latency histogram for tenant `name`, whose SLO
    /// controller needs its percentiles.
    pub fn track_percentiles(&self, name: &str) {
        let id = self.tenant(name).id;
        let mut st = self.shared.lock();
        let rec = &mut st.tenants[id.0 as usize];
        rec.track_percentiles = true;
        rec.pinned = true;
        if !st.tracked.contains(&id) {
            st.tracked.push(id);
        }
    }

    /// What happened since the last call, for the optimizers (one caller
    /// only); starts a new period.
    pub fn take_period(&self) -> Period {
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        let mut tenants = Vec::new();
        for (i, t) in st.tenants.iter_mut() {
            if t.busy {
                tenants.push(PeriodTenant {
                    name: Arc::clone(&t.name),
                    stats: std::mem::replace(&mut t.period, TenantStats::new(t.weight)),
                    latencies: t.period_latency.take(),
                    passed_over: std::mem::take(&mut t.passed_over),
                });
            }
            t.busy = t.in_flight > 0 || st.stage.policy().queued(TenantId(i as u32)) > 0;
        }
        let period = Period {
            tenants,
            peak_demand: std::mem::take(&mut st.peak_demand),
            peak_in_flight: std::mem::replace(&mut st.peak_in_flight, st.stage.in_service()),
            service: std::mem::take(&mut st.service),
            longest_stall: nanos(std::mem::take(&mut st.longest_stall).max(st.ongoing_stall())),
        };
        st.note_demand();
        period
    }

    /// Requests ended since the gate was made, every tenant's.
    pub fn completed(&self) -> u64 {
        self.shared.lock().completed
    }

    /// Everything the admin port shows.
    pub fn snapshot(&self) -> GateSnapshot {
        let st = self.shared.lock();
        GateSnapshot {
            parallelism: st.stage.limit(),
            zeta: st.stage.policy().zeta(),
            in_flight: st.stage.in_service(),
            parked: st.parked,
            queued: st.stage.queued(),
            wait_p99_ms: st.wait.quantile(0.99) as f64 / 1e6,
            wait_p999_ms: st.wait.quantile(0.999) as f64 / 1e6,
            tenants: st
                .tenants
                .iter()
                .map(|(i, t)| t.snapshot(st.stage.policy().queued(TenantId(i as u32))))
                .collect(),
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counters at worst stale;
        // refusing every later request would be worse.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Hands free slots to the requests the policy picks.
    fn grant_free_slots(&mut self) {
        while let Some(job) = self.stage.dispatch(0, &FlatDevice::default()) {
            let granted = self.waiters.remove(&job.tag).is_some_and(|tx| tx.send(()).is_ok());
            if granted {
                self.note_granted(job.ctx.tenant, Instant::now());
            } else {
                self.stage.complete().expect("the slot was just taken");
            }
        }
    }

    /// A slot the stage counts went to a request of `tenant` at `now`.
    fn note_granted(&mut self, tenant: TenantId, now: Instant) {
        let rec = &mut self.tenants[tenant.0 as usize];
        rec.in_flight += 1;
        rec.admitted += 1;
        if self.stage.in_service() == 1 {
            self.progress_at = now;
        }
        self.peak_in_flight = self.peak_in_flight.max(self.stage.in_service());
        self.note_passed_over(tenant);
    }

    /// A slot went to `granted`: every tracked tenant with a request
    /// queued was passed over (what an SLO controller can change by weight).
    fn note_passed_over(&mut self, granted: TenantId) {
        for &id in &self.tracked {
            if id != granted && self.stage.policy().queued(id) > 0 {
                self.tenants[id.0 as usize].passed_over += 1;
            }
        }
    }

    /// How long requests have been inside with none finishing, now.
    fn ongoing_stall(&self) -> Duration {
        if self.stage.in_service() > 0 {
            self.progress_at.elapsed()
        } else {
            Duration::ZERO
        }
    }

    fn note_demand(&mut self) {
        self.peak_demand = self.peak_demand.max(self.stage.queued() + self.stage.in_service());
    }

    /// A request finished at `now` (read before the lock, so another may
    /// have been noted later already).
    fn note_progress(&mut self, now: Instant) {
        self.longest_stall = self.longest_stall.max(now.saturating_duration_since(self.progress_at));
        self.progress_at = self.progress_at.max(now);
    }

    fn release(&mut self, tenant: TenantId) {
        self.stage.complete().expect("a granted slot is in service");
        self.tenants[tenant.0 as usize].in_flight -= 1;
        self.grant_free_slots();
    }
}

impl TenantRecord {
    /// A request of this tenant ended, `latency` ns after it arrived.
    fn record_latency(&mut self, latency: u64) {
        record(&mut self.latency, self.histogram, latency);
        if self.track_percentiles {
            // An SLO's percentiles are decided on: coarse, whatever the
            // tenant.
            record(&mut self.period_latency, LatencyHistogram::coarse, latency);
        }
        self.period.record(latency as f64);
    }

    fn new(name: Arc<str>, weight: f64, histogram: fn() -> LatencyHistogram) -> Self {
        TenantRecord {
            name,
            weight,
            histogram,
            in_flight: 0,
            parked: 0,
            admitted: 0,
            refused: 0,
            timed_out: 0,
            wait: Moments::default(),
            latency: None,
            period: TenantStats::new(weight),
            busy: false,
            period_latency: None,
            track_percentiles: false,
            passed_over: 0,
            pinned: false,
        }
    }

    fn snapshot(&self, queued: usize) -> TenantSnapshot {
        let ms = |h: &Option<Box<LatencyHistogram>>, q: f64| h.as_ref().map_or(0.0, |h| h.quantile(q) as f64 / 1e6);
        let mean_ms = |h: &Option<Box<LatencyHistogram>>| h.as_ref().map_or(0.0, |h| h.mean() / 1e6);
        TenantSnapshot {
            name: self.name.to_string(),
            weight: self.weight,
            queued,
            in_flight: self.in_flight,
            parked: self.parked,
            admitted: self.admitted,
            completed: self.latency.as_ref().map_or(0, |h| h.count()),
            refused: self.refused,
            timed_out: self.timed_out,
            wait_mean_ms: self.wait.mean() / 1e6,
            latency_mean_ms: mean_ms(&self.latency),
            latency_p99_ms: ms(&self.latency, 0.99),
            latency_p999_ms: ms(&self.latency, 0.999),
        }
    }
}

impl Slot {
    /// The request waits on its client: it stops counting toward P, and a
    /// waiting request may take its place. Does nothing if already parked.
    pub fn park(&mut self) {
        if self.parked_at.is_some() {
            return;
        }
        self.parked_at = Some(Instant::now());
        let mut st = self.shared.lock();
        st.parked += 1;
        let rec = &mut st.tenants[self.tenant.0 as usize];
        rec.parked += 1;
        rec.in_flight -= 1;
        st.stage.complete().expect("an unparked slot is in service");
        st.grant_free_slots();
    }

    /// The client went on: the request counts toward P again at once, even
    /// above it (see the module's doc). Does nothing if not parked.
    pub fn unpark(&mut self) {
        let Some(since) = self.parked_at.take() else {
            return;
        };
        let now = Instant::now();
        self.parked_for += now - since;
        let mut st = self.shared.lock();
        st.parked -= 1;
        let rec = &mut st.tenants[self.tenant.0 as usize];
        rec.parked -= 1;
        rec.in_flight += 1;
        st.stage.resume();
        if st.stage.in_service() == 1 {
            st.progress_at = now;
        }
        st.peak_in_flight = st.peak_in_flight.max(st.stage.in_service());
    }

    pub fn is_parked(&self) -> bool {
        self.parked_at.is_some()
    }

    /// A request of the same tenant that arrives now takes the slot over,
    /// without waiting at the gate: the slot is given back when the new
    /// request ends, and the request that held it goes on as the returned
    /// [`Rider`], to record its own latency. Both count as admitted.
    pub fn hand_over(&mut self) -> Rider {
        let now = Instant::now();
        self.shared.lock().tenants[self.tenant.0 as usize].admitted += 1;
        Rider {
            shared: Arc::clone(&self.shared),
            tenant: self.tenant,
            arrived: mem::replace(&mut self.arrived, now),
        }
    }
}

impl Drop for Rider {
    fn drop(&mut self) {
        let latency = nanos(self.arrived.elapsed());
        let mut st = self.shared.lock();
        st.completed += 1;
        st.tenants[self.tenant.0 as usize].record_latency(latency);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let now = Instant::now();
        let latency = nanos(now - self.arrived);
        let parked_for = self.parked_for + self.parked_at.map_or(Duration::ZERO, |since| now - since);
        let service = (now - self.admitted).saturating_sub(parked_for).as_secs_f64();
        let mut st = self.shared.lock();
        st.completed += 1;
        st.service.record(service);
        let rec = &mut st.tenants[self.tenant.0 as usize];
        rec.record_latency(latency);
        if self.parked_at.is_some() {
            // Its slot was given back when it parked.
            rec.parked -= 1;
            st.parked -= 1;
        } else {
            st.note_progress(now);
            st.release(self.tenant);
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let mut st = self.shared.lock();
        if st.stage.policy_mut().cancel(self.tenant, self.tag).is_some() {
            st.waiters.remove(&self.tag);
        } else if self.granted.try_recv().is_ok() {
            // Granted after the wait ended: the slot is ours to give back.
            st.release(self.tenant);
        }
    }
}

fn record(hist: &mut Option<Box<LatencyHistogram>>, make: fn() -> LatencyHistogram, v: u64) {
    hist.get_or_insert_with(|| Box::new(make())).record(v);
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Clone, Debug, Serialize)]
pub struct GateSnapshot {
    pub parallelism: usize,
    pub zeta: f64,
    pub in_flight: usize,
    /// Requests waiting on their client with their slot parked, not
    /// counted in `in_flight`.
    pub parked: usize,
    pub queued: usize,
    /// Queue wait of every tenant's requests together.
    pub wait_p99_ms: f64,
    pub wait_p999_ms: f64,
    pub tenants: Vec<TenantSnapshot>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TenantSnapshot {
    pub name: String,
    pub weight: f64,
    pub queued: usize,
    pub in_flight: usize,
    pub parked: usize,
    pub admitted: u64,
    pub completed: u64,
    pub refused: u64,
    pub timed_out: u64,
    pub wait_mean_ms: f64,
    pub latency_mean_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_p999_ms: f64,
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    fn gate(parallelism: usize, queue_limit: usize, wait_ms: u64) -> Gate {
        Gate::new(GateConfig {
            parallelism,
            queue_limit,
            wait_timeout: Duration::from_millis(wait_ms),
            weights: HashMap::from([("heavy".to_string(), 2.0)]),
            ..GateConfig::default()
        })
        .unwrap()
    }

    /// Starts `n` requests of `tenant` that each, once admitted, report
    /// their tenant's name and then either leave at once or hold their slot
    /// for the rest of the test.
    fn spawn_requests(g: &Gate, tenant: &str, n: usize, order: &mpsc::UnboundedSender<String>, hold: bool) {
        for _ in 0..n {
            let (g, t, order) = (g.clone(), g.tenant(tenant), order.clone());
            tokio::spawn(async move {
                let _slot = g.admit(&t).await.unwrap();
                order.send(t.name.to_string()).unwrap();
                if hold {
                    std::future::pending::<()>().await;
                }
            });
        }
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn lets_in_at_most_p_and_serves_tenants_by_weight() {
        let g = gate(1, 100, 5_000);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let blocker = g.admit(&g.tenant("light")).await.unwrap();
        spawn_requests(&g, "light", 4, &tx, false);
        spawn_requests(&g, "heavy", 8, &tx, false);
        settle().await;
        assert_eq!(g.snapshot().queued, 12, "P = 1 is taken: everyone waits");
        drop(blocker);
        let mut order = Vec::new();
        for _ in 0..12 {
            order.push(rx.recv().await.unwrap());
        }
        // ζ = 1: one light, then two heavy, round after round.
        let heavy_in_first_six = order[..6].iter().filter(|t| *t == "heavy").count();
        assert_eq!(heavy_in_first_six, 4, "order {order:?}");
        assert_eq!(g.snapshot().in_flight, 0);
    }

    #[tokio::test]
    async fn counts_slots_a_tracked_tenant_was_passed_over_for() {
        let g = gate(1, 100, 5_000);
        g.track_percentiles("ls");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let blocker = g.admit(&g.tenant("heavy")).await.unwrap();
        spawn_requests(&g, "heavy", 4, &tx, false);
        spawn_requests(&g, "ls", 1, &tx, false);
        settle().await;
        g.take_period();
        drop(blocker);
        for _ in 0..5 {
            rx.recv().await.unwrap();
        }
        let period = g.take_period();
        let passed = |name: &str| period.tenants.iter().find(|t| &*t.name == name).unwrap().passed_over;
        // ζ = 1, heavy weight 2: heavy, heavy, then ls.
        assert_eq!(passed("ls"), 2, "two slots went to heavy while ls waited");
        assert_eq!(passed("heavy"), 0, "untracked tenants are not counted");
    }

    #[tokio::test]
    async fn measures_the_longest_stretch_with_requests_inside_and_none_finishing() {
        let g = gate(2, 10, 5_000);
        // Idle time is no stall.
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(g.admit(&g.tenant("a")).await.unwrap());
        assert!(g.take_period().longest_stall < nanos(Duration::from_millis(50)));
        let first = g.admit(&g.tenant("a")).await.unwrap();
        let second = g.admit(&g.tenant("b")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(first);
        drop(second);
        let stall = g.take_period().longest_stall;
        assert!(stall >= nanos(Duration::from_millis(60)), "{stall} ns");
        // A stall still going on counts in the period it is seen in.
        let _held = g.admit(&g.tenant("a")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(g.take_period().longest_stall >= nanos(Duration::from_millis(60)));
    }

    #[tokio::test]
    async fn a_strict_tenant_is_let_in_before_heavier_ones() {
        let g = Gate::new(GateConfig {
            parallelism: 1,
            weights: HashMap::from([("heavy".to_string(), 100.0)]),
            strict: vec!["ls".to_string()],
            ..GateConfig::default()
        })
        .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let blocker = g.admit(&g.tenant("heavy")).await.unwrap();
        spawn_requests(&g, "heavy", 3, &tx, false);
        spawn_requests(&g, "ls", 3, &tx, false);
        settle().await;
        drop(blocker);
        let mut order = Vec::new();
        for _ in 0..6 {
            order.push(rx.recv().await.unwrap());
        }
        assert_eq!(order, ["ls", "ls", "ls", "heavy", "heavy", "heavy"]);
    }

    #[tokio::test]
    async fn strict_priority_moves_live_with_the_requests_waiting() {
        let g = Gate::new(GateConfig {
            parallelism: 1,
            strict: vec!["ls".to_string()],
            ..GateConfig::default()
        })
        .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let blocker = g.admit(&g.tenant("be")).await.unwrap();
        spawn_requests(&g, "ls", 2, &tx, false);
        spawn_requests(&g, "be", 2, &tx, false);
        settle().await;
        g.set_strict(&["be".to_string()]);
        drop(blocker);
        let mut order = Vec::new();
        for _ in 0..4 {
            order.push(rx.recv().await.unwrap());
        }
        assert_eq!(
            order,
            ["be", "be", "ls", "ls"],
            "be took ls's place, waiting requests too"
        );
        assert!(!g.forget("be"), "a strict tenant is configured, never forgotten");
    }

    #[tokio::test]
    async fn only_idle_unconfigured_tenants_are_forgotten_and_ids_are_reused() {
        let g = Gate::new(GateConfig {
            parallelism: 1,
            strict: vec!["ls".to_string()],
            ..GateConfig::default()
        })
        .unwrap();
        let inside = g.admit(&g.tenant("conn-1")).await.unwrap();
        assert!(!g.forget("conn-1"), "a request is inside");
        drop(inside);
        g.tenant("ls");
        g.tenant("heavy");
        g.set_weight("live", 3.0).unwrap();
        assert!(!g.forget("ls") && !g.forget("live"), "configured tenants stay");
        assert!(g.forget("conn-1"));
        assert!(!g.forget("conn-1"), "already gone");
        assert!(g.snapshot().tenants.iter().all(|t| t.name != "conn-1"));
        // The freed id goes to a new tenant, served like any other.
        let fresh = g.tenant("conn-2");
        let blocker = g.admit(&g.tenant("heavy")).await.unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        spawn_requests(&g, "conn-2", 1, &tx, false);
        settle().await;
        spawn_requests(&g, "ls", 1, &tx, false);
        settle().await;
        drop(blocker);
        let order = [rx.recv().await.unwrap(), rx.recv().await.unwrap()];
        assert_eq!(order, ["ls", "conn-2"], "strict ls first; {fresh:?}");
    }

    #[tokio::test]
    async fn a_full_queue_refuses_with_a_clear_error() {
        let g = gate(1, 1, 5_000);
        let t = g.tenant("a");
        let _inside = g.admit(&t).await.unwrap();
        let (g2, t2) = (g.clone(), t.clone());
        let _waiting = tokio::spawn(async move { g2.admit(&t2).await.map(drop) });
        settle().await;
        let refusal = g.admit(&t).await.err().unwrap();
        assert!(matches!(refusal, Refusal::QueueFull { limit: 1, .. }), "{refusal}");
        assert_eq!(refusal.sqlstate(), "53300");
        assert!(refusal.to_string().contains("tenant `a`"));
        assert_eq!(g.snapshot().tenants[0].refused, 1);
    }

    #[tokio::test]
    async fn a_timed_out_or_abandoned_wait_gives_nothing_away() {
        let g = gate(1, 10, 50);
        let t = g.tenant("a");
        let inside = g.admit(&t).await.unwrap();
        let refusal = g.admit(&t).await.err().unwrap();
        assert_eq!(refusal.sqlstate(), "57014");
        // A client that disconnects while queued: its admit future is dropped.
        let abandoned = tokio::spawn({
            let (g, t) = (g.clone(), t.clone());
            async move { g.admit(&t).await.map(drop) }
        });
        settle().await;
        abandoned.abort();
        settle().await;
        assert_eq!(g.snapshot().queued, 0, "abandoned requests leave the queue");
        drop(inside);
        let again = g.admit(&t).await.expect("the slot came back");
        assert_eq!(g.snapshot().in_flight, 1);
        drop(again);
        assert_eq!(g.snapshot().in_flight, 0);
    }

    #[tokio::test]
    async fn raising_p_lets_waiting_requests_in() {
        let g = gate(1, 10, 5_000);
        let (tx, mut rx) = mpsc::unbounded_channel();
        spawn_requests(&g, "a", 3, &tx, true);
        settle().await;
        assert_eq!(g.snapshot().in_flight, 1);
        g.set_parallelism(3).unwrap();
        for _ in 0..3 {
            rx.recv().await.unwrap();
        }
        assert_eq!(g.snapshot().in_flight, 3);
        assert!(g.set_parallelism(0).unwrap_err().contains("parallelism"));
        assert!(g.set_zeta(f64::NAN).unwrap_err().contains("zeta"));
    }

    #[tokio::test]
    async fn a_parked_slot_lets_the_next_request_in_and_comes_back_above_p() {
        let g = gate(1, 10, 5_000);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut thinking = g.admit(&g.tenant("a")).await.unwrap();
        spawn_requests(&g, "b", 2, &tx, true);
        settle().await;
        assert_eq!((g.snapshot().in_flight, g.snapshot().queued), (1, 2));
        thinking.park();
        thinking.park();
        assert_eq!(rx.recv().await.unwrap(), "b", "the parked slot went to b");
        let snap = g.snapshot();
        assert_eq!((snap.in_flight, snap.parked, snap.queued), (1, 1, 1));
        let a = snap.tenants.iter().find(|t| t.name == "a").unwrap();
        assert_eq!((a.in_flight, a.parked), (0, 1));
        assert!(!g.forget("a"), "a tenant with a parked request is kept");
        thinking.unpark();
        thinking.unpark();
        assert!(!thinking.is_parked());
        let snap = g.snapshot();
        assert_eq!(
            (snap.in_flight, snap.parked, snap.queued),
            (2, 0, 1),
            "back at once, above P = 1"
        );
        drop(thinking);
        settle().await;
        assert!(rx.try_recv().is_err(), "still at P: nobody else is let in");
        assert_eq!(g.snapshot().in_flight, 1);
    }

    #[tokio::test]
    async fn one_client_holding_a_parked_slot_is_not_deadlocked_by_its_own_next_request() {
        // A thread drives two connections: the first's transaction is open
        // and waits on that thread, which is blocked on the second's request.
        let g = gate(1, 10, 200);
        let mut open = g.admit(&g.tenant("c1")).await.unwrap();
        open.park();
        let next = g
            .admit(&g.tenant("c2"))
            .await
            .expect("let in while the first is parked");
        drop(next);
        open.unpark();
        drop(open);
        let snap = g.snapshot();
        assert_eq!((snap.in_flight, snap.parked), (0, 0));
        assert_eq!(g.snapshot().tenants.iter().map(|t| t.completed).sum::<u64>(), 2);
    }

    #[tokio::test]
    async fn a_dropped_parked_slot_gives_back_nothing_twice_and_its_parked_time_is_not_service() {
        let g = gate(2, 10, 5_000);
        let t = g.tenant("a");
        let mut parked = g.admit(&t).await.unwrap();
        parked.park();
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(parked);
        let period = g.take_period();
        assert!(period.service.mean() < 0.05, "service {} s", period.service.mean());
        let snap = g.snapshot();
        assert_eq!((snap.in_flight, snap.parked), (0, 0));
        let both = (g.admit(&t).await.unwrap(), g.admit(&t).await.unwrap());
        assert_eq!(g.snapshot().in_flight, 2, "P = 2 still, no slot lost or gained");
        drop(both);
    }

    #[tokio::test]
    async fn a_handed_over_slot_is_given_back_once_and_every_request_records_its_latency() {
        let g = gate(1, 10, 5_000);
        let t = g.tenant("a");
        let mut slot = g.admit(&t).await.unwrap();
        let rider = slot.hand_over();
        let snap = g.snapshot();
        assert_eq!(
            (snap.in_flight, snap.tenants[0].admitted),
            (1, 2),
            "one slot, two requests"
        );
        drop(rider);
        assert_eq!(g.snapshot().in_flight, 1, "the rider gives back nothing");
        drop(slot);
        let snap = g.snapshot();
        assert_eq!((snap.in_flight, snap.tenants[0].completed), (0, 2));
        let again = g.admit(&t).await.unwrap();
        assert_eq!(g.snapshot().in_flight, 1, "P = 1 still");
        drop(again);
    }

    #[test]
    fn a_connection_tenant_keeps_its_latencies_roughly() {
        let g = gate(1, 10, 5_000);
        let (user, connection) = (g.tenant("alice"), g.connection_tenant("127.0.0.1:4242"));
        let mut st = g.shared.lock();
        let p50 = |st: &mut State, tenant: &Tenant| {
            let rec = &mut st.tenants[tenant.id.0 as usize];
            rec.record_latency(1_234_567);
            rec.latency.as_ref().expect("made on first use").quantile(0.5) as f64 / 1_234_567.0
        };
        let fine = p50(&mut st, &user);
        assert!((0.99..1.01).contains(&fine), "two significant digits: {fine}");
        let rough = p50(&mut st, &connection);
        assert!(
            (1.0 - 1.0 / 16.0..1.0 + 1.0 / 16.0).contains(&rough) && rough != fine,
            "one significant digit: {rough}"
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |c: GateConfig| Gate::new(c).err().unwrap();
        assert!(bad(GateConfig {
            parallelism: 0,
            ..GateConfig::default()
        })
        .contains("parallelism"));
        let weights = HashMap::from([("x".to_string(), -1.0)]);
        assert!(bad(GateConfig {
            weights,
            ..GateConfig::default()
        })
        .contains("gate.weights.x"));
    }
}
