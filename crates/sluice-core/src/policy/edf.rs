//! Earliest Deadline First (TraQIOS §3.1): the job whose deadline is
//! earliest goes first, wherever the head is. Plain EDF uses the
//! transaction's deadline D_i for every access; EDF+budget (§5.3, Fig. 9)
//! uses the intermediate deadline of Exp slack budgeting instead, computed
//! when the access is issued (see [`crate::deadline`]). Ties go to the job
//! pushed first. A binary heap keeps push and pop at O(log n).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::Policy;
use crate::budget::SlackModel;
use crate::ctx::Ctx;
use crate::deadline::IntermediateDeadline;
use crate::device::DeviceView;
use crate::job::Job;
use crate::success::SuccessRate;
use crate::time::Nanos;

struct Keyed {
    deadline: i64,
    job: Job,
}

impl PartialEq for Keyed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Keyed {}
impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Keyed {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.deadline, self.job.seq).cmp(&(other.deadline, other.job.seq))
    }
}

pub struct Edf {
    rule: IntermediateDeadline,
    heap: BinaryHeap<Reverse<Keyed>>,
    success: SuccessRate,
    model: SlackModel,
}

impl Edf {
    pub fn new(rule: IntermediateDeadline, window: usize, model: SlackModel) -> Self {
        Edf {
            rule,
            heap: BinaryHeap::new(),
            success: SuccessRate::new(window),
            model,
        }
    }
}

impl Policy for Edf {
    fn name(&self) -> String {
        match self.rule {
            IntermediateDeadline::Budget(_) => "edf+budget".into(),
            _ => "edf".into(),
        }
    }
    fn push(&mut self, job: Job, now: Nanos) {
        let deadline = self.rule.of(&job, now, self.success.rate(), &self.model);
        self.heap.push(Reverse(Keyed { deadline, job }));
    }
    fn pop(&mut self, _now: Nanos, _device: &dyn DeviceView) -> Option<Job> {
        self.heap.pop().map(|Reverse(k)| k.job)
    }
    fn len(&self) -> usize {
        self.heap.len()
    }
    fn request_finished(&mut self, ctx: &Ctx, now: Nanos) {
        self.success.record(ctx, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budgeting;
    use crate::policy::testing::*;

    #[test]
    fn serves_earliest_deadline_first_regardless_of_head() {
        let mut p = Edf::new(IntermediateDeadline::Transaction, 10, SlackModel::default());
        for (id, pos, d) in [(1, 0, 300), (2, 999, 100), (3, 1, 200), (4, 5, 100)] {
            p.push(job(id, pos, d), 0);
        }
        // Equal deadlines (2 and 4) keep push order.
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![2, 4, 3, 1]);
    }

    #[test]
    fn budgeting_orders_by_advertised_slack() {
        let model = SlackModel {
            avg_cost: 10 * MS,
            think: 0,
        };
        let mut p = Edf::new(IntermediateDeadline::Budget(Budgeting::Uniform), 10, model);
        // Request 1: deadline 1000 ms but 10 accesses left -> share 1/10.
        let long = Ctx::new(1, 0).with_deadline(1000 * MS).with_est_ios(10);
        p.push(Job::new(1, long, 0, 0), 0);
        // Request 2: deadline 300 ms, its last access -> the whole slack.
        p.push(job(2, 0, 300), 0);
        // d1 = 10 + (1000 - 100) / 10 = 100 ms; d2 = 10 + 290 = 300 ms.
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![1, 2]);
    }
}
