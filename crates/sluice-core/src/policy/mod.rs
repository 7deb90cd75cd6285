//! The [`Policy`] trait and every policy, one file each.
//!
//! A policy orders the jobs waiting at a stage. It is told when a job
//! arrives (`push`) and asked for the next one (`pop`) at each scheduling
//! point, with the current time and a view of the device. Policies that
//! learn from finished requests (the success rate U of TraQIOS) are also
//! told when a request arrives and finishes.
//!
//! | name | file | source |
//! |---|---|---|
//! | `fifo` | [`fifo`] | arrival order |
//! | `edf` | [`edf`] | TraQIOS §3.1 |
//! | `sstf` | [`sstf`] | TraQIOS §3.1 |
//! | `scan` | [`scan`] | the elevator (TraQIOS §6) |
//! | `fd-scan` | [`fd_scan`] | TraQIOS §4, Abbott & Garcia-Molina |
//! | `ssedv` | [`ssedv`] | TraQIOS Eq. 4–5, Chen et al. |
//! | `traqios`, `traqios-all`, `traqios-uniform` | [`traqios`] | TraQIOS Eq. 1–3, §5.3 |
//! | `edf+budget`, `ssedv+budget` | [`edf`], [`ssedv`] | TraQIOS §5.3, Fig. 9 |
//! | `atc` | [`atc`] | Vepsäläinen & Morton's apparent tardiness cost, weighted by 1 / budget (the tighter SLO first once late) |
//! | `coop` | [`coop`] | request order: Jo et al. §4.2 (cooperative scheduling across shards) |
//! | `fair` | [`wrr`] | round robin over tenants, one job a turn |
//! | `cfq` | [`cfq`] | Linux CFQ's time slices and anticipation, the baseline of Jo et al. §5 |
//! | (every deadline policy) | [`unstamped`] | jobs without a deadline: a bounded wait |
//! | `wrr` | [`wrr`] | AppleS §3.3: weighted round robin with round quota ζ (the proxy's gate; not in experiment files) |

pub mod atc;
pub mod cfq;
pub mod coop;
pub mod edf;
pub mod fd_scan;
pub mod fifo;
pub mod scan;
mod spec;
pub mod ssedv;
pub mod sstf;
pub mod traqios;
pub mod unstamped;
pub mod wrr;

pub use spec::{PolicyError, PolicyOptions, PolicySpec};

use crate::ctx::Ctx;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

/// Orders the jobs waiting at a stage.
pub trait Policy: Send {
    /// The policy's name as the experiment files spell it.
    fn name(&self) -> String;
    /// A job arrives at the stage.
    fn push(&mut self, job: Job, now: Nanos);
    /// The next job to serve, chosen at `now` with the device as it is.
    /// `None` while jobs wait means the policy holds them back for now
    /// (anticipation): it is asked again at [`Policy::wake_at`] if nothing
    /// arrives or finishes before.
    fn pop(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job>;
    /// Jobs waiting.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// When a policy that holds its waiting jobs back wants to be asked
    /// again, though nothing arrives or finishes before; drivers wake a
    /// stage then. `None`: a job that waits is served at the next
    /// arrival or completion, as every work-conserving policy's are.
    fn wake_at(&self) -> Option<Nanos> {
        None
    }
    /// A request entered the system (before any of its jobs).
    fn request_arrived(&mut self, _ctx: &Ctx, _now: Nanos) {}
    /// A request left the system at `now`.
    fn request_finished(&mut self, _ctx: &Ctx, _now: Nanos) {}
}

/// Removes and returns the job with the smallest key; ties go to the job
/// pushed first (smaller `seq`). One implementation for every policy that
/// rescans its queue at each decision.
pub(crate) fn take_min_by<K: PartialOrd>(jobs: &mut Vec<Job>, mut key: impl FnMut(&Job) -> K) -> Option<Job> {
    let mut best: Option<(usize, K, u64)> = None;
    for (i, job) in jobs.iter().enumerate() {
        let k = key(job);
        let better = match &best {
            None => true,
            Some((_, bk, bseq)) => match k.partial_cmp(bk) {
                Some(std::cmp::Ordering::Less) => true,
                Some(std::cmp::Ordering::Equal) => job.seq < *bseq,
                _ => false,
            },
        };
        if better {
            best = Some((i, k, job.seq));
        }
    }
    best.map(|(i, _, _)| jobs.swap_remove(i))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Small fixed queues for the policies' unit tests.
    use super::*;
    use crate::device::SeekDisk;

    pub const MS: u64 = 1_000_000;

    /// The default TraQIOS disk with its head at `head`.
    pub fn disk_at(head: u64) -> SeekDisk {
        let mut d = SeekDisk::new(Default::default()).unwrap();
        d.set_head(head);
        d
    }

    /// A job of request `id` at cylinder `pos` with deadline `deadline_ms`.
    pub fn job(id: u64, pos: u64, deadline_ms: u64) -> Job {
        let ctx = Ctx::new(id, 0).with_deadline(deadline_ms * MS);
        Job::new(id, ctx, pos, 0)
    }

    /// Pops everything, returning request ids in service order.
    pub fn drain(p: &mut dyn Policy, now: Nanos, disk: &mut SeekDisk) -> Vec<u64> {
        let mut order = Vec::new();
        while let Some(j) = p.pop(now, disk) {
            disk.access(j.pos);
            order.push(j.ctx.id.0);
        }
        order
    }
}
