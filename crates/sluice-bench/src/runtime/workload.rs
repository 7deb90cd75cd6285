//! The micro-benchmark of RCP §7.6: foreground threads doing synchronous
//! 4 KiB reads and writes with think time, against background writers that
//! write bursts through the page cache and `fsync` after each burst.
//!
//! A foreground operation is a random 4 KiB read of a shared data file, or,
//! every [`WRITE_EVERY`]th, a 4 KiB write to the thread's own file followed
//! by `sync` (a commit). Its latency is the whole operation's. Background
//! bytes count once they are durable (after the burst's `sync`).
//!
//! What governs the background is the scheme under test: nothing, a static
//! rate limit on the task, or the background controller fed with the
//! foreground p99 of the last [`CONTROL_INTERVAL`].

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use sluice_core::controller::{BackgroundController, BackgroundControllerConfig};
use sluice_core::metrics::LatencyHistogram;
use sluice_core::Ctx;
use sluice_io::{enter, AlignedBuf, Background, ControlLoop, DeviceKind, Knobs, Runtime, SluiceFile, TaskKind};

use crate::runtime::device::{data_file, random_offset, READ};
use crate::runtime::runs::Metrics;

/// Every this many foreground operations, one is a write plus `sync`.
const WRITE_EVERY: u64 = 4;
/// Bytes of each background writer's file (offsets wrap around).
const BG_FILE: u64 = 8 << 20;
/// How often the controller decides.
const CONTROL_INTERVAL: Duration = Duration::from_millis(100);

/// Foreground and background threads of one run.
#[derive(Clone, Copy)]
pub(crate) struct Load {
    pub readers: usize,
    pub think: Option<Duration>,
    pub writers: usize,
    /// Bytes per background write.
    pub block: usize,
    /// Background writes per `fsync`.
    pub burst: usize,
}

/// What governs the background task.
#[derive(Clone, Copy)]
pub(crate) enum Governor {
    None,
    /// A fixed rate in bytes/s for all background writers together.
    StaticRate(f64),
    Controller(BackgroundControllerConfig),
}

/// Foreground latency: the whole run, and the controller's window.
#[derive(Default)]
struct Latency {
    total: LatencyHistogram,
    window: LatencyHistogram,
}

struct Shared<'a> {
    rt: &'a Runtime,
    dir: &'a Path,
    stop: AtomicBool,
    latency: Mutex<Latency>,
    fg_ops: AtomicU64,
    bg_bytes: AtomicU64,
}

/// Runs `load` on `rt` for `seconds` and returns its metrics.
pub(crate) fn run(rt: &Runtime, dir: &Path, load: Load, governor: Governor, seconds: f64) -> Result<Metrics> {
    let data_path = dir.join("data");
    data_file(&data_path, rt.config().device.kind == DeviceKind::Direct)?;
    let data = rt.open(&data_path, false)?;
    let bg = rt.register_background("writers", TaskKind::Compaction);
    if let Governor::StaticRate(rate) = governor {
        bg.set_knobs(Knobs {
            rate_bytes: Some(rate),
            ..Knobs::default()
        });
    }
    let sh = Shared {
        rt,
        dir,
        stop: AtomicBool::new(false),
        latency: Mutex::new(Latency::default()),
        fg_ops: AtomicU64::new(0),
        bg_bytes: AtomicU64::new(0),
    };
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let mut threads = Vec::new();
        for i in 0..load.writers {
            let (sh, bg) = (&sh, &bg);
            threads.push(s.spawn(move || background_writer(sh, bg, i, load)));
        }
        for i in 0..load.readers {
            let (sh, data) = (&sh, &data);
            threads.push(s.spawn(move || foreground(sh, data, i, load.think)));
        }
        if let Governor::Controller(config) = governor {
            let sh = &sh;
            threads.push(s.spawn(move || control(sh, config)));
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        sh.stop.store(true, Ordering::Relaxed);
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("benchmark thread panicked"))
    })?;
    let secs = started.elapsed().as_secs_f64();
    Ok(metrics(&sh, secs))
}

fn metrics(sh: &Shared, secs: f64) -> Metrics {
    let mut m = Metrics::new();
    let h = &sh.latency.lock().expect("latency").total;
    if h.count() > 0 {
        m.insert("fg_ops_s", sh.fg_ops.load(Ordering::Relaxed) as f64 / secs);
        m.insert("fg_mean_us", h.mean() / 1e3);
        m.insert("fg_p99_us", h.quantile(0.99) as f64 / 1e3);
        m.insert("fg_p999_us", h.quantile(0.999) as f64 / 1e3);
    }
    let bg = sh.bg_bytes.load(Ordering::Relaxed);
    if bg > 0 {
        m.insert("bg_mb_s", bg as f64 / secs / 1e6);
    }
    m
}

/// Bursts of writes through the page cache, each made durable by `sync`.
fn background_writer(sh: &Shared, bg: &std::sync::Arc<Background>, i: usize, load: Load) -> Result<()> {
    let _bg = bg.enter();
    let f = sh.rt.open(sh.dir.join(format!("bg-{i}")), true)?;
    let mut buf = AlignedBuf::zeroed(load.block);
    buf.fill(0x5a);
    let mut off = 0;
    while !sh.stop.load(Ordering::Relaxed) {
        for _ in 0..load.burst {
            f.write_buffered(&buf, off)?;
            off = (off + buf.len() as u64) % BG_FILE;
        }
        f.sync()?;
        sh.bg_bytes
            .fetch_add((load.burst * buf.len()) as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Synchronous reads, and every [`WRITE_EVERY`]th a write plus `sync`, each
/// inside a request context.
fn foreground(sh: &Shared, data: &SluiceFile, i: usize, think: Option<Duration>) -> Result<()> {
    let own = sh.rt.open(sh.dir.join(format!("fg-{i}")), true)?;
    let mut buf = AlignedBuf::zeroed(READ);
    let mut rng = 0x9e3779b97f4a7c15u64 ^ (i as u64 + 1);
    let mut n = 0u64;
    while !sh.stop.load(Ordering::Relaxed) {
        let _req = enter(Ctx::new(n, 0));
        let t = Instant::now();
        let offset = random_offset(&mut rng);
        if n % WRITE_EVERY == WRITE_EVERY - 1 {
            own.write_at(&buf, offset % BG_FILE)?;
            own.sync()?;
        } else {
            data.read_at(&mut buf, offset)?;
        }
        let ns = t.elapsed().as_nanos() as u64;
        {
            let mut l = sh.latency.lock().expect("latency");
            l.total.record(ns);
            l.window.record(ns);
        }
        n += 1;
        sh.fg_ops.fetch_add(1, Ordering::Relaxed);
        if let Some(think) = think {
            std::thread::sleep(think);
        }
    }
    Ok(())
}

/// Every [`CONTROL_INTERVAL`], hands the window's foreground p99 to the
/// controller, which sets the background rate.
fn control(sh: &Shared, config: BackgroundControllerConfig) -> Result<()> {
    let mut lp = ControlLoop::new(
        sh.rt.clone(),
        BackgroundController::new(config).map_err(anyhow::Error::msg)?,
    );
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(CONTROL_INTERVAL);
        let window = std::mem::take(&mut sh.latency.lock().expect("latency").window);
        lp.step((window.count() > 0).then(|| window.quantile(0.99)));
    }
    Ok(())
}
