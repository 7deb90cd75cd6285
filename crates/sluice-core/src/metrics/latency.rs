//! Latency distributions on HdrHistogram: nanosecond values from 1 ns to
//! about an hour with three significant digits, constant memory whatever the
//! number of samples.

use hdrhistogram::Histogram;

use crate::time::Nanos;

/// The top of a coarse histogram, ns.
const COARSE_MAX: u64 = 100_000_000_000;

#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds are valid"),
        }
    }
}

impl LatencyHistogram {
    /// A histogram for one of many tenants: microsecond resolution, two
    /// significant digits, up to 100 s (longer values count as 100 s);
    /// about a twelfth of the default's memory.
    pub fn coarse() -> Self {
        LatencyHistogram {
            hist: Histogram::new_with_bounds(1_000, COARSE_MAX, 2).expect("static bounds are valid"),
        }
    }

    /// A histogram for one of thousands of tenants (`sluice serve` makes
    /// each connection one): as [`coarse`](Self::coarse) but one
    /// significant digit, so a quantile is within 1/16 of its value, in
    /// about 3 KiB instead of 20.
    pub fn rough() -> Self {
        LatencyHistogram {
            hist: Histogram::new_with_bounds(1_000, COARSE_MAX, 1).expect("static bounds are valid"),
        }
    }

    /// Records one latency; values beyond the range are clamped to it.
    pub fn record(&mut self, latency: Nanos) {
        self.hist.saturating_record(latency.max(1));
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn mean(&self) -> f64 {
        self.hist.mean()
    }

    pub fn std_dev(&self) -> f64 {
        self.hist.stdev()
    }

    /// The latency at quantile `q` in [0, 1].
    pub fn quantile(&self, q: f64) -> Nanos {
        self.hist.value_at_quantile(q)
    }

    pub fn max(&self) -> Nanos {
        self.hist.max()
    }

    /// How many recorded latencies exceed `latency`, to the histogram's
    /// precision.
    pub fn count_above(&self, latency: Nanos) -> u64 {
        self.count() - self.hist.count_between(0, latency).min(self.count())
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        // A coarse histogram's values fit a fine one's range; a fine one's
        // beyond the coarse range are clamped to its top.
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist.saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_latencies_above_a_bound() {
        let mut h = LatencyHistogram::coarse();
        for ms in [10, 20, 59, 61, 200] {
            h.record(ms * 1_000_000);
        }
        assert_eq!(h.count_above(60_000_000), 2);
        assert_eq!(h.count_above(0), 5);
        assert_eq!(h.count_above(u64::MAX / 2), 0);
    }

    #[test]
    fn fine_and_coarse_histograms_merge_both_ways() {
        let mut fine = LatencyHistogram::default();
        fine.record(2_000_000);
        fine.record(3_000_000_000_000);
        let mut coarse = LatencyHistogram::coarse();
        coarse.record(5_000);
        coarse.merge(&fine);
        assert_eq!(coarse.count(), 3);
        assert!(
            coarse.max() >= COARSE_MAX && coarse.max() < 2 * COARSE_MAX,
            "clamped to the top: {}",
            coarse.max()
        );
        fine.merge(&coarse);
        assert_eq!(fine.count(), 5);
    }

    #[test]
    fn a_rough_histogram_is_small_and_within_a_sixteenth() {
        let mut h = LatencyHistogram::rough();
        for v in 1..=1000u64 {
            h.record(v * 10_000);
        }
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 9_900_000.0).abs() / 9_900_000.0 <= 1.0 / 16.0, "{p99}");
        let counts = |h: &LatencyHistogram| h.hist.distinct_values();
        assert!(
            counts(&h) * 6 < counts(&LatencyHistogram::coarse()),
            "{} counters against {}",
            counts(&h),
            counts(&LatencyHistogram::coarse())
        );
    }

    #[test]
    fn percentiles_within_three_digits() {
        let mut h = LatencyHistogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1_000);
        }
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.001, "{p99}");
        assert_eq!(h.count(), 1000);
        let mut other = LatencyHistogram::default();
        other.record(5_000_000);
        h.merge(&other);
        assert!(h.max() >= 5_000_000 - 5_000);
    }
}
