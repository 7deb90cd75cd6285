//! A stage: a policy behind an admission limit. Jobs wait in the policy; at
//! most `limit` of them are in service at once (one for a disk that serves
//! one access at a time, P for the AppleS gate, the device queue depth for an
//! NCQ-like device). A slot taken by `dispatch` is given back by `complete`.

use thiserror::Error;

use crate::device::DeviceView;
use crate::job::Job;
use crate::policy::Policy;
use crate::time::Nanos;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum StageError {
    #[error("stage limit must be at least 1")]
    ZeroLimit,
    #[error("completion reported with no job in service")]
    NothingInService,
}

pub struct Stage {
    policy: Box<dyn Policy>,
    limit: usize,
    in_service: usize,
}

impl Stage {
    pub fn new(policy: Box<dyn Policy>, limit: usize) -> Result<Self, StageError> {
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

    /// A job in service finished: its slot is free again.
    pub fn complete(&mut self) -> Result<(), StageError> {
        self.in_service = self.in_service.checked_sub(1).ok_or(StageError::NothingInService)?;
        Ok(())
    }

    pub fn policy(&self) -> &dyn Policy {
        self.policy.as_ref()
    }

    pub fn policy_mut(&mut self) -> &mut dyn Policy {
        self.policy.as_mut()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::Ctx;
    use crate::device::FlatDevice;
    use crate::policy::fifo::Fifo;

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
        assert!(Stage::new(Box::new(Fifo::default()), 0).is_err());
    }
}
