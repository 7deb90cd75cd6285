//! The round quota ζ by fast feedback on fairness and latency variability
//! (AppleS §4.3.2): each scheduling period (100 ms), if the unfairness U_f
//! and the latency variability V_l measured over the period are both below
//! half their thresholds U_f° and V_l°, ζ grows to exploit per-user
//! locality; if either is above its threshold, ζ is halved.
//!
//! Departures: the paper halves ζ when "the last increment" caused the
//! violation; here any violation halves it, so that a change in the load
//! (not only our own increment) is answered too. The paper does not say by
//! how much ζ grows; it grows by `step`, which with halving makes the
//! controller additive-increase, multiplicative-decrease.

use serde::{Deserialize, Serialize};

use super::check_positive;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaControllerConfig {
    /// U_f°: the unfairness bound (AppleS §5.1 uses 0.15).
    pub unfairness: f64,
    /// V_l°: the latency-variability bound.
    pub latency_cv: f64,
    pub min_zeta: f64,
    pub max_zeta: f64,
    /// Added to ζ when both measures are well inside their bounds.
    pub step: f64,
}

impl Default for QuotaControllerConfig {
    fn default() -> Self {
        QuotaControllerConfig {
            unfairness: 0.15,
            latency_cv: 1.0,
            min_zeta: 1.0,
            max_zeta: 64.0,
            step: 1.0,
        }
    }
}

/// What one period showed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuotaObservation {
    pub unfairness: f64,
    pub latency_cv: f64,
}

/// Why ζ moved (or did not), for the admin port's decision log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum QuotaDecision {
    Increase,
    Halve,
    Hold,
}

pub struct QuotaController {
    config: QuotaControllerConfig,
    zeta: f64,
}

impl QuotaController {
    /// Rejects settings that make the loop meaningless, naming the field.
    pub fn new(config: QuotaControllerConfig, zeta: f64) -> Result<Self, String> {
        let c = &config;
        for (name, v) in [
            ("unfairness", c.unfairness),
            ("latency_cv", c.latency_cv),
            ("min_zeta", c.min_zeta),
            ("step", c.step),
        ] {
            check_positive(name, v)?;
        }
        if !(c.max_zeta.is_finite() && c.max_zeta >= c.min_zeta) {
            return Err(format!("max_zeta must be finite and >= min_zeta, got {}", c.max_zeta));
        }
        let zeta = if zeta.is_finite() { zeta } else { c.min_zeta };
        Ok(QuotaController {
            zeta: zeta.clamp(c.min_zeta, c.max_zeta),
            config,
        })
    }

    pub fn zeta(&self) -> f64 {
        self.zeta
    }

    /// One period's decision; returns the new ζ and why.
    pub fn decide(&mut self, seen: QuotaObservation) -> (f64, QuotaDecision) {
        let c = &self.config;
        let decision = if seen.unfairness > c.unfairness || seen.latency_cv > c.latency_cv {
            QuotaDecision::Halve
        } else if seen.unfairness < c.unfairness / 2.0 && seen.latency_cv < c.latency_cv / 2.0 {
            QuotaDecision::Increase
        } else {
            QuotaDecision::Hold
        };
        self.zeta = match decision {
            QuotaDecision::Halve => self.zeta / 2.0,
            QuotaDecision::Increase => self.zeta + c.step,
            QuotaDecision::Hold => self.zeta,
        }
        .clamp(c.min_zeta, c.max_zeta);
        (self.zeta, decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(unfairness: f64, latency_cv: f64) -> QuotaObservation {
        QuotaObservation { unfairness, latency_cv }
    }

    #[test]
    fn grows_while_well_inside_and_halves_on_a_violation() {
        let mut c = QuotaController::new(QuotaControllerConfig::default(), 4.0).unwrap();
        assert_eq!(c.decide(seen(0.01, 0.2)), (5.0, QuotaDecision::Increase));
        assert_eq!(
            c.decide(seen(0.10, 0.2)),
            (5.0, QuotaDecision::Hold),
            "U_f between half and bound"
        );
        assert_eq!(c.decide(seen(0.01, 1.5)), (2.5, QuotaDecision::Halve));
        assert_eq!(c.decide(seen(0.30, 0.2)), (1.25, QuotaDecision::Halve));
        assert_eq!(
            c.decide(seen(0.30, 0.2)),
            (1.0, QuotaDecision::Halve),
            "clamped at min_zeta"
        );
    }

    #[test]
    fn never_exceeds_its_bounds() {
        let mut c = QuotaController::new(QuotaControllerConfig::default(), 1000.0).unwrap();
        assert_eq!(c.zeta(), 64.0);
        assert_eq!(c.decide(seen(0.0, 0.0)).0, 64.0);
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = QuotaControllerConfig {
            min_zeta: 0.0,
            ..QuotaControllerConfig::default()
        };
        assert!(QuotaController::new(bad, 1.0).err().unwrap().contains("min_zeta"));
        let inverted = QuotaControllerConfig {
            max_zeta: 0.5,
            ..QuotaControllerConfig::default()
        };
        assert!(QuotaController::new(inverted, 1.0).err().unwrap().contains("max_zeta"));
    }
}
