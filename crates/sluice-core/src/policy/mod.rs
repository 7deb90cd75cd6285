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
//! | `coop` | [`coop`] | request order: Jo et al. §4.2 (cooperative scheduling across shards) |
//! | `wrr` | [`wrr`] | AppleS §3.3: weighted round robin with round quota ζ (the proxy's gate; not in experiment files) |

pub mod coop;
pub mod edf;
pub mod fd_scan;
pub mod fifo;
pub mod scan;
pub mod ssedv;
pub mod sstf;
pub mod traqios;
pub mod wrr;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::budget::{Budgeting, SlackModel};
use crate::ctx::Ctx;
use crate::deadline::IntermediateDeadline;
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
    fn pop(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job>;
    /// Jobs waiting.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
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

#[derive(Debug, Error, PartialEq)]
pub enum PolicyError {
    #[error("unknown policy `{0}`; known policies: {known}", known = PolicySpec::NAMES.join(", "))]
    Unknown(String),
    #[error("ssedv.alpha must lie in [0, 1], got {0}")]
    Alpha(f64),
    #[error("traqios.window must be at least 1")]
    Window,
    #[error("coop.starvation_ms must be a positive number of milliseconds, got {0}")]
    Starvation(f64),
}

/// Which policy, by the name an experiment file gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySpec {
    Fifo,
    Edf,
    Sstf,
    Scan,
    FdScan,
    Ssedv,
    Traqios(Budgeting),
    EdfBudget,
    SsedvBudget,
    Coop,
    /// Round robin over tenants, one job a turn (`wrr` with ζ = 1 and equal
    /// weights): fair among whoever issues the I/O, as Linux's cfq is
    /// among processes, without its time slices and idling.
    Fair,
}

impl PolicySpec {
    pub const NAMES: [&'static str; 13] = [
        "fifo",
        "edf",
        "sstf",
        "scan",
        "fd-scan",
        "ssedv",
        "traqios",
        "traqios-all",
        "traqios-uniform",
        "edf+budget",
        "ssedv+budget",
        "coop",
        "fair",
    ];

    const ALL: [PolicySpec; 13] = [
        PolicySpec::Fifo,
        PolicySpec::Edf,
        PolicySpec::Sstf,
        PolicySpec::Scan,
        PolicySpec::FdScan,
        PolicySpec::Ssedv,
        PolicySpec::Traqios(Budgeting::Exp),
        PolicySpec::Traqios(Budgeting::All),
        PolicySpec::Traqios(Budgeting::Uniform),
        PolicySpec::EdfBudget,
        PolicySpec::SsedvBudget,
        PolicySpec::Coop,
        PolicySpec::Fair,
    ];

    fn index(self) -> usize {
        Self::ALL.iter().position(|&s| s == self).expect("every spec is listed")
    }

    /// Builds the policy with the given tunables and estimates.
    pub fn build(self, options: &PolicyOptions, model: SlackModel) -> Result<Box<dyn Policy>, PolicyError> {
        options.validate()?;
        let exp = IntermediateDeadline::Budget(Budgeting::Exp);
        Ok(match self {
            PolicySpec::Fifo => Box::new(fifo::Fifo::default()),
            PolicySpec::Edf => Box::new(edf::Edf::new(IntermediateDeadline::Transaction, options.window, model)),
            PolicySpec::EdfBudget => Box::new(edf::Edf::new(exp, options.window, model)),
            PolicySpec::Sstf => Box::new(sstf::Sstf::default()),
            PolicySpec::Scan => Box::new(scan::Scan::default()),
            PolicySpec::FdScan => Box::new(fd_scan::FdScan::new(options.fd_scan.feasible, model)),
            PolicySpec::Ssedv => Box::new(ssedv::Ssedv::new(
                options.ssedv,
                IntermediateDeadline::Step,
                options.window,
                model,
            )),
            PolicySpec::SsedvBudget => Box::new(ssedv::Ssedv::new(options.ssedv, exp, options.window, model)),
            PolicySpec::Traqios(budget) => {
                Box::new(traqios::Traqios::new(budget, &options.traqios, options.window, model))
            }
            PolicySpec::Coop => Box::new(coop::Coop::new(options.coop)),
            PolicySpec::Fair => Box::new(wrr::Wrr::fair()),
        })
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::NAMES[self.index()])
    }
}

impl FromStr for PolicySpec {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let i = Self::NAMES
            .iter()
            .position(|n| *n == s)
            .ok_or_else(|| PolicyError::Unknown(s.to_string()))?;
        Ok(Self::ALL[i])
    }
}

/// Tunables of the policies; every field has the paper's default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyOptions {
    /// Finished transactions over which the success rate U is measured
    /// (TraQIOS, EDF+budget, SSEDV+budget).
    pub window: usize,
    pub traqios: traqios::TraqiosOptions,
    pub ssedv: ssedv::SsedvOptions,
    pub fd_scan: fd_scan::FdScanOptions,
    pub coop: coop::CoopOptions,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            window: 100,
            traqios: traqios::TraqiosOptions::default(),
            ssedv: ssedv::SsedvOptions::default(),
            fd_scan: fd_scan::FdScanOptions::default(),
            coop: coop::CoopOptions::default(),
        }
    }
}

impl PolicyOptions {
    pub fn validate(&self) -> Result<(), PolicyError> {
        if !(0.0..=1.0).contains(&self.ssedv.alpha) {
            return Err(PolicyError::Alpha(self.ssedv.alpha));
        }
        if self.window == 0 {
            return Err(PolicyError::Window);
        }
        let starvation = self.coop.starvation_ms;
        if !(starvation.is_finite() && starvation > 0.0) {
            return Err(PolicyError::Starvation(starvation));
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in PolicySpec::NAMES {
            let spec: PolicySpec = name.parse().unwrap();
            assert_eq!(spec.to_string(), name);
            let built = spec.build(&PolicyOptions::default(), SlackModel::default()).unwrap();
            assert_eq!(built.name(), name);
        }
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let err = "edff".parse::<PolicySpec>().unwrap_err().to_string();
        assert!(err.contains("`edff`") && err.contains("fd-scan"), "{err}");
    }

    #[test]
    fn bad_options_are_rejected() {
        let mut o = PolicyOptions::default();
        o.ssedv.alpha = 1.5;
        assert_eq!(
            PolicySpec::Ssedv.build(&o, SlackModel::default()).err(),
            Some(PolicyError::Alpha(1.5))
        );
    }
}
