//! Jobs without a deadline under a deadline policy: served when no job with
//! a deadline waits, and never after waiting longer than a bound.
//!
//! TraQIOS and its baselines order jobs by their transaction's deadline;
//! the paper's workload gives every transaction one. A real stage also sees
//! requests nobody stamped (a client that sends no budget, the store's own
//! reads), and a policy that orders by deadline would put them behind every
//! stamped job for as long as stamped jobs keep coming: EDF orders them
//! last, and TraQIOS gives them priority 0 for ever, since their slack is
//! infinite. [`Unstamped`] keeps them apart, in arrival order, and serves
//! the oldest of them when it has waited `unstamped_wait_ms`
//! ([`PolicyOptions`](super::PolicyOptions)) or when the deadline policy
//! has nothing to serve. The bound is RCP's starvation guard (§4.3) applied
//! to the requests without a deadline: the k-th of them to wait is served
//! within the bound plus k decisions.
//!
//! A request whose deadline has already passed when it arrives (a budget
//! of 0) is stamped: it goes to the deadline policy as the most urgent job
//! it has, and is counted as a miss, never dropped.

use std::collections::VecDeque;

use super::Policy;
use crate::ctx::Ctx;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

/// A deadline policy with the jobs of requests without a deadline kept
/// apart (see the module doc).
pub struct Unstamped {
    inner: Box<dyn Policy>,
    /// Jobs without a deadline and when each was pushed, in push order.
    waiting: VecDeque<(Nanos, Job)>,
    bound: Nanos,
}

impl Unstamped {
    /// `inner` orders the jobs with a deadline; a job without one waits at
    /// most `bound` while `inner` has jobs to serve.
    pub fn new(inner: Box<dyn Policy>, bound: Nanos) -> Self {
        Unstamped {
            inner,
            waiting: VecDeque::new(),
            bound,
        }
    }
}

impl Policy for Unstamped {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn push(&mut self, job: Job, now: Nanos) {
        if job.ctx.deadline.is_some() {
            self.inner.push(job, now);
        } else {
            self.waiting.push_back((now, job));
        }
    }

    fn pop(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        // Push times never decrease, so the front has waited longest.
        let overdue = self
            .waiting
            .front()
            .is_some_and(|&(pushed, _)| now.saturating_sub(pushed) >= self.bound);
        if overdue {
            return self.waiting.pop_front().map(|(_, j)| j);
        }
        self.inner
            .pop(now, device)
            .or_else(|| self.waiting.pop_front().map(|(_, j)| j))
    }

    fn len(&self) -> usize {
        self.inner.len() + self.waiting.len()
    }

    fn wake_at(&self) -> Option<Nanos> {
        self.inner.wake_at()
    }

    fn request_arrived(&mut self, ctx: &Ctx, now: Nanos) {
        self.inner.request_arrived(ctx, now);
    }

    fn request_finished(&mut self, ctx: &Ctx, now: Nanos) {
        self.inner.request_finished(ctx, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::FlatDevice;
    use crate::policy::edf::Edf;
    use crate::policy::testing::*;

    fn edf() -> Unstamped {
        let inner = Edf::new(
            crate::deadline::IntermediateDeadline::Transaction,
            10,
            Default::default(),
        );
        Unstamped::new(Box::new(inner), 100 * MS)
    }

    fn unstamped(seq: u64, issued: Nanos) -> Job {
        Job::new(seq, Ctx::new(seq, issued), 0, issued)
    }

    #[test]
    fn stamped_jobs_go_first_until_an_unstamped_one_waited_the_bound() {
        let mut p = edf();
        let flat = FlatDevice::default();
        p.push(unstamped(1, 0), 0);
        p.push(job(2, 0, 500), 0);
        p.push(job(3, 0, 400), 0);
        assert_eq!(p.len(), 3);
        assert_eq!(p.pop(10 * MS, &flat).map(|j| j.seq), Some(3), "earliest deadline");
        assert_eq!(p.pop(100 * MS, &flat).map(|j| j.seq), Some(1), "waited 100 ms");
        assert_eq!(p.pop(100 * MS, &flat).map(|j| j.seq), Some(2));
        p.push(unstamped(4, 100 * MS), 100 * MS);
        assert_eq!(p.pop(101 * MS, &flat).map(|j| j.seq), Some(4), "nothing stamped waits");
        assert!(p.is_empty());
    }

    #[test]
    fn an_expired_budget_is_the_most_urgent_job_not_a_dropped_one() {
        let mut p = edf();
        p.push(job(1, 0, 50), 10 * MS);
        let expired = Ctx::new(2, 20 * MS).with_deadline(20 * MS);
        p.push(Job::new(2, expired, 0, 20 * MS), 20 * MS);
        assert_eq!(p.pop(20 * MS, &FlatDevice::default()).map(|j| j.seq), Some(2));
    }
}
