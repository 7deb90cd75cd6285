//! `sluice bench redis`: Redis users as AppleS counts them: N users, each a
//! closed loop on its own connection running a YCSB core workload, against
//! several RESP targets (Redis directly, through `sluice proxy`, through
//! another proxy) interleaved round by round, with per-user throughput,
//! U_f, V_l, latency percentiles and CPU steal.

use anyhow::{Context, Result};
use clap::Args;
use sluice_bench::{load, run as run_ycsb, Resp, TenantResult, TenantSpec, Workload};
use sluice_core::metrics::{unfairness, TenantStats};

use crate::bench::{median, median_min_max};
use crate::bench_io::status_mib;
use crate::bench_pg;
use crate::steal::CpuTimes;

/// Redis users (YCSB, one connection each) directly and through proxies
#[derive(Args)]
#[command(long_about = "Redis users against several RESP targets, interleaved.\n\n\
    Each user is one connection running a YCSB core workload (A, B, C, D or F; E needs a \
    range command Redis lacks) in a closed loop. The records are loaded once through the \
    first target; every round then runs each target for --seconds. Reports per target the \
    throughput, the paired ratio to the first target (median and spread), U_f, V_l and p50/p99. \
    Rounds with CPU steal above --max-steal are set aside.\n\n\
    Example: sluice bench redis --targets direct=127.0.0.1:6379,sluice=127.0.0.1:6380 --users 50")]
pub struct RedisBench {
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
}

struct Run {
    round: usize,
    target: String,
    ops_per_sec: f64,
    unfairness: f64,
    latency_cv: f64,
    p50_us: f64,
    p99_us: f64,
    steal: f64,
}

pub fn run(args: RedisBench) -> Result<()> {
    let workload = Workload::core(args.workload, args.records).context("--workload")?;
    anyhow::ensure!(
        !args.workload.eq_ignore_ascii_case(&'E'),
        "--workload E needs a range-scan command, which Redis lacks"
    );
    let targets = args
        .targets
        .iter()
        .map(|t| bench_pg::target(t).map(|(name, host, port)| (name, format!("{host}:{port}"))))
        .collect::<Result<Vec<_>>>()?;
    eprintln!("loading {} records through {}", args.records, targets[0].0);
    load(&Resp::new(targets[0].1.as_str())?, &workload, 8, 1)?;
    let users = TenantSpec::users(args.users.max(1), &workload);
    let mut runs = Vec::new();
    let mut ops = 0;
    for round in 1..=args.rounds {
        for (name, addr) in &targets {
            let resp = Resp::new(addr.as_str()).with_context(|| format!("target {name}"))?;
            let before = CpuTimes::now();
            let results = run_ycsb(&resp, &users, args.seconds, round as u64, &mut |_| {})
                .with_context(|| format!("target {name}"))?;
            let r = summarize(
                round,
                name,
                &results,
                args.seconds,
                before.steal_until(&CpuTimes::now()),
            );
            eprintln!(
                "round {round}  {name:<12} {:>9.0} ops/s  U_f {:.3}  V_l {:.3}  p50 {:.0} µs  p99 {:.0} µs  steal {:.1}%",
                r.ops_per_sec,
                r.unfairness,
                r.latency_cv,
                r.p50_us,
                r.p99_us,
                r.steal * 100.0
            );
            ops += results.iter().map(|u| u.ops).sum::<u64>();
            if let Some(pid) = args.rss_pid {
                let rss = status_mib(&pid.to_string(), "VmRSS:");
                let peak = status_mib(&pid.to_string(), "VmHWM:");
                eprintln!("round {round}  pid {pid}: RSS {rss:.1} MiB, peak {peak:.1} MiB after {ops} operations");
            }
            runs.push(r);
        }
    }
    print_table(&runs, &targets[0].0, args.max_steal);
    Ok(())
}

fn summarize(round: usize, target: &str, users: &[TenantResult], seconds: f64, steal: f64) -> Run {
    let stats: Vec<TenantStats> = users
        .iter()
        .map(|u| TenantStats {
            completed: u.ops,
            ..TenantStats::new(1.0)
        })
        .collect();
    let cvs: Vec<f64> = users
        .iter()
        .filter(|u| u.all.count() > 0)
        .map(|u| u.all.std_dev() / u.all.mean())
        .collect();
    let mut all = sluice_core::metrics::LatencyHistogram::default();
    for u in users {
        all.merge(&u.all);
    }
    Run {
        round,
        target: target.to_string(),
        ops_per_sec: users.iter().map(|u| u.ops).sum::<u64>() as f64 / seconds,
        unfairness: unfairness(&stats),
        latency_cv: cvs.iter().sum::<f64>() / cvs.len().max(1) as f64,
        p50_us: all.quantile(0.5) as f64 / 1e3,
        p99_us: all.quantile(0.99) as f64 / 1e3,
        steal,
    }
}

fn print_table(runs: &[Run], baseline: &str, max_steal: f64) {
    let kept: Vec<&Run> = runs.iter().filter(|r| r.steal <= max_steal).collect();
    println!("\ntarget        ops/s (median)  vs {baseline} (min-max)   U_f    V_l    p50 µs  p99 µs");
    let mut names: Vec<&str> = Vec::new();
    for r in &kept {
        if !names.contains(&r.target.as_str()) {
            names.push(&r.target);
        }
    }
    for name in names {
        let mine: Vec<&&Run> = kept.iter().filter(|r| r.target == name).collect();
        let ratios: Vec<f64> = mine
            .iter()
            .filter_map(|r| {
                kept.iter()
                    .find(|b| b.round == r.round && b.target == baseline)
                    .map(|b| r.ops_per_sec / b.ops_per_sec)
            })
            .collect();
        let med = |f: &dyn Fn(&Run) -> f64| median(mine.iter().map(|r| f(r)).collect());
        let (ratio, lo, hi) = median_min_max(ratios);
        println!(
            "{name:<12} {:>15.0}  {:>5.2} ({lo:.2}-{hi:.2})        {:.3}  {:.3}  {:>6.0}  {:>6.0}",
            med(&|r| r.ops_per_sec),
            ratio,
            med(&|r| r.unfairness),
            med(&|r| r.latency_cv),
            med(&|r| r.p50_us),
            med(&|r| r.p99_us),
        );
    }
    if kept.len() < runs.len() {
        println!(
            "({} runs set aside for CPU steal above {:.0}%)",
            runs.len() - kept.len(),
            max_steal * 100.0
        );
    }
}
