//! Controllers: turn measurements into knob settings. Pure like the rest
//! of the core: the driver measures, calls `decide` on its own timescale,
//! and applies the result.
//!
//! | controller | file | source |
//! |---|---|---|
//! | background rate from foreground latency and backlog | [`background`] | programmable background tasks §VI; ScyllaDB's backlog controllers |
//! | when each shard compacts: synchronized or staggered, from the fan-out | [`compaction_schedule`] | programmable background tasks §VI; "The Tail at Scale" |
//! | PostgreSQL's checkpoint pacing from foreground load and recovery debt | [`checkpoint`] | programmable background tasks §V-B, §VI; SILK |
//! | PostgreSQL's autovacuum pace from foreground load | [`vacuum`] | programmable background tasks §VI; SILK |
//! | delivered parallelism P: the matching point of the three-sample model | [`matching_point`] | AppleS §4.3.1, Eq. 1–2 |
//! | when to sample, which P, what to hold: the search around the model | [`model_search`] | AppleS §4.3.1 |
//! | the optimizer: P, ζ and SLO weights from one gate period at a time | [`optimizer`] | AppleS §4.3, §5.3 |
//! | round quota ζ from unfairness and latency variability | [`quota`] | AppleS §4.3.2 |
//! | P by latency gradient (the alternative to the matching point) | [`gradient`] | Envoy adaptive concurrency, Netflix gradient limiters |
//! | weights of latency-sensitive tenants from their percentile SLOs | [`slo`] | AppleS §5.3 with PSLO |
//!
//! [`postgres`] runs the checkpoint and vacuum controllers together, in the
//! order a driver and a replay share. A driver may record a controller's
//! run ([`trace`]); a replay decides it again from the same observations
//! and must decide the same.

pub mod background;
pub mod checkpoint;
pub mod compaction_schedule;
pub mod decision;
pub mod gradient;
pub mod matching_point;
pub mod model_search;
pub mod optimizer;
pub mod postgres;
pub mod quota;
pub mod slo;
pub mod trace;
pub mod vacuum;

/// Checks a setting that must be a finite number above zero, naming it in
/// the error.
pub fn check_positive(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be a finite number > 0, got {v}"))
    }
}

/// Checks a setting that must be a finite number in `[lo, hi]`, naming it
/// in the error.
pub fn check_range(name: &str, v: f64, lo: f64, hi: f64) -> Result<(), String> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(format!("{name} must lie in [{lo}, {hi}], got {v}"))
    }
}

/// The recent peak of a rate, fading by a share each observation, so that
/// a lasting drop in load stops counting as rest.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FadingPeak(f64);

impl FadingPeak {
    /// Takes one observation of the rate (anything but a finite number at
    /// or above zero counts as zero) and returns it with the peak.
    pub(crate) fn observe(&mut self, rate: f64, decay: f64) -> (f64, f64) {
        let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
        self.0 = (self.0 * decay).max(rate);
        (rate, self.0)
    }
}

/// The slow average of a rate over its busy intervals: an exponential
/// average, divided by the weight its observations hold so far, so that it
/// starts at the rates seen rather than climbing from zero (an average
/// that climbs takes every rate of its first minutes for a burst). Idle
/// intervals (a rate of zero) are left out: they say nothing about the
/// level a burst rises above, and hours of them would make the first
/// busy minute look like one.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlowAverage {
    sum: f64,
    weight: f64,
}

impl SlowAverage {
    /// Takes one observation (a finite rate at or above zero).
    pub(crate) fn observe(&mut self, rate: f64, weight: f64) {
        if rate > 0.0 {
            self.sum = self.sum * (1.0 - weight) + weight * rate;
            self.weight = self.weight * (1.0 - weight) + weight;
        }
    }

    /// The average; `None` before any busy interval.
    pub(crate) fn level(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.sum / self.weight)
    }
}

pub use background::{BackgroundController, BackgroundControllerConfig, BackgroundDecision, BackgroundObservation};
pub use checkpoint::{CheckpointController, CheckpointControllerConfig, CheckpointObservation, CheckpointSettings};
pub use compaction_schedule::{CompactionSchedule, CompactionScheduleConfig, Schedule};
pub use decision::{Decision, Knob};
pub use gradient::{GradientConfig, GradientLimiter, GradientObservation};
pub use matching_point::{matching_point, MatchingPoint, Sample, ThroughputModel};
pub use model_search::{ModelConfig, ModelObservation, ModelSearch};
pub use optimizer::{Optimizer, OptimizerConfig, ParallelismMode, Period, PeriodTenant, Slo, SloMeasure, ZetaMode};
pub use postgres::PostgresControllers;
pub use quota::{QuotaController, QuotaControllerConfig, QuotaDecision, QuotaObservation};
pub use slo::{MissRate, SloController, SloControllerConfig};
pub use vacuum::{VacuumController, VacuumControllerConfig, VacuumObservation};
