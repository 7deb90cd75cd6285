//! Policies by name: [`PolicySpec`] parses the names experiment files and
//! configurations use, and builds each policy with its [`PolicyOptions`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::unstamped::Unstamped;
use super::{atc, cfq, coop, edf, fd_scan, fifo, scan, ssedv, sstf, traqios, wrr, Policy};
use crate::budget::{Budgeting, SlackModel};
use crate::deadline::IntermediateDeadline;

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
    #[error("cfq.slice_ms must be a positive number of milliseconds, got {0}")]
    Slice(f64),
    #[error("cfq.idle_ms must be a number of milliseconds, 0 or more, got {0}")]
    Idle(f64),
    #[error("atc.lookahead must be a positive number of average accesses, got {0}")]
    Lookahead(f64),
    #[error("unstamped_wait_ms must be a positive number of milliseconds, got {0}")]
    UnstampedWait(f64),
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
    /// Apparent tardiness cost weighted by 1 / budget: the tighter SLO
    /// goes first once late.
    Atc,
    Coop,
    /// Round robin over tenants, one job a turn (`wrr` with ζ = 1 and equal
    /// weights): fair among whoever issues the I/O, as Linux's cfq is
    /// among processes, without its time slices and idling.
    Fair,
    /// Linux CFQ's time slices and anticipation over tenants.
    Cfq,
}

impl PolicySpec {
    pub const NAMES: [&'static str; 15] = [
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
        "atc",
        "coop",
        "fair",
        "cfq",
    ];

    const ALL: [PolicySpec; 15] = [
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
        PolicySpec::Atc,
        PolicySpec::Coop,
        PolicySpec::Fair,
        PolicySpec::Cfq,
    ];

    fn index(self) -> usize {
        Self::ALL.iter().position(|&s| s == self).expect("every spec is listed")
    }

    /// Builds the policy with the given tunables and estimates.
    pub fn build(self, options: &PolicyOptions, model: SlackModel) -> Result<Box<dyn Policy>, PolicyError> {
        options.validate()?;
        let exp = IntermediateDeadline::Budget(Budgeting::Exp);
        let bounded = |p: Box<dyn Policy>| -> Box<dyn Policy> {
            Box::new(Unstamped::new(p, crate::time::from_ms(options.unstamped_wait_ms)))
        };
        Ok(match self {
            PolicySpec::Fifo => Box::new(fifo::Fifo::default()),
            PolicySpec::Edf => bounded(Box::new(edf::Edf::new(
                IntermediateDeadline::Transaction,
                options.window,
                model,
            ))),
            PolicySpec::EdfBudget => bounded(Box::new(edf::Edf::new(exp, options.window, model))),
            PolicySpec::Sstf => Box::new(sstf::Sstf::default()),
            PolicySpec::Scan => Box::new(scan::Scan::default()),
            PolicySpec::FdScan => bounded(Box::new(fd_scan::FdScan::new(options.fd_scan.feasible, model))),
            PolicySpec::Ssedv => bounded(Box::new(ssedv::Ssedv::new(
                options.ssedv,
                IntermediateDeadline::Step,
                options.window,
                model,
            ))),
            PolicySpec::SsedvBudget => bounded(Box::new(ssedv::Ssedv::new(options.ssedv, exp, options.window, model))),
            PolicySpec::Traqios(budget) => bounded(Box::new(traqios::Traqios::new(
                budget,
                &options.traqios,
                options.window,
                model,
            ))),
            PolicySpec::Atc => bounded(Box::new(atc::Atc::new(options.atc, options.window, model))),
            PolicySpec::Coop => Box::new(coop::Coop::new(options.coop)),
            PolicySpec::Fair => Box::new(wrr::Wrr::fair()),
            PolicySpec::Cfq => Box::new(cfq::Cfq::new(options.cfq)),
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
    pub cfq: cfq::CfqOptions,
    pub atc: atc::AtcOptions,
    /// The longest a job without a deadline waits under a deadline policy
    /// while jobs with one keep coming, ms ([`super::unstamped`]).
    pub unstamped_wait_ms: f64,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            window: 100,
            traqios: traqios::TraqiosOptions::default(),
            ssedv: ssedv::SsedvOptions::default(),
            fd_scan: fd_scan::FdScanOptions::default(),
            coop: coop::CoopOptions::default(),
            cfq: cfq::CfqOptions::default(),
            atc: atc::AtcOptions::default(),
            unstamped_wait_ms: 100.0,
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
        let slice = self.cfq.slice_ms;
        if !(slice.is_finite() && slice > 0.0) {
            return Err(PolicyError::Slice(slice));
        }
        let idle = self.cfq.idle_ms;
        if !(idle.is_finite() && idle >= 0.0) {
            return Err(PolicyError::Idle(idle));
        }
        let k = self.atc.lookahead;
        if !(k.is_finite() && k > 0.0) {
            return Err(PolicyError::Lookahead(k));
        }
        let wait = self.unstamped_wait_ms;
        if !(wait.is_finite() && wait > 0.0) {
            return Err(PolicyError::UnstampedWait(wait));
        }
        Ok(())
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
        let mut o = PolicyOptions::default();
        o.cfq.idle_ms = -1.0;
        let err = PolicySpec::Cfq.build(&o, SlackModel::default()).err().unwrap();
        assert!(err.to_string().contains("cfq.idle_ms"), "{err}");
        o.cfq.idle_ms = 0.0;
        o.cfq.slice_ms = f64::NAN;
        assert!(matches!(
            PolicySpec::Cfq.build(&o, SlackModel::default()).err(),
            Some(PolicyError::Slice(_))
        ));
    }
}
