//! SSEDV, Shortest Seek and Earliest Deadline by Value (Chen, Stankovic,
//! Kurose & Towsley 1991; TraQIOS §4, Eq. 4): each job gets the value
//! `P = α·C + (1 - α)·l`, where C is its access time from the head and l the
//! time from now to its deadline, and the smallest value goes first. With
//! α = 0.8 (the default, as TraQIOS sets it) seek time dominates.
//!
//! Units: the paper does not say in which units C and l are added. Both are
//! times here (the same unit), so the sum does not depend on the unit chosen;
//! adding seek *distance* in cylinders to l in ms would weight the two terms
//! differently. l may be negative once the deadline has passed.
//!
//! Deadlines: the step deadline of Eq. 5 (`A + x/N·(D - A)`) by default;
//! SSEDV+budget (§5.3, Fig. 9) uses the Exp budgeting deadline instead.

use serde::{Deserialize, Serialize};

use super::{take_min_by, Policy};
use crate::budget::SlackModel;
use crate::ctx::Ctx;
use crate::deadline::IntermediateDeadline;
use crate::device::DeviceView;
use crate::job::Job;
use crate::success::SuccessRate;
use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SsedvOptions {
    /// Weight α of the access time in Eq. 4.
    pub alpha: f64,
}

impl Default for SsedvOptions {
    fn default() -> Self {
        SsedvOptions { alpha: 0.8 }
    }
}

pub struct Ssedv {
    alpha: f64,
    rule: IntermediateDeadline,
    jobs: Vec<Job>,
    /// Intermediate deadline of each job, by `seq`, fixed at push.
    deadlines: std::collections::HashMap<u64, i64>,
    success: SuccessRate,
    model: SlackModel,
}

impl Ssedv {
    pub fn new(alpha: f64, rule: IntermediateDeadline, window: usize, model: SlackModel) -> Self {
        Ssedv {
            alpha,
            rule,
            jobs: Vec::new(),
            deadlines: Default::default(),
            success: SuccessRate::new(window),
            model,
        }
    }

    /// Eq. 4: the value of serving `job` now; smaller is served first.
    pub fn value(alpha: f64, cost: Nanos, deadline: i64, now: Nanos) -> f64 {
        let l = deadline as f64 - now as f64;
        alpha * cost as f64 + (1.0 - alpha) * l
    }
}

impl Policy for Ssedv {
    fn name(&self) -> String {
        match self.rule {
            IntermediateDeadline::Budget(_) => "ssedv+budget".into(),
            _ => "ssedv".into(),
        }
    }
    fn push(&mut self, job: Job, now: Nanos) {
        let d = self.rule.of(&job, now, self.success.rate(), &self.model);
        self.deadlines.insert(job.seq, d);
        self.jobs.push(job);
    }
    fn pop(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        let (alpha, deadlines) = (self.alpha, &self.deadlines);
        let job = take_min_by(&mut self.jobs, |j| Self::value(alpha, device.cost(j.pos), deadlines[&j.seq], now))?;
        self.deadlines.remove(&job.seq);
        Some(job)
    }
    fn len(&self) -> usize {
        self.jobs.len()
    }
    fn request_finished(&mut self, ctx: &Ctx, now: Nanos) {
        self.success.record(ctx, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;

    #[test]
    fn eq4_weighs_seek_against_time_to_deadline() {
        // 0.8 * 10 ms + 0.2 * (150 - 100) ms = 18 ms.
        let v = Ssedv::value(0.8, 10 * MS, (150 * MS) as i64, 100 * MS);
        assert!((v - (18 * MS) as f64).abs() < 1.0);
    }

    #[test]
    fn picks_the_smallest_value() {
        let mut p = Ssedv::new(0.8, IntermediateDeadline::Transaction, 10, SlackModel::default());
        // Head at 0. Job 1 near (4 ms) with a far deadline (400 ms):
        // 0.8*4 + 0.2*400 = 83.2. Job 2 far (4 + 0.3*30 = 13 ms) with a near
        // deadline (20 ms): 0.8*13 + 0.2*20 = 14.4. Job 2 first.
        p.push(job(1, 0, 400), 0);
        p.push(job(2, 900, 20), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![2, 1]);
        // With alpha = 1 it is SSTF.
        let mut p = Ssedv::new(1.0, IntermediateDeadline::Transaction, 10, SlackModel::default());
        p.push(job(1, 0, 400), 0);
        p.push(job(2, 900, 20), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![1, 2]);
    }

    #[test]
    fn step_deadlines_favour_the_early_accesses_of_long_transactions() {
        let mut p = Ssedv::new(0.0, IntermediateDeadline::Step, 10, SlackModel::default());
        // Both due at 1000 ms. Request 1's first of 10 accesses has step
        // deadline 100 ms; request 2's single access 1000 ms.
        let long = Ctx::new(1, 0).with_deadline(1000 * MS).with_est_ios(10);
        p.push(job(2, 0, 1000), 0);
        p.push(Job::new(1, long, 0, 0), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![1, 2]);
    }
}
