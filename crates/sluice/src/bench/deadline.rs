//! `sluice bench deadline` (the benchmark is `sluice_bench::deadline`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sluice_bench::deadline::{DeadlineBench, Via};
use sluice_core::device::SeekDiskProfile;
use sluice_sim::TraqiosWorkload;

/// TraQIOS on real I/O: tardiness per policy on an emulated seek disk, beside the simulator's prediction
#[derive(Args)]
#[command(
    long_about = "TraQIOS on real I/O: deadline-aware I/O ordering measured in wall time, each run beside \
    the simulator's prediction for the same transactions.\n\n\
    Transactions arrive by a Poisson process at each utilization of --utilizations (TraQIOS §4, Table 1): \
    each reads --ios-min to --ios-max blocks of a real file on an emulated seek disk of depth 1 \
    (a + b·sqrt(d) ms from the head's cylinder, --cylinders cylinders), with a think time of 0 to \
    --think-ms-max before each read, and has the deadline A + N·C̄·(1 + U[0, --slack-factor-max]). \
    Each transaction is a thread in its own request context on a sluice-io runtime whose dispatch \
    runs the policy under test. Each round runs one seed under every policy of --policies; the \
    simulator runs the same transactions under the same policy. Reports average tardiness measured \
    and predicted, ratios to the first policy paired by round, TraQIOS against the best of the \
    others, and the EDF/SSTF crossover.\n\n\
    With --via serve the same transactions go through `sluice serve` (this binary, started for each \
    run with the policy under test): the store holds one record per cylinder, and each transaction \
    is a client connection that sends its reads as GETs inside SLUICE.WITH with its id, its budget \
    left and its reads left (IOS), so that the store's I/O queues see its deadline and count it as \
    one request.\n\n\
    The default disk is TraQIOS's scaled by 1/4 and its transactions shorter (1-40 reads), so that \
    the default sweep takes about 8 minutes a round.\n\n\
    Example: sluice bench deadline --rounds 3"
)]
pub struct DeadlineArgs {
    /// I/O policies, comma-separated; the first is the baseline of the ratios
    #[arg(long, value_delimiter = ',', default_value = "edf,sstf,fifo,traqios")]
    pub policies: Vec<String>,
    /// Disk utilizations swept, comma-separated, each in (0, 1]
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.3,0.5,0.6,0.7,0.8,0.9")]
    pub utilizations: Vec<f64>,
    /// Seconds of arrivals per run (a run lasts until its last transaction finishes)
    #[arg(long, default_value_t = 15.0)]
    pub seconds: f64,
    /// Rounds; round r runs seed r under every policy
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, default_value_t = 1000)]
    pub cylinders: u64,
    /// The disk's fixed access time a, ms
    #[arg(long, default_value_t = 1.0)]
    pub a_ms: f64,
    /// The disk's seek factor b, ms per sqrt(cylinder)
    #[arg(long, default_value_t = 0.075)]
    pub b: f64,
    #[arg(long, default_value_t = 1)]
    pub ios_min: u32,
    #[arg(long, default_value_t = 40)]
    pub ios_max: u32,
    #[arg(long, default_value_t = 0.25)]
    pub think_ms_max: f64,
    #[arg(long, default_value_t = 4.0)]
    pub slack_factor_max: f64,
    /// Set aside runs whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Where the disk's backing file (or the store, with --via serve) goes (default: a temporary directory)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Where the reads go: `runtime` (a sluice-io runtime in this process) or `serve` (through `sluice serve`)
    #[arg(long, default_value = "runtime", value_parser = ["runtime", "serve"])]
    pub via: String,
}

pub fn run(a: DeadlineArgs) -> Result<()> {
    let defaults = DeadlineBench::default();
    print!(
        "{}",
        sluice_bench::deadline::run(&DeadlineBench {
            policies: a.policies,
            utilizations: a.utilizations,
            seconds: a.seconds,
            rounds: a.rounds,
            disk: SeekDiskProfile {
                cylinders: a.cylinders,
                a_ms: a.a_ms,
                b: a.b,
                ..defaults.disk
            },
            workload: TraqiosWorkload {
                ios: [a.ios_min, a.ios_max],
                think_ms: [0.0, a.think_ms_max],
                slack_factor_max: a.slack_factor_max,
                ..defaults.workload
            },
            max_steal: a.max_steal,
            dir: a.dir,
            via: match a.via.as_str() {
                "serve" => Via::Serve(std::env::current_exe()?),
                _ => Via::Runtime,
            },
        })?
    );
    Ok(())
}
