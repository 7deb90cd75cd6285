//! `sluice bench sim` (the benchmark is `sluice_bench::sim`).

use anyhow::Result;
use clap::Args;
use sluice_bench::sim::SimBench;

/// Simulator speed: simulated I/O completions per second on one core
#[derive(Args)]
#[command(
    long_about = "Simulator speed: simulated I/O completions per second on one core.\n\n\
    Runs the TraQIOS workload under each policy in turn (interleaved, repeated), \
    single-threaded, and reports completions per second with the ratio to the \
    baseline policy measured in the same run. Runs with CPU steal above \
    --max-steal are set aside."
)]
pub struct SimArgs {
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

pub fn run(a: SimArgs) -> Result<()> {
    print!(
        "{}",
        sluice_bench::sim::run(&SimBench {
            policies: a.policies,
            utilization: a.utilization,
            transactions: a.transactions,
            repeat: a.repeat,
            max_steal: a.max_steal,
            json: a.json,
        })?
    );
    Ok(())
}
