//! Tardiness (TraQIOS Def. 1): `E_i = max(0, F_i - D_i)`; average tardiness
//! (Def. 2) is its mean over all transactions, and the miss ratio (§5.8) the
//! fraction with `E_i > 0`. Requests without a deadline are not counted.

use crate::ctx::Ctx;
use crate::time::Nanos;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tardiness {
    count: u64,
    missed: u64,
    sum: u128,
}

impl Tardiness {
    /// Records a request that finished at `finish`.
    pub fn record(&mut self, ctx: &Ctx, finish: Nanos) {
        let Some(deadline) = ctx.deadline else {
            return;
        };
        self.count += 1;
        let late = finish.saturating_sub(deadline);
        if late > 0 {
            self.missed += 1;
            self.sum += u128::from(late);
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Average tardiness in ns (0 with no requests).
    pub fn average(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Fraction of requests that missed their deadline.
    pub fn miss_ratio(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.missed as f64 / self.count as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_1_and_2() {
        let mut t = Tardiness::default();
        let ctx = |d| Ctx::new(0, 0).with_deadline(d);
        t.record(&ctx(100), 90); // early: 0
        t.record(&ctx(100), 130); // 30 late
        t.record(&ctx(50), 100); // 50 late
        t.record(&Ctx::new(0, 0), 1_000); // no deadline: not counted
        assert_eq!(t.count(), 3);
        assert!((t.average() - 80.0 / 3.0).abs() < 1e-9);
        assert!((t.miss_ratio() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(Tardiness::default().average(), 0.0);
    }
}
