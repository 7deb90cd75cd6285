//! Shortest Seek Time First (TraQIOS §3.1): the job closest to the head goes
//! first (priority `1 / C_{i,x}`). Jobs are kept ordered by position, so the
//! choice is between the nearest job at or below the head and the nearest
//! above it: O(log n). This assumes, as every seek model does, that cost
//! grows with distance from the head. Ties go to the cheaper side by the
//! device's cost, then to the job pushed first.

use std::collections::BTreeMap;

use super::Policy;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

/// Jobs by (position, seq): shared by the position-ordered policies.
#[derive(Default)]
pub(crate) struct ByPosition {
    jobs: BTreeMap<(u64, u64), Job>,
}

impl ByPosition {
    pub fn insert(&mut self, job: Job) {
        self.jobs.insert((job.pos, job.seq), job);
    }
    pub fn len(&self) -> usize {
        self.jobs.len()
    }
    /// The earliest-pushed job among those at the nearest position >= `pos`.
    pub fn at_or_above(&self, pos: u64) -> Option<&Job> {
        self.jobs.range((pos, 0)..).next().map(|(_, j)| j)
    }
    /// The earliest-pushed job among those at the nearest position <= `pos`.
    pub fn at_or_below(&self, pos: u64) -> Option<&Job> {
        let (&(p, _), _) = self.jobs.range(..=(pos, u64::MAX)).next_back()?;
        self.at_or_above(p)
    }
    pub fn remove(&mut self, job: &Job) -> Option<Job> {
        self.jobs.remove(&(job.pos, job.seq))
    }
}

#[derive(Default)]
pub struct Sstf {
    jobs: ByPosition,
}

impl Policy for Sstf {
    fn name(&self) -> String {
        "sstf".into()
    }
    fn push(&mut self, job: Job, _now: Nanos) {
        self.jobs.insert(job);
    }
    fn pop(&mut self, _now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        let head = device.head();
        let below = self.jobs.at_or_below(head);
        let above = self.jobs.at_or_above(head);
        let pick = match (below, above) {
            (Some(b), Some(a)) => {
                let key = |j: &Job| (device.cost(j.pos), j.seq);
                if key(a) < key(b) {
                    a
                } else {
                    b
                }
            }
            (b, a) => b.or(a)?,
        };
        let pick = *pick;
        self.jobs.remove(&pick)
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
    fn serves_nearest_to_the_moving_head() {
        let mut p = Sstf::default();
        for (id, pos) in [(1, 900), (2, 480), (3, 560), (4, 100)] {
            p.push(job(id, pos, 1), 0);
        }
        // Head at 500: 480 (20 away), then 560 (80), then 900 (340) before
        // 100 (460), then 100.
        assert_eq!(drain(&mut p, 0, &mut disk_at(500)), vec![2, 3, 1, 4]);
    }

    #[test]
    fn same_cylinder_goes_in_push_order() {
        let mut p = Sstf::default();
        for (id, pos) in [(1, 500), (2, 500), (3, 499)] {
            p.push(job(id, pos, 1), 0);
        }
        assert_eq!(drain(&mut p, 0, &mut disk_at(500)), vec![1, 2, 3]);
    }
}
