//! `sluice bench io`: the I/O runtime measured against its baselines.
//!
//! | part | file | compares |
//! |---|---|---|
//! | `rcp` | [`rcp`] | FIFO, a static rate limit, dispatch priority only, RCP, RCP plus the controller; foreground alone; background cost |
//! | `bound` | [`bound`] | the non-critical device bound swept (RCP §7.6, Fig. 11) |
//! | `overhead` | [`overhead`] | the runtime against a plain `pread` loop |
//! | `memory` | [`memory`] | bookkeeping per queued I/O; RSS over a long run |
//! | `uring` | [`uring`] | `pread` threads against one io_uring ring, page cache and real disk |
//!
//! The workload of `rcp` and `bound` is in [`workload`]; plots in [`plot`].
//!
//! Configurations are interleaved within each round, rounds are repeated,
//! CPU steal is recorded per round and rounds above the threshold are set
//! aside; ratios are paired within a round and reported as median and range.

mod bound;
mod memory;
mod overhead;
mod plot;
mod rcp;
mod uring;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use sluice_core::device::{DeviceProfile, SsdConfig};
use sluice_io::{AlignedBuf, DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig};

use crate::bench::{median, median_min_max};
use crate::steal::CpuTimes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Part {
    Rcp,
    Bound,
    Overhead,
    Memory,
    Uring,
    /// rcp, overhead, memory and uring (bound is a separate sweep)
    All,
}

/// The device of parts `rcp` and `bound`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Medium {
    /// The emulated SSD
    Ssd,
    /// The real disk under --dir, through O_DIRECT
    Disk,
}

impl Medium {
    fn kind(self) -> DeviceKind {
        match self {
            Medium::Ssd => DeviceKind::Emulated,
            Medium::Disk => DeviceKind::Direct,
        }
    }
}

/// The I/O runtime on an emulated SSD: RCP against FIFO, and overhead
#[derive(Args)]
#[command(
    long_about = "The I/O runtime on an emulated SSD (4 channels, 80 us reads, 30 us writes \
    plus transfer at 200 MB/s per channel, device queue depth 32) or on the real disk.\n\n\
    rcp: the micro-benchmark of RCP 7.6. Foreground threads do synchronous 4 KiB random reads, \
    and every 4th operation a 4 KiB write plus sync, with think time; background writers write \
    bursts through the page cache and fsync after each, saturating the device. Side by side: \
    fifo (no priorities), static-rate (fifo plus a fixed background rate limit), dispatch-only \
    (critical first at dispatch, nothing else), rcp (every layer plus inheritance), \
    rcp+controller (rcp with the background controller fed foreground p99), and the \
    foreground alone; background throughput with a light foreground (one thread, 5 ms think \
    time) beside the background alone.\n\n\
    bound: the light foreground against the background writers with the bound on \
    non-critical I/Os at the device swept from 1 to 32 (RCP Fig. 11).\n\n\
    overhead: 4 KiB random reads through sluice-io against a plain pread loop on the same \
    device, at queue depth 1 and 32, on the emulated SSD and on the page cache (no timing \
    model: the runtime's CPU cost shows).\n\n\
    memory: bytes of bookkeeping per queued I/O, and resident memory sampled over a long \
    run of reads (it must not grow with the I/Os completed).\n\n\
    uring: 4 KiB random reads by threads calling pread against one thread keeping as many \
    reads in flight in an io_uring ring, at queue depth 1 and 32, on the page cache and on \
    the real disk (O_DIRECT): IOPS and CPU time per I/O.\n\n\
    Configurations are interleaved in every round; rounds with CPU steal above --max-steal are \
    set aside; ratios are paired within rounds."
)]
pub struct IoBench {
    /// Which part to run
    #[arg(long, value_enum, default_value = "all")]
    pub part: Part,
    /// Device of parts rcp and bound
    #[arg(long, value_enum, default_value = "ssd")]
    pub device: Medium,
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
    /// Background writes between two fsyncs
    #[arg(long, default_value_t = 64)]
    pub background_burst: usize,
    /// Foreground threads in the rcp part
    #[arg(long, default_value_t = 2)]
    pub foreground_threads: usize,
    /// Think time between a foreground thread's operations in the rcp part, microseconds
    #[arg(long, default_value_t = 100)]
    pub think_us: u64,
    /// Background rate of the static-rate scheme, MB/s
    #[arg(long, default_value_t = 50.0)]
    pub static_rate_mb: f64,
    /// Foreground p99 target of the rcp+controller scheme, microseconds
    #[arg(long, default_value_t = 1000)]
    pub target_p99_us: u64,
    /// Directory for the benchmark's files (default: a fresh temporary one)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Directory for runs.json and the SVG plots
    #[arg(long, default_value = "results/bench-io")]
    pub out: PathBuf,
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

/// The emulated SSD, or a real file (page cache or O_DIRECT).
fn device(kind: DeviceKind) -> DeviceConfig {
    DeviceConfig {
        kind,
        depth: 32,
        profile: (kind == DeviceKind::Emulated).then(|| DeviceProfile::Ssd(SsdConfig::default())),
    }
}

fn runtime(rcp: RcpConfig, kind: DeviceKind) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        device: device(kind),
        rcp,
    })?)
}

/// A file of `FILE_BYTES` to read from. Sparse unless `on_disk`: reads
/// of a hole never reach a real disk, so the real-disk runs write it out.
fn data_file(path: &Path, on_disk: bool) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    if on_disk {
        let mut chunk = AlignedBuf::zeroed(1 << 20);
        chunk.fill(0x11);
        for i in 0..FILE_BYTES / chunk.len() as u64 {
            std::os::unix::fs::FileExt::write_all_at(&f, &chunk, i * chunk.len() as u64)?;
        }
        f.sync_all()?;
    } else {
        f.set_len(FILE_BYTES)?;
    }
    Ok(())
}

/// The median of `metric` of `config` over `runs`, if it was measured.
fn median_of(runs: &[Run], config: &str, metric: &str) -> Option<f64> {
    let xs: Vec<f64> = runs
        .iter()
        .filter(|r| r.config == config)
        .filter_map(|r| r.metrics.get(metric).copied())
        .collect();
    (!xs.is_empty()).then(|| median(xs))
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
    let (mid, lo, hi) = median_min_max(xs);
    (label.to_string(), mid, lo, hi)
}

fn ratios(runs: &[Run]) -> Vec<Ratio> {
    let mut all = rcp::ratios(runs);
    all.extend(bound::ratios(runs));
    all.extend(overhead::ratios(runs));
    all.extend(uring::ratios(runs));
    all.into_iter().filter(|r| r.1.is_finite()).collect()
}

/// CPU time (user plus system) the process has used, seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid start.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// A memory field (`VmRSS:`, `VmHWM:`) of process `pid` ("self" for this
/// one) in MiB; NaN where /proc does not say.
pub(crate) fn status_mib(pid: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
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
    ensure!(b.background_burst > 0, "--background-burst must be at least 1");
    ensure!(
        b.static_rate_mb > 0.0 && b.static_rate_mb.is_finite(),
        "--static-rate-mb must be a number > 0"
    );
    ensure!(
        b.background_block.is_multiple_of(sluice_io::device::DIRECT_ALIGN) || b.device == Medium::Ssd,
        "--background-block must be a multiple of {} bytes on --device disk (O_DIRECT)",
        sluice_io::device::DIRECT_ALIGN
    );
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
            results.extend(bound::round(&b, &dir)?);
        }
        if matches!(b.part, Part::Overhead | Part::All) {
            results.extend(overhead::round(&b, &dir)?);
        }
        if matches!(b.part, Part::Memory | Part::All) {
            results.extend(memory::round(&dir)?);
        }
        if matches!(b.part, Part::Uring | Part::All) {
            results.extend(uring::round(&b, &dir)?);
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
    report(&b, &kept, &set_aside)?;
    write_out(&b, &kept, &set_aside)
}

/// Writes every run and the plots to `--out`.
fn write_out(b: &IoBench, kept: &[Run], set_aside: &[Run]) -> Result<()> {
    std::fs::create_dir_all(&b.out).with_context(|| format!("creating {}", b.out.display()))?;
    let runs = b.out.join("runs.json");
    let json = serde_json::json!({ "kept": kept, "set_aside": set_aside, "ratios": ratios(kept) });
    std::fs::write(&runs, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", runs.display()))?;
    let mut files = vec![runs];
    files.extend(plot::write(&b.out, kept)?);
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
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
    let peak = status_mib("self", "VmHWM:");
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
        let first = kept
            .iter()
            .find(|r| r.config == c)
            .expect("a run of every listed config");
        let metrics: Vec<String> = first
            .metrics
            .keys()
            .filter_map(|k| Some(format!("{k} {:.1}", median_of(kept, c, k)?)))
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
