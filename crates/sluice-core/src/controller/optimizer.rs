//! AppleS's optimizer (§4.3): the controllers that tune the gate, run on
//! their timescales from one period's measurements at a time. Pure like
//! the rest of the core: a driver (the proxy, or the simulator in virtual
//! time) takes a [`Period`] from its gate every `period_ms`, calls
//! [`Optimizer::tick`] with it and the time, and applies the
//! [`Decision`]s it returns; the same decisions follow from the same
//! periods in either.
//!
//! - P, slow timescale, by one of: `fixed`; `model`, the three-sample model
//!   of §4.3.1 ([`super::model_search`]); `gradient`, a Gradient2-style
//!   limiter on the time requests spend inside the database
//!   ([`super::gradient`]).
//! - ζ, fast timescale (§4.3.2): `fixed`, or `feedback` on U_f and V_l
//!   ([`super::quota`]). Departure: measured over `zeta_window_ms` (1 s)
//!   rather than 100 ms; with hundreds of users each finishes 0–2 requests
//!   in 100 ms and U_f is noise at that scale.
//! - SLO weights (§5.3): each latency-sensitive tenant's weight follows its
//!   percentile target ([`super::slo`]), decided every `slo_window_ms` on
//!   `slo_measure`: `percentile`, the window's percentile against the
//!   target (default), or `misses`, the fading fraction of requests over
//!   the target against the fraction the percentile allows. A weight is
//!   not raised on a window with a stall: a stretch longer than the target
//!   (and than [`STALL_SERVICE_MULTIPLE`] times the mean time inside) in
//!   which requests were inside the database and none finished. The
//!   windows that wind the weight up on PostgreSQL are such stalls, WAL
//!   flushes and descheduled clients holding locks, that every tenant
//!   waits out (docs/BENCHMARKS.md, "SLO classes"). Holding only when the
//!   time inside the database alone misses the target at the percentile
//!   would not catch them: fewer than 0.1% of requests are inside during a
//!   stall; the rest of their wait is queued behind it. Under `misses`, a
//!   window a stall decided is also left out of the miss count, whose
//!   fading memory would otherwise carry it into the windows after and
//!   wind the weight up to its cap; and a window whose own requests kept
//!   within the budget raises nothing, whatever older misses the count
//!   still carries, or the weight goes on rising for many windows after
//!   the misses stop and takes best-effort throughput with it (on
//!   PostgreSQL, 24 windows in a row, to a weight of 86.7 that left
//!   best-effort tenants 1.18× what strict priority gives them). A tenant
//!   whose target is removed keeps its weight.
//!
//! Every change, and every SLO weight held through a stall, is a
//! [`Decision`] with its reason, for the driver's log.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::decision::{Decision, Knob};
use super::gradient::{GradientConfig, GradientLimiter, GradientObservation};
use super::model_search::{ModelConfig, ModelObservation, ModelSearch};
use super::quota::{QuotaController, QuotaControllerConfig, QuotaObservation};
use super::slo::{MissRate, SloController, SloControllerConfig};
use crate::metrics::{latency_cv, unfairness, LatencyHistogram, Moments, TenantStats};
use crate::time::{from_ms, to_ms, Nanos};

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
        super::check_positive(&format!("slo for `{}`: target_ms", self.tenant), self.target_ms)
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
        ModelSearch::new(self.model.clone(), 0).map_err(|e| format!("optimizer.{e}"))?;
        QuotaController::new(self.quota, 1.0).map_err(|e| format!("optimizer.quota: {e}"))?;
        GradientLimiter::new(self.gradient, 1).map_err(|e| format!("optimizer.gradient: {e}"))?;
        SloController::new(self.slo_control, 1.0).map_err(|e| format!("optimizer.slo_control: {e}"))?;
        self.slo.iter().try_for_each(Slo::validate)
    }
}

/// A window's longest stretch without a finished request counts as a stall
/// (on which no SLO weight is raised) when longer than the target and than
/// this many times the mean time requests spent inside the database. On
/// PostgreSQL under the SLO experiment requests take ~8 ms inside (16 at
/// ~2,000 per second) and the stalls 70–240 ms (docs/BENCHMARKS.md, "SLO
/// classes").
pub const STALL_SERVICE_MULTIPLE: f64 = 4.0;

/// What a gate measured over one period: the optimizer's observation.
#[derive(Debug, Default)]
pub struct Period {
    /// The tenants that had requests waiting or inside during the period.
    pub tenants: Vec<PeriodTenant>,
    /// Most requests queued or inside at once: the demand for parallelism.
    pub peak_demand: usize,
    /// Most requests inside at once.
    pub peak_in_flight: usize,
    /// Time requests spent inside the database, seconds.
    pub service: Moments,
    /// Longest stretch in which requests were inside the database and none
    /// finished: a stall every tenant waits out (a WAL flush, a descheduled
    /// client holding a lock), which no share of the gate can shorten.
    pub longest_stall: Nanos,
}

#[derive(Debug)]
pub struct PeriodTenant {
    pub name: Arc<str>,
    /// Completions and latencies (ns) in the period, with the tenant's weight.
    pub stats: TenantStats,
    /// The period's latencies, for tenants tracked for an SLO.
    pub latencies: Option<Box<LatencyHistogram>>,
    /// Slots that went to other tenants while it had a request queued
    /// (tenants tracked for an SLO; 0 for the others).
    pub passed_over: u64,
}

impl Period {
    pub fn completed(&self) -> u64 {
        self.tenants.iter().map(|t| t.stats.completed).sum()
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

/// The optimizer (see the module doc).
pub struct Optimizer {
    config: OptimizerConfig,
    model: ModelSearch,
    gradient: GradientLimiter,
    quota: QuotaController,
    /// Each tenant's completions since the window began. Fx, not SipHash:
    /// every tenant (one a connection, when tenants are connections) is
    /// looked up here every period, and SipHash took 2% of the proxy's
    /// instructions doing it; Fx also drains the same tenants, seen in the
    /// same order, in the same order run after run.
    zeta_window: (Nanos, FxHashMap<Arc<str>, TenantStats>),
    slos: Vec<SloLoop>,
    slo_window_start: Nanos,
    /// Longest stall (see [`Period::longest_stall`]) in the SLO window.
    slo_stall: Nanos,
    /// Time requests spent inside the database in the SLO window.
    slo_service: Moments,
}

impl Optimizer {
    /// An optimizer starting at `now` on a gate that lets in
    /// `parallelism` with round quota `zeta`.
    pub fn new(config: OptimizerConfig, now: Nanos, parallelism: usize, zeta: f64) -> Result<Self, String> {
        config.validate()?;
        Ok(Optimizer {
            model: ModelSearch::new(config.model.clone(), now)?,
            gradient: GradientLimiter::new(config.gradient, parallelism)?,
            quota: QuotaController::new(config.quota, zeta)?,
            zeta_window: (now, FxHashMap::default()),
            slos: Vec::new(),
            slo_window_start: now,
            slo_stall: 0,
            slo_service: Moments::default(),
            config,
        })
    }

    pub fn config(&self) -> &OptimizerConfig {
        &self.config
    }

    /// Takes up the SLO targets as they stand: a tenant keeps its
    /// controller (and weight) when only its target changes; a new one
    /// starts from its weight at the gate, `weight_of(tenant)`.
    pub fn follow_slo_targets(&mut self, targets: &[Slo], weight_of: impl Fn(&str) -> f64) -> Result<(), String> {
        targets.iter().try_for_each(Slo::validate)?;
        self.slos.retain(|l| targets.iter().any(|t| t.tenant == l.slo.tenant));
        for target in targets {
            if let Some(entry) = self.slos.iter_mut().find(|l| l.slo.tenant == target.tenant) {
                entry.slo = target.clone();
                continue;
            }
            self.slos.push(SloLoop {
                controller: SloController::new(self.config.slo_control, weight_of(&target.tenant))?,
                slo: target.clone(),
                window: LatencyHistogram::coarse(),
                passed_over: 0,
                misses: MissRate::default(),
            });
        }
        Ok(())
    }

    /// Takes one period into account at `now`, with the gate letting in
    /// `parallelism`; returns what to change and why.
    pub fn tick(&mut self, now: Nanos, parallelism: usize, period: &Period) -> Vec<Decision> {
        let mut out = match self.config.parallelism {
            ParallelismMode::Fixed => Vec::new(),
            ParallelismMode::Model => self.model.tick(ModelObservation {
                now,
                peak_demand: period.peak_demand,
                completed: period.completed(),
                parallelism,
            }),
            ParallelismMode::Gradient => self.gradient_tick(period, parallelism),
        };
        if self.config.zeta == ZetaMode::Feedback {
            out.extend(self.zeta_tick(period, now));
        }
        if !self.slos.is_empty() {
            self.slo_tick(period, now, &mut out);
        }
        out
    }

    fn gradient_tick(&mut self, period: &Period, parallelism: usize) -> Vec<Decision> {
        if period.service.count() == 0 {
            return Vec::new();
        }
        let seen = GradientObservation {
            latency: period.service.mean(),
            peak_in_flight: period.peak_in_flight,
        };
        let p = self.gradient.decide(seen);
        (p != parallelism)
            .then(|| Decision {
                knob: Knob::Parallelism,
                value: p as f64,
                why: format!("gradient: {:.2} ms inside the database", seen.latency * 1e3),
            })
            .into_iter()
            .collect()
    }

    fn zeta_tick(&mut self, period: &Period, now: Nanos) -> Option<Decision> {
        let (since, window) = &mut self.zeta_window;
        for t in &period.tenants {
            window
                .entry(Arc::clone(&t.name))
                .or_insert_with(|| TenantStats::new(t.stats.weight))
                .merge(&t.stats);
        }
        if now - *since < from_ms(self.config.zeta_window_ms as f64) {
            return None;
        }
        let tenants: Vec<TenantStats> = window.drain().map(|(_, s)| s).collect();
        *since = now;
        // U_f over fewer than a couple of requests per tenant is noise.
        let completed: u64 = tenants.iter().map(|t| t.completed).sum();
        if tenants.len() < 2 || completed < 2 * tenants.len() as u64 {
            return None;
        }
        let seen = QuotaObservation {
            unfairness: unfairness(&tenants),
            latency_cv: latency_cv(&tenants),
        };
        let before = self.quota.zeta();
        let (zeta, why) = self.quota.decide(seen);
        (zeta != before).then(|| Decision {
            knob: Knob::Zeta,
            value: zeta,
            why: format!("{why:?}: U_f {:.3}, V_l {:.3}", seen.unfairness, seen.latency_cv),
        })
    }

    fn slo_tick(&mut self, period: &Period, now: Nanos, out: &mut Vec<Decision>) {
        for t in &period.tenants {
            if let (Some(h), Some(l)) = (&t.latencies, self.slos.iter_mut().find(|l| *l.slo.tenant == *t.name)) {
                l.window.merge(h);
                l.passed_over += t.passed_over;
            }
        }
        self.slo_stall = self.slo_stall.max(period.longest_stall);
        self.slo_service.merge(&period.service);
        if now - self.slo_window_start < from_ms(self.config.slo_window_ms as f64) {
            return;
        }
        self.slo_window_start = now;
        let stall_ms = to_ms(std::mem::take(&mut self.slo_stall) as f64);
        let service_ms = std::mem::take(&mut self.slo_service).mean() * 1e3;
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
            if weight != before || stalled {
                out.push(Decision {
                    knob: Knob::Weight(l.slo.tenant.clone()),
                    value: weight,
                    why,
                });
            }
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

    /// Fixed P and ζ, an SLO window of 200 ms over periods of 20 ms, and
    /// tenant ls held to p99 ≤ 25 ms from a weight of 0.1.
    fn slo_optimizer() -> Optimizer {
        let config = OptimizerConfig {
            period_ms: 20,
            parallelism: ParallelismMode::Fixed,
            zeta: ZetaMode::Fixed,
            slo_window_ms: 200,
            ..OptimizerConfig::default()
        };
        let mut opt = Optimizer::new(config, 0, 4, 1.0).unwrap();
        let target = Slo {
            tenant: "ls".into(),
            percentile: 99.0,
            target_ms: 25.0,
        };
        opt.follow_slo_targets(&[target], |_| 0.1).unwrap();
        opt
    }

    /// One 20 ms period: ls's requests took `ls_ms` each, passed over
    /// once; nothing finished for `stall_ms`; requests took 5 ms inside.
    fn period(ls_ms: u64, stall_ms: u64) -> Period {
        let mut stats = TenantStats::new(0.1);
        let mut service = Moments::default();
        for _ in 0..4 {
            stats.record(ls_ms as f64 * 1e6);
            service.record(0.005);
        }
        Period {
            tenants: vec![PeriodTenant {
                name: "ls".into(),
                stats,
                latencies: Some(Box::new(histogram(&[ls_ms; 4]))),
                passed_over: 1,
            }],
            peak_demand: 10,
            peak_in_flight: 4,
            service,
            longest_stall: from_ms(stall_ms as f64),
        }
    }

    /// Runs `periods` periods of 20 ms, `ls_ms` decided by the weight ls
    /// has; returns the weight decisions.
    fn run(opt: &mut Optimizer, periods: u64, ls_ms: impl Fn(f64) -> u64, stall_ms: u64) -> Vec<Decision> {
        let mut weight = 0.1;
        let mut out = Vec::new();
        for i in 1..=periods {
            for d in opt.tick(from_ms((20 * i) as f64), 4, &period(ls_ms(weight), stall_ms)) {
                assert_eq!(d.knob, Knob::Weight("ls".into()), "{d:?}");
                weight = d.value;
                out.push(d);
            }
        }
        out
    }

    #[test]
    fn a_missed_target_raises_the_weight_until_met() {
        let mut opt = slo_optimizer();
        // ls's p99 is 100 ms until its weight passes 1, then 10 ms.
        let decisions = run(&mut opt, 200, |w| if w > 1.0 { 10 } else { 100 }, 0);
        let raised = decisions.iter().map(|d| d.value).fold(0.0, f64::max);
        assert!(raised > 1.0, "{decisions:#?}");
        assert!(decisions[0].why.contains("target 25"), "{}", decisions[0].why);
        // Met, the weight comes down again but not below what meets it.
        let last = decisions.last().unwrap();
        assert!(last.value < raised, "{decisions:#?}");
    }

    #[test]
    fn a_weight_is_not_raised_on_windows_a_stall_decides() {
        // Every window holds a 150 ms stretch with nothing finished, far
        // beyond 4× the 5 ms requests take inside and the 25 ms target.
        let mut opt = slo_optimizer();
        let decisions = run(&mut opt, 100, |_| 100, 150);
        assert!(!decisions.is_empty(), "holds are logged");
        for d in &decisions {
            assert!(d.value <= 0.1, "raised through a stall: {d:?}");
            assert!(
                d.why.contains("not raised: no request finished for 150 ms"),
                "{}",
                d.why
            );
        }
        assert_eq!(decisions.len(), 10, "one hold per 200 ms window");
    }
}
