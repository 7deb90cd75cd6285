//! `sluice bench redis`: Redis users as AppleS counts them: N users, each a
//! closed loop on its own connection running a YCSB core workload, against
//! several RESP targets (Redis directly, through `sluice proxy`, through
//! another proxy) interleaved round by round, with per-user throughput,
//! U_f, V_l, latency percentiles and CPU steal.

use anyhow::{Context, Result};
use sluice_core::metrics::{unfairness, LatencyHistogram, TenantStats};

use crate::driver::{load, run as run_users, TenantResult, TenantSpec};
use crate::harness::{median, paired_ratios, parse_target, split_by_steal, targets, Run as _, Spread};
use crate::process::status_mib;
use crate::steal;
use crate::target::Resp;
use crate::ycsb::Workload;

/// What to measure.
#[derive(Clone, Debug)]
pub struct RedisBench {
    /// Targets as NAME=HOST:PORT; the first is the baseline.
    pub targets: Vec<String>,
    /// Users (connections, each a closed loop).
    pub users: usize,
    /// YCSB core workload letter.
    pub workload: char,
    /// Records loaded before the runs.
    pub records: u64,
    /// Seconds per run.
    pub seconds: f64,
    pub rounds: usize,
    /// Runs whose CPU steal exceeds this fraction are set aside.
    pub max_steal: f64,
    /// Report the resident memory of this process (a server under test)
    /// after every run.
    pub rss_pid: Option<u32>,
    /// Operations a user sends together before reading their replies.
    pub pipeline: usize,
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

impl crate::harness::Run for Run {
    fn round(&self) -> usize {
        self.round
    }
    fn target(&self) -> &str {
        &self.target
    }
    fn steal(&self) -> f64 {
        self.steal
    }
}

/// Loads the records, runs the rounds; returns the table.
pub fn run(args: &RedisBench) -> Result<String> {
    let workload = Workload::core(args.workload, args.records).context("--workload")?;
    anyhow::ensure!(
        !args.workload.eq_ignore_ascii_case(&'E'),
        "--workload E needs a range-scan command, which Redis lacks"
    );
    let targets = args
        .targets
        .iter()
        .map(|t| parse_target(t).map(|(name, host, port)| (name, format!("{host}:{port}"))))
        .collect::<Result<Vec<_>>>()?;
    // Each target may be a store of its own; through proxies of one store
    // the same records are written again.
    for (name, addr) in &targets {
        eprintln!("loading {} records through {name}", args.records);
        load(
            &Resp::new(addr.as_str()).with_context(|| format!("target {name}"))?,
            &workload,
            8,
            1,
        )?;
    }
    anyhow::ensure!(args.pipeline >= 1, "--pipeline: at least 1 (one operation at a time)");
    let users: Vec<TenantSpec> = TenantSpec::users(args.users.max(1), &workload)
        .into_iter()
        .map(|user| TenantSpec {
            pipeline: args.pipeline,
            ..user
        })
        .collect();
    if args.pipeline > 1 {
        eprintln!(
            "each user sends {} operations before it reads their replies",
            args.pipeline
        );
    }
    let mut runs = Vec::new();
    let mut ops = 0;
    for round in 1..=args.rounds {
        for (name, addr) in &targets {
            let resp = Resp::new(addr.as_str()).with_context(|| format!("target {name}"))?;
            let (results, steal) = steal::during(|| run_users(&resp, &users, args.seconds, round as u64, &mut |_| {}));
            let results = results.with_context(|| format!("target {name}"))?;
            let r = summarize(round, name, &results, args.seconds, steal);
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
    Ok(table(&runs, &targets[0].0, args.max_steal))
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
    let mut all = LatencyHistogram::default();
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

fn table(runs: &[Run], baseline: &str, max_steal: f64) -> String {
    let (kept, set_aside) = split_by_steal(runs, max_steal);
    let mut out = format!("\ntarget        ops/s (median)  vs {baseline} (min-max)   U_f    V_l    p50 µs  p99 µs\n");
    for name in targets(&kept) {
        let mine: Vec<&Run> = kept.iter().copied().filter(|r| r.target() == name).collect();
        let ratio = Spread::of(paired_ratios(&kept, name, baseline, |r| Some(r.ops_per_sec)));
        let med = |f: &dyn Fn(&Run) -> f64| median(mine.iter().map(|r| f(r)));
        out += &format!(
            "{name:<12} {:>15.0}  {:>5.2} ({:.2}-{:.2})        {:.3}  {:.3}  {:>6.0}  {:>6.0}\n",
            med(&|r| r.ops_per_sec),
            ratio.median,
            ratio.min,
            ratio.max,
            med(&|r| r.unfairness),
            med(&|r| r.latency_cv),
            med(&|r| r.p50_us),
            med(&|r| r.p99_us),
        );
    }
    if !set_aside.is_empty() {
        out += &format!(
            "({} runs set aside for CPU steal above {:.0}%)\n",
            set_aside.len(),
            max_steal * 100.0
        );
    }
    out
}
