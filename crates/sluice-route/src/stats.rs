//! What the router measures: per shard (in `shard.rs`) and per request:
//! its latency, its fan-out, and the sub-request gap (the latest minus the
//! earliest completion of its sub-requests: the spread that request-order
//! scheduling closes). Read through the admin port as JSON (`/stats`) and
//! as Prometheus text (`/metrics`).

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// Latencies in microseconds, 1 µs to 100 s at 3 significant digits.
pub struct Histogram(Mutex<hdrhistogram::Histogram<u64>>);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(Mutex::new(
            hdrhistogram::Histogram::new_with_bounds(1, 100_000_000, 3).expect("static bounds are valid"),
        ))
    }
}

/// Percentiles of a histogram, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        self.record_micros(d.as_micros() as u64);
    }

    pub fn record_micros(&self, us: u64) {
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.saturating_record(us.max(1));
    }

    pub fn summary(&self) -> Summary {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Summary {
            count: h.len(),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            max_ms: h.max() as f64 / 1000.0,
        }
    }

    pub fn reset(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).reset();
    }

    /// How many recorded values are at most `d`, and how many there are.
    pub fn count_within(&self, d: Duration) -> (u64, u64) {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (h.count_between(0, d.as_micros() as u64), h.len())
    }
}

/// The router's clients.
#[derive(Default)]
pub struct ClientStats {
    /// Connected now.
    pub connected: AtomicU64,
    /// Refused at `max_clients`.
    pub refused: AtomicU64,
}

/// Per-request measurements of the router.
#[derive(Default)]
pub struct RequestStats {
    pub requests: AtomicU64,
    /// Requests answered with an error because a shard failed them.
    pub failed: AtomicU64,
    /// From the whole request's arrival to its merged reply.
    pub latency: Histogram,
    /// Of requests with more than one sub-request: latest minus earliest
    /// sub-request completion.
    pub gap: Histogram,
    /// Sub-requests sent for them: with `requests`, the mean fan-out.
    pub sub_requests: AtomicU64,
    /// `MOVED` and `ASK` replies followed.
    pub redirects: AtomicU64,
    /// The widest fan-out seen.
    pub max_fanout: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_within_counts_values_up_to_the_bound() {
        let h = Histogram::default();
        for ms in [0, 1, 2, 3, 300] {
            h.record(Duration::from_millis(ms));
        }
        assert_eq!(h.count_within(Duration::from_millis(2)), (3, 5));
        assert_eq!(h.count_within(Duration::from_secs(1)), (5, 5));
    }
}
