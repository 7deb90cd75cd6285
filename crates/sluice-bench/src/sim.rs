//! `sluice bench sim`: the simulator's speed, simulated I/O completions per
//! second on one core, under each policy in turn (interleaved, repeated),
//! with the ratio to the baseline policy measured in the same round.

use std::time::Instant;

use anyhow::{anyhow, ensure, Context, Result};
use serde::Serialize;
use sluice_core::device::{SeekDisk, SeekDiskConfig};
use sluice_core::{PolicyOptions, PolicySpec};
use sluice_sim::{simulate, TraqiosWorkload};

use crate::harness::{paired_ratios, split_by_steal, Run, Spread};
use crate::steal;

/// What to measure.
#[derive(Clone, Debug)]
pub struct SimBench {
    /// Policies; the first is the baseline.
    pub policies: Vec<String>,
    /// Disk utilization of the workload.
    pub utilization: f64,
    /// Transactions per run (about 500 I/Os each).
    pub transactions: u64,
    /// Rounds; each runs every policy once.
    pub repeat: usize,
    /// Rounds whose CPU steal exceeds this fraction are set aside.
    pub max_steal: f64,
    /// JSON instead of a table.
    pub json: bool,
}

#[derive(Serialize)]
struct Sample {
    round: usize,
    policy: String,
    ios: u64,
    seconds: f64,
    ios_per_sec: f64,
    steal: f64,
}

impl Run for Sample {
    fn round(&self) -> usize {
        self.round
    }
    fn target(&self) -> &str {
        &self.policy
    }
    fn steal(&self) -> f64 {
        self.steal
    }
}

#[derive(Serialize)]
struct Summary {
    policy: String,
    median_ios_per_sec: f64,
    min_ios_per_sec: f64,
    max_ios_per_sec: f64,
    ratio_to_baseline_median: f64,
    ratio_to_baseline_min: f64,
    ratio_to_baseline_max: f64,
}

/// Runs the rounds; returns the table (or JSON) for standard output.
pub fn run(b: &SimBench) -> Result<String> {
    ensure!(b.repeat >= 1, "--repeat must be at least 1");
    let policies: Vec<PolicySpec> = b
        .policies
        .iter()
        .map(|p| p.parse().with_context(|| format!("--policies: `{p}`")))
        .collect::<Result<_>>()?;
    ensure!(!policies.is_empty(), "--policies is empty");
    let workload = TraqiosWorkload {
        utilization: b.utilization,
        transactions: b.transactions,
        ..TraqiosWorkload::default()
    };
    let disk = SeekDisk::new(SeekDiskConfig::default())?;
    workload
        .validate(disk.cylinders())
        .map_err(|e| anyhow!("--{}: {}", e.field, e.problem))?;
    let options = PolicyOptions::default();
    let mut samples = Vec::new();
    for round in 0..b.repeat {
        let (this_round, steal) = steal::during(|| {
            policies
                .iter()
                .map(|p| {
                    let started = Instant::now();
                    let stats = simulate(disk.clone(), &workload, *p, &options, 1 + round as u64)?;
                    let seconds = started.elapsed().as_secs_f64();
                    Ok(Sample {
                        round,
                        policy: p.to_string(),
                        ios: stats.ios,
                        seconds,
                        ios_per_sec: stats.ios as f64 / seconds,
                        steal: 0.0,
                    })
                })
                .collect::<Result<Vec<_>>>()
        });
        eprintln!("round {}/{}: steal {:.1}%", round + 1, b.repeat, steal * 100.0);
        samples.extend(this_round?.into_iter().map(|s| Sample { steal, ..s }));
    }
    let (kept, set_aside) = split_by_steal(&samples, b.max_steal);
    let summaries = summarize(&policies, &kept);
    if b.json {
        let out = serde_json::json!({ "kept": kept, "set_aside": set_aside, "summary": summaries });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&out)?));
    }
    let mut out = format!(
        "simulator speed, one core, utilization {}, {} transactions/run; {} rounds kept, {} set aside (steal > {:.0}%)\n",
        b.utilization,
        b.transactions,
        kept.len() / policies.len(),
        set_aside.len() / policies.len(),
        b.max_steal * 100.0
    );
    out += &format!(
        "{:>12} {:>16} {:>24} {:>26}\n",
        "policy", "median I/O/s", "range I/O/s", "ratio to baseline (range)"
    );
    for s in &summaries {
        out += &format!(
            "{:>12} {:>16.0} {:>11.0}-{:<12.0} {:>8.3} ({:.3}-{:.3})\n",
            s.policy,
            s.median_ios_per_sec,
            s.min_ios_per_sec,
            s.max_ios_per_sec,
            s.ratio_to_baseline_median,
            s.ratio_to_baseline_min,
            s.ratio_to_baseline_max
        );
    }
    Ok(out)
}

fn summarize(policies: &[PolicySpec], kept: &[&Sample]) -> Vec<Summary> {
    let baseline = policies[0].to_string();
    policies
        .iter()
        .map(|p| {
            let name = p.to_string();
            let rate = |s: &Sample| Some(s.ios_per_sec);
            let values = Spread::of(kept.iter().filter(|s| s.policy == name).map(|s| s.ios_per_sec));
            let ratios = Spread::of(paired_ratios(kept, &name, &baseline, rate));
            Summary {
                policy: name,
                median_ios_per_sec: values.median,
                min_ios_per_sec: values.min,
                max_ios_per_sec: values.max,
                ratio_to_baseline_median: ratios.median,
                ratio_to_baseline_min: ratios.min,
                ratio_to_baseline_max: ratios.max,
            }
        })
        .collect()
}
