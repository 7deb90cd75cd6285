//! `sluice fanout`: requests that fan out over shards, in the simulator
//! (`sluice_sim::fanout`), under each shard policy: how far request order
//! (`coop`) cuts the tail and the gap between sub-requests against arrival
//! order (`fifo`) and per-client fairness (`fair`), at any number of shards
//! and fan-out width. Seeds play the part of rounds: each policy runs with
//! the same seeds, and ratios pair runs of the same seed.

use anyhow::{anyhow, bail, Result};
use sluice_sim::fanout::{simulate, FanoutConfig, FanoutStats, ShardPolicy};

use crate::harness::{median, paired_ratios, Run, Spread};

/// The sweep: every combination of `shards` and `fanout` (a fan-out wider
/// than the shards skipped), each policy, each seed.
#[derive(Clone, Debug)]
pub struct FanoutSweep {
    pub shards: Vec<usize>,
    pub fanout: Vec<usize>,
    /// Closed-loop clients.
    pub users: usize,
    /// Records (I/Os) a sub-request reads, drawn uniformly from MIN-MAX.
    pub ios: (u32, u32),
    /// I/Os a shard serves at once.
    pub depth: usize,
    /// Mean service time of one I/O, µs.
    pub service_us: f64,
    /// Mean wait of a client between its requests, µs.
    pub think_us: f64,
    /// Requests measured per run.
    pub requests: u64,
    /// Every sub-request of a request reads the same number of records.
    pub same_size: bool,
    /// A shard serves a sub-request's next I/O before any other waiting.
    pub batched: bool,
    /// Shard policies; the first is the baseline.
    pub policies: Vec<ShardPolicy>,
    /// Seeds (runs per policy).
    pub seeds: u64,
}

/// One seed's run of one policy.
struct Seeded {
    seed: usize,
    policy: String,
    stats: FanoutStats,
}

impl Run for Seeded {
    fn round(&self) -> usize {
        self.seed
    }
    fn target(&self) -> &str {
        &self.policy
    }
    fn steal(&self) -> f64 {
        0.0
    }
}

/// Runs the sweep; returns its table.
pub fn table(sweep: &FanoutSweep) -> Result<String> {
    if !sweep.shards.iter().any(|&n| sweep.fanout.iter().any(|&k| k <= n)) {
        bail!("every --fanout exceeds every --shards: a request cannot touch more shards than there are");
    }
    let mut out = format!(
        "{:>6} {:>6}  {:<6} {:>9} {:>9} {:>9} {:>15} {:>10} {:>15}\n",
        "shards", "fanout", "policy", "req/s", "p50 ms", "p99 ms", "p99 vs base", "gap p99", "gap p99 vs base"
    );
    for &shards in &sweep.shards {
        for &fanout in sweep.fanout.iter().filter(|&&k| k <= shards) {
            let config = FanoutConfig {
                shards,
                fanout,
                users: sweep.users,
                ios_min: sweep.ios.0,
                ios_max: sweep.ios.1,
                depth: sweep.depth,
                service_us: sweep.service_us,
                think_us: sweep.think_us,
                requests: sweep.requests,
                same_size: sweep.same_size,
                batched: sweep.batched,
            };
            config.validate().map_err(|e| anyhow!(e))?;
            let mut runs = Vec::new();
            for &policy in &sweep.policies {
                for seed in 0..sweep.seeds {
                    let stats = simulate(&config, policy, seed).map_err(|e| anyhow!(e))?;
                    runs.push(Seeded {
                        seed: seed as usize,
                        policy: policy.to_string(),
                        stats,
                    });
                }
            }
            let runs: Vec<&Seeded> = runs.iter().collect();
            let baseline = sweep.policies[0].to_string();
            for policy in &sweep.policies {
                let name = policy.to_string();
                let of =
                    |f: fn(&FanoutStats) -> f64| median(runs.iter().filter(|r| r.policy == name).map(|r| f(&r.stats)));
                let vs_base = |f: fn(&FanoutStats) -> f64| {
                    let s = Spread::of(paired_ratios(&runs, &name, &baseline, |r| Some(f(&r.stats))));
                    format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max)
                };
                out += &format!(
                    "{shards:>6} {fanout:>6}  {policy:<6} {:>9.0} {:>9.2} {:>9.2} {:>15} {:>10.2} {:>15}\n",
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
    Ok(out)
}
