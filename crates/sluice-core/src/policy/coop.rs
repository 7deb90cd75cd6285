//! Request order (the cooperative I/O scheduler of Jo et al., "Request-aware
//! Cooperative I/O Scheduling for Scale-out Database Applications", §4.2):
//! queued jobs are served in the order of their request ids, which a front
//! end hands out in global arrival order and sends with every sub-request,
//! so that every shard serves the I/O of an earlier request before a later
//! one's and the sub-requests of one request finish close together. The
//! jobs of one request are adjacent in that order and go out together, in
//! the order they were pushed.
//!
//! Two departures from the paper, and why:
//!
//! - The paper keeps the queue as a linked list and a lookup table of each
//!   outstanding request's last I/O, so that inserting a job is one table
//!   lookup. A B-tree keyed by (request id, push order) gives the same order
//!   with insertion and removal at O(log n) and no table to keep in step
//!   with request lifetimes; the queues this serves hold at most a few
//!   hundred jobs.
//! - The paper has no starvation bound: its request ids come from one
//!   sequence, so a job waits only for jobs of earlier requests. Here ids
//!   may come from two sequences (a router's and a shard's own, for
//!   commands sent without a request context) and background work shares
//!   the queue when RCP's two queues are off. A job that has waited
//!   `starvation_ms` is therefore served next, oldest first, whatever its
//!   id; and background jobs come after every foreground one, bounded by the
//!   same guard. Without starved jobs, no job of a later request leaves
//!   before a queued job of an earlier one. The guard must lie above the
//!   requests' latency under load: each shard fires it on its own clock,
//!   so a guard that fires often serves the parts of one request at
//!   different times on different shards, which is what request order is
//!   there to prevent (measured through `sluice bench route`: with scans of
//!   about 300 ms, the sub-request gap's p99 was 1.4× `fifo`'s with a 100 ms
//!   guard and 0.2× with a 10 s one).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::Policy;
use crate::ctx::Class;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

/// Tunables of `coop`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoopOptions {
    /// A job queued this long is served next whatever its request id (the
    /// starvation guard; see the module's doc).
    pub starvation_ms: f64,
}

impl Default for CoopOptions {
    fn default() -> Self {
        // Far above a queue's usual wait on a device that serves an I/O in
        // well under a millisecond, so that it rarely overrides the order,
        // and far below what a user would see as a stall.
        CoopOptions { starvation_ms: 100.0 }
    }
}

/// Where a job stands in the order: foreground before background, then
/// request id, then push order.
type Key = (bool, u64, u64);

pub struct Coop {
    order: BTreeMap<Key, Job>,
    /// Every queued job's key by push time, oldest first; keys whose job
    /// already left are skipped when they reach the front.
    arrivals: VecDeque<(Nanos, Key)>,
    starvation: Nanos,
}

impl Coop {
    pub fn new(options: CoopOptions) -> Self {
        Coop {
            order: BTreeMap::new(),
            arrivals: VecDeque::new(),
            starvation: (options.starvation_ms * 1e6) as Nanos,
        }
    }

    /// The oldest queued job, if it has waited out the guard at `now`.
    fn starved(&mut self, now: Nanos) -> Option<Key> {
        while let Some(&(pushed, key)) = self.arrivals.front() {
            if !self.order.contains_key(&key) {
                self.arrivals.pop_front();
                continue;
            }
            return (now.saturating_sub(pushed) >= self.starvation).then_some(key);
        }
        None
    }
}

impl Policy for Coop {
    fn name(&self) -> String {
        "coop".into()
    }
    fn push(&mut self, job: Job, now: Nanos) {
        let key = (job.ctx.class == Class::Background, job.ctx.id.0, job.seq);
        self.order.insert(key, job);
        self.arrivals.push_back((now, key));
    }
    fn pop(&mut self, now: Nanos, _device: &dyn DeviceView) -> Option<Job> {
        if let Some(key) = self.starved(now) {
            self.arrivals.pop_front();
            return self.order.remove(&key);
        }
        self.order.pop_first().map(|(_, job)| job)
    }
    fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::Ctx;
    use crate::policy::testing::*;

    fn coop() -> Coop {
        Coop::new(CoopOptions::default())
    }

    /// A job of request `id`, pushed `seq`-th.
    fn io(id: u64, seq: u64) -> Job {
        Job::new(seq, Ctx::new(id, 0), 0, 0)
    }

    #[test]
    fn serves_in_request_order_with_each_requests_jobs_together() {
        let mut p = coop();
        for (seq, id) in [7, 3, 7, 5, 3, 5, 7].into_iter().enumerate() {
            p.push(io(id, seq as u64), 0);
        }
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![3, 3, 5, 5, 7, 7, 7]);
    }

    #[test]
    fn jobs_of_one_request_keep_their_push_order() {
        let mut p = coop();
        for seq in [4, 9, 2] {
            p.push(io(1, seq).with_tag(seq), 0);
        }
        let tags: Vec<u64> = std::iter::from_fn(|| p.pop(0, &disk_at(0)).map(|j| j.tag)).collect();
        assert_eq!(tags, vec![2, 4, 9], "push order is seq order");
    }

    #[test]
    fn background_goes_after_every_foreground_job() {
        let mut p = coop();
        let mut background = io(1, 0);
        background.ctx.class = Class::Background;
        p.push(background, 0);
        p.push(io(9, 1), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![9, 1]);
    }

    #[test]
    fn a_starved_job_is_served_next_whatever_its_id() {
        let mut p = Coop::new(CoopOptions { starvation_ms: 10.0 });
        p.push(io(100, 0), 0);
        p.push(io(1, 1), 5 * MS);
        let disk = disk_at(0);
        // At 9 ms nothing has waited 10 ms: request order.
        assert_eq!(p.pop(9 * MS, &disk).unwrap().ctx.id.0, 1);
        p.push(io(2, 2), 9 * MS);
        // At 10 ms request 100's job has waited out the guard.
        assert_eq!(p.pop(10 * MS, &disk).unwrap().ctx.id.0, 100);
        assert_eq!(p.pop(10 * MS, &disk).unwrap().ctx.id.0, 2);
        assert!(p.pop(10 * MS, &disk).is_none());
        assert!(
            p.arrivals.is_empty(),
            "no stale arrival is kept once the queue is empty"
        );
    }
}
