//! Expected slack and slack budgeting (TraQIOS §3.2.2).
//!
//! The expected slack of transaction T_i when its access R_{i,x} is served
//! now at cost C is
//!
//! `S_i = D_i - t - C - K - (M - 1)(C̄ + K̄)`
//!
//! where M counts the accesses still expected *including this one* (see
//! [`crate::Job::remaining`]), C̄ is the average access time and K̄ the mean
//! processing ("think") time per access. The paper's sum writes the
//! processing after the current access as K_{i,x} and the remaining ones as
//! Σ K_{i,j}; both are estimated by K̄ here, as the paper allows ("estimated
//! ... by monitoring the prior executions").
//!
//! Budgeting decides how much of S_i one access advertises (§3.2.2, §5.3):
//! Exp `S_{i,x} = M^U / M · S_i` (Eq. 2, U the success rate), All
//! `S_{i,x} = S_i`, Uniform `S_{i,x} = S_i / M`.

use serde::{Deserialize, Serialize};

use crate::job::Job;
use crate::time::Nanos;

/// The estimates slack is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SlackModel {
    /// C̄: the average access time of the device.
    pub avg_cost: Nanos,
    /// K̄: the mean processing time after each access.
    pub think: Nanos,
}

impl SlackModel {
    /// Expected slack S_i (ns) of `job`'s request if `job` is served now at
    /// `cost`. Requests without a deadline have infinite slack.
    pub fn slack(&self, job: &Job, now: Nanos, cost: f64) -> f64 {
        let Some(deadline) = job.ctx.deadline else {
            return f64::INFINITY;
        };
        let rest = f64::from(job.remaining - 1) * (self.avg_cost + self.think) as f64;
        deadline as f64 - now as f64 - cost - self.think as f64 - rest
    }
}

/// How much of its slack one access advertises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Budgeting {
    /// Eq. 2: `M^U / M`, moving from Uniform (U = 0) to All (U = 1).
    Exp,
    /// The whole slack (the Ultimate Deadline rule of Kao & Garcia-Molina).
    All,
    /// An equal share over the remaining accesses (their Equal Slack rule).
    Uniform,
}

impl Budgeting {
    /// The fraction of the slack advertised by an access with `m` accesses
    /// remaining (this one included) at success rate `u` in [0, 1].
    pub fn share(self, m: u32, u: f64) -> f64 {
        let m = f64::from(m.max(1));
        match self {
            Budgeting::Exp => m.powf(u - 1.0),
            Budgeting::All => 1.0,
            Budgeting::Uniform => 1.0 / m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::Ctx;

    const MS: u64 = 1_000_000;

    #[test]
    fn exp_share_moves_from_uniform_to_all_with_success_rate() {
        assert_eq!(Budgeting::Exp.share(10, 1.0), 1.0);
        assert!((Budgeting::Exp.share(10, 0.0) - 0.1).abs() < 1e-12);
        // M^U / M at M = 16, U = 0.5: 4 / 16.
        assert!((Budgeting::Exp.share(16, 0.5) - 0.25).abs() < 1e-12);
        assert_eq!(Budgeting::All.share(16, 0.0), 1.0);
        assert_eq!(Budgeting::Uniform.share(16, 1.0), 1.0 / 16.0);
        // A single remaining access advertises everything under every rule.
        for b in [Budgeting::Exp, Budgeting::All, Budgeting::Uniform] {
            assert_eq!(b.share(1, 0.3), 1.0);
        }
    }

    #[test]
    fn slack_subtracts_this_access_and_the_expected_rest() {
        let model = SlackModel {
            avg_cost: 10 * MS,
            think: MS,
        };
        let ctx = Ctx::new(1, 0).with_deadline(100 * MS).with_est_ios(4);
        // Second of four accesses: M = 3, so two more at C̄ + K̄ = 11 ms.
        let job = Job::new(0, ctx, 0, 0).at_index(2);
        let s = model.slack(&job, 20 * MS, (5 * MS) as f64);
        // 100 - 20 - 5 - 1 - 2 * 11 = 52 ms.
        assert_eq!(s, (52 * MS) as f64);
        let free = Job::new(0, Ctx::new(2, 0), 0, 0);
        assert_eq!(model.slack(&free, 0, 1.0), f64::INFINITY);
    }
}
