//! `sluice bench redis` (the benchmark is `sluice_bench::redis`).

use anyhow::Result;
use clap::Args;
use sluice_bench::redis::RedisBench;

/// Redis users (YCSB, one connection each) directly and through proxies
#[derive(Args)]
#[command(long_about = "Redis users against several RESP targets, interleaved.\n\n\
    Each user is one connection running a YCSB core workload (A, B, C, D or F; E needs a \
    range command Redis lacks) in a closed loop. The records are loaded through every target \
    (each may be a store of its own); every round then runs each target for --seconds. Reports per target the \
    throughput, the paired ratio to the first target (median and spread), U_f, V_l and p50/p99. \
    Rounds with CPU steal above --max-steal are set aside.\n\n\
    Example: sluice bench redis --targets direct=127.0.0.1:6379,sluice=127.0.0.1:6380 --users 50\n\n\
    With --pipeline N each user sends N operations before it reads their replies, as a pipelining \
    client does.")]
pub struct RedisArgs {
    /// Targets as NAME=HOST:PORT, comma-separated; the first is the baseline
    #[arg(long, value_delimiter = ',', required = true)]
    pub targets: Vec<String>,
    /// Users (connections, each a closed loop)
    #[arg(long, default_value_t = 50)]
    pub users: usize,
    /// YCSB core workload letter
    #[arg(long, default_value_t = 'A')]
    pub workload: char,
    /// Records loaded before the runs
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// Seconds per run
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Set aside rounds whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Report the resident memory of this process (a server under test)
    /// after every run, to see whether it grows with the operations run
    #[arg(long)]
    pub rss_pid: Option<u32>,
    /// Operations each user sends together before reading their replies (a
    /// pipeline, as redis-benchmark -P); each counts the pipeline's time as
    /// its latency
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
}

pub fn run(a: RedisArgs) -> Result<()> {
    print!(
        "{}",
        sluice_bench::redis::run(&RedisBench {
            targets: a.targets,
            users: a.users,
            workload: a.workload,
            records: a.records,
            seconds: a.seconds,
            rounds: a.rounds,
            max_steal: a.max_steal,
            rss_pid: a.rss_pid,
            pipeline: a.pipeline,
        })?
    );
    Ok(())
}
