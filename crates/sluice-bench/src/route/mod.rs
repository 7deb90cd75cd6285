//! `sluice bench route`: the cooperative scheduler's experiment (Jo et al.,
//! Table 1 and Fig. 4) on real shards. `sluice serve` shards, each its own
//! process on its own emulated device ([`shards`]), behind `sluice route`
//! (in this process); closed-loop users run range scans of U(1, 100)
//! records through the router, so every scan fans out to every shard. Each
//! round restarts the shards once per shard policy (fifo, the paper's noop;
//! fair, round robin over the router's connections; cfq, Linux CFQ's time
//! slices and anticipation over them, the paper's cfq; coop, request
//! order) and measures each after a warm-up,
//! interleaved, with a client writing to the first shard meanwhile if asked
//! ([`writer`]); the table gives each policy's ratios to the first, paired
//! by round.
//!
//! With schedules (`--schedules per-node,synchronized,staggered`), the
//! router decides when the shards compact (its `[compaction]` steering),
//! and each policy runs under each schedule; `--writer` with `--write-all`
//! gives every shard compactions to place.
//!
//! With tenants (`--tenants gold:20:32,bronze:200:32`), the users are the
//! tenants', each client named after its tenant, and the router gives each
//! tenant's requests its budget (TraQIOS's SLA deadline, sent with every
//! sub-request, which the shards' `edf` and `traqios` order their I/O by);
//! a second table gives each tenant's miss ratio (scans slower than its
//! budget, measured at the client) under each policy.

mod compactions;
pub(crate) mod shards;
mod writer;

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use sluice_core::controller::compaction_schedule::Schedule;
use sluice_core::metrics::LatencyHistogram;

use crate::driver::{load, run as run_users, TenantSpec};
use crate::harness::{markdown_table, median, paired_ratios, split_by_steal, Spread};
use crate::route::compactions::{Overlap, Sampler};
use crate::route::shards::{Device, Shards};
use crate::route::writer::Writer;
use crate::steal;
use crate::target::Resp;
use crate::ycsb::{Distribution, Workload};

/// What to measure.
#[derive(Clone, Debug)]
pub struct RouteBench {
    /// Shard I/O policies; the first is the baseline.
    pub policies: Vec<String>,
    pub shards: usize,
    /// Closed-loop users, each its own connection to the router.
    pub users: usize,
    /// Records of 1 KiB, loaded once.
    pub records: u64,
    /// Emulated read time, µs.
    pub read_us: f64,
    /// Emulated device channels (reads served at once).
    pub channels: u32,
    pub warmup: f64,
    /// Measured seconds per run.
    pub seconds: f64,
    pub rounds: usize,
    /// coop's starvation guard at the shards, ms.
    pub coop_starvation_ms: f64,
    /// Writes per second to the first shard during every run; 0: none.
    pub writer: f64,
    /// The writer's keys spread over every shard instead of the first.
    pub write_all: bool,
    /// RCP's mechanisms at the shards (`false`: one FIFO path for all I/O).
    pub rcp: bool,
    /// Each shard's memtable, MiB; `None`: `sluice serve`'s default.
    pub memtable_mb: Option<u32>,
    /// Each shard's block cache, MiB.
    pub block_cache_mb: u32,
    /// When the shards compact (the router's `[compaction]` schedule); each
    /// policy runs under each, and with more than one the runs are named
    /// `policy/schedule`.
    pub schedules: Vec<Schedule>,
    /// Runs whose CPU steal exceeds this fraction are set aside.
    pub max_steal: f64,
    /// Where the shards keep their data (default: a temporary directory).
    pub dir: Option<PathBuf>,
    /// The `sluice` binary whose `serve` runs the shards.
    pub serve: PathBuf,
    /// Tenants with a budget each; when given, their users replace `users`.
    pub tenants: Vec<TenantBudget>,
}

/// A tenant of `--tenants`: its name, the budget of each of its requests
/// and its closed-loop users.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantBudget {
    pub name: String,
    pub budget_ms: f64,
    pub users: usize,
}

impl std::str::FromStr for TenantBudget {
    type Err = String;
    /// `NAME:BUDGET_MS:USERS`.
    fn from_str(spec: &str) -> std::result::Result<Self, String> {
        let bad = || format!("--tenants: '{spec}' is not NAME:BUDGET_MS:USERS (for example gold:20:32)");
        let [name, budget, users] = spec.split(':').collect::<Vec<_>>()[..] else {
            return Err(bad());
        };
        let budget_ms: f64 = budget.parse().map_err(|_| bad())?;
        let users: usize = users.parse().map_err(|_| bad())?;
        if name.is_empty() || !(budget_ms > 0.0 && budget_ms.is_finite()) || users == 0 {
            return Err(bad());
        }
        Ok(TenantBudget {
            name: name.into(),
            budget_ms,
            users,
        })
    }
}

struct Run {
    round: usize,
    policy: String,
    ops_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    gap_p99_ms: f64,
    gap_p50_ms: f64,
    steal: f64,
    /// Per tenant of `--tenants`, in order: the fraction of its scans
    /// slower than its budget.
    missed: Vec<f64>,
    /// Per tenant, in order: its scans per second.
    served: Vec<f64>,
    /// When the shards compacted.
    overlap: Overlap,
}

impl crate::harness::Run for Run {
    fn round(&self) -> usize {
        self.round
    }
    fn target(&self) -> &str {
        &self.policy
    }
    fn steal(&self) -> f64 {
        self.steal
    }
}

/// Starts the shards and the router, loads, runs the rounds; returns the
/// table.
pub fn run(args: &RouteBench) -> Result<String> {
    ensure!(
        args.shards >= 1 && args.users >= 1 && args.rounds >= 1,
        "--shards, --users and --rounds must be at least 1"
    );
    ensure!(!args.policies.is_empty(), "--policies is empty");
    ensure!(!args.schedules.is_empty(), "--schedules is empty");
    for p in &args.policies {
        shards::policy_variant(p).with_context(|| format!("--policies: `{p}`"))?;
    }
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let device = Device {
        read_us: args.read_us,
        channels: args.channels,
        coop_starvation_ms: args.coop_starvation_ms,
        rcp: args.rcp,
    };
    let users_total = if args.tenants.is_empty() {
        args.users
    } else {
        args.tenants.iter().map(|t| t.users).sum()
    };
    let mut shards = Shards::new(args.serve.clone(), dir, args.shards, device, users_total)?;
    shards.memtable_mb = args.memtable_mb;
    shards.block_cache_mb = args.block_cache_mb;
    shards.start(&args.policies[0])?;
    let budgets: Vec<(&str, f64)> = args.tenants.iter().map(|t| (t.name.as_str(), t.budget_ms)).collect();
    let steered = args.schedules.iter().any(|&s| s != Schedule::PerNode);
    let (addr, router) = shards.router(users_total, &budgets, steered)?;
    // Each run: a policy at the shards and a schedule at the router.
    let runs_of_round: Vec<(String, &str, Schedule)> = args
        .policies
        .iter()
        .flat_map(|p| {
            args.schedules.iter().map(move |&s| {
                let label = if args.schedules.len() > 1 {
                    format!("{p}/{s}")
                } else {
                    p.clone()
                };
                (label, p.as_str(), s)
            })
        })
        .collect();
    let labels: Vec<String> = runs_of_round.iter().map(|r| r.0.clone()).collect();
    let workload = Workload {
        name: "scan".into(),
        read: 0.0,
        update: 0.0,
        insert: 0.0,
        scan: 1.0,
        read_modify_write: 0.0,
        distribution: Distribution::Uniform,
        max_scan_length: 100,
        record_count: args.records,
        field_count: 1,
        field_length: 1024,
    };
    let target = Resp::new(addr)?.naming_clients();
    eprintln!(
        "loading {} records of 1 KiB over {} shards through the router",
        args.records, args.shards
    );
    load(&target, &workload, 4, 1)?;
    let users = if args.tenants.is_empty() {
        TenantSpec::users(args.users, &workload)
    } else {
        args.tenants
            .iter()
            .map(|t| TenantSpec {
                name: t.name.clone(),
                workload: workload.clone(),
                threads: t.users,
                weight: 1.0,
                target_ops: None,
                pipeline: 1,
            })
            .collect()
    };
    shards.settle()?;
    let mut runs = Vec::new();
    for round in 1..=args.rounds {
        // Odd rounds in the given order, even rounds reversed, so that no
        // policy always runs first after a restart of the bench or last
        // before the next round.
        let mut order: Vec<&(String, &str, Schedule)> = runs_of_round.iter().collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for (label, policy, schedule) in order {
            let steering = router.compaction.as_ref();
            if let Some(s) = steering {
                s.set_schedule(Schedule::PerNode);
            }
            shards.start(policy)?;
            if args.writer > 0.0 {
                // Every run starts with no compaction owed: what a run's
                // writes leave is the next run's debt otherwise, and each
                // schedule would pay for its predecessor.
                shards.settle()?;
            }
            if let Some(s) = steering {
                s.set_schedule(*schedule);
            }
            let writer = Writer::start(addr, args.shards, args.writer, args.write_all);
            run_users(&target, &users, args.warmup, round as u64 * 1000, &mut |_| {})?;
            router.stats.gap.reset();
            for shard in router.shards() {
                shard.stats.latency.reset();
            }
            let sampler = Sampler::start(shards.ports.clone());
            let applied = || router.compaction.as_ref().map_or(0, |c| c.applied());
            let decided_before = applied();
            let (results, steal) =
                steal::during(|| run_users(&target, &users, args.seconds, round as u64, &mut |_| {}));
            let overlap = sampler.stop();
            let decided = applied() - decided_before;
            let results = results?;
            drop(writer);
            let mut all = LatencyHistogram::default();
            for u in &results {
                all.merge(&u.all);
            }
            let gap = router.stats.gap.summary();
            let missed = args
                .tenants
                .iter()
                .zip(&results)
                .map(|(t, u)| u.all.count_above((t.budget_ms * 1e6) as u64) as f64 / u.all.count().max(1) as f64)
                .collect();
            let served = results
                .iter()
                .take(args.tenants.len())
                .map(|u| u.all.count() as f64 / args.seconds)
                .collect();
            let r = Run {
                round,
                policy: label.clone(),
                ops_per_sec: all.count() as f64 / args.seconds,
                p50_ms: all.quantile(0.5) as f64 / 1e6,
                p99_ms: all.quantile(0.99) as f64 / 1e6,
                gap_p99_ms: gap.p99_ms,
                gap_p50_ms: gap.p50_ms,
                steal,
                missed,
                served,
                overlap,
            };
            // Each shard's sub-request latency at the router: where the
            // gap comes from (a shard that is slower than the others).
            let shard_p50: Vec<String> = router
                .shards()
                .iter()
                .map(|s| format!("{:.0}", s.stats.latency.summary().p50_ms))
                .collect();
            // Sub-requests answered within 2 ms did no I/O that waited
            // (their blocks were in the shard's block cache): a request
            // with one has a gap near its whole latency, and when they
            // are 1% of a run the gap's p99 falls on them.
            let (at_once, parts) = router.shards().iter().fold((0, 0), |(a, n), s| {
                let (within, all) = s.stats.latency.count_within(std::time::Duration::from_millis(2));
                (a + within, n + all)
            });
            let missed: Vec<String> = args
                .tenants
                .iter()
                .zip(r.missed.iter().zip(&r.served))
                .map(|(t, (m, n))| format!("  {} missed {:.1}% of {n:.1}/s", t.name, m * 100.0))
                .collect();
            eprintln!(
                "round {round}  {:<6} {:>7.1} scans/s  p50 {:>7.1} ms  p99 {:>7.1} ms  gap p50 {:>6.1} p99 {:>6.1} ms  shards' p50 {} ms  parts within 2 ms {:.2}%  compacting {:.0}% of the time, {:.1} shards at once ({decided} decisions)  steal {:.1}%{}",
                r.policy,
                r.ops_per_sec,
                r.p50_ms,
                r.p99_ms,
                r.gap_p50_ms,
                r.gap_p99_ms,
                shard_p50.join("/"),
                100.0 * at_once as f64 / parts.max(1) as f64,
                r.overlap.any_share() * 100.0,
                r.overlap.at_once(),
                r.steal * 100.0,
                missed.concat()
            );
            runs.push(r);
        }
    }
    let mut out = table(&runs, &labels, args.max_steal);
    if !args.tenants.is_empty() {
        out += &tenant_table(&runs, &labels, &args.tenants, args.max_steal);
    }
    Ok(out)
}

/// Each tenant's miss ratio and scans per second under each policy: the
/// median over the kept runs, with their range.
fn tenant_table(runs: &[Run], policies: &[String], tenants: &[TenantBudget], max_steal: f64) -> String {
    let (kept, _) = split_by_steal(runs, max_steal);
    let mut header = vec!["policy".to_string()];
    header.extend(
        tenants
            .iter()
            .map(|t| format!("{} ({} ms) missed", t.name, t.budget_ms)),
    );
    header.extend(tenants.iter().map(|t| format!("{} scans/s", t.name)));
    let rows: Vec<Vec<String>> = policies
        .iter()
        .map(|p| {
            let mine: Vec<&Run> = kept.iter().copied().filter(|r| &r.policy == p).collect();
            let mut row = vec![p.clone()];
            for i in 0..tenants.len() {
                let s = Spread::of(mine.iter().map(|r| 100.0 * r.missed[i]));
                row.push(format!("{:.1}% ({:.1}–{:.1}%)", s.median, s.min, s.max));
            }
            for i in 0..tenants.len() {
                let s = Spread::of(mine.iter().map(|r| r.served[i]));
                row.push(format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max));
            }
            row
        })
        .collect();
    format!(
        "\nScans slower than their tenant's budget (at the client), and each tenant's scans, median over rounds:\n\n{}",
        markdown_table(&header, &rows)
    )
}

/// The summary: per policy, medians over the kept runs and ratios to the
/// baseline paired by round (a round whose baseline run was set aside
/// gives no ratio).
fn table(runs: &[Run], policies: &[String], max_steal: f64) -> String {
    let (kept, set_aside) = split_by_steal(runs, max_steal);
    let rounds: std::collections::BTreeSet<usize> = kept.iter().map(|r| r.round).collect();
    let baseline = &policies[0];
    let mut header: Vec<String> = ["policy", "scans/s", "p50 ms", "p99 ms", "gap p99 ms"]
        .map(String::from)
        .into();
    for metric in ["p99", "gap p99", "scans/s", "p50"] {
        header.push(format!("{metric} / {baseline}"));
    }
    // Where shards compacted during the runs: how much of the time, and
    // how many at once.
    let compacted = kept.iter().any(|r| r.overlap.any_share() > 0.0);
    if compacted {
        header.extend(["compacting % of time", "shards at once"].map(String::from));
    }
    let mut rows = Vec::new();
    for p in policies {
        let mine: Vec<&Run> = kept.iter().copied().filter(|r| &r.policy == p).collect();
        if mine.is_empty() {
            continue;
        }
        let med = |f: fn(&Run) -> f64| format!("{:.1}", median(mine.iter().map(|r| f(r))));
        let ratio = |f: fn(&Run) -> f64| {
            let s = Spread::of(paired_ratios(&kept, p, baseline, |r| Some(f(r))));
            format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max)
        };
        let mut row = vec![
            p.clone(),
            med(|r| r.ops_per_sec),
            med(|r| r.p50_ms),
            med(|r| r.p99_ms),
            med(|r| r.gap_p99_ms),
            ratio(|r| r.p99_ms),
            ratio(|r| r.gap_p99_ms),
            ratio(|r| r.ops_per_sec),
            ratio(|r| r.p50_ms),
        ];
        if compacted {
            row.push(format!(
                "{:.0}",
                median(mine.iter().map(|r| 100.0 * r.overlap.any_share()))
            ));
            row.push(format!("{:.1}", median(mine.iter().map(|r| r.overlap.at_once()))));
        }
        rows.push(row);
    }
    let steals = Spread::of(runs.iter().map(|r| r.steal * 100.0));
    format!(
        "{}\n{} runs in {} rounds; steal {:.1}–{:.1}%; {} set aside (steal above {:.0}%)\n",
        markdown_table(&header, &rows),
        runs.len(),
        rounds.len(),
        steals.min,
        steals.max.max(0.0),
        set_aside.len(),
        max_steal * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_pairs_ratios_by_round_and_sets_aside_stolen_runs() {
        let run = |round, policy: &str, p99_ms, steal| Run {
            round,
            policy: policy.into(),
            ops_per_sec: 100.0,
            p50_ms: 1.0,
            p99_ms,
            gap_p99_ms: 1.0,
            gap_p50_ms: 1.0,
            steal,
            missed: vec![0.1],
            served: vec![40.0],
            overlap: Overlap::default(),
        };
        let runs = vec![
            run(1, "fifo", 10.0, 0.0),
            run(1, "coop", 6.0, 0.0),
            run(2, "fifo", 20.0, 0.5),
            run(2, "coop", 1.0, 0.0),
        ];
        let text = table(&runs, &["fifo".into(), "coop".into()], 0.1);
        assert!(
            text.starts_with("| policy | scans/s | p50 ms | p99 ms | gap p99 ms | p99 / fifo | gap p99 / fifo | scans/s / fifo | p50 / fifo |\n|---|---|---|---|---|---|---|---|---|\n"),
            "{text}"
        );
        assert!(
            text.contains("| coop | 100.0 | 1.0 | 6.0 | 1.0 | 0.60 (0.60–0.60) |"),
            "{text}"
        );
        assert!(
            text.contains("| fifo | 100.0 | 1.0 | 10.0 |"),
            "round 2's fifo is set aside: {text}"
        );
        assert!(text.contains("1 set aside"), "{text}");
        let tenants = [TenantBudget {
            name: "gold".into(),
            budget_ms: 20.0,
            users: 4,
        }];
        let text = tenant_table(&runs, &["fifo".into(), "coop".into()], &tenants, 0.1);
        assert!(
            text.contains("| coop | 10.0% (10.0–10.0%) | 40.0 (40.0–40.0) |"),
            "{text}"
        );
    }

    #[test]
    fn tenants_parse_and_bad_ones_name_the_flag() {
        let t: TenantBudget = "gold:20:32".parse().unwrap();
        assert_eq!((t.name.as_str(), t.budget_ms, t.users), ("gold", 20.0, 32));
        for bad in [
            "gold",
            "gold:20",
            "gold:x:3",
            "gold:0:3",
            "gold:20:0",
            ":20:3",
            "a:1:2:3",
        ] {
            let e = bad.parse::<TenantBudget>().unwrap_err();
            assert!(e.contains("--tenants") && e.contains(bad), "{e}");
        }
    }
}
