//! SSEDV, Shortest Seek and Earliest Deadline by Value (Chen, Stankovic,
//! Kurose & Towsley 1991; TraQIOS §4, Eq. 4): each job gets the value
//! `P = α·C + (1 - α)·l`, where C is its access time from the head and l the
//! time from now to its deadline, and the smallest value goes first. With
//! α = 0.8 (the default, as TraQIOS sets it) seek time dominates.
//!
//! Units: the paper does not say in which units C and l are added. By
//! default both are times in the same unit, so the sum does not depend on
//! the unit chosen ([`SeekUnits::Time`]). Chen et al. worked with seek
//! distances; [`SeekUnits::CylindersMs`] adds the distance in cylinders to l
//! in milliseconds, which weights seeking far more heavily on the default
//! disk (1000 cylinders against an access time of 4–13 ms). l may be
//! negative once the deadline has passed.
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

/// The units in which Eq. 4 adds seek cost and time to the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SeekUnits {
    /// Access time and time to deadline, both in the same time unit.
    #[default]
    Time,
    /// Seek distance in cylinders, time to deadline in milliseconds.
    CylindersMs,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SsedvOptions {
    /// Weight α of the access time in Eq. 4.
    pub alpha: f64,
    pub units: SeekUnits,
}

impl Default for SsedvOptions {
    fn default() -> Self {
        SsedvOptions {
            alpha: 0.8,
            units: SeekUnits::Time,
        }
    }
}

pub struct Ssedv {
    alpha: f64,
    units: SeekUnits,
    rule: IntermediateDeadline,
    jobs: Vec<Job>,
    /// Intermediate deadline of each job, by `seq`, fixed at push.
    deadlines: std::collections::HashMap<u64, i64>,
    success: SuccessRate,
    model: SlackModel,
}

impl Ssedv {
    pub fn new(options: SsedvOptions, rule: IntermediateDeadline, window: usize, model: SlackModel) -> Self {
        Ssedv {
            alpha: options.alpha,
            units: options.units,
            rule,
            jobs: Vec::new(),
            deadlines: Default::default(),
            success: SuccessRate::new(window),
            model,
        }
    }

    /// Eq. 4: `α·seek + (1 - α)·l`; smaller is served first.
    pub fn value(alpha: f64, seek: f64, l: f64) -> f64 {
        alpha * seek + (1.0 - alpha) * l
    }

    fn value_of(&self, job: &Job, now: Nanos, device: &dyn DeviceView) -> f64 {
        let l = self.deadlines[&job.seq] as f64 - now as f64;
        match self.units {
            SeekUnits::Time => Self::value(self.alpha, device.cost(job.pos) as f64, l),
            SeekUnits::CylindersMs => {
                let distance = job.pos.abs_diff(device.head()) as f64;
                Self::value(self.alpha, distance, l / crate::time::NANOS_PER_MS)
            }
        }
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
        let mut jobs = std::mem::take(&mut self.jobs);
        let job = take_min_by(&mut jobs, |j| self.value_of(j, now, device));
        self.jobs = jobs;
        let job = job?;
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
        let v = Ssedv::value(0.8, (10 * MS) as f64, (50 * MS) as f64);
        assert!((v - (18 * MS) as f64).abs() < 1.0);
    }

    #[test]
    fn picks_the_smallest_value() {
        let mut p = Ssedv::new(
            opts(0.8, SeekUnits::Time),
            IntermediateDeadline::Transaction,
            10,
            SlackModel::default(),
        );
        // Head at 0. Job 1 near (4 ms) with a far deadline (400 ms):
        // 0.8*4 + 0.2*400 = 83.2. Job 2 far (4 + 0.3*30 = 13 ms) with a near
        // deadline (20 ms): 0.8*13 + 0.2*20 = 14.4. Job 2 first.
        p.push(job(1, 0, 400), 0);
        p.push(job(2, 900, 20), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![2, 1]);
        // With alpha = 1 it is SSTF.
        let mut p = Ssedv::new(
            opts(1.0, SeekUnits::Time),
            IntermediateDeadline::Transaction,
            10,
            SlackModel::default(),
        );
        p.push(job(1, 0, 400), 0);
        p.push(job(2, 900, 20), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![1, 2]);
    }

    #[test]
    fn cylinder_units_weigh_seeking_heavier() {
        // Job 2 is 900 cylinders away: 0.8*900 + 0.2*20 = 724 against job 1's
        // 0.8*0 + 0.2*400 = 80, so job 1 goes first, unlike in time units.
        let mut p = Ssedv::new(
            opts(0.8, SeekUnits::CylindersMs),
            IntermediateDeadline::Transaction,
            10,
            SlackModel::default(),
        );
        p.push(job(1, 0, 400), 0);
        p.push(job(2, 900, 20), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![1, 2]);
    }

    fn opts(alpha: f64, units: SeekUnits) -> SsedvOptions {
        SsedvOptions { alpha, units }
    }

    #[test]
    fn step_deadlines_favour_the_early_accesses_of_long_transactions() {
        let mut p = Ssedv::new(
            opts(0.0, SeekUnits::Time),
            IntermediateDeadline::Step,
            10,
            SlackModel::default(),
        );
        // Both due at 1000 ms. Request 1's first of 10 accesses has step
        // deadline 100 ms; request 2's single access 1000 ms.
        let long = Ctx::new(1, 0).with_deadline(1000 * MS).with_est_ios(10);
        p.push(job(2, 0, 1000), 0);
        p.push(Job::new(1, long, 0, 0), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![1, 2]);
    }
}
