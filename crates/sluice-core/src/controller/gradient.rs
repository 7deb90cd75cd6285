//! A gradient concurrency limiter for P, after Envoy's adaptive concurrency
//! filter (itself after Netflix's gradient limiters): the limit follows the
//! ratio of the no-load latency (minRTT) to the latency just measured, plus
//! a headroom of √limit. Offered as the alternative to AppleS's model-based
//! matching point so that the two can be compared on the same load.
//!
//! Per window: gradient = clamp(minRTT·(1 + buffer) / latency, 0.5, 2);
//! limit' = limit · gradient + √limit, smoothed by `smoothing` and clamped.
//! minRTT is measured as Envoy does: at the start and then every
//! `probe_every` windows the limit drops to `min_limit` for `probe_windows`
//! windows and the lowest latency seen there is the new minRTT. When fewer
//! than half the slots were used the load, not the limit, bounded the
//! window, and the limit is not raised.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GradientConfig {
    pub min_limit: usize,
    pub max_limit: usize,
    /// How much above minRTT the latency may sit before the limit falls.
    pub buffer: f64,
    /// Weight of the new limit in the smoothed one.
    pub smoothing: f64,
    /// Windows between minRTT probes.
    pub probe_every: u32,
    /// Windows a probe lasts.
    pub probe_windows: u32,
}

impl Default for GradientConfig {
    fn default() -> Self {
        GradientConfig {
            min_limit: 3,
            max_limit: 1000,
            buffer: 0.1,
            smoothing: 0.2,
            probe_every: 600,
            probe_windows: 5,
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
    min_rtt: Option<f64>,
    /// Windows left in the current probe (0: not probing), and the lowest
    /// latency it has seen.
    probing: (u32, f64),
    since_probe: u32,
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
        if !(c.buffer.is_finite() && c.buffer >= 0.0) {
            return Err(format!("buffer must be a finite number >= 0, got {}", c.buffer));
        }
        if !(c.smoothing > 0.0 && c.smoothing <= 1.0) {
            return Err(format!("smoothing must lie in (0, 1], got {}", c.smoothing));
        }
        if c.probe_windows == 0 || c.probe_every == 0 {
            return Err("probe_every and probe_windows must be at least 1".into());
        }
        Ok(GradientLimiter {
            limit: initial.clamp(c.min_limit, c.max_limit) as f64,
            min_rtt: None,
            probing: (c.probe_windows, f64::INFINITY),
            since_probe: 0,
            config,
        })
    }

    /// The limit to apply now (`min_limit` while probing).
    pub fn limit(&self) -> usize {
        if self.probing.0 > 0 {
            self.config.min_limit
        } else {
            self.limit.round() as usize
        }
    }

    /// The limit for the next window.
    pub fn decide(&mut self, seen: GradientObservation) -> usize {
        if !(seen.latency.is_finite() && seen.latency > 0.0) {
            return self.limit();
        }
        if self.probing.0 > 0 {
            self.probe(seen.latency);
        } else if let Some(min_rtt) = self.min_rtt {
            self.follow(min_rtt, seen);
        }
        self.limit()
    }

    fn probe(&mut self, latency: f64) {
        let (left, lowest) = &mut self.probing;
        *lowest = lowest.min(latency);
        *left -= 1;
        if *left == 0 {
            self.min_rtt = Some(*lowest);
            self.since_probe = 0;
        }
    }

    fn follow(&mut self, min_rtt: f64, seen: GradientObservation) {
        let c = self.config;
        let gradient = (min_rtt * (1.0 + c.buffer) / seen.latency).clamp(0.5, 2.0);
        let target = self.limit * gradient + self.limit.sqrt();
        let app_limited = (seen.peak_in_flight as f64) < self.limit / 2.0;
        if !(app_limited && target > self.limit) {
            let smoothed = self.limit * (1.0 - c.smoothing) + target * c.smoothing;
            self.limit = smoothed.clamp(c.min_limit as f64, c.max_limit as f64);
        }
        self.since_probe += 1;
        if self.since_probe >= c.probe_every {
            self.probing = (c.probe_windows, f64::INFINITY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(initial: usize) -> GradientLimiter {
        let config = GradientConfig {
            probe_windows: 1,
            ..GradientConfig::default()
        };
        GradientLimiter::new(config, initial).unwrap()
    }

    fn window(latency: f64, peak_in_flight: usize) -> GradientObservation {
        GradientObservation {
            latency,
            peak_in_flight,
        }
    }

    #[test]
    fn probes_first_then_grows_while_latency_holds_and_shrinks_when_it_climbs() {
        let mut g = limiter(10);
        assert_eq!(g.limit(), 3, "probing for minRTT");
        assert_eq!(g.decide(window(1.0, 3)), 10, "probe over, back to the limit");
        for _ in 0..20 {
            g.decide(window(1.0, 1000));
        }
        let grown = g.limit();
        assert!(grown > 10, "latency at minRTT, busy slots: the limit grows ({grown})");
        for _ in 0..20 {
            g.decide(window(10.0, 1000));
        }
        assert!(
            g.limit() < grown / 2,
            "latency up tenfold: the limit falls ({})",
            g.limit()
        );
    }

    #[test]
    fn an_idle_window_does_not_raise_the_limit() {
        let mut g = limiter(100);
        g.decide(window(1.0, 3));
        for _ in 0..10 {
            g.decide(window(1.0, 3));
        }
        assert!(g.limit() <= 100);
    }

    #[test]
    fn probes_again_after_probe_every_windows() {
        let config = GradientConfig {
            probe_every: 2,
            probe_windows: 1,
            ..GradientConfig::default()
        };
        let mut g = GradientLimiter::new(config, 50).unwrap();
        g.decide(window(1.0, 3));
        g.decide(window(1.0, 60));
        assert_eq!(g.decide(window(1.0, 60)), 3, "second probe");
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
