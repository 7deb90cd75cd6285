//! `sluice bench pg` (the benchmark is `sluice_bench::pg`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sluice_bench::pg::PgBench;

/// PostgreSQL users (pgbench) directly, through sluice proxy, through PgBouncer
#[derive(Args)]
#[command(long_about = "PostgreSQL users against several targets, interleaved.\n\n\
    Each user is one connection running pgbench's script in a closed loop, or with --rate \
    on pgbench's schedule. Every round runs \
    each target once per user count; only transactions finishing after --warmup count, so a \
    proxy that tunes itself first is measured once settled. Reports per target the median \
    throughput, the paired ratio to the first target (of throughput, or of p99 under --rate; median and spread over rounds), U_f, \
    V_l, p99, failed transactions, and the CPU time and context switches per transaction of \
    processes given by --cpu. Rounds with CPU steal above --max-steal are set aside.\n\n\
    Example: sluice bench pg --targets direct=127.0.0.1:5432,sluice=127.0.0.1:6432 \
    --users 8,256 --cpu sluice=$(pidof sluice)\n\
    scripts/bench-proxy.sh sets up PostgreSQL, PgBouncer and sluice proxy and runs this.")]
pub struct PgArgs {
    /// Targets as NAME=HOST:PORT, comma-separated; the first is the baseline.
    /// HOST may be a directory, where pgbench connects to the Unix socket
    /// HOST/.s.PGSQL.PORT
    #[arg(long, value_delimiter = ',', required = true)]
    pub targets: Vec<String>,
    /// User counts to run, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "256,512")]
    pub users: Vec<usize>,
    /// Seconds measured per run
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Seconds run before measuring: long enough for sluice proxy's model
    /// to take its samples and refine them (about 16 s after users arrive)
    #[arg(long, default_value_t = 20)]
    pub warmup: u64,
    /// Rounds; each runs every target once per user count
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// pgbench -M: simple, extended or prepared
    #[arg(long, default_value = "simple")]
    pub protocol: String,
    /// pgbench -b: tpcb-like, simple-update or select-only
    #[arg(long, default_value = "tpcb-like")]
    pub script: String,
    #[arg(long, default_value = "postgres")]
    pub user: String,
    #[arg(long, default_value = "postgres")]
    pub database: String,
    /// pgbench worker threads
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Processes to charge CPU time and context switches to, as TARGET=PID (e.g. sluice=1234)
    #[arg(long, value_delimiter = ',')]
    pub cpu: Vec<String>,
    /// Set aside rounds whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Tenants as NAME:WEIGHT[:USERS], comma-separated: each tenant runs
    /// USERS users (default: an even split of what the others leave of
    /// --users), its connections carry its name as application_name, and
    /// its share of throughput is reported against its share of the
    /// weights, with its own latency percentiles
    #[arg(long, value_delimiter = ',')]
    pub tenants: Vec<String>,
    /// Write every run as JSON here
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Transactions a second for all users together, on pgbench's schedule
    /// (pgbench -R): an open system, where a target that falls behind
    /// queues the transactions and their latency counts from the schedule.
    /// The rate then sets the throughput and each user's share of it, so
    /// the paired ratio is p99's and U_f is shown as "-". Without it each
    /// user is a closed loop
    #[arg(long, value_parser = positive_rate)]
    pub rate: Option<f64>,
}

fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!("wants transactions a second above 0, got `{text}`")),
    }
}

pub fn run(a: PgArgs) -> Result<()> {
    print!(
        "{}",
        sluice_bench::pg::run(&PgBench {
            targets: a.targets,
            users: a.users,
            seconds: a.seconds,
            warmup: a.warmup,
            rounds: a.rounds,
            protocol: a.protocol,
            script: a.script,
            user: a.user,
            database: a.database,
            threads: a.threads,
            cpu: a.cpu,
            max_steal: a.max_steal,
            tenants: a.tenants,
            out: a.out,
            rate: a.rate,
        })?
    );
    Ok(())
}
