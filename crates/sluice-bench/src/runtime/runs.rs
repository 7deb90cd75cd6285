//! A configuration's result in one round, and the ratios the parts report
//! between configurations, paired by round.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::harness::{median, paired_ratios, Spread};

/// Metrics of one configuration in one round.
pub(crate) type Metrics = BTreeMap<&'static str, f64>;

/// One configuration's result in one round.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Run {
    pub round: usize,
    pub config: String,
    pub steal: f64,
    pub metrics: Metrics,
}

impl crate::harness::Run for Run {
    fn round(&self) -> usize {
        self.round
    }
    fn target(&self) -> &str {
        &self.config
    }
    fn steal(&self) -> f64 {
        self.steal
    }
}

/// The median of `metric` of `config` over `runs`, if it was measured.
pub(crate) fn median_of(runs: &[&Run], config: &str, metric: &str) -> Option<f64> {
    let xs: Vec<f64> = runs
        .iter()
        .filter(|r| r.config == config)
        .filter_map(|r| r.metrics.get(metric).copied())
        .collect();
    (!xs.is_empty()).then(|| median(xs))
}

/// A ratio of two configurations' metric, paired by round: (label, median, min, max).
pub(crate) type Ratio = (String, f64, f64, f64);

/// `metric` of config `num` over that of config `den`, paired by round.
pub(crate) fn ratio(runs: &[&Run], label: &str, num: &str, den: &str, metric: &str) -> Ratio {
    let s = Spread::of(paired_ratios(runs, num, den, |r| r.metrics.get(metric).copied()));
    (label.to_string(), s.median, s.min, s.max)
}
