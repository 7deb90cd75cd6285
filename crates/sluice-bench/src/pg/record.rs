//! What one run of `sluice bench pg` measured, as `runs.json` keeps it.

use serde::Serialize;

use crate::harness::Run;

/// One tenant's throughput and latency in a run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TenantTps {
    pub name: String,
    pub weight: f64,
    pub users: usize,
    pub tps: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunRecord {
    pub users: usize,
    pub round: usize,
    pub target: String,
    /// Transactions a second asked of all users together (`--rate`);
    /// `None`: closed loops.
    pub rate: Option<f64>,
    pub tps: f64,
    /// U_f; `None` under a rate, where pgbench's schedule sets every
    /// user's throughput and U_f measures nothing of the target.
    pub unfairness: Option<f64>,
    pub latency_cv: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub failed: u64,
    pub steal: f64,
    /// The worst second's share stalled on I/O (Linux PSI), over the whole
    /// run as steal is (warm-up included); `None` without PSI.
    pub io_stall_worst_s: Option<f64>,
    /// CPU milliseconds per transaction of the target's process, if given.
    pub cpu_ms_per_txn: Option<f64>,
    /// Context switches of the target's threads per transaction, if given.
    pub switches_per_txn: Option<f64>,
    pub tenants: Vec<TenantTps>,
}

impl Run for RunRecord {
    fn round(&self) -> usize {
        self.round
    }
    fn target(&self) -> &str {
        &self.target
    }
    fn steal(&self) -> f64 {
        self.steal
    }
}
