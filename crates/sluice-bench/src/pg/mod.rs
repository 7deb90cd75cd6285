//! `sluice bench pg`: PostgreSQL users (pgbench's scripts, one closed loop
//! per connection, or with `--rate` an open system on pgbench's schedule)
//! against several targets — the database directly, through `sluice
//! proxy`, through PgBouncer — interleaved round by round, with
//! per-user throughput, U_f, V_l, latency percentiles, CPU steal, the worst
//! second's I/O stall, and the CPU time each proxy process spends per
//! transaction.
//!
//! | file | holds |
//! |---|---|
//! | [`tenants`] | `--tenants` and the split of a run's users among them |
//! | [`record`] | what a run measured |
//! | [`table`] | the tables printed at the end |

mod record;
mod table;
mod tenants;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::harness::parse_target;
use crate::pg::record::{RunRecord, TenantTps};
use crate::pg::tenants::{user_split, WeightedTenant};
use crate::pgbench::{self, PgbenchResult, PgbenchSpec};
use crate::pressure::IoStallWatch;
use crate::process::Usage;
use crate::steal;

/// What to measure.
#[derive(Clone, Debug)]
pub struct PgBench {
    /// Targets as NAME=HOST:PORT; the first is the baseline. HOST may be a
    /// directory, where pgbench connects to the Unix socket HOST/.s.PGSQL.PORT.
    pub targets: Vec<String>,
    /// User counts to run.
    pub users: Vec<usize>,
    /// Seconds measured per run.
    pub seconds: u64,
    /// Seconds run before measuring.
    pub warmup: u64,
    /// Rounds; each runs every target once per user count.
    pub rounds: usize,
    /// pgbench -M: simple, extended or prepared.
    pub protocol: String,
    /// pgbench -b: tpcb-like, simple-update or select-only.
    pub script: String,
    pub user: String,
    pub database: String,
    /// pgbench worker threads.
    pub threads: usize,
    /// Processes to charge CPU time and context switches to, as TARGET=PID.
    pub cpu: Vec<String>,
    /// Runs whose CPU steal exceeds this fraction are set aside.
    pub max_steal: f64,
    /// Tenants as NAME:WEIGHT[:USERS].
    pub tenants: Vec<String>,
    /// Where to write every run as JSON.
    pub out: Option<PathBuf>,
    /// Transactions a second for all users together (pgbench's `-R`),
    /// split among tenants by their users; `None`: closed loops.
    pub rate: Option<f64>,
}

/// Runs the rounds; returns the tables.
pub fn run(args: &PgBench) -> Result<String> {
    let targets = args
        .targets
        .iter()
        .map(|t| parse_target(t))
        .collect::<Result<Vec<_>>>()?;
    let pids: BTreeMap<String, u32> = args
        .cpu
        .iter()
        .map(|c| {
            let (name, pid) = c
                .split_once('=')
                .ok_or_else(|| anyhow!("--cpu wants TARGET=PID, got `{c}`"))?;
            Ok((
                name.to_string(),
                pid.parse().with_context(|| format!("--cpu {c}: not a process id"))?,
            ))
        })
        .collect::<Result<_>>()?;
    let tenants = args
        .tenants
        .iter()
        .map(|t| WeightedTenant::parse(t))
        .collect::<Result<Vec<_>>>()?;
    let usage = |pid: u32| Usage::of(pid).context("--cpu");
    let mut records = Vec::new();
    for &users in &args.users {
        for round in 1..=args.rounds {
            for (name, host, port) in &targets {
                let usage_before = pids.get(name).map(|&p| usage(p)).transpose()?;
                let io_stall = IoStallWatch::start();
                let (result, steal) = steal::during(|| run_tenants(args, &tenants, host, *port, users));
                let (result, tenants) = result.with_context(|| format!("{name}, {users} users"))?;
                let io_stall_worst_s = io_stall.worst_second();
                let used = match (usage_before, pids.get(name)) {
                    (Some(before), Some(&pid)) => Some(usage(pid)?.since(&before, result.finished_in_run)),
                    _ => None,
                };
                let r = RunRecord {
                    users,
                    round,
                    target: name.clone(),
                    rate: args.rate,
                    tps: result.tps(),
                    unfairness: args.rate.is_none().then(|| result.unfairness()),
                    latency_cv: result.latency_cv(),
                    p50_ms: result.quantile_ms(0.5),
                    p99_ms: result.quantile_ms(0.99),
                    p999_ms: result.quantile_ms(0.999),
                    failed: result.failed,
                    steal,
                    io_stall_worst_s,
                    cpu_ms_per_txn: used.map(|u| u.cpu_s * 1e3),
                    switches_per_txn: used.map(|u| u.switches),
                    tenants,
                };
                eprintln!(
                    "{users:>4} users  round {round}  {name:<12} {:>8.0} tps{}  U_f {}  V_l {:.3}  p99 {:>7.1} ms  steal {:.1}%  io stall (worst s) {}",
                    r.tps,
                    r.rate.map_or(String::new(), |rate| format!(" (asked {rate:.0})")),
                    r.unfairness.map_or("-".into(), |u| format!("{u:.3}")),
                    r.latency_cv,
                    r.p99_ms,
                    steal * 100.0,
                    io_stall_worst_s.map_or("-".into(), |s| format!("{:.0}%", s * 100.0))
                );
                records.push(r);
            }
        }
    }
    let text = table::table(&records, &targets[0].0, args.max_steal);
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        let path = out.join("runs.json");
        std::fs::write(&path, serde_json::to_string_pretty(&records)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(text)
}

/// One run: every tenant's pgbench at once (or one pgbench if there are no
/// tenants), merged, with each tenant's throughput and latency.
fn run_tenants(
    args: &PgBench,
    tenants: &[WeightedTenant],
    host: &str,
    port: u16,
    users: usize,
) -> Result<(PgbenchResult, Vec<TenantTps>)> {
    let groups = user_split(tenants, users)?;
    let total: usize = groups.iter().map(|(_, _, users)| users).sum();
    let results: Vec<Result<PgbenchResult>> = std::thread::scope(|scope| {
        let runs: Vec<_> = groups
            .iter()
            .map(|(name, _, users)| {
                let spec = PgbenchSpec {
                    host: host.to_string(),
                    port,
                    user: args.user.clone(),
                    database: args.database.clone(),
                    users: *users,
                    threads: args.threads.min(*users),
                    warmup: Duration::from_secs(args.warmup),
                    measure: Duration::from_secs(args.seconds),
                    protocol: args.protocol.clone(),
                    script: args.script.clone(),
                    application_name: name.clone(),
                    rate: args.rate.map(|rate| rate * *users as f64 / total.max(1) as f64),
                };
                scope.spawn(move || {
                    let logs = tempfile::tempdir()?;
                    Ok(pgbench::run(&spec, logs.path())?)
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap_or_else(|_| Err(anyhow!("a pgbench runner panicked"))))
            .collect()
    });
    let mut merged: Option<PgbenchResult> = None;
    let mut shares = Vec::new();
    for ((name, weight, users), result) in groups.into_iter().zip(results) {
        let result = result?;
        if let Some(name) = name {
            shares.push(TenantTps {
                name,
                weight,
                users,
                tps: result.tps(),
                p99_ms: result.quantile_ms(0.99),
                p999_ms: result.quantile_ms(0.999),
            });
        }
        match &mut merged {
            Some(m) => m.merge(result),
            None => merged = Some(result),
        }
    }
    Ok((merged.expect("at least one group"), shares))
}
