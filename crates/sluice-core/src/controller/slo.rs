//! Latency SLOs for latency-sensitive tenants (AppleS §5.3, with a
//! PSLO-style feedback loop): each latency-sensitive tenant has a target for
//! one percentile of its latency (e.g. p99.9 ≤ 60 ms); its weight φ in the
//! gate's round robin rises multiplicatively while the measured percentile
//! misses the target and falls slowly while it is well inside, so that it
//! gets the smallest share that meets the target and best-effort tenants get
//! the rest.
//!
//! Departure: PSLO's model-based gain is replaced by fixed multiplicative
//! steps (the same shape as the background controller), which needs no
//! model of the database and converges in a few windows.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SloControllerConfig {
    pub min_weight: f64,
    pub max_weight: f64,
    /// Factor applied while the target is missed (> 1).
    pub increase: f64,
    /// Factor applied while the percentile is below `margin` · target (< 1).
    pub decrease: f64,
    /// Fraction of the target under which the share may shrink.
    pub margin: f64,
}

impl Default for SloControllerConfig {
    fn default() -> Self {
        SloControllerConfig {
            min_weight: 0.1,
            max_weight: 1000.0,
            increase: 1.5,
            decrease: 0.9,
            margin: 0.7,
        }
    }
}

pub struct SloController {
    config: SloControllerConfig,
    weight: f64,
}

impl SloController {
    /// Rejects settings that make the loop meaningless, naming the field.
    pub fn new(config: SloControllerConfig, weight: f64) -> Result<Self, String> {
        let c = &config;
        if !(c.min_weight.is_finite() && c.min_weight > 0.0 && c.max_weight.is_finite() && c.max_weight >= c.min_weight)
        {
            return Err(format!(
                "need 0 < min_weight <= max_weight, got {} and {}",
                c.min_weight, c.max_weight
            ));
        }
        if !(c.increase.is_finite() && c.increase > 1.0) {
            return Err(format!("increase must be a finite number > 1, got {}", c.increase));
        }
        if !(c.decrease > 0.0 && c.decrease < 1.0) {
            return Err(format!("decrease must lie in (0, 1), got {}", c.decrease));
        }
        if !(c.margin > 0.0 && c.margin <= 1.0) {
            return Err(format!("margin must lie in (0, 1], got {}", c.margin));
        }
        let weight = if weight.is_finite() { weight } else { c.min_weight };
        Ok(SloController {
            weight: weight.clamp(c.min_weight, c.max_weight),
            config,
        })
    }

    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// The weight for the next window, from the percentile measured in the
    /// last one (`None`: the tenant sent nothing, keep the weight).
    pub fn decide(&mut self, measured: Option<f64>, target: f64) -> f64 {
        let c = &self.config;
        if let Some(m) = measured {
            if m > target {
                self.weight *= c.increase;
            } else if m < c.margin * target {
                self.weight *= c.decrease;
            }
        }
        self.weight = self.weight.clamp(c.min_weight, c.max_weight);
        self.weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rises_on_a_miss_and_settles_when_well_inside() {
        let mut c = SloController::new(SloControllerConfig::default(), 1.0).unwrap();
        assert_eq!(c.decide(Some(80.0), 60.0), 1.5);
        assert_eq!(c.decide(Some(50.0), 60.0), 1.5, "inside but near the target: hold");
        assert_eq!(c.decide(Some(10.0), 60.0), 1.35);
        assert_eq!(c.decide(None, 60.0), 1.35, "no requests: hold");
        for _ in 0..100 {
            c.decide(Some(1.0), 60.0);
        }
        assert_eq!(c.weight(), 0.1, "never below min_weight");
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = SloControllerConfig {
            margin: 2.0,
            ..SloControllerConfig::default()
        };
        assert!(SloController::new(bad, 1.0).err().unwrap().contains("margin"));
    }
}
