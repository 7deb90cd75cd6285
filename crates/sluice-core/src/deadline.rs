//! Intermediate deadlines: the deadline one access carries, derived from its
//! transaction's global deadline (TraQIOS §3.1, §4, §5.3).
//!
//! - [`IntermediateDeadline::Transaction`]: the transaction's own D_i, as
//!   EDF of §3.1 and FD-SCAN use it.
//! - [`IntermediateDeadline::Step`]: SSEDV's step deadline, Eq. 5:
//!   `d = A + (x / N)(D - A)`, with x clamped to N when a transaction makes
//!   more accesses than estimated.
//! - [`IntermediateDeadline::Budget`]: the deadline that slack budgeting
//!   gives (§5.3, "EDF+Budgeting" and "SSEDV+Budgeting"): the access should
//!   finish within its expected cost and processing time plus its budgeted
//!   share of the slack, computed when the access is issued with C̄ for its
//!   (not yet known) cost: `d = t + C̄ + K̄ + share · S_i(t, C̄)`.

use crate::budget::{Budgeting, SlackModel};
use crate::job::Job;
use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntermediateDeadline {
    Transaction,
    Step,
    Budget(Budgeting),
}

impl IntermediateDeadline {
    /// The deadline of `job` issued at `now`, in ns (may lie before `now`);
    /// `i64::MAX` if its request has no deadline. `u` is the success rate.
    pub fn of(self, job: &Job, now: Nanos, u: f64, model: &SlackModel) -> i64 {
        let Some(deadline) = job.ctx.deadline else {
            return i64::MAX;
        };
        match self {
            IntermediateDeadline::Transaction => deadline as i64,
            IntermediateDeadline::Step => {
                let n = job.ctx.est_ios.max(1);
                let x = job.index.min(n);
                let a = job.ctx.arrival as f64;
                (a + f64::from(x) / f64::from(n) * (deadline as f64 - a)).round() as i64
            }
            IntermediateDeadline::Budget(rule) => {
                let expected = model.avg_cost as f64;
                let slack = model.slack(job, now, expected);
                let share = rule.share(job.remaining, u);
                (now as f64 + expected + model.think as f64 + share * slack).round() as i64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::Ctx;

    const MS: u64 = 1_000_000;

    fn job(index: u32) -> Job {
        let ctx = Ctx::new(1, 100 * MS).with_deadline(500 * MS).with_est_ios(4);
        Job::new(0, ctx, 0, 0).at_index(index)
    }

    #[test]
    fn step_deadline_is_eq5() {
        let m = SlackModel::default();
        let step = IntermediateDeadline::Step;
        // A + x/N (D - A) = 100 + 1/4 * 400 = 200 ms.
        assert_eq!(step.of(&job(1), 0, 1.0, &m), (200 * MS) as i64);
        assert_eq!(step.of(&job(4), 0, 1.0, &m), (500 * MS) as i64);
        assert_eq!(step.of(&job(9), 0, 1.0, &m), (500 * MS) as i64);
    }

    #[test]
    fn budget_deadline_spends_the_advertised_share() {
        let m = SlackModel {
            avg_cost: 10 * MS,
            think: 0,
        };
        // At t = 200 ms the first of four accesses: S = 500 - 200 - 4 * 10 = 260.
        let all = IntermediateDeadline::Budget(Budgeting::All);
        assert_eq!(all.of(&job(1), 200 * MS, 0.0, &m), (470 * MS) as i64);
        let uniform = IntermediateDeadline::Budget(Budgeting::Uniform);
        assert_eq!(uniform.of(&job(1), 200 * MS, 1.0, &m), (275 * MS) as i64);
        // Exp at U = 0.5: share 4^0.5 / 4 = 0.5, so 200 + 10 + 130.
        let exp = IntermediateDeadline::Budget(Budgeting::Exp);
        assert_eq!(exp.of(&job(1), 200 * MS, 0.5, &m), (340 * MS) as i64);
        assert_eq!(
            IntermediateDeadline::Transaction.of(&job(1), 0, 0.0, &m),
            (500 * MS) as i64
        );
    }
}
