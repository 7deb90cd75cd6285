//! Sets the rate of background work (flush, compaction, checkpoint) from
//! live load, as the programmable-background-tasks paper (§VI) asks of a
//! controller with global visibility.
//!
//! Two signals, combined so that neither can starve the other:
//! - **Foreground tail latency** against a target: multiplicative decrease
//!   of the background rate while the p99 is above the target, increase
//!   while it is below (the shape of TCP's and Gradient2's limiters).
//! - **Backlog**, after ScyllaDB's backlog controllers: a floor on the rate
//!   that grows linearly from `min_rate` at no backlog to `max_rate` at
//!   `max_backlog`, so background work always gets at least the share its
//!   backlog calls for and the backlog cannot pass the bound while the
//!   device can sustain `max_rate`.
//!
//! The rate is the larger of the two, clamped to `[min_rate, max_rate]`.

use serde::{Deserialize, Serialize};

use super::check_positive;

use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackgroundControllerConfig {
    /// Foreground p99 target, in nanoseconds.
    pub target_p99: Nanos,
    /// Backlog (bytes) at which background work runs at `max_rate`.
    pub max_backlog: u64,
    /// Bytes per second background work never drops below.
    pub min_rate: f64,
    /// Bytes per second background work never exceeds.
    pub max_rate: f64,
    /// Factor applied while foreground latency is above target (< 1).
    pub decrease: f64,
    /// Factor applied while it is below (> 1).
    pub increase: f64,
}

impl Default for BackgroundControllerConfig {
    fn default() -> Self {
        BackgroundControllerConfig {
            target_p99: 10_000_000,
            max_backlog: 256 << 20,
            min_rate: 1e6,
            max_rate: 200e6,
            decrease: 0.7,
            increase: 1.2,
        }
    }
}

/// What the controller sees at one decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackgroundObservation {
    /// Foreground p99 over the last interval; `None` if no foreground work.
    pub foreground_p99: Option<Nanos>,
    /// Work background tasks still have, bytes.
    pub backlog: u64,
}

pub struct BackgroundController {
    config: BackgroundControllerConfig,
    /// The latency loop's current rate.
    latency_rate: f64,
}

impl BackgroundController {
    /// Rejects settings that make the loop meaningless, naming the field.
    pub fn new(config: BackgroundControllerConfig) -> Result<Self, String> {
        let c = &config;
        check_positive("min_rate", c.min_rate)?;
        if !(c.max_rate.is_finite() && c.max_rate >= c.min_rate) {
            return Err(format!("max_rate must be finite and >= min_rate, got {}", c.max_rate));
        }
        if !(c.decrease > 0.0 && c.decrease < 1.0) {
            return Err(format!("decrease must lie in (0, 1), got {}", c.decrease));
        }
        if !(c.increase.is_finite() && c.increase > 1.0) {
            return Err(format!("increase must be a finite number > 1, got {}", c.increase));
        }
        if c.max_backlog == 0 {
            return Err("max_backlog must be at least 1 byte".into());
        }
        Ok(BackgroundController {
            latency_rate: config.max_rate,
            config,
        })
    }

    /// The rate floor the backlog calls for.
    pub fn backlog_floor(&self, backlog: u64) -> f64 {
        let c = &self.config;
        let share = (backlog as f64 / c.max_backlog as f64).min(1.0);
        c.min_rate + share * (c.max_rate - c.min_rate)
    }

    /// The background rate (bytes/s) for the next interval.
    pub fn decide(&mut self, obs: BackgroundObservation) -> f64 {
        let c = self.config;
        self.latency_rate = match obs.foreground_p99 {
            Some(p99) if p99 > c.target_p99 => self.latency_rate * c.decrease,
            _ => self.latency_rate * c.increase,
        }
        .clamp(c.min_rate, c.max_rate);
        self.latency_rate.max(self.backlog_floor(obs.backlog))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller() -> BackgroundController {
        BackgroundController::new(BackgroundControllerConfig {
            target_p99: 100,
            max_backlog: 1000,
            min_rate: 10.0,
            max_rate: 1000.0,
            decrease: 0.5,
            increase: 2.0,
        })
        .unwrap()
    }

    fn obs(p99: u64, backlog: u64) -> BackgroundObservation {
        BackgroundObservation {
            foreground_p99: Some(p99),
            backlog,
        }
    }

    #[test]
    fn slows_while_latency_is_above_target_and_recovers_below() {
        let mut c = controller();
        assert_eq!(c.decide(obs(200, 0)), 500.0);
        assert_eq!(c.decide(obs(200, 0)), 250.0);
        assert_eq!(c.decide(obs(50, 0)), 500.0);
        for _ in 0..20 {
            c.decide(obs(500, 0));
        }
        assert_eq!(c.decide(obs(500, 0)), 10.0, "never below min_rate");
    }

    #[test]
    fn backlog_sets_a_floor_whatever_the_latency() {
        let mut c = controller();
        for _ in 0..20 {
            c.decide(obs(500, 0));
        }
        // Half the bound: 10 + 0.5 * 990 = 505.
        assert_eq!(c.decide(obs(500, 500)), 505.0);
        assert_eq!(c.decide(obs(500, 5000)), 1000.0, "at the bound: full rate");
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = BackgroundControllerConfig {
            decrease: 1.5,
            ..BackgroundControllerConfig::default()
        };
        assert!(BackgroundController::new(bad).err().unwrap().contains("decrease"));
    }
}
