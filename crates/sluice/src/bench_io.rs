//! `sluice bench io`: the I/O runtime on an emulated SSD, in two parts.
//!
//! - **rcp**: foreground random reads against a flood of background writes,
//!   under full RCP and under FIFO (RCP disabled), beside the foreground
//!   alone; and background throughput with a light foreground beside the
//!   background alone (RCP §7.6 measures the same trade-off).
//! - **overhead**: random 4 KiB reads through the runtime against a plain
//!   `pread` loop on the same emulated device, at queue depth 1 and 32.
//!
//! Configurations are interleaved within each round, rounds are repeated,
//! CPU steal is recorded per round and rounds above the threshold are set
//! aside; ratios are paired within a round and reported as median and range.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use sluice_core::device::{DeviceProfile, SsdConfig};
use sluice_core::metrics::LatencyHistogram;
use sluice_core::Ctx;
use sluice_io::device::{plain_read, Device};
use sluice_io::{enter, DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig, TaskKind};

use crate::bench::median;
use crate::steal::CpuTimes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Part {
    Rcp,
    Overhead,
    All,
}

#[derive(Args)]
#[command(
    long_about = "The I/O runtime on an emulated SSD (4 channels, 80 us reads, 30 us writes \
    plus transfer at 200 MB/s per channel, device queue depth 32).\n\n\
    rcp: foreground 4 KiB random reads against background writers saturating the device, \
    under full RCP and under FIFO, beside the foreground alone; background throughput with a \
    light foreground (one reader, 5 ms think time) beside the background alone.\n\n\
    overhead: 4 KiB random reads through sluice-io against a plain pread loop on the same \
    emulated device, at queue depth 1 and 32.\n\n\
    Configurations are interleaved in every round; rounds with CPU steal above --max-steal are \
    set aside; ratios are paired within rounds."
)]
pub struct IoBench {
    /// Which part to run
    #[arg(long, value_enum, default_value = "all")]
    pub part: Part,
    /// Seconds per configuration per round
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Rounds; each round runs every configuration once
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Set aside rounds whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Background writer threads (each keeps one write outstanding)
    #[arg(long, default_value_t = 128)]
    pub background_threads: usize,
    /// Bytes per background write
    #[arg(long, default_value_t = 16384)]
    pub background_block: usize,
    /// Foreground reader threads in the rcp part
    #[arg(long, default_value_t = 2)]
    pub foreground_threads: usize,
    /// Directory for the benchmark's files (default: a fresh temporary one)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of tables
    #[arg(long)]
    pub json: bool,
}

/// One configuration's result in one round.
#[derive(Clone, Debug, Serialize)]
struct Run {
    round: usize,
    config: String,
    steal: f64,
    metrics: BTreeMap<&'static str, f64>,
}

const FILE_BYTES: u64 = 64 << 20;
const READ: usize = 4096;

fn device(depth: usize) -> DeviceConfig {
    DeviceConfig {
        kind: DeviceKind::Emulated,
        depth,
        profile: Some(DeviceProfile::Ssd(SsdConfig::default())),
    }
}

fn runtime(rcp: RcpConfig) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        device: device(32),
        rcp,
    })?)
}

/// A load: foreground readers and background writers for `seconds`.
#[derive(Clone, Copy)]
struct Load {
    readers: usize,
    think: Option<Duration>,
    writers: usize,
    block: usize,
}

fn random_offset(state: &mut u64) -> u64 {
    // xorshift: cheap and good enough to spread reads over the file.
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % (FILE_BYTES / READ as u64)) * READ as u64
}

/// Runs `load` on `rt`; returns foreground latencies, foreground I/Os and
/// background bytes, with the elapsed time.
fn run_load(rt: &Runtime, dir: &Path, load: Load, seconds: f64) -> Result<(LatencyHistogram, u64, u64, f64)> {
    let data = rt.open(dir.join("data"), true)?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(data.path())?
        .set_len(FILE_BYTES)?;
    let stop = Arc::new(AtomicBool::new(false));
    let hist = Arc::new(Mutex::new(LatencyHistogram::default()));
    let (fg_ios, bg_bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let bg = rt.register_background("writers", TaskKind::Compaction);
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        for i in 0..load.writers {
            let f = rt.open(dir.join(format!("bg-{i}")), true)?;
            let (stop, bg, bytes) = (stop.clone(), bg.clone(), bg_bytes.clone());
            s.spawn(move || {
                let _bg = bg.enter();
                let buf = vec![0x5au8; load.block];
                let mut off = 0;
                while !stop.load(Ordering::Relaxed) {
                    f.write_at(&buf, off).expect("background write");
                    bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    off = (off + buf.len() as u64) % (8 << 20);
                }
            });
        }
        for i in 0..load.readers {
            let (f, stop, hist, ios) = (data.clone(), stop.clone(), hist.clone(), fg_ios.clone());
            s.spawn(move || {
                let mut local = LatencyHistogram::default();
                let mut buf = vec![0u8; READ];
                let mut rng = 0x9e3779b97f4a7c15u64 ^ (i as u64 + 1);
                while !stop.load(Ordering::Relaxed) {
                    let _req = enter(Ctx::new(0, 0));
                    let t = Instant::now();
                    f.read_at(&mut buf, random_offset(&mut rng)).expect("foreground read");
                    local.record(t.elapsed().as_nanos() as u64);
                    ios.fetch_add(1, Ordering::Relaxed);
                    if let Some(think) = load.think {
                        std::thread::sleep(think);
                    }
                }
                hist.lock().expect("histogram").merge(&local);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        Ok(())
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let hist = hist.lock().expect("histogram").clone();
    Ok((
        hist,
        fg_ios.load(Ordering::Relaxed),
        bg_bytes.load(Ordering::Relaxed),
        elapsed,
    ))
}

fn rcp_round(b: &IoBench, dir: &Path) -> Result<Vec<(String, BTreeMap<&'static str, f64>)>> {
    let heavy = Load {
        readers: b.foreground_threads,
        think: None,
        writers: b.background_threads,
        block: b.background_block,
    };
    let light = Load {
        readers: 1,
        think: Some(Duration::from_millis(5)),
        ..heavy
    };
    let configs: [(&str, RcpConfig, Load); 6] = [
        ("fg-alone", RcpConfig::default(), Load { writers: 0, ..heavy }),
        ("rcp", RcpConfig::default(), heavy),
        ("fifo", RcpConfig::off(), heavy),
        ("bg-alone-rcp", RcpConfig::default(), Load { readers: 0, ..heavy }),
        ("bg+light-fg-rcp", RcpConfig::default(), light),
        ("bg-alone-fifo", RcpConfig::off(), Load { readers: 0, ..heavy }),
    ];
    let mut out = Vec::new();
    for (name, rcp, load) in configs {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub)?;
        let (h, ios, bytes, secs) = run_load(&runtime(rcp)?, &sub, load, b.seconds)?;
        let mut m = BTreeMap::new();
        if ios > 0 {
            m.insert("fg_iops", ios as f64 / secs);
            m.insert("fg_p50_us", h.quantile(0.5) as f64 / 1e3);
            m.insert("fg_p99_us", h.quantile(0.99) as f64 / 1e3);
            m.insert("fg_p999_us", h.quantile(0.999) as f64 / 1e3);
        }
        if bytes > 0 {
            m.insert("bg_mb_s", bytes as f64 / secs / 1e6);
        }
        out.push((name.to_string(), m));
    }
    Ok(out)
}

/// `qd` threads of random reads for `seconds`, through the runtime or plain.
fn read_loop(through_sluice: bool, qd: usize, dir: &Path, seconds: f64) -> Result<BTreeMap<&'static str, f64>> {
    let path = dir.join(format!("reads-{qd}-{through_sluice}"));
    std::fs::File::create(&path)?.set_len(FILE_BYTES)?;
    let rt = runtime(RcpConfig::default())?;
    let sluice_file = rt.open(&path, false)?;
    let plain_device = Device::new(&device(32))?;
    let plain_file = std::fs::File::open(&path)?;
    let stop = AtomicBool::new(false);
    let hist = Mutex::new(LatencyHistogram::default());
    let ios = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for i in 0..qd {
            let (f, pf, dev, stop, hist, ios) = (&sluice_file, &plain_file, &plain_device, &stop, &hist, &ios);
            s.spawn(move || {
                let mut local = LatencyHistogram::default();
                let mut buf = vec![0u8; READ];
                let mut rng = 0x2545f4914f6cdd1du64 ^ (i as u64 + 1);
                let _req = enter(Ctx::new(0, 0));
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let off = random_offset(&mut rng);
                    let t = Instant::now();
                    if through_sluice {
                        f.read_at(&mut buf, off).expect("read through sluice");
                    } else {
                        plain_read(dev, pf, &mut buf, off).expect("plain read");
                    }
                    local.record(t.elapsed().as_nanos() as u64);
                    n += 1;
                }
                ios.fetch_add(n, Ordering::Relaxed);
                hist.lock().expect("histogram").merge(&local);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    let secs = started.elapsed().as_secs_f64();
    let h = hist.into_inner().expect("histogram");
    Ok(BTreeMap::from([
        ("iops", ios.into_inner() as f64 / secs),
        ("p50_us", h.quantile(0.5) as f64 / 1e3),
        ("p99_us", h.quantile(0.99) as f64 / 1e3),
    ]))
}

fn overhead_round(b: &IoBench, dir: &Path) -> Result<Vec<(String, BTreeMap<&'static str, f64>)>> {
    let mut out = Vec::new();
    for qd in [1, 32] {
        for (name, sluice) in [("plain", false), ("sluice", true)] {
            out.push((format!("{name}-qd{qd}"), read_loop(sluice, qd, dir, b.seconds)?));
        }
    }
    Ok(out)
}

/// A ratio of two metrics, paired by round: (label, median, min, max).
type Ratio = (String, f64, f64, f64);

fn ratio(runs: &[Run], label: &str, num: (&str, &str), den: (&str, &str)) -> Ratio {
    let get = |round: usize, (config, metric): (&str, &str)| {
        runs.iter()
            .find(|r| r.round == round && r.config == config)
            .and_then(|r| r.metrics.get(metric).copied())
    };
    let rounds: std::collections::BTreeSet<usize> = runs.iter().map(|r| r.round).collect();
    let xs: Vec<f64> = rounds
        .into_iter()
        .filter_map(|r| Some(get(r, num)? / get(r, den)?))
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (label.to_string(), median(xs), lo, hi)
}

fn ratios(runs: &[Run]) -> Vec<Ratio> {
    vec![
        ratio(
            runs,
            "fg p99.9: rcp / fg-alone (target <= 2)",
            ("rcp", "fg_p999_us"),
            ("fg-alone", "fg_p999_us"),
        ),
        ratio(
            runs,
            "fg p99.9: fifo / rcp (target >= 10)",
            ("fifo", "fg_p999_us"),
            ("rcp", "fg_p999_us"),
        ),
        ratio(
            runs,
            "bg MB/s: light fg / bg-alone, rcp (target >= 0.5)",
            ("bg+light-fg-rcp", "bg_mb_s"),
            ("bg-alone-rcp", "bg_mb_s"),
        ),
        ratio(
            runs,
            "bg MB/s: bg-alone rcp / bg-alone fifo (cost of the bound)",
            ("bg-alone-rcp", "bg_mb_s"),
            ("bg-alone-fifo", "bg_mb_s"),
        ),
        ratio(
            runs,
            "IOPS qd1: sluice / plain (target >= 0.9)",
            ("sluice-qd1", "iops"),
            ("plain-qd1", "iops"),
        ),
        ratio(
            runs,
            "IOPS qd32: sluice / plain (target >= 0.9)",
            ("sluice-qd32", "iops"),
            ("plain-qd32", "iops"),
        ),
        ratio(
            runs,
            "p50 qd1: sluice / plain",
            ("sluice-qd1", "p50_us"),
            ("plain-qd1", "p50_us"),
        ),
        ratio(
            runs,
            "p50 qd32: sluice / plain",
            ("sluice-qd32", "p50_us"),
            ("plain-qd32", "p50_us"),
        ),
    ]
    .into_iter()
    .filter(|r| r.1.is_finite())
    .collect()
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

pub fn run(b: IoBench) -> Result<()> {
    ensure!(b.repeat >= 1, "--repeat must be at least 1");
    ensure!(
        b.seconds > 0.0 && b.seconds.is_finite(),
        "--seconds must be a number > 0"
    );
    ensure!(b.background_block > 0, "--background-block must be at least 1 byte");
    let tmp = tempfile_dir(b.dir.as_deref())?;
    let (mut kept, mut set_aside) = (Vec::new(), Vec::new());
    for round in 0..b.repeat {
        let before = CpuTimes::now();
        let mut results = Vec::new();
        if matches!(b.part, Part::Rcp | Part::All) {
            results.extend(rcp_round(&b, &tmp.join(format!("r{round}")))?);
        }
        if matches!(b.part, Part::Overhead | Part::All) {
            results.extend(overhead_round(&b, &tmp)?);
        }
        let steal = before.steal_until(&CpuTimes::now());
        eprintln!("round {}/{}: steal {:.1}%", round + 1, b.repeat, steal * 100.0);
        let runs = results.into_iter().map(|(config, metrics)| Run {
            round,
            config,
            steal,
            metrics,
        });
        if steal > b.max_steal {
            set_aside.extend(runs);
        } else {
            kept.extend(runs);
        }
    }
    if b.dir.is_none() {
        std::fs::remove_dir_all(&tmp).ok();
    }
    report(&b, &kept, &set_aside)
}

fn tempfile_dir(dir: Option<&Path>) -> Result<PathBuf> {
    let d = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::temp_dir().join(format!("sluice-bench-io-{}", std::process::id())),
    };
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

fn report(b: &IoBench, kept: &[Run], set_aside: &[Run]) -> Result<()> {
    let ratios = ratios(kept);
    if b.json {
        let out = serde_json::json!({ "kept": kept, "set_aside": set_aside, "ratios": ratios, "peak_rss_mib": peak_rss_mib() });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} runs kept, {} set aside (steal > {:.0}%)",
        kept.len(),
        set_aside.len(),
        b.max_steal * 100.0
    );
    let mut configs: Vec<&str> = kept.iter().map(|r| r.config.as_str()).collect();
    configs.dedup();
    configs.sort_unstable();
    configs.dedup();
    for c in configs {
        let runs: Vec<&Run> = kept.iter().filter(|r| r.config == c).collect();
        let metrics: Vec<String> = runs[0]
            .metrics
            .keys()
            .map(|k| {
                let v = median(runs.iter().filter_map(|r| r.metrics.get(k).copied()).collect());
                format!("{k} {v:.1}")
            })
            .collect();
        println!("{c:>18}: {}", metrics.join(", "));
    }
    println!("ratios, paired by round: median (min-max)");
    for (label, m, lo, hi) in &ratios {
        println!("  {label}: {m:.3} ({lo:.3}-{hi:.3})");
    }
    println!("peak RSS: {:.1} MiB", peak_rss_mib());
    Ok(())
}
