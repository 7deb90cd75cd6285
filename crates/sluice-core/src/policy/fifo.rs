//! First in, first out: jobs are served in the order they arrived. The
//! baseline with no notion of requests, deadlines or the device.

use std::collections::VecDeque;

use super::Policy;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

#[derive(Default)]
pub struct Fifo {
    queue: VecDeque<Job>,
}

impl Policy for Fifo {
    fn name(&self) -> String {
        "fifo".into()
    }
    fn push(&mut self, job: Job, _now: Nanos) {
        self.queue.push_back(job);
    }
    fn pop(&mut self, _now: Nanos, _device: &dyn DeviceView) -> Option<Job> {
        self.queue.pop_front()
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;

    #[test]
    fn serves_in_arrival_order() {
        let mut p = Fifo::default();
        for (id, pos) in [(1, 900), (2, 10), (3, 500)] {
            p.push(job(id, pos, 100), 0);
        }
        assert_eq!(drain(&mut p, 0, &mut disk_at(0)), vec![1, 2, 3]);
    }
}
