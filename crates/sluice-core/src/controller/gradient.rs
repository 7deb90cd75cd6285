//! A gradient concurrency limiter for P, after Netflix's Gradient2 and
//! Envoy's adaptive concurrency filter: the limit follows the ratio of a
//! long-run latency (what the database gives when not overloaded) to the
//! latency just measured, plus a queue allowance of √limit for headroom.
//! Offered as the alternative to AppleS's model-based matching point so that
//! the two can be compared on the same load.
//!
//! Per window: gradient = clamp(tolerance · long / short, 0.5, 1);
//! limit' = limit · gradient + √limit, smoothed by `smoothing` and clamped.
//! The long-run latency is an exponential average that is pulled down when
//! it drifts far above the short one (Gradient2's drift correction). When
//! fewer than half the slots were used the load, not the limit, bounded the
//! window, and the limit is not raised.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GradientConfig {
    pub min_limit: usize,
    pub max_limit: usize,
    /// How much slower than the long-run latency a window may be before the
    /// limit falls.
    pub tolerance: f64,
    /// Weight of the new limit in the smoothed one.
    pub smoothing: f64,
    /// Windows the long-run latency averages over.
    pub long_windows: f64,
}

impl Default for GradientConfig {
    fn default() -> Self {
        GradientConfig {
            min_limit: 1,
            max_limit: 1000,
            tolerance: 1.5,
            smoothing: 0.2,
            long_windows: 60.0,
        }
    }
}

/// One window's measurements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradientObservation {
    /// Mean latency inside the database (seconds, or any unit kept fixed).
    pub latency: f64,
    /// Most requests inside at once in the window.
    pub peak_in_flight: usize,
}

pub struct GradientLimiter {
    config: GradientConfig,
    limit: f64,
    long_latency: Option<f64>,
}

impl GradientLimiter {
    /// Rejects settings that make the loop meaningless, naming the field.
    pub fn new(config: GradientConfig, initial: usize) -> Result<Self, String> {
        let c = &config;
        if c.min_limit == 0 || c.max_limit < c.min_limit {
            return Err(format!(
                "need 1 <= min_limit <= max_limit, got {} and {}",
                c.min_limit, c.max_limit
            ));
        }
        if !(c.tolerance.is_finite() && c.tolerance >= 1.0) {
            return Err(format!("tolerance must be a finite number >= 1, got {}", c.tolerance));
        }
        if !(c.smoothing > 0.0 && c.smoothing <= 1.0) {
            return Err(format!("smoothing must lie in (0, 1], got {}", c.smoothing));
        }
        if !(c.long_windows.is_finite() && c.long_windows >= 1.0) {
            return Err(format!(
                "long_windows must be a finite number >= 1, got {}",
                c.long_windows
            ));
        }
        Ok(GradientLimiter {
            limit: initial.clamp(c.min_limit, c.max_limit) as f64,
            long_latency: None,
            config,
        })
    }

    pub fn limit(&self) -> usize {
        self.limit.round() as usize
    }

    /// The limit for the next window.
    pub fn decide(&mut self, seen: GradientObservation) -> usize {
        let c = self.config;
        if !(seen.latency.is_finite() && seen.latency > 0.0) {
            return self.limit();
        }
        let long = self.long_run(seen.latency);
        let gradient = (c.tolerance * long / seen.latency).clamp(0.5, 1.0);
        let target = self.limit * gradient + self.limit.sqrt();
        let app_limited = (seen.peak_in_flight as f64) < self.limit / 2.0;
        if !(app_limited && target > self.limit) {
            let smoothed = self.limit * (1.0 - c.smoothing) + target * c.smoothing;
            self.limit = smoothed.clamp(c.min_limit as f64, c.max_limit as f64);
        }
        self.limit()
    }

    fn long_run(&mut self, short: f64) -> f64 {
        let alpha = 1.0 / self.config.long_windows;
        let mut long = self.long_latency.map_or(short, |l| l * (1.0 - alpha) + short * alpha);
        if long / short > 2.0 {
            long *= 0.95;
        }
        self.long_latency = Some(long);
        long
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(initial: usize) -> GradientLimiter {
        GradientLimiter::new(GradientConfig::default(), initial).unwrap()
    }

    fn window(latency: f64, peak_in_flight: usize) -> GradientObservation {
        GradientObservation {
            latency,
            peak_in_flight,
        }
    }

    #[test]
    fn grows_while_latency_holds_and_shrinks_when_it_climbs() {
        let mut g = limiter(10);
        for _ in 0..20 {
            g.decide(window(1.0, 1000));
        }
        let grown = g.limit();
        assert!(grown > 10, "steady latency, busy slots: the limit grows ({grown})");
        for _ in 0..20 {
            g.decide(window(10.0, 1000));
        }
        assert!(g.limit() < grown, "latency up tenfold: the limit falls ({})", g.limit());
    }

    #[test]
    fn an_idle_window_does_not_raise_the_limit() {
        let mut g = limiter(100);
        for _ in 0..10 {
            g.decide(window(1.0, 3));
        }
        assert!(g.limit() <= 100);
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = GradientConfig {
            smoothing: 0.0,
            ..GradientConfig::default()
        };
        assert!(GradientLimiter::new(bad, 1).err().unwrap().contains("smoothing"));
    }
}
