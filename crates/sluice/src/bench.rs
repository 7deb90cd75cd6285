//! `sluice bench ...`: benchmarks of Sluice itself. Each benchmark
//! interleaves the configurations it compares (A, B, A, B, ...), repeats
//! them, records CPU steal for every run and sets aside runs above the
//! steal threshold, then reports medians and the spread of paired ratios to
//! the baseline measured in the same run.

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice_core::device::{SeekDisk, SeekDiskConfig};
use sluice_core::{PolicyOptions, PolicySpec};
use sluice_sim::{simulate, TraqiosWorkload};

use crate::steal::CpuTimes;

#[derive(Subcommand)]
pub enum BenchCommand {
    Sim(SimBench),
    Io(crate::bench_io::IoBench),
    Pg(crate::bench_pg::PgBench),
    Redis(crate::bench_redis::RedisBench),
    Route(crate::bench_route::RouteBench),
}

/// Simulator speed: simulated I/O completions per second on one core
#[derive(Args)]
#[command(
    long_about = "Simulator speed: simulated I/O completions per second on one core.\n\n\
    Runs the TraQIOS workload under each policy in turn (interleaved, repeated), \
    single-threaded, and reports completions per second with the ratio to the \
    baseline policy measured in the same run. Runs with CPU steal above \
    --max-steal are set aside."
)]
pub struct SimBench {
    /// Policies to measure, comma-separated; the first is the baseline
    #[arg(long, value_delimiter = ',', default_value = "fifo,edf")]
    pub policies: Vec<String>,
    /// Disk utilization of the workload
    #[arg(long, default_value_t = 0.8)]
    pub utilization: f64,
    /// Transactions per run (about 500 I/Os each)
    #[arg(long, default_value_t = 5000)]
    pub transactions: u64,
    /// Rounds; each round runs every policy once
    #[arg(long, default_value_t = 7)]
    pub repeat: usize,
    /// Set aside rounds whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Sim(b) => sim(b),
        BenchCommand::Io(b) => crate::bench_io::run(b),
        BenchCommand::Pg(b) => crate::bench_pg::run(b),
        BenchCommand::Redis(b) => crate::bench_redis::run(b),
        BenchCommand::Route(b) => crate::bench_route::run(b),
    }
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

/// Median, min and max of ratios paired by round.
pub(crate) fn median_min_max(xs: Vec<f64>) -> (f64, f64, f64) {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(xs), lo, hi)
}

pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() {
        f64::NAN
    } else {
        xs[xs.len() / 2]
    }
}

fn sim(b: SimBench) -> Result<()> {
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
        .map_err(|e| anyhow::anyhow!("--{}: {}", e.field, e.problem))?;
    let options = PolicyOptions::default();
    let mut samples = Vec::new();
    let mut set_aside = Vec::new();
    for round in 0..b.repeat {
        let mut this_round = Vec::new();
        let before = CpuTimes::now();
        for p in &policies {
            let started = Instant::now();
            let stats = simulate(disk.clone(), &workload, *p, &options, 1 + round as u64)?;
            let seconds = started.elapsed().as_secs_f64();
            this_round.push(Sample {
                round,
                policy: p.to_string(),
                ios: stats.ios,
                seconds,
                ios_per_sec: stats.ios as f64 / seconds,
                steal: 0.0,
            });
        }
        let steal = before.steal_until(&CpuTimes::now());
        this_round.iter_mut().for_each(|s| s.steal = steal);
        eprintln!("round {}/{}: steal {:.1}%", round + 1, b.repeat, steal * 100.0);
        if steal > b.max_steal {
            set_aside.extend(this_round);
        } else {
            samples.extend(this_round);
        }
    }
    let summaries = summarize(&policies, &samples);
    if b.json {
        let out = serde_json::json!({ "kept": samples, "set_aside": set_aside, "summary": summaries });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let kept = samples.len() / policies.len();
    println!(
        "simulator speed, one core, utilization {}, {} transactions/run; {kept} rounds kept, {} set aside (steal > {:.0}%)",
        b.utilization,
        b.transactions,
        set_aside.len() / policies.len(),
        b.max_steal * 100.0
    );
    println!(
        "{:>12} {:>16} {:>24} {:>26}",
        "policy", "median I/O/s", "range I/O/s", "ratio to baseline (range)"
    );
    for s in &summaries {
        println!(
            "{:>12} {:>16.0} {:>11.0}-{:<12.0} {:>8.3} ({:.3}-{:.3})",
            s.policy,
            s.median_ios_per_sec,
            s.min_ios_per_sec,
            s.max_ios_per_sec,
            s.ratio_to_baseline_median,
            s.ratio_to_baseline_min,
            s.ratio_to_baseline_max
        );
    }
    Ok(())
}

fn summarize(policies: &[PolicySpec], samples: &[Sample]) -> Vec<Summary> {
    let baseline = policies[0].to_string();
    let rate = |policy: &str| -> Vec<(usize, f64)> {
        samples
            .iter()
            .filter(|s| s.policy == policy)
            .map(|s| (s.round, s.ios_per_sec))
            .collect()
    };
    let base = rate(&baseline);
    policies
        .iter()
        .map(|p| {
            let name = p.to_string();
            let mine = rate(&name);
            let ratios: Vec<f64> = mine
                .iter()
                .filter_map(|(r, v)| base.iter().find(|(br, _)| br == r).map(|(_, bv)| v / bv))
                .collect();
            let values: Vec<f64> = mine.iter().map(|(_, v)| *v).collect();
            Summary {
                policy: name,
                median_ios_per_sec: median(values.clone()),
                min_ios_per_sec: values.iter().copied().fold(f64::INFINITY, f64::min),
                max_ios_per_sec: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                ratio_to_baseline_median: median(ratios.clone()),
                ratio_to_baseline_min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
                ratio_to_baseline_max: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            }
        })
        .collect()
}
