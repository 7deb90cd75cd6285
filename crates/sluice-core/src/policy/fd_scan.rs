//! FD-SCAN (Abbott & Garcia-Molina, RTSS 1990; TraQIOS §4): "the track
//! location of the request with the earliest feasible deadline is used to
//! determine the scan direction. The head seeks in the direction of that
//! request serving all other requests along the way until it reaches the
//! target track." The target is chosen afresh at every scheduling point, so
//! a newly arrived, more urgent request can turn the head.
//!
//! "Feasible" is not defined in TraQIOS. Abbott & Garcia-Molina call a
//! request feasible if it can still meet its deadline when served now; here
//! the deadline of an access is its transaction's D_i, which gives two
//! readings ([`Feasible`]): the access itself can finish before D_i
//! (`service`, the default, closest to the original request-level policy),
//! or the whole transaction can still finish by D_i, i.e. expected slack
//! >= 0 (`slack`). With no feasible request the head keeps sweeping as SCAN.

use serde::{Deserialize, Serialize};

use super::{take_min_by, Policy};
use crate::budget::SlackModel;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

/// What makes a request a feasible target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Feasible {
    /// `now + C <= D_i`: this access can finish before the deadline.
    #[default]
    Service,
    /// Expected slack `S_i >= 0`: the transaction can still make it.
    Slack,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FdScanOptions {
    pub feasible: Feasible,
}

pub struct FdScan {
    jobs: Vec<Job>,
    up: bool,
    feasible: Feasible,
    model: SlackModel,
}

impl FdScan {
    pub fn new(feasible: Feasible, model: SlackModel) -> Self {
        FdScan {
            jobs: Vec::new(),
            up: true,
            feasible,
            model,
        }
    }

    fn is_feasible(&self, job: &Job, now: Nanos, cost: Nanos) -> bool {
        let Some(deadline) = job.ctx.deadline else {
            return false;
        };
        match self.feasible {
            Feasible::Service => now.saturating_add(cost) <= deadline,
            Feasible::Slack => self.model.slack(job, now, cost as f64) >= 0.0,
        }
    }

    /// Position of the feasible job with the earliest deadline.
    fn target(&self, now: Nanos, device: &dyn DeviceView) -> Option<u64> {
        self.jobs
            .iter()
            .filter(|j| self.is_feasible(j, now, device.cost(j.pos)))
            .min_by_key(|j| (j.ctx.deadline_or_max(), j.seq))
            .map(|j| j.pos)
    }

    /// The nearest job at or beyond `head` in the current direction.
    fn take_ahead(&mut self, head: u64) -> Option<Job> {
        let up = self.up;
        let ahead = |j: &Job| if up { j.pos >= head } else { j.pos <= head };
        if !self.jobs.iter().any(ahead) {
            return None;
        }
        take_min_by(&mut self.jobs, |j| {
            let d = if ahead(j) { j.pos.abs_diff(head) } else { u64::MAX };
            (d, j.ctx.deadline_or_max())
        })
    }
}

impl Policy for FdScan {
    fn name(&self) -> String {
        "fd-scan".into()
    }
    fn push(&mut self, job: Job, _now: Nanos) {
        self.jobs.push(job);
    }
    fn pop(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        let head = device.head();
        if let Some(target) = self.target(now, device) {
            if target != head {
                self.up = target > head;
            }
        }
        self.take_ahead(head).or_else(|| {
            self.up = !self.up;
            self.take_ahead(head)
        })
    }
    fn len(&self) -> usize {
        self.jobs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;

    #[test]
    fn heads_for_the_earliest_feasible_deadline_serving_on_the_way() {
        let mut p = FdScan::new(Feasible::Service, SlackModel::default());
        // Head at 500. Job 1 at 100 has the earliest deadline (9 ms) but its
        // access alone takes 4 + 0.3 * sqrt(400) = 10 ms: infeasible. Job 2
        // at 800 is the earliest feasible one, so the head moves up; job 3 at
        // 600 lies on the way, job 4 at 450 (nearest, but behind) waits.
        for (id, pos, d) in [(1, 100, 9), (2, 800, 50), (3, 600, 500), (4, 450, 400)] {
            p.push(job(id, pos, d), 0);
        }
        let mut disk = disk_at(500);
        let first = p.pop(0, &disk).unwrap();
        assert_eq!(first.ctx.id.0, 3, "on the way up to the target");
        disk.access(first.pos);
        assert_eq!(p.pop(0, &disk).unwrap().ctx.id.0, 2);
    }

    #[test]
    fn without_feasible_deadlines_it_sweeps_like_scan() {
        let mut p = FdScan::new(Feasible::Service, SlackModel::default());
        for (id, pos) in [(1, 450), (2, 700), (3, 520)] {
            p.push(job(id, pos, 0), 0); // every deadline already passed
        }
        assert_eq!(drain(&mut p, 5 * MS, &mut disk_at(500)), vec![3, 2, 1]);
    }

    #[test]
    fn slack_feasibility_counts_the_rest_of_the_transaction() {
        let model = SlackModel {
            avg_cost: 10 * MS,
            think: 0,
        };
        let mut p = FdScan::new(Feasible::Slack, model);
        // Job 1 (cylinder 900): deadline 100 ms, 20 accesses left: slack < 0.
        let ctx = crate::Ctx::new(1, 0).with_deadline(100 * MS).with_est_ios(20);
        p.push(Job::new(1, ctx, 900, 0), 0);
        // Job 2 (cylinder 100): a single access due at 200 ms: feasible.
        p.push(job(2, 100, 200), 0);
        let mut disk = disk_at(500);
        disk.access(500);
        assert_eq!(p.pop(0, &disk).unwrap().ctx.id.0, 2);
    }
}
