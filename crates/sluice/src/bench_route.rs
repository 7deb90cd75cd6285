//! `sluice bench route`: the cooperative scheduler's experiment (Jo et al.,
//! Table 1 and Fig. 4) on real shards. `sluice serve` shards, each its own
//! process on its own emulated device, behind `sluice route` (in this
//! process); closed-loop users run range scans of U(1, 100) records through
//! the router, so every scan fans out to every shard. Each round restarts
//! the shards once per shard policy (fifo, the paper's noop; fair, round robin
//! policy over the router's connections, the paper's cfq analogue; coop,
//! request order) and measures each after a warm-up, interleaved; the
//! table gives each policy's ratios to the first, paired by round.

use std::fmt::Write as _;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use sluice_bench::{load, run as run_users, Distribution, Resp, TenantSpec, Workload};
use sluice_core::metrics::LatencyHistogram;
use sluice_route::config::Config;
use sluice_route::Router;

use crate::bench::median_min_max;
use crate::steal::CpuTimes;

/// Range scans through sluice route over sluice serve shards, per shard policy
#[derive(Args)]
#[command(
    long_about = "Range scans through sluice route over sluice serve shards, per shard I/O policy.\n\n\
    Starts --shards sluice serve processes, each with its own data directory on an emulated SSD \
    (--read-us per read, --channels, a small block cache so that scans read the device), and \
    sluice route in this process in front of them. Loads --records records of 1 KiB through the \
    router, then each round runs every policy of --policies in turn: the shards restart with that \
    I/O policy, --users closed-loop users scan U(1,100) records from a random key for --warmup \
    seconds (not measured) and --seconds (measured). Reports per policy the scan latency \
    (p50, p99), the sub-request gap measured at the router, throughput, and paired ratios to the \
    first policy. --writer adds a client writing to the first shard throughout, so that it \
    flushes and compacts while the scans run.\n\n\
    Example: sluice bench route --policies fifo,fair,coop --rounds 5"
)]
pub struct RouteBench {
    /// Shard I/O policies, comma-separated; the first is the baseline
    #[arg(long, value_delimiter = ',', default_value = "fifo,fair,coop")]
    pub policies: Vec<String>,
    #[arg(long, default_value_t = 4)]
    pub shards: usize,
    /// Closed-loop users, each its own connection to the router
    #[arg(long, default_value_t = 64)]
    pub users: usize,
    /// Records of 1 KiB, loaded once
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Emulated read time, µs
    #[arg(long, default_value_t = 1000.0)]
    pub read_us: f64,
    /// Emulated device channels (reads served at once)
    #[arg(long, default_value_t = 4)]
    pub channels: u32,
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Measured seconds per run
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// coop's starvation guard at the shards, ms: a job queued this long is
    /// served next whatever its request id. Above the scans' latency, so
    /// that the guard does not reorder each shard's queue on its own clock
    /// (the policy's default, 100 ms, is below it here)
    #[arg(long, default_value_t = 1000.0)]
    pub coop_starvation_ms: f64,
    /// Writes per second to the first shard during every run (4 KiB each); 0: none
    #[arg(long, default_value_t = 0.0)]
    pub writer: f64,
    /// Set aside rounds whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Where the shards keep their data (default: a temporary directory)
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The shard processes, stopped when dropped.
struct Shards {
    exe: PathBuf,
    dir: PathBuf,
    ports: Vec<u16>,
    children: Vec<Child>,
    bench: RouteParams,
}

#[derive(Clone, Copy)]
struct RouteParams {
    read_us: f64,
    channels: u32,
    coop_starvation_ms: f64,
}

impl Shards {
    fn start(&mut self, policy: &str) -> Result<()> {
        self.stop();
        let runtime = self.dir.join(format!("runtime-{policy}.toml"));
        std::fs::write(
            &runtime,
            format!(
                "[device]\nkind = \"emulated\"\ndepth = {ch}\n[device.profile]\nmodel = \"ssd\"\nchannels = {ch}\nread_us = {r}\n[rcp]\npolicy = \"{policy}\"\n[rcp.options]\ncoop = {{ starvation_ms = {s} }}\n",
                ch = self.bench.channels,
                r = self.bench.read_us,
                s = self.bench.coop_starvation_ms
            ),
        )?;
        for (i, port) in self.ports.iter().enumerate() {
            let log = std::fs::File::create(self.dir.join(format!("shard-{i}.log")))?;
            let child = Command::new(&self.exe)
                .args([
                    "serve",
                    "--port",
                    &port.to_string(),
                    "--no-sync",
                    "--block-cache-mb",
                    "1",
                ])
                .arg("--dir")
                .arg(self.dir.join(format!("shard-{i}")))
                .arg("--runtime")
                .arg(&runtime)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("starting a sluice serve shard")?;
            self.children.push(child);
        }
        for port in &self.ports {
            wait_listening(*port)?;
        }
        Ok(())
    }

    fn stop(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait_listening(port: u16) -> Result<()> {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("shard on port {port} did not start within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The router, serving from a thread of its own.
fn start_router(ports: &[u16], users: usize) -> Result<(std::net::SocketAddr, Arc<Router>)> {
    let per = 16384 / ports.len();
    let mut toml = format!("listen = \"127.0.0.1:0\"\n[pool]\nsize = {}\n", users.max(1) + 8);
    for (i, port) in ports.iter().enumerate() {
        let hi = if i + 1 == ports.len() { 16383 } else { (i + 1) * per - 1 };
        toml.push_str(&format!(
            "[[shard]]\nname = \"s{i}\"\naddr = \"127.0.0.1:{port}\"\nslots = \"{}-{hi}\"\n",
            i * per
        ));
    }
    Ok(sluice_route::spawn(Config::from_toml(&toml)?)?)
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
}

pub fn run(args: RouteBench) -> Result<()> {
    ensure!(
        args.shards >= 1 && args.users >= 1 && args.rounds >= 1,
        "--shards, --users and --rounds must be at least 1"
    );
    ensure!(!args.policies.is_empty(), "--policies is empty");
    for p in &args.policies {
        p.parse::<sluice_core::PolicySpec>()
            .with_context(|| format!("--policies: `{p}`"))?;
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
    let ports = (0..args.shards).map(|_| free_port()).collect::<Result<Vec<_>>>()?;
    let mut shards = Shards {
        exe: std::env::current_exe()?,
        dir: dir.clone(),
        ports: ports.clone(),
        children: Vec::new(),
        bench: RouteParams {
            read_us: args.read_us,
            channels: args.channels,
            coop_starvation_ms: args.coop_starvation_ms,
        },
    };
    shards.start(&args.policies[0])?;
    let (addr, router) = start_router(&ports, args.users)?;
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
    let target = Resp::new(addr)?;
    eprintln!(
        "loading {} records of 1 KiB over {} shards through the router",
        args.records, args.shards
    );
    load(&target, &workload, 4, 1)?;
    let users = TenantSpec::users(args.users, &workload);
    settle(&ports)?;
    let mut runs = Vec::new();
    for round in 1..=args.rounds {
        // Odd rounds in the given order, even rounds reversed, so that no
        // policy always runs first after a restart of the bench or last
        // before the next round.
        let mut order: Vec<&String> = args.policies.iter().collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for policy in order {
            shards.start(policy)?;
            let writer = Writer::start(addr, &ports, args.writer);
            run_users(&target, &users, args.warmup, round as u64 * 1000, &mut |_| {})?;
            router.stats.gap.reset();
            for shard in router.shards() {
                shard.stats.latency.reset();
            }
            let before = CpuTimes::now();
            let results = run_users(&target, &users, args.seconds, round as u64, &mut |_| {})?;
            let steal = before.steal_until(&CpuTimes::now());
            drop(writer);
            let mut all = LatencyHistogram::default();
            for u in &results {
                all.merge(&u.all);
            }
            let gap = router.stats.gap.summary();
            let r = Run {
                round,
                policy: policy.clone(),
                ops_per_sec: all.count() as f64 / args.seconds,
                p50_ms: all.quantile(0.5) as f64 / 1e6,
                p99_ms: all.quantile(0.99) as f64 / 1e6,
                gap_p99_ms: gap.p99_ms,
                gap_p50_ms: gap.p50_ms,
                steal,
            };
            // Each shard's sub-request latency at the router: where the
            // gap comes from (a shard that is slower than the others).
            let shard_p50: Vec<String> = router
                .shards()
                .iter()
                .map(|s| format!("{:.0}", s.stats.latency.summary().p50_ms))
                .collect();
            eprintln!(
                "round {round}  {:<6} {:>7.1} scans/s  p50 {:>7.1} ms  p99 {:>7.1} ms  gap p50 {:>6.1} p99 {:>6.1} ms  shards' p50 {} ms  steal {:.1}%",
                r.policy,
                r.ops_per_sec,
                r.p50_ms,
                r.p99_ms,
                r.gap_p50_ms,
                r.gap_p99_ms,
                shard_p50.join("/"),
                r.steal * 100.0
            );
            runs.push(r);
        }
    }
    print!("{}", table(&runs, &args.policies, args.max_steal));
    Ok(())
}

/// Waits until no shard has flush or compaction work left from the load
/// (their INFO's `backlog_bytes` and `pending_compaction_bytes`), so that the first run measured does not
/// share the devices with the load's compactions.
fn settle(ports: &[u16]) -> Result<()> {
    let started = Instant::now();
    loop {
        let mut backlog = 0u64;
        for port in ports {
            let text = info(*port)?;
            backlog += text
                .lines()
                .filter_map(|l| l.split("backlog_bytes=").nth(1))
                .filter_map(|rest| rest.split(',').next()?.trim().parse::<u64>().ok())
                .sum::<u64>();
            backlog += text
                .lines()
                .filter_map(|l| l.strip_prefix("pending_compaction_bytes:"))
                .filter_map(|n| n.trim().parse::<u64>().ok())
                .sum::<u64>();
        }
        if backlog == 0 {
            // The load and its compactions left dirty pages that the
            // kernel writes back over minutes, taking the real disk from
            // the emulated devices' reads at random: written now, once.
            eprintln!("writing the load's dirty pages back (sync)");
            // SAFETY: sync(2) takes no arguments and cannot fail.
            unsafe { libc::sync() };
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the shards still had {backlog} bytes of flush and compaction to do after 300 s");
        }
        eprintln!(
            "waiting for the load's flushes and compactions: {:.1} MiB left",
            backlog as f64 / 1048576.0
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// A shard's INFO text.
fn info(port: u16) -> Result<String> {
    use sluice_kv::resp::{encode_command, parse_reply, Limits, Reply};
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    let mut out = Vec::new();
    encode_command(&["INFO"], &mut out);
    stream.write_all(&out)?;
    let mut buf = Vec::new();
    loop {
        if let Some((reply, _)) = parse_reply(&buf, &Limits::default())? {
            return match reply {
                Reply::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
                other => bail!("shard on port {port} answered INFO with {other:?}"),
            };
        }
        let mut chunk = [0u8; 16384];
        let n = stream.read(&mut chunk)?;
        ensure!(n > 0, "shard on port {port} closed the connection during INFO");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A client writing 4 KiB values to keys of the first shard at a steady
/// rate, so that it flushes and compacts during the run.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(router: std::net::SocketAddr, ports: &[u16], per_sec: f64) -> Option<Writer> {
        if per_sec <= 0.0 {
            return None;
        }
        // A hash tag whose slot is in the first shard's range.
        let first_shard_slots = 16384 / ports.len() as u16;
        let tag = (0u32..)
            .map(|i| format!("w{i}"))
            .find(|t| sluice_route::slot::slot(t.as_bytes()) < first_shard_slots)
            .expect("some tag hashes into the first shard");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let Ok(target) = Resp::new(router) else { return };
            let Ok(mut client) = sluice_bench::Target::client(&target) else {
                return;
            };
            let value = vec![b'w'; 4096];
            let start = Instant::now();
            let mut n = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let due = start + Duration::from_secs_f64(n as f64 / per_sec);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let key = format!("{{{tag}}}{}", n % 1_000_000);
                if client.write(key.as_bytes(), &value).is_err() {
                    return;
                }
                n += 1;
            }
        });
        Some(Writer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The summary: per policy, medians over the kept runs and ratios to the
/// baseline paired by round (a round whose baseline run was set aside
/// gives no ratio).
fn table(runs: &[Run], policies: &[String], max_steal: f64) -> String {
    let mut out = String::new();
    let kept: Vec<&Run> = runs.iter().filter(|r| r.steal <= max_steal).collect();
    let set_aside = runs.len() - kept.len();
    let rounds: std::collections::BTreeSet<usize> = kept.iter().map(|r| r.round).collect();
    let baseline = &policies[0];
    let _ = writeln!(
        out,
        "| policy | scans/s | p50 ms | p99 ms | gap p99 ms | p99 / {baseline} | gap p99 / {baseline} | scans/s / {baseline} | p50 / {baseline} |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    let find = |round: usize, p: &str| kept.iter().find(|r| r.round == round && r.policy == p).copied();
    for p in policies {
        let mine: Vec<&Run> = kept.iter().filter(|r| &r.policy == p).copied().collect();
        if mine.is_empty() {
            continue;
        }
        let med = |f: &dyn Fn(&Run) -> f64| median_min_max(mine.iter().map(|r| f(r)).collect()).0;
        let ratio = |f: &dyn Fn(&Run) -> f64| {
            let xs: Vec<f64> = rounds
                .iter()
                .filter_map(|&round| Some(f(find(round, p)?) / f(find(round, baseline)?)))
                .collect();
            let (m, lo, hi) = median_min_max(xs);
            format!("{m:.2} ({lo:.2}–{hi:.2})")
        };
        let _ = writeln!(
            out,
            "| {p} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} |",
            med(&|r| r.ops_per_sec),
            med(&|r| r.p50_ms),
            med(&|r| r.p99_ms),
            med(&|r| r.gap_p99_ms),
            ratio(&|r| r.p99_ms),
            ratio(&|r| r.gap_p99_ms),
            ratio(&|r| r.ops_per_sec),
            ratio(&|r| r.p50_ms),
        );
    }
    let steals: Vec<f64> = runs.iter().map(|r| r.steal * 100.0).collect();
    let _ = writeln!(
        out,
        "\n{} runs in {} rounds; steal {:.1}–{:.1}%; {} set aside (steal above {:.0}%)",
        runs.len(),
        rounds.len(),
        steals.iter().copied().fold(f64::INFINITY, f64::min),
        steals.iter().copied().fold(0.0, f64::max),
        set_aside,
        max_steal * 100.0
    );
    out
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
        };
        let runs = vec![
            run(1, "fifo", 10.0, 0.0),
            run(1, "coop", 6.0, 0.0),
            run(2, "fifo", 20.0, 0.5),
            run(2, "coop", 1.0, 0.0),
        ];
        let text = table(&runs, &["fifo".into(), "coop".into()], 0.1);
        assert!(
            text.contains("| coop | 100.0 | 1.0 | 6.0 | 1.0 | 0.60 (0.60–0.60) |"),
            "{text}"
        );
        assert!(
            text.contains("| fifo | 100.0 | 1.0 | 10.0 |"),
            "round 2's fifo is set aside: {text}"
        );
        assert!(text.contains("1 set aside"), "{text}");
    }
}
