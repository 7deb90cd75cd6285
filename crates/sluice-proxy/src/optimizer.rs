//! The optimizer (AppleS §4.3): one task that ticks every period and runs
//! the controllers of sluice-core against the gate, on their timescales.
//!
//! - P, slow timescale, by one of: `fixed`; `model`, the three-sample model
//!   of §4.3.1 (sample throughput at P0, at a middle P1 and at P2 = the
//!   demand, fit Eq. 2, let in the matching point; sample again when the
//!   demand moves by more than `demand_change`, a pause with no demand not
//!   counting, and start sampling afresh when it moves while sampling; a
//!   demand back at a level sampled before gets that level's matching
//!   point without sampling, and one back at a level whose sampling it
//!   left unfinished (within `rerun_ms`) goes on with that sampling where
//!   it stopped, so that runs shorter than a sampling end it in a few
//!   runs instead of each beginning it again; after `rerun_ms` at one
//!   level, measure only P/2, P and 2P around the held P and move to the
//!   best only if it beat the held P by more than `MARGIN`, a
//!   departure, see `start_around`);
//!   by default it then also measures λ(C) and λ(2C) and keeps the best
//!   measured P (`refine`, a departure: Eq. 2's first maximum fell short of
//!   the peak on PostgreSQL), but P = every user unless the best beat it
//!   by more than `MARGIN`: holding users back costs them queueing that no
//!   sample of throughput counts, so it must pay by more than noise;
//!   `gradient`, a Gradient2-style limiter on the time requests spend inside
//!   the database.
//! - ζ, fast timescale (§4.3.2): `fixed`, or `feedback` on U_f and V_l.
//!   Departure: measured over `zeta_window_ms` (1 s) rather than 100 ms;
//!   with hundreds of users each finishes 0–2 requests in 100 ms and U_f is
//!   noise at that scale.
//! - SLO weights (§5.3): each latency-sensitive tenant's weight follows its
//!   percentile target, decided every `slo_window_ms` on `slo_measure`:
//!   `percentile`, the window's percentile against the target (default),
//!   or `misses`, the fading fraction of requests over the target against
//!   the fraction the percentile allows (see sluice-core's
//!   `controller::slo` for why). A weight is not raised on a window with a
//!   stall: a stretch longer than the target (and than
//!   `STALL_SERVICE_MULTIPLE` times the mean time inside) in which
//!   requests were inside the database and none finished. The windows
//!   that wind the weight up on PostgreSQL are such stalls, WAL flushes
//!   and descheduled clients holding locks, that every tenant waits out
//!   (docs/BENCHMARKS.md, "SLO classes"). Holding only when the time
//!   inside the database alone misses the target at the percentile would
//!   not catch them: fewer than 0.1% of requests are inside during a
//!   stall; the rest of their wait is queued behind it.
//!   Under `misses`, a window a stall decided is also left out of the miss
//!   count, whose fading memory would otherwise carry it into the windows
//!   after and wind the weight up to its cap; and a window whose own
//!   requests kept within the budget raises nothing, whatever older misses
//!   the count still carries, or the weight goes on rising for many
//!   windows after the misses stop and takes best-effort throughput with
//!   it (on PostgreSQL, 24 windows in a row, to a weight of 86.7 that left
//!   best-effort tenants 1.18× what strict priority gives them).
//!   Targets start from the configuration and change live through
//!   [`SloTargets`] (the admin port, a reload); a tenant whose target is
//!   removed keeps its weight.
//!
//! Every change, and every SLO weight held through a stall, is logged as a
//! [`Decision`] that the admin port shows.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_core::controller::{
    check_positive, matching_point, GradientConfig, GradientLimiter, GradientObservation, MissRate, QuotaController,
    QuotaControllerConfig, QuotaObservation, Sample, SloController, SloControllerConfig,
};
use sluice_core::metrics::{latency_cv, unfairness, LatencyHistogram, Moments, TenantStats};
use tokio::sync::watch;

use crate::gate::{Gate, Period};

/// How P is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParallelismMode {
    Fixed,
    Model,
    Gradient,
}

/// What an SLO weight is decided on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SloMeasure {
    /// The window's percentile against the target.
    #[default]
    Percentile,
    /// The fraction of requests over the target, older windows fading,
    /// against the fraction the percentile allows.
    Misses,
}

/// How ζ is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ZetaMode {
    Fixed,
    Feedback,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// P0: small enough that every request runs in parallel (α ≈ 1).
    pub p0: usize,
    /// Time after a change of P before throughput is sampled.
    pub settle_ms: u64,
    /// Time each sample is measured over.
    pub sample_ms: u64,
    /// Sample again after this long.
    pub rerun_ms: u64,
    /// Sample again when the demand moves by more than this fraction.
    pub demand_change: f64,
    /// After the model's matching point C, also measure λ(C) and λ(2C) and
    /// let in whichever measured P did best. On by default, a departure
    /// from the paper: on PostgreSQL the first local maximum of Eq. 2 lies
    /// at 7–11, below the peak near 16 that a hand sweep finds, and the
    /// refinement raises throughput 12–19% (docs/BENCHMARKS.md, "Refining
    /// the matching point (now the default)").
    pub refine: bool,
}

impl ModelConfig {
    /// Whether `demand` differs from `users` by more than `demand_change`.
    fn demand_moved(&self, demand: usize, users: usize) -> bool {
        (demand as f64 - users as f64).abs() > self.demand_change * users.max(1) as f64
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            p0: 2,
            settle_ms: 1_000,
            sample_ms: 3_000,
            rerun_ms: 300_000,
            demand_change: 0.5,
            refine: true,
        }
    }
}

/// A latency-sensitive tenant's target.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    pub tenant: String,
    /// The percentile, e.g. 99.9.
    pub percentile: f64,
    pub target_ms: f64,
}

impl Slo {
    /// Rejects a target the controller cannot follow, naming the tenant.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.percentile > 0.0 && self.percentile < 100.0) {
            return Err(format!(
                "slo for `{}`: percentile must lie in (0, 100), got {}",
                self.tenant, self.percentile
            ));
        }
        check_positive(&format!("slo for `{}`: target_ms", self.tenant), self.target_ms)
    }
}

/// The latency-sensitive tenants' targets as they stand, shared by the
/// optimizer (which follows them from its next tick), the admin port and
/// reloads.
#[derive(Clone)]
pub struct SloTargets(Arc<watch::Sender<Vec<Slo>>>);

impl SloTargets {
    /// Starts from `slos`, which must be valid (see [`Slo::validate`]).
    pub fn new(slos: Vec<Slo>) -> Self {
        SloTargets(Arc::new(watch::Sender::new(slos)))
    }

    pub fn list(&self) -> Vec<Slo> {
        self.0.borrow().clone()
    }

    /// Sets `slo.tenant`'s target, replacing any it had.
    pub fn set(&self, slo: Slo) -> Result<(), String> {
        slo.validate()?;
        self.0
            .send_modify(|slos| match slos.iter_mut().find(|s| s.tenant == slo.tenant) {
                Some(s) => *s = slo,
                None => slos.push(slo),
            });
        Ok(())
    }

    /// Drops `tenant`'s target; false if it had none.
    pub fn remove(&self, tenant: &str) -> bool {
        self.0.send_if_modified(|slos| {
            let before = slos.len();
            slos.retain(|s| s.tenant != tenant);
            slos.len() != before
        })
    }

    /// Replaces every target at once (a reload).
    pub fn replace(&self, slos: Vec<Slo>) -> Result<(), String> {
        slos.iter().try_for_each(Slo::validate)?;
        self.0.send_if_modified(|old| std::mem::replace(old, slos) != *old);
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimizerConfig {
    pub period_ms: u64,
    pub parallelism: ParallelismMode,
    pub zeta: ZetaMode,
    pub zeta_window_ms: u64,
    pub slo_window_ms: u64,
    pub slo_measure: SloMeasure,
    pub model: ModelConfig,
    pub quota: QuotaControllerConfig,
    pub gradient: GradientConfig,
    pub slo_control: SloControllerConfig,
    pub slo: Vec<Slo>,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            period_ms: 100,
            parallelism: ParallelismMode::Model,
            zeta: ZetaMode::Feedback,
            zeta_window_ms: 1_000,
            slo_window_ms: 5_000,
            slo_measure: SloMeasure::Percentile,
            model: ModelConfig::default(),
            quota: QuotaControllerConfig::default(),
            gradient: GradientConfig::default(),
            slo_control: SloControllerConfig::default(),
            slo: Vec::new(),
        }
    }
}

impl OptimizerConfig {
    /// Rejects settings the optimizer cannot run with, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.period_ms == 0 {
            return Err("optimizer.period_ms must be at least 1".into());
        }
        let m = &self.model;
        if m.p0 == 0 || m.sample_ms == 0 {
            return Err("optimizer.model.p0 and optimizer.model.sample_ms must be at least 1".into());
        }
        check_positive("optimizer.model.demand_change", m.demand_change)?;
        QuotaController::new(self.quota, 1.0).map_err(|e| format!("optimizer.quota: {e}"))?;
        GradientLimiter::new(self.gradient, 1).map_err(|e| format!("optimizer.gradient: {e}"))?;
        SloController::new(self.slo_control, 1.0).map_err(|e| format!("optimizer.slo_control: {e}"))?;
        self.slo.iter().try_for_each(Slo::validate)
    }
}

/// A sampling moves P away from its default (after a re-run the held P,
/// after the model's refinement P = every user) only when another P beat
/// the default by more than this fraction. On PostgreSQL, 4 s samples at
/// neighbouring P differ by up to ~10% by chance: re-runs without a margin
/// move P from 20 to 10 on a 1% difference, with a 5% margin they still
/// walk it 16 → 8 → 16 → 32 on differences of 5.5–11% where the hand
/// sweep's peak is 16, and without one a refinement at 8 users holds P = 6
/// on a 5% lead over P = 8, holding two users back for what a sample's
/// noise can show (docs/BENCHMARKS.md, "A Unix socket to PostgreSQL" and
/// its "512 users").
const MARGIN: f64 = 0.10;

/// The measured P that did best, the first on a tie.
fn best_measured(samples: &[Sample]) -> Sample {
    samples
        .iter()
        .fold(samples[0], |b, s| if s.throughput > b.throughput { *s } else { b })
}

/// What a sampling keeps: the best measured P if it beat the sample at
/// `default` by more than [`MARGIN`], else `default`'s sample (the best,
/// when `default` was not measured).
fn choice_with_margin(samples: &[Sample], default: usize) -> Sample {
    let best = best_measured(samples);
    match samples.iter().find(|s| s.p == default) {
        Some(d) if best.throughput <= d.throughput * (1.0 + MARGIN) => *d,
        _ => best,
    }
}

/// A window's longest stretch without a finished request counts as a stall
/// (on which no SLO weight is raised) when longer than the target and than
/// this many times the mean time requests spent inside the database. On
/// PostgreSQL under the SLO experiment requests take ~8 ms inside (16 at
/// ~2,000 per second) and the stalls 70–240 ms (docs/BENCHMARKS.md, "SLO
/// classes").
const STALL_SERVICE_MULTIPLE: f64 = 4.0;

/// One change the optimizer made (or an SLO weight it held through a
/// stall), and why.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// Seconds since the optimizer started.
    pub at: f64,
    pub knob: String,
    pub value: f64,
    pub why: String,
}

/// The last decisions, newest last, shared with the admin port.
#[derive(Clone, Default)]
pub struct DecisionLog(Arc<Mutex<VecDeque<Decision>>>);

const LOG_LEN: usize = 200;

impl DecisionLog {
    fn push(&self, d: Decision) {
        tracing::info!(knob = %d.knob, value = d.value, why = %d.why, "optimizer decision");
        let mut log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() == LOG_LEN {
            log.pop_front();
        }
        log.push_back(d);
    }

    pub fn recent(&self) -> Vec<Decision> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// Where the three-sample model stands.
enum ModelPhase {
    /// No demand yet, or holding the matching point. `moved_since` is when
    /// the demand first strayed from `users` (it must stay away a while).
    Holding {
        since: Instant,
        users: usize,
        moved_since: Option<Instant>,
    },
    /// Measuring λ at the plan's next P.
    Sampling {
        sweep: Sweep,
        plan: Plan,
        started: Instant,
        completed: u64,
        /// What was held before; back to it if the users leave.
        resume: Held,
    },
}

/// Which P a sampling measures, and how it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sweep {
    /// The paper's three samples (P0, P1 and P2 = the users) fitted by
    /// Eq. 2, then, with `refine`, the model's C and 2C.
    Model,
    /// A periodic re-run at an unchanged demand: P/2, P and 2P around the
    /// held P, which is kept unless another beat it by [`MARGIN`].
    Around,
}

/// A P the model held, and the users it was decided for.
#[derive(Clone, Copy, Debug)]
struct Held {
    p: usize,
    users: usize,
}

/// What a sampling measures, for whom, and what it has measured so far.
#[derive(Default)]
struct Plan {
    /// The P to measure, in order (for `Sweep::Model` P0, P1, P2, then
    /// the refinement's candidates, if any).
    ps: Vec<usize>,
    users: usize,
    /// One per P of `ps` measured so far, in its order.
    samples: Vec<Sample>,
}

impl Plan {
    fn fresh(ps: Vec<usize>, users: usize) -> Self {
        Plan {
            ps,
            users,
            samples: Vec::new(),
        }
    }

    /// The P measured next.
    fn next(&self) -> usize {
        self.ps[self.samples.len()]
    }
}

/// A model sampling the users left before it ended, kept to go on with
/// when the demand comes back to its level.
struct Unfinished {
    plan: Plan,
    /// When it was left.
    at: Instant,
}

fn holding(since: Instant, users: usize) -> ModelPhase {
    ModelPhase::Holding {
        since,
        users,
        moved_since: None,
    }
}

/// One latency-sensitive tenant's loop: its target, its controller, and
/// what the current window has seen.
struct SloLoop {
    slo: Slo,
    controller: SloController,
    window: LatencyHistogram,
    /// Times it was passed over at the gate in the window.
    passed_over: u64,
    misses: MissRate,
}

/// What one SLO window measured.
struct Measured {
    /// The measure the controller steers (`None`: nothing to act on).
    value: Option<f64>,
    /// What it is held to.
    target: f64,
    /// Both in words, for the decision log.
    seen: String,
    /// Under `misses`: the window's own requests kept within the budget,
    /// whatever the fading count says.
    window_met: bool,
}

impl SloLoop {
    /// The window's measure against its target. A window a stall decided
    /// (`stalled`) is left out of the miss count: its misses would
    /// otherwise raise the weight in the windows after it.
    fn measure(&mut self, how: SloMeasure, stalled: bool) -> Measured {
        let slo = &self.slo;
        match how {
            SloMeasure::Percentile => {
                let measured =
                    (self.window.count() > 0).then(|| self.window.quantile(slo.percentile / 100.0) as f64 / 1e6);
                let seen = format!(
                    "p{} {:.1} ms vs target {} ms",
                    slo.percentile,
                    measured.unwrap_or(0.0),
                    slo.target_ms
                );
                Measured {
                    value: measured,
                    target: slo.target_ms,
                    seen,
                    window_met: false,
                }
            }
            SloMeasure::Misses => {
                let allowed = 1.0 - slo.percentile / 100.0;
                if stalled {
                    // Counted as a window without requests: older ones fade.
                    self.misses.update(0, 0);
                    return Measured {
                        value: None,
                        target: allowed,
                        seen: "window left out of the miss count".into(),
                        window_met: false,
                    };
                }
                let (requests, over) = (
                    self.window.count(),
                    self.window.count_above((slo.target_ms * 1e6) as u64),
                );
                let rate = self.misses.update(requests, over);
                let window_met = over as f64 <= allowed * requests as f64;
                let seen = format!(
                    "{:.3}% of requests over {} ms (p{} allows {:.3}%; this window {:.3}%)",
                    rate.unwrap_or(0.0) * 100.0,
                    slo.target_ms,
                    slo.percentile,
                    allowed * 100.0,
                    over as f64 * 100.0 / requests.max(1) as f64
                );
                Measured {
                    value: rate,
                    target: allowed,
                    seen,
                    window_met,
                }
            }
        }
    }
}

struct Optimizer {
    config: OptimizerConfig,
    gate: Gate,
    log: DecisionLog,
    start: Instant,
    model: ModelPhase,
    /// The model's matching points, one per level of demand: a demand
    /// back at a level is held at its P (and sampled again after
    /// `rerun_ms` there, as any).
    matched: Vec<Held>,
    /// Samplings left unfinished, one per level of demand: runs shorter
    /// than a sampling (five samples of `settle_ms + sample_ms`) would
    /// otherwise each begin it afresh and never end it.
    unfinished: Vec<Unfinished>,
    gradient: GradientLimiter,
    quota: QuotaController,
    zeta_window: (Instant, HashMap<Arc<str>, TenantStats>),
    slo_targets: watch::Receiver<Vec<Slo>>,
    slos: Vec<SloLoop>,
    slo_window_start: Instant,
    /// Longest stall (see [`Period::longest_stall`]) in the SLO window.
    slo_stall: Duration,
    /// Time requests spent inside the database in the SLO window.
    slo_service: Moments,
}

/// Runs the optimizer until `shutdown` turns true.
pub async fn run(
    config: OptimizerConfig,
    gate: Gate,
    log: DecisionLog,
    slo_targets: SloTargets,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut opt = match Optimizer::new(config, gate, log, slo_targets.0.subscribe()) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("optimizer not started: {e}");
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_millis(opt.config.period_ms));
    loop {
        tokio::select! {
            _ = tick.tick() => opt.tick(Instant::now()),
            _ = shutdown.changed() => if *shutdown.borrow() { return },
        }
    }
}

impl Optimizer {
    fn new(
        config: OptimizerConfig,
        gate: Gate,
        log: DecisionLog,
        slo_targets: watch::Receiver<Vec<Slo>>,
    ) -> Result<Self, String> {
        config.validate()?;
        let now = Instant::now();
        let mut opt = Optimizer {
            gradient: GradientLimiter::new(config.gradient, gate.parallelism())?,
            quota: QuotaController::new(config.quota, gate.zeta())?,
            model: holding(now, 0),
            matched: Vec::new(),
            unfinished: Vec::new(),
            zeta_window: (now, HashMap::new()),
            slo_window_start: now,
            slo_stall: Duration::ZERO,
            slo_service: Moments::default(),
            slo_targets,
            slos: Vec::new(),
            start: now,
            config,
            gate,
            log,
        };
        opt.follow_slo_targets()?;
        Ok(opt)
    }

    /// Takes up the targets as they stand: a tenant keeps its controller
    /// (and weight) when only its target changes.
    fn follow_slo_targets(&mut self) -> Result<(), String> {
        let targets = self.slo_targets.borrow_and_update().clone();
        self.slos.retain(|l| targets.iter().any(|t| t.tenant == l.slo.tenant));
        for target in targets {
            if let Some(entry) = self.slos.iter_mut().find(|l| l.slo.tenant == target.tenant) {
                entry.slo = target;
                continue;
            }
            self.gate.track_percentiles(&target.tenant);
            let weight = self.gate.tenant(&target.tenant).weight;
            self.slos.push(SloLoop {
                slo: target,
                controller: SloController::new(self.config.slo_control, weight)?,
                window: LatencyHistogram::coarse(),
                passed_over: 0,
                misses: MissRate::default(),
            });
        }
        Ok(())
    }

    fn decide(&self, knob: &str, value: f64, why: String) {
        self.log.push(Decision {
            at: self.start.elapsed().as_secs_f64(),
            knob: knob.into(),
            value,
            why,
        });
    }

    fn tick(&mut self, now: Instant) {
        let period = self.gate.take_period();
        match self.config.parallelism {
            ParallelismMode::Fixed => {}
            ParallelismMode::Model => self.model_tick(&period, now),
            ParallelismMode::Gradient => self.gradient_tick(&period),
        }
        if self.config.zeta == ZetaMode::Feedback {
            self.zeta_tick(&period, now);
        }
        if self.slo_targets.has_changed().unwrap_or(false) {
            if let Err(e) = self.follow_slo_targets() {
                tracing::error!("slo targets not taken up: {e}");
            }
        }
        if !self.slos.is_empty() {
            self.slo_tick(&period, now);
        }
    }

    fn set_p(&self, p: usize, why: String) {
        if p != self.gate.parallelism() && self.gate.set_parallelism(p).is_ok() {
            self.decide("parallelism", p as f64, why);
        }
    }

    fn model_tick(&mut self, period: &Period, now: Instant) {
        if self.sampling_upset(period, now) {
            return;
        }
        match self.model {
            ModelPhase::Holding { .. } => self.holding_tick(period, now),
            ModelPhase::Sampling { .. } => self.sampling_tick(period, now),
        }
    }

    /// Ends a sampling whose users left or whose demand moved, and says
    /// whether it did. A sample is λ at a fixed number of users; one taken
    /// while users come or go would bend the fit (users leaving halfway
    /// through the last sample once set P to half their number).
    fn sampling_upset(&mut self, period: &Period, now: Instant) -> bool {
        let ModelPhase::Sampling { plan, resume, .. } = &self.model else {
            return false;
        };
        let (users, demand, resume) = (plan.users, period.peak_demand, *resume);
        if demand == 0 {
            self.shelve(now);
            self.resume(resume, now, format!("model: the {users} users left while sampling"));
        } else if self.config.model.demand_moved(demand, users) {
            let why = format!("model: demand moved from {users} to {demand} users while sampling; sampling again");
            self.decide("matching_point", self.gate.parallelism() as f64, why);
            self.shelve(now);
            self.start_sampling(demand, now, resume);
        } else {
            return false;
        }
        true
    }

    /// While a P is held: samples again when the demand has moved for a
    /// settle time, or re-runs around the held P once it is stale.
    fn holding_tick(&mut self, period: &Period, now: Instant) {
        let m = &self.config.model;
        let (settle, rerun) = (Duration::from_millis(m.settle_ms), Duration::from_millis(m.rerun_ms));
        let ModelPhase::Holding {
            since,
            users,
            moved_since,
        } = &mut self.model
        else {
            return;
        };
        // A change of demand counts once it has lasted a settle time:
        // clients connecting or leaving pass through every count on their
        // way. No demand is no change: the users coming back from a pause
        // (pgbench run after pgbench run) would otherwise be sampled afresh
        // each time, at P = 2 and P = all of them.
        let demand = period.peak_demand;
        let moved = demand > 0 && m.demand_moved(demand, *users);
        *moved_since = if moved { moved_since.or(Some(now)) } else { None };
        let sustained = moved_since.is_some_and(|t| now - t >= settle);
        let stale = now - *since >= rerun;
        // A stale level is re-run at its own demand only: a lone request
        // between runs once began (and at once left) one.
        if demand == 0 || !(sustained || (stale && !moved)) {
            return;
        }
        let held = Held {
            p: self.gate.parallelism(),
            users: *users,
        };
        if !sustained {
            self.start_around(demand, now, held);
        } else if let Some(matched) = self.recall(demand) {
            let why = format!(
                "model: {demand} users; P = {} matched {} users before",
                matched.p, matched.users
            );
            self.hold(matched, now, why);
        } else {
            self.start_sampling(demand, now, held);
        }
    }

    /// While sampling: counts what finishes after the settle time and, once
    /// a sample is complete, goes on to the next P or ends the sampling.
    fn sampling_tick(&mut self, period: &Period, now: Instant) {
        let m = &self.config.model;
        let (settle, sample_ms, refine) = (m.settle_ms, m.sample_ms, m.refine);
        let ModelPhase::Sampling {
            sweep,
            plan,
            started,
            completed,
            resume,
        } = &mut self.model
        else {
            return;
        };
        let since = now - *started;
        if since < Duration::from_millis(settle) {
            return;
        }
        *completed += period.completed();
        if since < Duration::from_millis(settle + sample_ms) {
            return;
        }
        let throughput = *completed as f64 / (sample_ms as f64 / 1e3);
        let p = plan.next();
        if throughput == 0.0 {
            let (why, resume) = (format!("model: nothing finished at P = {p}"), *resume);
            return self.resume(resume, now, why);
        }
        plan.samples.push(Sample { p, throughput });
        // Every way on below replaces the phase.
        let (sweep, mut plan, resume) = (*sweep, std::mem::take(plan), *resume);
        let step = plan.samples.len();
        let fitted = sweep == Sweep::Model && step == 3;
        if fitted && refine {
            let candidates = self.refinement(&plan.samples);
            plan.ps.extend(candidates);
        }
        if step < plan.ps.len() {
            let why = format!("model: sampling throughput at P{step} = {}", plan.next());
            self.begin(sweep, plan, resume, now, why);
        } else if fitted {
            self.finish_sampling(&plan.samples, now);
        } else {
            let held = Held {
                p: resume.p,
                users: plan.users,
            };
            self.finish_best(sweep, &plan.samples, held, now);
        }
    }

    /// Stops sampling and holds `held` again, for `why`.
    fn resume(&mut self, held: Held, now: Instant, why: String) {
        let why = format!(
            "{why}; sampling abandoned, back to P = {} for {} users",
            held.p, held.users
        );
        self.hold(held, now, why);
    }

    /// Lets in `held.p` for `held.users` from `now` on.
    fn hold(&mut self, held: Held, now: Instant, why: String) {
        self.decide("matching_point", held.p as f64, why.clone());
        self.set_p(held.p, why);
        self.model = holding(now, held.users);
    }

    /// Holds a matching point just found, and remembers it for the
    /// demand's return.
    fn hold_matched(&mut self, matched: Held, now: Instant, why: String) {
        self.hold(matched, now, why);
        let m = &self.config.model;
        self.matched.retain(|h| m.demand_moved(h.users, matched.users));
        self.matched.push(matched);
        self.unfinished.retain(|u| m.demand_moved(u.plan.users, matched.users));
    }

    /// Keeps the samples of a model sampling being left, in place of any
    /// older one at its level.
    fn shelve(&mut self, now: Instant) {
        let ModelPhase::Sampling {
            sweep: Sweep::Model,
            plan,
            ..
        } = &mut self.model
        else {
            return;
        };
        if plan.samples.is_empty() {
            return;
        }
        let plan = std::mem::take(plan);
        let m = &self.config.model;
        self.unfinished.retain(|u| m.demand_moved(u.plan.users, plan.users));
        let left = Unfinished { plan, at: now };
        self.unfinished.push(left);
    }

    /// The unfinished sampling at the level of `demand`, taken out, if
    /// one was left there within `rerun_ms`.
    fn take_unfinished(&mut self, demand: usize, now: Instant) -> Option<Plan> {
        let m = &self.config.model;
        let fresh = Duration::from_millis(m.rerun_ms);
        self.unfinished.retain(|u| now - u.at < fresh);
        let at = self
            .unfinished
            .iter()
            .position(|u| !m.demand_moved(demand, u.plan.users))?;
        Some(self.unfinished.swap_remove(at).plan)
    }

    /// The matching point of the level of demand closest to `demand`, if
    /// one is near enough.
    fn recall(&self, demand: usize) -> Option<Held> {
        let m = &self.config.model;
        self.matched
            .iter()
            .filter(|h| !m.demand_moved(demand, h.users))
            .min_by_key(|h| h.users.abs_diff(demand))
            .copied()
    }

    /// Samples λ for `users`; `resume` is what to hold if they leave.
    fn start_sampling(&mut self, users: usize, now: Instant, resume: Held) {
        if self.too_few_to_model(users, now) {
            return;
        }
        if let Some(left) = self.take_unfinished(users, now) {
            let why = format!(
                "model: {users} users; the sampling for {} users goes on at P{} = {}",
                left.users,
                left.samples.len(),
                left.next()
            );
            // Logged even when P stays (P2 is often the P held before).
            self.decide("matching_point", self.gate.parallelism() as f64, why.clone());
            return self.begin(Sweep::Model, left, resume, now, why);
        }
        let p0 = self.config.model.p0;
        let p1 = ((p0 * users) as f64).sqrt().round() as usize;
        let ps = vec![p0, p1.clamp(p0 + 1, users - 1), users];
        let why = format!("model: {users} users; sampling throughput at P0 = {p0}");
        self.begin(Sweep::Model, Plan::fresh(ps, users), resume, now, why);
    }

    /// With no more users than P0 + 1 there is no contention to sample,
    /// first or again: holds the P let in (raised to the users if below)
    /// and says whether it did. A re-run at one user once sampled P = 8
    /// and 16, each letting in the same one request.
    fn too_few_to_model(&mut self, users: usize, now: Instant) -> bool {
        if users > self.config.model.p0 + 1 {
            return false;
        }
        self.model = holding(now, users);
        if self.gate.parallelism() < users {
            self.set_p(users, format!("model: only {users} users, no contention to model"));
        }
        true
    }

    /// Lets in the first P of `ps` not yet in `samples` and starts
    /// measuring λ there.
    fn begin(&mut self, sweep: Sweep, plan: Plan, resume: Held, now: Instant, why: String) {
        let next = plan.next();
        self.model = ModelPhase::Sampling {
            sweep,
            plan,
            started: now,
            completed: 0,
            resume,
        };
        self.set_p(next, why);
    }

    /// The periodic re-run at an unchanged demand of `users`: measures
    /// P/2, P and 2P around the held P and keeps it unless another beat it
    /// by [`MARGIN`]. A departure: the paper samples afresh, and on
    /// PostgreSQL the samples at P = 2 and P = all users, 4 s each, cost
    /// the measured windows they fall in 10–30%, where this sweep costs
    /// 1–7% less than the full one (docs/BENCHMARKS.md, "pgbench's own
    /// runs: the model between runs, and pooled backends beyond P"). It
    /// can move P on one noisy sample, which the margin guards against.
    fn start_around(&mut self, users: usize, now: Instant, resume: Held) {
        if self.too_few_to_model(users, now) {
            return;
        }
        let p = resume.p;
        let mut ps = vec![(p / 2).max(1), p, (2 * p).min(users.max(p))];
        ps.dedup();
        let why = format!(
            "model: {users} users, re-run around P = {p}; sampling throughput at P0 = {}",
            ps[0]
        );
        self.begin(Sweep::Around, Plan::fresh(ps, users), resume, now, why);
    }

    fn finish_sampling(&mut self, samples: &[Sample], now: Instant) {
        let mp = matching_point(samples[0], samples[1], samples[2]);
        let shown: Vec<String> = samples
            .iter()
            .map(|s| format!("λ({})={:.0}/s", s.p, s.throughput))
            .collect();
        let why = match mp.model {
            Some(m) => format!(
                "model: {}; B={:.3} γ={:.4}; matching point",
                shown.join(" "),
                m.b,
                m.gamma
            ),
            None => format!("model: {}; no curve of Eq. 2 fits, the best measured", shown.join(" ")),
        };
        let matched = Held {
            p: mp.p,
            users: samples[2].p,
        };
        self.hold_matched(matched, now, why);
    }

    /// The model's C and 2C, where not sampled already.
    fn refinement(&self, samples: &[Sample]) -> Vec<usize> {
        let users = samples[2].p;
        let c = matching_point(samples[0], samples[1], samples[2]).p;
        let mut candidates: Vec<usize> = vec![c, (2 * c).min(users)];
        candidates.dedup();
        candidates.retain(|p| samples.iter().all(|s| s.p != *p));
        self.decide(
            "matching_point",
            c as f64,
            format!("model: C = {c}; measuring {candidates:?} to refine"),
        );
        candidates
    }

    /// Lets in for `held.users` what [`choice_with_margin`] keeps: after a
    /// re-run `held.p`, after the model's samples P = every user, unless
    /// another P beat it.
    fn finish_best(&mut self, sweep: Sweep, samples: &[Sample], held: Held, now: Instant) {
        let (default, how, whom) = match sweep {
            Sweep::Model => (held.users, "refined", "every user in"),
            Sweep::Around => (held.p, "re-run", "the P held"),
        };
        let best = choice_with_margin(samples, default);
        let shown: Vec<String> = samples
            .iter()
            .map(|s| format!("λ({})={:.0}/s", s.p, s.throughput))
            .collect();
        let kept = if best.p == default {
            format!(
                "P = {default} ({whom}) kept unless beaten by more than {:.0}%",
                MARGIN * 100.0
            )
        } else {
            "best measured".into()
        };
        let why = format!("model, {how}: {}; {kept}", shown.join(" "));
        // Logged even when P stays: the log shows where each sampling ended.
        let matched = Held {
            p: best.p,
            users: held.users,
        };
        self.hold_matched(matched, now, why);
    }

    fn gradient_tick(&mut self, period: &Period) {
        if period.service.count() == 0 {
            return;
        }
        let seen = GradientObservation {
            latency: period.service.mean(),
            peak_in_flight: period.peak_in_flight,
        };
        let p = self.gradient.decide(seen);
        self.set_p(p, format!("gradient: {:.2} ms inside the database", seen.latency * 1e3));
    }

    fn zeta_tick(&mut self, period: &Period, now: Instant) {
        let (since, window) = &mut self.zeta_window;
        for t in &period.tenants {
            window
                .entry(Arc::clone(&t.name))
                .or_insert_with(|| TenantStats::new(t.stats.weight))
                .merge(&t.stats);
        }
        if now - *since < Duration::from_millis(self.config.zeta_window_ms) {
            return;
        }
        let tenants: Vec<TenantStats> = window.drain().map(|(_, s)| s).collect();
        *since = now;
        // U_f over fewer than a couple of requests per tenant is noise.
        let completed: u64 = tenants.iter().map(|t| t.completed).sum();
        if tenants.len() < 2 || completed < 2 * tenants.len() as u64 {
            return;
        }
        let seen = QuotaObservation {
            unfairness: unfairness(&tenants),
            latency_cv: latency_cv(&tenants),
        };
        let before = self.quota.zeta();
        let (zeta, why) = self.quota.decide(seen);
        if zeta != before && self.gate.set_zeta(zeta).is_ok() {
            self.decide(
                "zeta",
                zeta,
                format!("{why:?}: U_f {:.3}, V_l {:.3}", seen.unfairness, seen.latency_cv),
            );
        }
    }

    fn slo_tick(&mut self, period: &Period, now: Instant) {
        for t in &period.tenants {
            if let (Some(h), Some(l)) = (&t.latencies, self.slos.iter_mut().find(|l| *l.slo.tenant == *t.name)) {
                l.window.merge(h);
                l.passed_over += t.passed_over;
            }
        }
        self.slo_stall = self.slo_stall.max(period.longest_stall);
        self.slo_service.merge(&period.service);
        if now - self.slo_window_start < Duration::from_millis(self.config.slo_window_ms) {
            return;
        }
        self.slo_window_start = now;
        let stall_ms = std::mem::take(&mut self.slo_stall).as_secs_f64() * 1e3;
        let service_ms = std::mem::take(&mut self.slo_service).mean() * 1e3;
        let mut changed = Vec::new();
        for l in &mut self.slos {
            // A stall longer than the target decides the window's tail
            // whatever the weights: raising one then only winds it up. Long
            // requests leave long gaps too, where a weight does help; a
            // stall is a gap far beyond the time requests take inside.
            let stalled = stall_ms > l.slo.target_ms.max(STALL_SERVICE_MULTIPLE * service_ms);
            let m = l.measure(self.config.slo_measure, stalled);
            let before = l.controller.weight();
            let can_raise = l.passed_over > 0 && !stalled && !m.window_met;
            let weight = l.controller.decide(m.value, m.target, can_raise);
            l.window = LatencyHistogram::coarse();
            let mut why = format!(
                "slo: {}, passed over {} times",
                m.seen,
                std::mem::take(&mut l.passed_over)
            );
            if stalled {
                why += &format!("; not raised: no request finished for {stall_ms:.0} ms");
            }
            // A hold is logged too, so that how often stalls decide is seen.
            let changes = weight != before && self.gate.set_weight(&l.slo.tenant, weight).is_ok();
            if changes || stalled {
                changed.push((format!("weight.{}", l.slo.tenant), weight, why));
            }
        }
        for (knob, weight, why) in changed {
            self.decide(&knob, weight, why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(ms: &[u64]) -> LatencyHistogram {
        let mut h = LatencyHistogram::coarse();
        for ms in ms {
            h.record(ms * 1_000_000);
        }
        h
    }

    fn slo_loop(latencies_ms: &[u64]) -> SloLoop {
        SloLoop {
            slo: Slo {
                tenant: "ls".into(),
                percentile: 99.0,
                target_ms: 60.0,
            },
            controller: SloController::new(SloControllerConfig::default(), 1.0).unwrap(),
            window: histogram(latencies_ms),
            passed_over: 0,
            misses: MissRate::default(),
        }
    }

    #[test]
    fn an_slo_is_measured_by_its_percentile_or_by_its_misses() {
        let mut latencies = vec![10; 98];
        latencies.extend([70, 200]);
        let mut l = slo_loop(&latencies);
        let m = l.measure(SloMeasure::Percentile, false);
        assert!((69.0..=71.0).contains(&m.value.unwrap()), "{}", m.seen);
        assert_eq!(m.target, 60.0);

        let m = l.measure(SloMeasure::Misses, false);
        assert_eq!(m.value, Some(0.02), "2 of 100 over 60 ms: {}", m.seen);
        assert!((m.target - 0.01).abs() < 1e-12, "p99 allows 1%");
        assert!(m.seen.contains("2.000% of requests over 60 ms"), "{}", m.seen);
        assert!(!m.window_met);

        // A window a stall decided (half its requests over) adds none of
        // its misses: after a fast window the rate is under 1%, where
        // counting it would have put it near 17%.
        l.window = histogram(&[10, 200].repeat(50));
        let m = l.measure(SloMeasure::Misses, true);
        assert_eq!(m.value, None, "{}", m.seen);
        l.window = histogram(&[10; 100]);
        let m = l.measure(SloMeasure::Misses, false);
        assert!(m.value.unwrap() < 0.01, "{}", m.seen);
    }

    fn samples(measured: &[(usize, f64)]) -> Vec<Sample> {
        measured
            .iter()
            .map(|&(p, throughput)| Sample { p, throughput })
            .collect()
    }

    /// Re-runs on PostgreSQL: 8 ahead of the held 16 by 5.5% is noise
    /// (docs/BENCHMARKS.md, "A Unix socket to PostgreSQL", its "512
    /// users"); 9 ahead of the held 18 by 18% is beyond it ("pgbench's own
    /// runs").
    #[test]
    fn a_re_run_moves_p_only_when_beaten_by_more_than_the_margin() {
        let close = samples(&[(8, 2017.0), (16, 1912.0), (32, 1727.0)]);
        assert_eq!(choice_with_margin(&close, 16).p, 16);
        let far = samples(&[(9, 1863.0), (18, 1574.0), (36, 1757.0)]);
        assert_eq!(choice_with_margin(&far, 18).p, 9);
        let unsampled_held = samples(&[(4, 1000.0), (16, 1010.0)]);
        assert_eq!(
            choice_with_margin(&unsampled_held, 8).p,
            16,
            "the best when held was not measured"
        );
        assert_eq!(best_measured(&close).p, 8);
    }

    /// At 8 users on PostgreSQL a refinement measures λ(6) = 2,335/s
    /// against λ(8) = 2,212/s (5%; docs/BENCHMARKS.md, "A Unix socket to
    /// PostgreSQL"); with the margin every user is let in.
    /// At 256 users P = 256 is far behind and the best measured P wins.
    #[test]
    fn a_refinement_holds_users_back_only_when_it_pays_by_more_than_the_margin() {
        let eight = samples(&[(2, 1500.0), (4, 2100.0), (8, 2212.0), (6, 2335.0)]);
        assert_eq!(choice_with_margin(&eight, 8).p, 8);
        let many = samples(&[(2, 700.0), (23, 1900.0), (256, 1300.0), (16, 2000.0), (32, 1800.0)]);
        assert_eq!(choice_with_margin(&many, 256).p, 16);
    }

    /// The fading count can stay over budget for many windows after the
    /// misses stop (24 on PostgreSQL, raising the weight to 86.7 in all;
    /// docs/BENCHMARKS.md, "SLO classes"). A window whose own requests kept
    /// the budget raises nothing; the count still lowers the weight once it
    /// is under.
    #[test]
    fn a_window_within_budget_does_not_raise_on_older_misses() {
        let mut l = slo_loop(&[[10; 90].as_slice(), &[200; 10]].concat());
        let m = l.measure(SloMeasure::Misses, false);
        assert!(!m.window_met, "10% over against 1% allowed");
        l.window = histogram(&[10; 100]);
        let m = l.measure(SloMeasure::Misses, false);
        assert!(m.window_met, "{}", m.seen);
        assert!(
            m.value.unwrap() > m.target,
            "the fading count is still over: {}",
            m.seen
        );
        assert!(m.seen.ends_with("this window 0.000%)"), "{}", m.seen);
    }
}
