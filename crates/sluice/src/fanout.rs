//! `sluice fanout`: requests that fan out over shards, in the simulator
//! (`sluice_sim::fanout`), under each shard policy: how far request order
//! (`coop`) cuts the tail and the gap between sub-requests against arrival
//! order (`fifo`), per-client fairness (`fair`) and Linux CFQ's time slices
//! with anticipation (`cfq`), at any number of shards and fan-out width.

use anyhow::Result;
use clap::Args;
use sluice_bench::fanout::{table, FanoutSweep};
use sluice_sim::fanout::ShardPolicy;

/// Simulate requests that fan out over shards under each shard policy
#[derive(Args)]
#[command(
    long_about = "Simulate requests that fan out over shards under each shard policy, in virtual time.\n\n\
    Closed-loop clients send requests that touch --fanout of --shards shards; each sub-request \
    reads a uniform number of records in --ios, one I/O after another; each shard serves --depth \
    I/Os at once, exponential in time with mean --service-us, and orders the I/O waiting by the \
    policy: fifo (arrival order of the I/Os), fair (round robin over clients), cfq (Linux \
    CFQ's time slices of 100 ms per client, the device idling up to 8 ms for the client with \
    the slice) or coop (the request order a front end stamps: cooperative request-order \
    scheduling). Each policy runs \
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
    /// Each shard serves a sub-request's next I/O before any other waiting,
    /// as if it waited for it at no cost: the best that batching one
    /// request's I/O (or anticipating it) could do on top of request order
    #[arg(long)]
    batched: bool,
    /// Shard policies, comma-separated; the first is the baseline
    #[arg(long, value_delimiter = ',', default_value = "fifo,fair,cfq,coop")]
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

pub fn run(a: FanoutArgs) -> Result<()> {
    print!(
        "{}",
        table(&FanoutSweep {
            shards: a.shards,
            fanout: a.fanout,
            users: a.users,
            ios: a.ios,
            depth: a.depth,
            service_us: a.service_us,
            think_us: a.think_us,
            requests: a.requests,
            same_size: a.same_size,
            batched: a.batched,
            policies: a.policies,
            seeds: a.seeds,
        })?
    );
    Ok(())
}
