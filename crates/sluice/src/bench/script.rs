//! What the benchmark scripts ask of the harness: a summary of the runs
//! they measured (`summarize`), and the readings they must not parse
//! themselves, CPU steal (`steal`) and a process's CPU time (`cpu`).

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sluice_bench::rows::Rows;
use sluice_bench::steal::CpuTimes;

/// Summarize runs measured by a script: medians, ranges, ratios paired by round
#[derive(Args)]
#[command(
    long_about = "Summarize runs measured by a script: medians, ranges, ratios paired by round.\n\n\
    Reads rows of white-space separated columns under a header line naming them: round, target \
    and steal (the fraction of CPU time stolen during the run, from `sluice bench steal --since`) \
    are required; the columns given to --by group the runs (a test, a user count); every other \
    column is a metric. Runs with steal above --max-steal are set aside. Prints, per group, \
    target and metric, a Markdown table of the median and range, the ratios to --baseline \
    paired by round (median, range, and each round's) and, with --difference-to, the \
    differences to that target paired by round.\n\n\
    Example: sluice bench summarize runs.txt --baseline twemproxy --by test --difference-to direct"
)]
pub struct SummarizeArgs {
    /// The rows: a file, or - for standard input
    #[arg(default_value = "-")]
    rows: PathBuf,
    /// The target the others are divided by [default: the first in the rows]
    #[arg(long)]
    baseline: Option<String>,
    /// Columns that group the runs, comma-separated
    #[arg(long, value_delimiter = ',')]
    by: Vec<String>,
    /// Also give each target's difference to this one (such as the server directly)
    #[arg(long)]
    difference_to: Option<String>,
    /// Set aside runs whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    max_steal: f64,
}

/// CPU steal for scripts: a sample of /proc/stat, or the fraction stolen since one
#[derive(Args)]
#[command(long_about = "CPU steal for scripts, read from /proc/stat.\n\n\
    Without --since, prints the machine's CPU time counters as one word, STEAL/TOTAL ticks; \
    given that word back with --since, prints the fraction of CPU time stolen since.\n\n\
    Example: s=$(sluice bench steal); redis-benchmark ...; sluice bench steal --since \"$s\"")]
pub struct StealArgs {
    /// A sample an earlier `sluice bench steal` printed
    #[arg(long)]
    since: Option<CpuTimes>,
}

/// A process's CPU time for scripts: seconds used so far, or since a reading
#[derive(Args)]
#[command(long_about = "A process's CPU time for scripts, read from /proc/PID/stat.\n\n\
    Prints the user plus system CPU seconds the process has used so far; with --since, \
    less that earlier reading.\n\n\
    Example: c=$(sluice bench cpu --pid \"$proxy\"); redis-benchmark ...; sluice bench cpu --pid \"$proxy\" --since \"$c\"")]
pub struct CpuArgs {
    #[arg(long)]
    pid: u32,
    /// Seconds an earlier `sluice bench cpu` printed
    #[arg(long)]
    since: Option<f64>,
}

pub fn summarize(a: SummarizeArgs) -> Result<()> {
    let mut text = String::new();
    if a.rows.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(&a.rows).with_context(|| format!("reading {}", a.rows.display()))?;
    }
    let rows = Rows::parse(&text, &a.by).with_context(|| format!("{}", a.rows.display()))?;
    print!(
        "{}",
        rows.summary(a.baseline.as_deref(), a.difference_to.as_deref(), a.max_steal)?
    );
    Ok(())
}

pub fn steal(a: StealArgs) -> Result<()> {
    let now = CpuTimes::now();
    match a.since {
        Some(before) => println!("{:.4}", before.steal_until(&now)),
        None => println!("{now}"),
    }
    Ok(())
}

pub fn cpu(a: CpuArgs) -> Result<()> {
    let seconds = sluice_bench::process::cpu_seconds(a.pid)?;
    println!("{:.3}", seconds - a.since.unwrap_or(0.0));
    Ok(())
}
