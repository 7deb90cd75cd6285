//! A stage: a policy behind an admission limit. Jobs wait in the policy; at
//! most `limit` of them are in service at once (one for a disk that serves
//! one access at a time, P for the AppleS gate, the device queue depth for an
//! NCQ-like device). A slot taken by `dispatch` is given back by `complete`.
//!
//! A driver pushes jobs as they arrive, dispatches while a slot is free, and
//! completes each job it finishes; the policy alone decides the order.
//! Here earliest-deadline-first over a device where every access costs the
//! same, one job in service at a time:
//!
//! ```
//! use sluice_core::device::FlatDevice;
//! use sluice_core::{Ctx, Job, PolicyOptions, PolicySpec, Stage};
//!
//! let policy = PolicySpec::Edf.build(&PolicyOptions::default(), Default::default()).unwrap();
//! let mut stage = Stage::new(policy, 1).unwrap();
//! let device = FlatDevice { cost: 1_000_000 };
//! // Request 1 arrives first with the later deadline.
//! stage.push(Job::new(1, Ctx::new(1, 0).with_deadline(50_000_000), 0, 0), 0);
//! stage.push(Job::new(2, Ctx::new(2, 0).with_deadline(20_000_000), 0, 0), 0);
//!
//! let first = stage.dispatch(0, &device).unwrap();
//! assert_eq!(first.ctx.id.0, 2, "the earlier deadline goes first");
//! assert!(stage.dispatch(0, &device).is_none(), "the one slot is taken");
//! stage.complete().unwrap();
//! assert_eq!(stage.dispatch(1_000_000, &device).unwrap().ctx.id.0, 1);
//! ```

use thiserror::Error;

use crate::device::DeviceView;
use crate::job::Job;
use crate::policy::wrr::Wrr;
use crate::policy::Policy;
use crate::time::Nanos;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum StageError {
    #[error("stage limit must be at least 1")]
    ZeroLimit,
    #[error("completion reported with no job in service")]
    NothingInService,
}

/// A stage over any policy; `Stage` alone holds a boxed `dyn Policy`, a
/// driver that tunes its policy (the AppleS gate sets ζ) names the type.
pub struct Stage<P: Policy + ?Sized = dyn Policy> {
    policy: Box<P>,
    limit: usize,
    in_service: usize,
}

impl<P: Policy + ?Sized> Stage<P> {
    pub fn new(policy: Box<P>, limit: usize) -> Result<Self, StageError> {
        if limit == 0 {
            return Err(StageError::ZeroLimit);
        }
        Ok(Stage {
            policy,
            limit,
            in_service: 0,
        })
    }

    pub fn push(&mut self, job: Job, now: Nanos) {
        self.policy.push(job, now);
    }

    /// The next job to serve, if a slot is free and a job waits.
    pub fn dispatch(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        if self.in_service >= self.limit {
            return None;
        }
        let job = self.policy.pop(now, device)?;
        self.in_service += 1;
        Some(job)
    }

    /// When the policy, holding waiting jobs back, wants `dispatch` called
    /// again though nothing arrives or finishes before ([`Policy::wake_at`]).
    pub fn wake_at(&self) -> Option<Nanos> {
        self.policy.wake_at()
    }

    /// A job in service finished: its slot is free again.
    pub fn complete(&mut self) -> Result<(), StageError> {
        self.in_service = self.in_service.checked_sub(1).ok_or(StageError::NothingInService)?;
        Ok(())
    }

    /// A job that gave its slot back without finishing (it waits on
    /// something outside the stage) is in service again at once, even
    /// above the limit: it may hold what the jobs before it in the queue
    /// need. No new job starts until the count is below the limit again.
    pub fn resume(&mut self) {
        self.in_service += 1;
    }

    pub fn policy(&self) -> &P {
        self.policy.as_ref()
    }

    pub fn policy_mut(&mut self) -> &mut P {
        self.policy.as_mut()
    }

    /// Changes the limit (P, tuned at run time). Jobs already in service
    /// above a lowered limit finish; no new one starts until below it.
    pub fn set_limit(&mut self, limit: usize) -> Result<(), StageError> {
        if limit == 0 {
            return Err(StageError::ZeroLimit);
        }
        self.limit = limit;
        Ok(())
    }

    pub fn queued(&self) -> usize {
        self.policy.len()
    }

    pub fn in_service(&self) -> usize {
        self.in_service
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl Stage<Wrr> {
    /// Takes a slot for a job at once, without queueing it, if nothing is
    /// queued and a slot is free; returns whether it did. The same as
    /// `push` then `dispatch` of that job, since round robin serves a lone
    /// job at once and keeps nothing of its tenant's turn once the queue
    /// is empty again (an emptied queue forfeits its credit), but without
    /// building the job or touching the policy: the AppleS gate's path for
    /// a request that finds a slot free.
    pub fn start_alone(&mut self) -> bool {
        if self.policy.len() > 0 || self.in_service >= self.limit {
            return false;
        }
        self.in_service += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ctx::Ctx;
    use crate::device::FlatDevice;
    use crate::policy::fifo::Fifo;

    proptest! {
        /// A stage that starts lone jobs with `start_alone` serves every
        /// tenant in the same order as one that queues each job (and
        /// dispatches it at once where `start_alone` started it), whatever the weights, ζ, strict tenants and
        /// interleaving of arrivals, completions and dispatches (a driver
        /// may leave a slot free with jobs queued until it dispatches).
        #[test]
        fn starting_a_lone_job_at_once_serves_as_queueing_it_would(
            zeta in 0.2f64..4.0,
            limit in 1usize..4,
            strict in proptest::option::of(0u32..4),
            events in proptest::collection::vec((0u32..4, any::<bool>(), any::<bool>()), 1..200),
        ) {
            let weight = |t: u32| 0.5 + f64::from(t);
            let make = || {
                let mut wrr = Wrr::new(zeta);
                if let Some(t) = strict {
                    wrr.set_strict(crate::ctx::TenantId(t), true);
                }
                Stage::new(Box::new(wrr), limit).unwrap()
            };
            let (mut direct, mut queued) = (make(), make());
            let (mut served_direct, mut served_queued) = (Vec::new(), Vec::new());
            let dev = FlatDevice::default();
            for (seq, &(tenant, arrives, dispatches)) in (0u64..).zip(&events) {
                if arrives {
                    let job = Job::new(seq, Ctx::new(seq, 0).with_tenant(tenant, weight(tenant)), 0, 0);
                    queued.push(job, 0);
                    if direct.start_alone() {
                        served_direct.push(tenant);
                        // What it stands for: this very job dispatched now.
                        let dispatched = queued.dispatch(0, &dev).map(|j| j.seq);
                        prop_assert_eq!(dispatched, Some(seq));
                        served_queued.push(tenant);
                    } else {
                        direct.push(job, 0);
                    }
                } else if direct.in_service() > 0 {
                    direct.complete().unwrap();
                    queued.complete().unwrap();
                }
                if !dispatches {
                    continue;
                }
                while let Some(job) = direct.dispatch(0, &dev) {
                    served_direct.push(job.ctx.tenant.0);
                }
                while let Some(job) = queued.dispatch(0, &dev) {
                    served_queued.push(job.ctx.tenant.0);
                }
                prop_assert_eq!(&served_direct, &served_queued);
                prop_assert_eq!(direct.in_service(), queued.in_service());
            }
        }
    }

    #[test]
    fn holds_jobs_back_at_the_limit_and_returns_slots() {
        let mut s = Stage::new(Box::new(Fifo::default()), 2).unwrap();
        for i in 0..3 {
            s.push(Job::new(i, Ctx::new(i, 0), 0, 0), 0);
        }
        let dev = FlatDevice::default();
        assert!(s.dispatch(0, &dev).is_some());
        assert!(s.dispatch(0, &dev).is_some());
        assert!(s.dispatch(0, &dev).is_none(), "limit reached");
        assert_eq!((s.in_service(), s.queued()), (2, 1));
        s.complete().unwrap();
        assert_eq!(s.dispatch(0, &dev).map(|j| j.seq), Some(2));
        s.complete().unwrap();
        s.complete().unwrap();
        assert_eq!(s.complete(), Err(StageError::NothingInService));
        assert!(Stage::<Fifo>::new(Box::new(Fifo::default()), 0).is_err());
        assert_eq!(s.set_limit(0), Err(StageError::ZeroLimit));
    }

    #[test]
    fn a_resumed_job_goes_above_the_limit_and_holds_new_ones_back() {
        let mut s = Stage::new(Box::new(Fifo::default()), 1).unwrap();
        let dev = FlatDevice::default();
        for i in 0..2 {
            s.push(Job::new(i, Ctx::new(i, 0), 0, 0), 0);
        }
        assert!(s.dispatch(0, &dev).is_some());
        s.complete().unwrap();
        assert!(s.dispatch(0, &dev).is_some(), "the slot given back is taken");
        s.resume();
        assert_eq!(s.in_service(), 2, "the first job is back, above the limit");
        s.push(Job::new(2, Ctx::new(2, 0), 0, 0), 0);
        s.complete().unwrap();
        assert!(s.dispatch(0, &dev).is_none(), "still at the limit");
        s.complete().unwrap();
        assert!(s.dispatch(0, &dev).is_some());
    }
}
