//! `sluice fanout`: requests that fan out over shards, in the simulator
//! (`sluice_sim::fanout`), under each shard policy: how far request order
//! (`coop`) cuts the tail and the gap between sub-requests against arrival
//! order (`fifo`) and per-client fairness (`fair`), at any number of shards
//! and fan-out width.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use sluice_sim::fanout::{simulate, FanoutConfig, FanoutStats, ShardPolicy};

use crate::bench::{median, median_min_max};

/// Simulate requests that fan out over shards under each shard policy
#[derive(Args)]
#[command(
    long_about = "Simulate requests that fan out over shards under each shard policy, in virtual time.\n\n\
    Closed-loop clients send requests that touch --fanout of --shards shards; each sub-request \
    reads a uniform number of records in --ios, one I/O after another; each shard serves --depth \
    I/Os at once, exponential in time with mean --service-us, and orders the I/O waiting by the \
    policy: fifo (arrival order of the I/Os), fair (round robin over clients) or coop (the \
    request order a front end stamps: cooperative request-order scheduling). Each policy runs \
    with the same seeds; the table gives medians over seeds and, for p99 and the sub-request \
    gap, the ratio to the first policy paired by seed. With several --shards or --fanout values \
    every combination is a row group (a fan-out wider than the shards is skipped).\n\n\
    Example: sluice fanout --shards 4,16,64 --fanout 1,4,16,64"
)]
pub struct FanoutArgs {
    /// Shards, comma-separated for a sweep
    #[arg(long, value_delimiter = ',', default_value = "4")]
    shards: Vec<usize>,
    /// Shards each request touches, comma-separated for a sweep
    #[arg(long, value_delimiter = ',', default_value = "4")]
    fanout: Vec<usize>,
    /// Closed-loop clients
    #[arg(long, default_value_t = 64)]
    users: usize,
    /// Records (I/Os) a sub-request reads: MIN-MAX, drawn uniformly
    #[arg(long, default_value = "1-25", value_parser = parse_range)]
    ios: (u32, u32),
    /// I/Os a shard serves at once
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Mean service time of one I/O, microseconds
    #[arg(long, default_value_t = 100.0)]
    service_us: f64,
    /// Mean wait of a client between its requests, microseconds
    #[arg(long, default_value_t = 0.0)]
    think_us: f64,
    /// Requests measured per run, after a warm-up of two per client
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// Every sub-request of a request reads the same number of records (a
    /// range scan over hash-sharded keys, as `sluice bench route` runs)
    #[arg(long)]
    same_size: bool,
    /// Shard policies, comma-separated; the first is the baseline
    #[arg(long, value_delimiter = ',', default_value = "fifo,fair,coop")]
    policies: Vec<ShardPolicy>,
    /// Seeds (runs per policy)
    #[arg(long, default_value_t = 5)]
    seeds: u64,
}

fn parse_range(text: &str) -> Result<(u32, u32), String> {
    let (lo, hi) = text.split_once('-').unwrap_or((text, text));
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{text}` is not MIN-MAX (such as 1-25)"))
    };
    Ok((number(lo)?, number(hi)?))
}

pub fn run(args: FanoutArgs) -> Result<()> {
    if !args.shards.iter().any(|&n| args.fanout.iter().any(|&k| k <= n)) {
        bail!("every --fanout exceeds every --shards: a request cannot touch more shards than there are");
    }
    println!(
        "{:>6} {:>6}  {:<6} {:>9} {:>9} {:>9} {:>15} {:>10} {:>15}",
        "shards", "fanout", "policy", "req/s", "p50 ms", "p99 ms", "p99 vs base", "gap p99", "gap p99 vs base"
    );
    for &shards in &args.shards {
        for &fanout in args.fanout.iter().filter(|&&k| k <= shards) {
            let config = FanoutConfig {
                shards,
                fanout,
                users: args.users,
                ios_min: args.ios.0,
                ios_max: args.ios.1,
                depth: args.depth,
                service_us: args.service_us,
                think_us: args.think_us,
                requests: args.requests,
                same_size: args.same_size,
            };
            config.validate().map_err(|e| anyhow!(e))?;
            let runs: Vec<Vec<FanoutStats>> = args
                .policies
                .iter()
                .map(|&policy| {
                    (0..args.seeds)
                        .map(|seed| simulate(&config, policy, seed).map_err(|e| anyhow!(e)))
                        .collect::<Result<_>>()
                })
                .collect::<Result<_>>()?;
            for (policy, stats) in args.policies.iter().zip(&runs) {
                let of = |f: fn(&FanoutStats) -> f64| median(stats.iter().map(f).collect());
                let vs_base = |f: fn(&FanoutStats) -> f64| {
                    let ratios = stats.iter().zip(&runs[0]).map(|(s, b)| f(s) / f(b)).collect();
                    let (m, lo, hi) = median_min_max(ratios);
                    format!("{m:.2} ({lo:.2}-{hi:.2})")
                };
                println!(
                    "{shards:>6} {fanout:>6}  {policy:<6} {:>9.0} {:>9.2} {:>9.2} {:>15} {:>10.2} {:>15}",
                    of(|s| s.throughput),
                    of(|s| s.p50_ms),
                    of(|s| s.p99_ms),
                    vs_base(|s| s.p99_ms),
                    of(|s| s.gap_p99_ms),
                    vs_base(|s| s.gap_p99_ms),
                );
            }
        }
    }
    Ok(())
}
