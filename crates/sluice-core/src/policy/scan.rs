//! SCAN, the elevator: the head sweeps in one direction serving every job
//! it passes, and turns around when no job lies ahead. (Strictly this is the
//! LOOK form: on a seek model, travelling on to the last cylinder with no
//! job there only adds seek time.) Jobs at the head's cylinder are served
//! first; a new sweep starts upward.

use super::sstf::ByPosition;
use super::Policy;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

pub struct Scan {
    jobs: ByPosition,
    up: bool,
}

impl Default for Scan {
    fn default() -> Self {
        Scan {
            jobs: ByPosition::default(),
            up: true,
        }
    }
}

impl Scan {
    fn ahead(&self, head: u64) -> Option<Job> {
        let here = self.jobs.at_or_above(head).filter(|j| j.pos == head);
        let next = if self.up {
            self.jobs.at_or_above(head)
        } else {
            self.jobs.at_or_below(head)
        };
        here.or(next).copied()
    }
}

impl Policy for Scan {
    fn name(&self) -> String {
        "scan".into()
    }
    fn push(&mut self, job: Job, _now: Nanos) {
        self.jobs.insert(job);
    }
    fn pop(&mut self, _now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        let head = device.head();
        let job = match self.ahead(head) {
            Some(j) => j,
            None => {
                self.up = !self.up;
                self.ahead(head)?
            }
        };
        self.jobs.remove(&job)
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
    fn sweeps_up_then_turns() {
        let mut p = Scan::default();
        for (id, pos) in [(1, 450), (2, 700), (3, 100), (4, 520), (5, 500)] {
            p.push(job(id, pos, 1), 0);
        }
        // Head at 500 going up: 500, 520, 700; then down: 450, 100. SSTF
        // would have taken 450 before 700.
        assert_eq!(drain(&mut p, 0, &mut disk_at(500)), vec![5, 4, 2, 1, 3]);
    }
}
