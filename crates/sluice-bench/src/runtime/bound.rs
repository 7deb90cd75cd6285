//! Part `bound`: the bound on non-critical I/Os at the device swept under a
//! light foreground and saturating background writers, the trade-off of
//! RCP §7.6 and Fig. 11 (background throughput against foreground latency).

use std::path::Path;

use anyhow::Result;
use sluice_io::RcpConfig;

use crate::runtime::config::IoBench;
use crate::runtime::rcp::{config, light, run_all};
use crate::runtime::runs::{ratio, Metrics, Ratio, Run};
use crate::runtime::workload::Governor;

/// Bounds swept; 32 is the emulated device's depth (no bound).
pub(crate) const BOUNDS: [usize; 6] = [1, 2, 4, 8, 16, 32];

pub(crate) fn name(bound: usize) -> String {
    format!("bound-{bound:02}")
}

pub(crate) fn round(b: &IoBench, dir: &Path) -> Result<Vec<(String, Metrics)>> {
    let list = BOUNDS
        .iter()
        .map(|&bound| {
            let rcp = RcpConfig {
                noncritical_device_bound: bound,
                // The bound itself, never lifted: what it costs the
                // background with the light foreground.
                critical_idle_ms: 0.0,
                ..RcpConfig::default()
            };
            config(name(bound), rcp, Governor::None, light(b))
        })
        .collect();
    run_all(b, dir, list)
}

pub(crate) fn ratios(runs: &[&Run]) -> Vec<Ratio> {
    let base = name(BOUNDS[0]);
    let mut out = Vec::new();
    for &bound in &BOUNDS[1..] {
        let n = name(bound);
        for (label, metric) in [("bg MB/s", "bg_mb_s"), ("fg mean", "fg_mean_us")] {
            out.push(ratio(runs, &format!("{label}: {n} / {base}"), &n, &base, metric));
        }
    }
    out
}
