//! `sluice bench pg`: PostgreSQL users (pgbench's scripts, one closed loop
//! per connection) against several targets — the database directly, through
//! `sluice proxy`, through PgBouncer — interleaved round by round, with
//! per-user throughput, U_f, V_l, latency percentiles, CPU steal, the worst
//! second's I/O stall, and the CPU time each proxy process spends per
//! transaction.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use serde::Serialize;
use sluice_bench::pgbench::{self, PgbenchSpec};

use crate::bench::{median, median_min_max};
use crate::pressure::IoStallWatch;
use crate::steal::CpuTimes;

/// PostgreSQL users (pgbench) directly, through sluice proxy, through PgBouncer
#[derive(Args)]
#[command(long_about = "PostgreSQL users against several targets, interleaved.\n\n\
    Each user is one connection running pgbench's script in a closed loop. Every round runs \
    each target once per user count; only transactions finishing after --warmup count, so a \
    proxy that tunes itself first is measured once settled. Reports per target the median \
    throughput, the paired ratio to the first target (median and spread over rounds), U_f, \
    V_l, p99, failed transactions, and the CPU time and context switches per transaction of \
    processes given by --cpu. Rounds with CPU steal above --max-steal are set aside.\n\n\
    Example: sluice bench pg --targets direct=127.0.0.1:5432,sluice=127.0.0.1:6432 \
    --users 8,256 --cpu sluice=$(pidof sluice)\n\
    scripts/bench-proxy.sh sets up PostgreSQL, PgBouncer and sluice proxy and runs this.")]
pub struct PgBench {
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
}

/// A tenant of `--tenants`.
#[derive(Clone, Debug, PartialEq)]
struct TenantSpec {
    name: String,
    weight: f64,
    users: Option<usize>,
}

/// One tenant's throughput and latency in a run.
#[derive(Clone, Debug, Serialize)]
struct TenantTps {
    name: String,
    weight: f64,
    users: usize,
    tps: f64,
    p99_ms: f64,
    p999_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
struct RunRecord {
    users: usize,
    round: usize,
    target: String,
    tps: f64,
    unfairness: f64,
    latency_cv: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    failed: u64,
    steal: f64,
    /// The worst second's share stalled on I/O (Linux PSI), over the whole
    /// run as steal is (warm-up included); `None` without PSI.
    io_stall_worst_s: Option<f64>,
    /// CPU milliseconds per transaction of the target's process, if given.
    cpu_ms_per_txn: Option<f64>,
    /// Context switches of the target's threads per transaction, if given.
    switches_per_txn: Option<f64>,
    tenants: Vec<TenantTps>,
}

pub fn run(args: PgBench) -> Result<()> {
    let targets = args.targets.iter().map(|t| target(t)).collect::<Result<Vec<_>>>()?;
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
    let tenants = args.tenants.iter().map(|t| tenant(t)).collect::<Result<Vec<_>>>()?;
    let mut records = Vec::new();
    for &users in &args.users {
        for round in 1..=args.rounds {
            for (name, host, port) in &targets {
                let usage_before = pids.get(name).map(|&p| Usage::of(p)).transpose()?;
                let steal_before = CpuTimes::now();
                let io_stall = IoStallWatch::start();
                let (result, tenants) = run_tenants(&args, &tenants, host, *port, users)
                    .with_context(|| format!("{name}, {users} users"))?;
                let steal = steal_before.steal_until(&CpuTimes::now());
                let io_stall_worst_s = io_stall.worst_second();
                let used = match (usage_before, pids.get(name)) {
                    (Some(before), Some(&pid)) => Some(Usage::of(pid)?.since(&before, result.finished_in_run)),
                    _ => None,
                };
                let r = RunRecord {
                    users,
                    round,
                    target: name.clone(),
                    tps: result.tps(),
                    unfairness: result.unfairness(),
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
                    "{users:>4} users  round {round}  {name:<12} {:>8.0} tps  U_f {:.3}  V_l {:.3}  p99 {:>7.1} ms  steal {:.1}%  io stall (worst s) {}",
                    r.tps,
                    r.unfairness,
                    r.latency_cv,
                    r.p99_ms,
                    steal * 100.0,
                    io_stall_worst_s.map_or("-".into(), |s| format!("{:.0}%", s * 100.0))
                );
                records.push(r);
            }
        }
    }
    print_table(&records, &targets[0].0, args.max_steal);
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        let path = out.join("runs.json");
        std::fs::write(&path, serde_json::to_string_pretty(&records)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// One run: every tenant's pgbench at once (or one pgbench if there are no
/// tenants), merged, with each tenant's throughput and latency.
fn run_tenants(
    args: &PgBench,
    tenants: &[TenantSpec],
    host: &str,
    port: u16,
    users: usize,
) -> Result<(pgbench::PgbenchResult, Vec<TenantTps>)> {
    let groups = user_split(tenants, users)?;
    let results: Vec<Result<pgbench::PgbenchResult>> = std::thread::scope(|scope| {
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
    let mut merged: Option<pgbench::PgbenchResult> = None;
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

/// The pgbench groups of a run as (application_name, weight, users): one
/// unnamed group without tenants; else each tenant with its own user count
/// or an even share of what the others leave of `users`.
fn user_split(tenants: &[TenantSpec], users: usize) -> Result<Vec<(Option<String>, f64, usize)>> {
    if tenants.is_empty() {
        return Ok(vec![(None, 1.0, users)]);
    }
    let fixed: usize = tenants.iter().filter_map(|t| t.users).sum();
    let even = tenants.iter().filter(|t| t.users.is_none()).count();
    anyhow::ensure!(
        even == 0 || fixed < users,
        "--users {users}: the tenants with a user count take {fixed}, none left for the others"
    );
    let rest = users.saturating_sub(fixed) / even.max(1);
    Ok(tenants
        .iter()
        .map(|t| (Some(t.name.clone()), t.weight, t.users.unwrap_or(rest.max(1))))
        .collect())
}

fn tenant(spec: &str) -> Result<TenantSpec> {
    let mut parts = spec.split(':');
    let (Some(name), Some(weight)) = (parts.next(), parts.next()) else {
        anyhow::bail!("--tenants wants NAME:WEIGHT[:USERS], got `{spec}`");
    };
    let weight: f64 = weight
        .parse()
        .with_context(|| format!("tenant `{name}`: bad weight `{weight}`"))?;
    anyhow::ensure!(
        weight.is_finite() && weight > 0.0,
        "tenant `{name}`: weight must be > 0, got {weight}"
    );
    let users = parts
        .next()
        .map(|u| match u.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(anyhow!("tenant `{name}`: users must be a whole number > 0, got `{u}`")),
        })
        .transpose()?;
    anyhow::ensure!(
        parts.next().is_none(),
        "--tenants wants NAME:WEIGHT[:USERS], got `{spec}`"
    );
    Ok(TenantSpec {
        name: name.to_string(),
        weight,
        users,
    })
}

/// A `NAME=HOST:PORT` target of `--targets`.
pub(crate) fn target(spec: &str) -> Result<(String, String, u16)> {
    let (name, addr) = spec
        .split_once('=')
        .ok_or_else(|| anyhow!("--targets wants NAME=HOST:PORT, got `{spec}`"))?;
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("target `{name}`: `{addr}` is not HOST:PORT"))?;
    let port = port
        .parse()
        .with_context(|| format!("target `{name}`: bad port `{port}`"))?;
    Ok((name.to_string(), host.to_string(), port))
}

/// What a process has used: CPU seconds (user plus system) and its
/// threads' context switches (each one a sleep and a wake-up, or a
/// preemption), so far or, after [`Usage::since`], per transaction.
#[derive(Clone, Copy)]
struct Usage {
    cpu_s: f64,
    switches: f64,
}

impl Usage {
    fn of(pid: u32) -> Result<Usage> {
        Ok(Usage {
            cpu_s: process_cpu(pid)?,
            switches: context_switches(pid)?,
        })
    }

    /// What was used from `before` to `self`, per transaction.
    fn since(&self, before: &Usage, transactions: u64) -> Usage {
        let n = transactions.max(1) as f64;
        Usage {
            cpu_s: (self.cpu_s - before.cpu_s) / n,
            switches: (self.switches - before.switches) / n,
        }
    }
}

/// User plus system CPU seconds of process `pid` so far.
fn process_cpu(pid: u32) -> Result<f64> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("process {pid} (--cpu)"))?;
    // The command name may hold spaces: fields count from after its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("/proc/{pid}/stat: no command field"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .zip(f.get(12).and_then(|s| s.parse::<f64>().ok()))
        .map(|(u, s)| u + s)
        .ok_or_else(|| anyhow!("/proc/{pid}/stat: no CPU times"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// Voluntary and involuntary context switches of all threads of `pid`.
fn context_switches(pid: u32) -> Result<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("process {pid} (--cpu)"))?;
    let mut switches = 0.0;
    for task in tasks {
        // A thread that ended meanwhile has nothing left to count.
        let Ok(status) = std::fs::read_to_string(task?.path().join("status")) else {
            continue;
        };
        switches += status
            .lines()
            .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(switches)
}

/// The kept runs grouped by (users, target), in the order first run.
fn groups<'a>(kept: &[&'a RunRecord]) -> Vec<Vec<&'a RunRecord>> {
    let mut groups: Vec<Vec<&RunRecord>> = Vec::new();
    for &r in kept {
        match groups
            .iter_mut()
            .find(|g| g[0].users == r.users && g[0].target == r.target)
        {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
}

fn print_table(records: &[RunRecord], baseline: &str, max_steal: f64) {
    let kept: Vec<&RunRecord> = records.iter().filter(|r| r.steal <= max_steal).collect();
    let set_aside = records.len() - kept.len();
    println!(
        "\nusers  target        tps (median)  vs {baseline:<10} (min-max)   U_f    V_l    p99 ms  failed  CPU ms/txn  switches/txn"
    );
    for runs in groups(&kept) {
        let (users, target) = (runs[0].users, &runs[0].target);
        let ratios: Vec<f64> = runs
            .iter()
            .filter_map(|r| {
                kept.iter()
                    .find(|b| b.users == users && b.round == r.round && b.target == baseline)
                    .map(|b| r.tps / b.tps)
            })
            .collect();
        let col = |f: &dyn Fn(&RunRecord) -> f64| median(runs.iter().map(|r| f(r)).collect());
        let (ratio, lo, hi) = median_min_max(ratios);
        // A column only some targets have (--cpu): "-" for the others.
        let optional = |f: &dyn Fn(&RunRecord) -> Option<f64>, digits: usize| {
            let m = col(&|r| f(r).unwrap_or(f64::NAN));
            if m.is_nan() {
                "-".into()
            } else {
                format!("{m:.digits$}")
            }
        };
        println!(
            "{users:>5}  {target:<12} {:>12.0}  {ratio:>6.2} ({lo:.2}-{hi:.2})          {:.3}  {:.3}  {:>7.1}  {:>6}  {:<10}  {}",
            col(&|r| r.tps),
            col(&|r| r.unfairness),
            col(&|r| r.latency_cv),
            col(&|r| r.p99_ms),
            runs.iter().map(|r| r.failed).sum::<u64>(),
            optional(&|r| r.cpu_ms_per_txn, 3),
            optional(&|r| r.switches_per_txn, 2),
        );
    }
    if set_aside > 0 {
        println!(
            "({set_aside} runs set aside for CPU steal above {:.0}%)",
            max_steal * 100.0
        );
    }
    print_shares(&kept);
}

/// Per tenant: its users, its share of the weights and its median share of
/// the throughput, its median throughput and p99.9 (and the worst p99.9 of
/// the runs); per target, the largest relative error of any tenant's share
/// in each run (median and max over the runs).
fn print_shares(kept: &[&RunRecord]) {
    if kept.iter().all(|r| r.tenants.is_empty()) {
        return;
    }
    println!(
        "\nusers  target           tenant  users  weight share  throughput share      tps  p99.9 ms (max)  worst share error (median, max)"
    );
    for runs in groups(kept) {
        let r = runs[0];
        let worst: Vec<f64> = runs
            .iter()
            .map(|x| share_errors(&x.tenants).into_iter().fold(0.0, f64::max))
            .collect();
        let total_weight: f64 = r.tenants.iter().map(|t| t.weight).sum();
        for (i, t) in r.tenants.iter().enumerate() {
            let share = |x: &RunRecord| x.tenants[i].tps / x.tenants.iter().map(|t| t.tps).sum::<f64>();
            let got = median(runs.iter().map(|&x| share(x)).collect());
            let tps = median(runs.iter().map(|x| x.tenants[i].tps).collect());
            let (p999, _, p999_max) = median_min_max(runs.iter().map(|x| x.tenants[i].p999_ms).collect());
            let tail = if i == 0 {
                let max = worst.iter().copied().fold(0.0, f64::max);
                format!("{:.1}%, {:.1}%", median(worst.clone()) * 100.0, max * 100.0)
            } else {
                String::new()
            };
            println!(
                "{:>5}  {:<15}  {:<6}  {:>5}  {:>12.3}  {got:>16.3}  {tps:>7.0}  {p999:>7.1} ({p999_max:.1})  {tail}",
                r.users,
                r.target,
                t.name,
                t.users,
                t.weight / total_weight
            );
        }
    }
}

/// Relative error of each tenant's throughput share against its weight share.
fn share_errors(tenants: &[TenantTps]) -> Vec<f64> {
    let total_weight: f64 = tenants.iter().map(|t| t.weight).sum();
    let total_tps: f64 = tenants.iter().map(|t| t.tps).sum();
    tenants
        .iter()
        .map(|t| ((t.tps / total_tps) / (t.weight / total_weight) - 1.0).abs())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_take_their_own_user_count_or_an_even_share() {
        let ls = tenant("ls:1:10").unwrap();
        assert_eq!(ls.users, Some(10));
        let be = tenant("be:9").unwrap();
        let split = user_split(&[ls.clone(), be], 100).unwrap();
        let users: Vec<usize> = split.iter().map(|g| g.2).collect();
        assert_eq!(users, [10, 90]);
        assert!(
            user_split(&[ls, tenant("be:1").unwrap()], 10).is_err(),
            "nothing left for be"
        );
    }

    #[test]
    fn bad_tenants_are_named() {
        for bad in ["ls", "ls:x", "ls:0", "ls:1:0", "ls:1:ten", "ls:1:2:3"] {
            let e = tenant(bad).unwrap_err().to_string();
            assert!(e.contains("ls") || e.contains("NAME:WEIGHT"), "{bad}: {e}");
        }
    }
}
