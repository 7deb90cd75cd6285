//! Delivered parallelism P by AppleS's three-sample throughput model
//! (§4.3.1, Eq. 1–2, Appendix A).
//!
//! The parallel fraction α(P) = A + B·e^(−γP) decays with P; with
//! α(P0) = 1 at a small P0 the throughput is
//!
//! λ(P) = P·λ(P0) / (P0 + B·P0·(e^(−γP0) − e^(−γP))·(P − 1))        (Eq. 2)
//!
//! Throughput sampled at P0, at a middle P1 and at P2 (the number of active
//! users) gives two equations for B and γ. Writing r_k = P_k·λ0/λ_k − P0,
//! their ratio r1/r2 depends on γ alone and is monotone in it, so γ is found
//! by bisection and B follows. The matching point C is the first local
//! maximum of λ(P) on P0..=P2.
//!
//! Departures, each for a case the paper does not meet:
//! - Eq. 2 often rises towards an asymptote without a local maximum. Then C
//!   is the smallest P within `plateau` (2%) of the best λ on the range,
//!   which is the paper's stated goal ("the smallest P where the throughput
//!   peaks").
//! - When no curve of Eq. 2's shape passes through the samples, none is
//!   fitted and C is the best measured of the three. That is P2, every
//!   user in, when throughput grows at least linearly (r_k ≤ 0); and it is
//!   what a noisy λ(P1) below every such curve through λ(P0) and λ(P2)
//!   gets (r1/r2 above what the steepest decay in γ's range produces),
//!   where the nearest fit is a step at P0 (B → ∞) whose first maximum
//!   is P0 itself: samples measured on PostgreSQL at 256 users, λ(2) =
//!   865, λ(32) = 1094, λ(256) = 1263, would put C at 2
//!   (docs/BENCHMARKS.md, "Eq. 2 against a fine hand sweep, with each
//!   middle sample").
//! - When r1/r2 lies below what the slowest decay in range produces, γ is
//!   clamped to the range's low end: α then falls linearly in P and Eq. 2's
//!   denominator is quadratic, the curve of a service time growing with
//!   the square of the requests inside (the simulated database of
//!   [`super::model_search`]'s tests lies on that edge, and its
//!   samples fall either side of it). That curve passes through λ(P0) and
//!   λ(P1) and misses λ(P2).
//! - C is searched from P0 up (the paper's P0 < C): below P0 α would
//!   exceed 1 and Eq. 2 can turn negative.

use serde::{Deserialize, Serialize};

/// One throughput sample: λ (requests/s) measured with P requests let in.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub p: usize,
    pub throughput: f64,
}

/// The fitted Eq. 2.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputModel {
    pub p0: f64,
    pub lambda0: f64,
    pub b: f64,
    pub gamma: f64,
}

/// The optimizer's answer: C and, when one was fitted, the model behind it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatchingPoint {
    pub p: usize,
    pub model: Option<ThroughputModel>,
}

const GAMMA_RANGE: (f64, f64) = (1e-6, 50.0);
const PLATEAU: f64 = 0.02;

impl ThroughputModel {
    /// λ(P) by Eq. 2.
    pub fn throughput(&self, p: f64) -> f64 {
        let decay = (-self.gamma * self.p0).exp() - (-self.gamma * p).exp();
        p * self.lambda0 / (self.p0 + self.b * self.p0 * decay * (p - 1.0))
    }

    /// Fits B and γ to three samples taken at P0 < P1 < P2.
    pub fn fit(s0: Sample, s1: Sample, s2: Sample) -> Option<Self> {
        let valid = s0.p >= 1 && s0.p < s1.p && s1.p < s2.p;
        if !valid
            || [s0, s1, s2]
                .iter()
                .any(|s| !(s.throughput > 0.0 && s.throughput.is_finite()))
        {
            return None;
        }
        let (p0, lambda0) = (s0.p as f64, s0.throughput);
        let r = |s: Sample| s.p as f64 * lambda0 / s.throughput - p0;
        let (r1, r2) = (r(s1), r(s2));
        if r1 <= 0.0 || r2 <= 0.0 {
            return None;
        }
        let (p1, p2) = (s1.p as f64, s2.p as f64);
        let term = |gamma: f64, p: f64| ((-gamma * p0).exp() - (-gamma * p).exp()) * (p - 1.0);
        let ratio = |gamma: f64| term(gamma, p1) / term(gamma, p2);
        let target = r1 / r2;
        if target > ratio(GAMMA_RANGE.1) {
            return None;
        }
        let gamma = bisect_increasing(ratio, target, GAMMA_RANGE);
        let b = r1 / (p0 * term(gamma, p1));
        (b.is_finite() && b > 0.0).then_some(ThroughputModel { p0, lambda0, b, gamma })
    }

    /// The first local maximum of λ on P0..=max_p, else the smallest P
    /// within the plateau of the best. Below P0, where α would exceed 1,
    /// Eq. 2 describes nothing (and can turn negative).
    pub fn matching_point(&self, max_p: usize) -> usize {
        let first = (self.p0.round() as usize).max(1);
        let max_p = max_p.max(first);
        let lambda: Vec<f64> = (first..=max_p).map(|p| self.throughput(p as f64)).collect();
        if let Some(i) = (0..lambda.len().saturating_sub(1)).find(|&i| lambda[i + 1] < lambda[i]) {
            return first + i;
        }
        let best = lambda.iter().copied().fold(f64::MIN, f64::max);
        lambda
            .iter()
            .position(|&l| l >= best * (1.0 - PLATEAU))
            .map_or(max_p, |i| first + i)
    }
}

/// The matching point from three samples (P2 is the number of active
/// users); without a fit, the best measured of the three.
pub fn matching_point(s0: Sample, s1: Sample, s2: Sample) -> MatchingPoint {
    match ThroughputModel::fit(s0, s1, s2) {
        Some(model) => MatchingPoint {
            p: model.matching_point(s2.p),
            model: Some(model),
        },
        None => {
            // The last of equals wins: more users in for the same throughput.
            let best = [s0, s1, s2]
                .into_iter()
                .max_by(|a, b| a.throughput.total_cmp(&b.throughput))
                .unwrap_or(s2);
            MatchingPoint {
                p: best.p.max(1),
                model: None,
            }
        }
    }
}

/// The x in `range` (log-spaced search) where the increasing `f` meets
/// `target` (at most `f` at the range's end), or the range's start when
/// `f` is above `target` all along.
fn bisect_increasing(f: impl Fn(f64) -> f64, target: f64, range: (f64, f64)) -> f64 {
    let (mut lo, mut hi) = (range.0.ln(), range.1.ln());
    if f(range.0) >= target {
        return range.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if f(mid.exp()) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(model: &ThroughputModel, p: usize) -> Sample {
        Sample {
            p,
            throughput: model.throughput(p as f64),
        }
    }

    #[test]
    fn recovers_the_parameters_of_an_exact_curve() {
        let truth = ThroughputModel {
            p0: 2.0,
            lambda0: 400.0,
            b: 0.9,
            gamma: 0.08,
        };
        let fitted = ThroughputModel::fit(sample(&truth, 2), sample(&truth, 16), sample(&truth, 256)).unwrap();
        assert!((fitted.b - truth.b).abs() < 1e-6, "{fitted:?}");
        assert!((fitted.gamma - truth.gamma).abs() < 1e-6, "{fitted:?}");
        assert_eq!(fitted.matching_point(256), truth.matching_point(256));
    }

    #[test]
    fn finds_a_peak_when_throughput_falls_past_it() {
        let model = ThroughputModel {
            p0: 1.0,
            lambda0: 100.0,
            b: 0.9,
            gamma: 0.05,
        };
        let c = model.matching_point(512);
        let at = |p: usize| model.throughput(p as f64);
        assert!(c > 1 && c < 512, "C = {c}");
        assert!(at(c) > at(c - 1) && at(c) > at(c + 1), "C = {c} is a local maximum");
    }

    #[test]
    fn no_contention_lets_every_user_in() {
        let linear = |p: usize| Sample {
            p,
            throughput: 10.0 * p as f64,
        };
        assert_eq!(
            matching_point(linear(1), linear(8), linear(64)),
            MatchingPoint { p: 64, model: None }
        );
    }

    #[test]
    fn a_sample_below_every_curve_gets_the_best_measured_p() {
        let s = |p, throughput| Sample { p, throughput };
        // Measured on PostgreSQL at 256 users (docs/BENCHMARKS.md, "Eq. 2
        // against a fine hand sweep"): λ(32) lies below the line Eq. 2 allows.
        let mp = matching_point(s(2, 865.0), s(32, 1094.0), s(256, 1263.0));
        assert_eq!(mp, MatchingPoint { p: 256, model: None });
        // Super-linear to P1 and falling after it: P1 was measured best.
        let mp = matching_point(s(2, 100.0), s(8, 450.0), s(64, 300.0));
        assert_eq!(mp, MatchingPoint { p: 8, model: None });
    }

    #[test]
    fn a_collapse_past_p1_is_fitted_at_the_slowest_decay_and_searched_from_p0() {
        let s = |p, throughput| Sample { p, throughput };
        // Found by the property test: γ at the low end of its range, a
        // curve that turns negative below P0, where C used to be sought.
        let mp = matching_point(s(5, 2155.0), s(6, 211.0), s(7, 1.0));
        let model = mp.model.expect("fitted at the slowest decay");
        assert_eq!(model.gamma, GAMMA_RANGE.0);
        assert!(model.throughput(2.0) < 0.0, "{model:?}");
        assert_eq!(mp.p, 5);
    }

    #[test]
    fn rejects_samples_that_cannot_be_fitted() {
        let s = |p, throughput| Sample { p, throughput };
        assert_eq!(
            ThroughputModel::fit(s(4, 10.0), s(2, 20.0), s(8, 30.0)),
            None,
            "P out of order"
        );
        assert_eq!(
            ThroughputModel::fit(s(1, 0.0), s(2, 20.0), s(8, 30.0)),
            None,
            "no throughput"
        );
        assert_eq!(
            ThroughputModel::fit(s(1, 10.0), s(2, f64::NAN), s(8, 30.0)),
            None,
            "NaN"
        );
    }
}
