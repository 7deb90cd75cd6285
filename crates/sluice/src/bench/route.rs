//! `sluice bench route` (the benchmark is `sluice_bench::route`; its shards
//! are this binary's `sluice serve`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sluice_bench::route::{RouteBench, TenantBudget};
use sluice_core::controller::compaction_schedule::Schedule;

/// Range scans through sluice route over sluice serve shards, per shard policy
#[derive(Args)]
#[command(
    long_about = "Range scans through sluice route over sluice serve shards, per shard I/O policy.\n\n\
    Starts --shards sluice serve processes, each with its own data directory on an emulated SSD \
    (--read-us per read, --channels, a small block cache so that scans read the device: \
    --block-cache-mb), and \
    sluice route in this process in front of them. Loads --records records of 1 KiB through the \
    router, then each round runs every policy of --policies in turn: the shards restart with that \
    I/O policy (fifo: arrival order; fair: round robin over the router's connections; cfq: \
    Linux CFQ's 100 ms time slices over them, the device idling up to 8 ms for the connection \
    with the slice; coop: request order), --users closed-loop users scan U(1,100) records from a random key for --warmup \
    seconds (not measured) and --seconds (measured). Reports per policy the scan latency \
    (p50, p99), the sub-request gap measured at the router, throughput, and paired ratios to the \
    first policy. --writer adds a client writing to the first shard throughout, so that it \
    flushes and compacts while the scans run (--write-all: every shard does; each run then starts \
    with no compaction owed). --schedules lets \
    the router decide when the shards compact (per-node: each when it wants; synchronized: all \
    at once; staggered: one at a time) and runs every policy under each.\n\n\
    --tenants replaces --users with tenants, each with a budget per request and its own users \
    (named after it): the router sends each scan's deadline to the shards, and a second table gives \
    each tenant's miss ratio (scans slower than its budget) and scans/s under each policy; compare \
    fifo with a deadline policy (edf, traqios, atc: atc lets the tighter budget go first when \
    many miss).\n\n\
    Example: sluice bench route --policies fifo,cfq,coop --rounds 5\n\
    Example: sluice bench route --policies fifo,edf,atc --tenants gold:250:32,bronze:500:32\n\
    Example: sluice bench route --policies coop --schedules per-node,synchronized,staggered --writer 400 --write-all"
)]
pub struct RouteArgs {
    /// Shard I/O policies, comma-separated; the first is the baseline. `coop@MS` is coop with
    /// its starvation guard at MS ms instead of --coop-starvation-ms; `cfq@MS` is cfq with its
    /// anticipation window at MS ms instead of 8 (0: no anticipation)
    #[arg(long, value_delimiter = ',', default_value = "fifo,fair,cfq,coop")]
    pub policies: Vec<String>,
    #[arg(long, default_value_t = 4)]
    pub shards: usize,
    /// Closed-loop users, each its own connection to the router
    #[arg(long, default_value_t = 64)]
    pub users: usize,
    /// Records of 1 KiB, loaded once
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Emulated read time, µs
    #[arg(long, default_value_t = 1000.0)]
    pub read_us: f64,
    /// Emulated device channels (reads served at once)
    #[arg(long, default_value_t = 4)]
    pub channels: u32,
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Measured seconds per run
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// coop's starvation guard at the shards, ms: a job queued this long is
    /// served next whatever its request id. Above the scans' latency, so
    /// that the guard does not reorder each shard's queue on its own clock
    /// (the policy's default, 100 ms, is below it here)
    #[arg(long, default_value_t = 1000.0)]
    pub coop_starvation_ms: f64,
    /// Writes per second to the first shard during every run (4 KiB each); 0: none
    #[arg(long, default_value_t = 0.0)]
    pub writer: f64,
    /// Spread --writer's keys over every shard, so that each compacts
    #[arg(long)]
    pub write_all: bool,
    /// Shards without RCP's mechanisms: all I/O on one FIFO path, background I/O as long as it
    /// comes (as a store that does not tell compaction from reads)
    #[arg(long)]
    pub no_rcp: bool,
    /// Each shard's memtable, MiB (default: sluice serve's); smaller flushes and compacts more often
    #[arg(long)]
    pub memtable_mb: Option<u32>,
    /// Each shard's block cache, MiB; the default keeps scans on the device, a cache near the
    /// data (25 MB a shard by default) serves most reads from memory, as the paper's shards did
    #[arg(long, default_value_t = 1)]
    pub block_cache_mb: u32,
    /// When the shards compact, decided by the router (its [compaction] schedule): per-node,
    /// synchronized, staggered or auto, comma-separated; every policy runs under each
    #[arg(long, value_delimiter = ',', default_value = "per-node")]
    pub schedules: Vec<Schedule>,
    /// Set aside rounds whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Where the shards keep their data (default: a temporary directory)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Tenants as NAME:BUDGET_MS:USERS, comma-separated; replaces --users
    #[arg(long, value_delimiter = ',')]
    pub tenants: Vec<TenantBudget>,
}

pub fn run(a: RouteArgs) -> Result<()> {
    print!(
        "{}",
        sluice_bench::route::run(&RouteBench {
            policies: a.policies,
            shards: a.shards,
            users: a.users,
            tenants: a.tenants,
            records: a.records,
            read_us: a.read_us,
            channels: a.channels,
            warmup: a.warmup,
            seconds: a.seconds,
            rounds: a.rounds,
            coop_starvation_ms: a.coop_starvation_ms,
            writer: a.writer,
            write_all: a.write_all,
            memtable_mb: a.memtable_mb,
            block_cache_mb: a.block_cache_mb,
            rcp: !a.no_rcp,
            schedules: a.schedules,
            max_steal: a.max_steal,
            dir: a.dir,
            serve: std::env::current_exe()?,
        })?
    );
    Ok(())
}
