//! `sluice bench io`: the I/O runtime measured against its baselines.
//!
//! | part | file | compares |
//! |---|---|---|
//! | `rcp` | [`rcp`] | foreground under RCP, under FIFO, and alone; background cost |
//! | `bound` | [`rcp`] | the non-critical device bound swept (RCP §7.6, Fig. 11) |
//! | `overhead` | [`overhead`] | the runtime against a plain `pread` loop |
//! | `memory` | [`memory`] | bookkeeping per queued I/O; RSS over a long run |
//!
//! Configurations are interleaved within each round, rounds are repeated,
//! CPU steal is recorded per round and rounds above the threshold are set
//! aside; ratios are paired within a round and reported as median and range.

mod memory;
mod overhead;
mod rcp;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use sluice_core::device::{DeviceProfile, SsdConfig};
use sluice_io::{DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig};

use crate::bench::median;
use crate::steal::CpuTimes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Part {
    Rcp,
    Bound,
    Overhead,
    Memory,
    /// rcp, overhead and memory (bound is a separate sweep)
    All,
}

#[derive(Args)]
#[command(
    long_about = "The I/O runtime on an emulated SSD (4 channels, 80 us reads, 30 us writes \
    plus transfer at 200 MB/s per channel, device queue depth 32).\n\n\
    rcp: foreground 4 KiB random reads against background writers saturating the device, \
    under full RCP and under FIFO, beside the foreground alone; background throughput with a \
    light foreground (one reader, 5 ms think time) beside the background alone.\n\n\
    bound: the light foreground against the background writers with the bound on \
    non-critical I/Os at the device swept from 1 to 32 (RCP Fig. 11).\n\n\
    overhead: 4 KiB random reads through sluice-io against a plain pread loop on the same \
    device, at queue depth 1 and 32, on the emulated SSD and on the page cache (no timing \
    model: the runtime's CPU cost shows).\n\n\
    memory: bytes of bookkeeping per queued I/O, and resident memory sampled over a long \
    run of reads (it must not grow with the I/Os completed).\n\n\
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

/// Metrics of one configuration in one round.
type Metrics = BTreeMap<&'static str, f64>;

/// One configuration's result in one round.
#[derive(Clone, Debug, Serialize)]
struct Run {
    round: usize,
    config: String,
    steal: f64,
    metrics: Metrics,
}

const FILE_BYTES: u64 = 64 << 20;
const READ: usize = 4096;

/// The emulated SSD, or the page cache (no timing model).
fn device(emulated: bool) -> DeviceConfig {
    DeviceConfig {
        kind: if emulated {
            DeviceKind::Emulated
        } else {
            DeviceKind::Buffered
        },
        depth: 32,
        profile: emulated.then(|| DeviceProfile::Ssd(SsdConfig::default())),
    }
}

fn runtime(rcp: RcpConfig, emulated: bool) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        device: device(emulated),
        rcp,
    })?)
}

/// A file of `FILE_BYTES` to read from.
fn data_file(path: &Path) -> Result<()> {
    std::fs::File::create(path)?.set_len(FILE_BYTES)?;
    Ok(())
}

fn random_offset(state: &mut u64) -> u64 {
    // xorshift: cheap and good enough to spread reads over the file.
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % (FILE_BYTES / READ as u64)) * READ as u64
}

/// A ratio of two metrics, paired by round: (label, median, min, max).
type Ratio = (String, f64, f64, f64);

fn ratio(runs: &[Run], label: &str, num: (&str, &str), den: (&str, &str)) -> Ratio {
    let get = |round: usize, (config, metric): (&str, &str)| {
        runs.iter()
            .find(|r| r.round == round && r.config == config)
            .and_then(|r| r.metrics.get(metric).copied())
    };
    let rounds: BTreeSet<usize> = runs.iter().map(|r| r.round).collect();
    let xs: Vec<f64> = rounds
        .into_iter()
        .filter_map(|r| Some(get(r, num)? / get(r, den)?))
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (label.to_string(), median(xs), lo, hi)
}

fn ratios(runs: &[Run]) -> Vec<Ratio> {
    let mut all = rcp::ratios(runs);
    all.extend(overhead::ratios(runs));
    all.into_iter().filter(|r| r.1.is_finite()).collect()
}

pub(crate) fn rss_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?;
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
    ensure!(b.foreground_threads > 0, "--foreground-threads must be at least 1");
    let tmp = scratch_dir(b.dir.as_deref())?;
    let (mut kept, mut set_aside) = (Vec::new(), Vec::new());
    for round in 0..b.repeat {
        let before = CpuTimes::now();
        let dir = tmp.join(format!("r{round}"));
        std::fs::create_dir_all(&dir)?;
        let mut results = Vec::new();
        if matches!(b.part, Part::Rcp | Part::All) {
            results.extend(rcp::round(&b, &dir)?);
        }
        if b.part == Part::Bound {
            results.extend(rcp::bound_round(&b, &dir)?);
        }
        if matches!(b.part, Part::Overhead | Part::All) {
            results.extend(overhead::round(&b, &dir)?);
        }
        if matches!(b.part, Part::Memory | Part::All) {
            results.extend(memory::round(&dir)?);
        }
        std::fs::remove_dir_all(&dir).ok();
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

fn scratch_dir(dir: Option<&Path>) -> Result<PathBuf> {
    let d = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::temp_dir().join(format!("sluice-bench-io-{}", std::process::id())),
    };
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

fn report(b: &IoBench, kept: &[Run], set_aside: &[Run]) -> Result<()> {
    let ratios = ratios(kept);
    let peak = rss_mib("VmHWM:");
    if b.json {
        let out = serde_json::json!({ "kept": kept, "set_aside": set_aside, "ratios": ratios, "peak_rss_mib": peak });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} runs kept, {} set aside (steal > {:.0}%); medians over kept rounds",
        kept.len(),
        set_aside.len(),
        b.max_steal * 100.0
    );
    let configs: BTreeSet<&str> = kept.iter().map(|r| r.config.as_str()).collect();
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
        println!("{c:>22}: {}", metrics.join(", "));
    }
    if !ratios.is_empty() {
        println!("ratios, paired by round: median (min-max)");
    }
    for (label, m, lo, hi) in &ratios {
        println!("  {label}: {m:.3} ({lo:.3}-{hi:.3})");
    }
    println!("peak RSS: {peak:.1} MiB");
    Ok(())
}
