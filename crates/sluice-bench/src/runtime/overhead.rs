//! The runtime's cost: 4 KiB random reads through sluice-io against a
//! plain `pread` loop on the same device, at queue depth 1 and 32. On the
//! emulated SSD the device's time dominates; on the page cache (no timing
//! model) the runtime's CPU cost per I/O shows.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use sluice_core::metrics::LatencyHistogram;
use sluice_core::Ctx;
use sluice_io::device::{plain_read, Device};
use sluice_io::{enter, AlignedBuf, DeviceKind, RcpConfig};

use crate::process::own_cpu_seconds;
use crate::runtime::config::IoBench;
use crate::runtime::device::{data_file, device, random_offset, runtime, READ};
use crate::runtime::runs::{ratio, Metrics, Ratio, Run};

/// `qd` threads, each in a foreground request, calling `read` for random
/// 4 KiB blocks for `seconds`: IOPS, latency, and CPU seconds per I/O.
pub(crate) fn threads(qd: usize, seconds: f64, read: impl Fn(&mut [u8], u64) -> Result<()> + Sync) -> Result<Metrics> {
    let stop = AtomicBool::new(false);
    let hist = Mutex::new(LatencyHistogram::default());
    let ios = AtomicU64::new(0);
    let (started, cpu) = (Instant::now(), own_cpu_seconds());
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..qd)
            .map(|i| {
                let (stop, hist, ios, read) = (&stop, &hist, &ios, &read);
                s.spawn(move || -> Result<()> {
                    let mut local = LatencyHistogram::default();
                    let mut buf = AlignedBuf::zeroed(READ);
                    let mut rng = 0x2545f4914f6cdd1du64 ^ (i as u64 + 1);
                    let _req = enter(Ctx::new(0, 0));
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let off = random_offset(&mut rng);
                        let t = Instant::now();
                        read(&mut buf, off)?;
                        local.record(t.elapsed().as_nanos() as u64);
                        n += 1;
                    }
                    ios.fetch_add(n, Ordering::Relaxed);
                    hist.lock().expect("histogram").merge(&local);
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("reader thread panicked"))
    })?;
    let (secs, cpu) = (started.elapsed().as_secs_f64(), own_cpu_seconds() - cpu);
    let h = hist.into_inner().expect("histogram");
    Ok(read_metrics(ios.into_inner(), secs, cpu, &h))
}

/// IOPS, latency percentiles and CPU microseconds per I/O.
pub(crate) fn read_metrics(ios: u64, secs: f64, cpu: f64, h: &LatencyHistogram) -> Metrics {
    Metrics::from([
        ("iops", ios as f64 / secs),
        ("p50_us", h.quantile(0.5) as f64 / 1e3),
        ("p99_us", h.quantile(0.99) as f64 / 1e3),
        ("cpu_us_per_io", cpu * 1e6 / ios.max(1) as f64),
    ])
}

/// Reads through the runtime, or plain, on the emulated SSD or the page cache.
fn read_loop(through_sluice: bool, kind: DeviceKind, qd: usize, dir: &Path, seconds: f64) -> Result<Metrics> {
    let path = dir.join(format!("reads-{qd}-{through_sluice}-{kind:?}"));
    data_file(&path, false)?;
    if through_sluice {
        let f = runtime(RcpConfig::default(), kind)?.open(&path, false)?;
        return threads(qd, seconds, |buf, off| Ok(f.read_at(buf, off).map(drop)?));
    }
    let (dev, f) = (Device::new(&device(kind))?, std::fs::File::open(&path)?);
    threads(qd, seconds, |buf, off| Ok(plain_read(&dev, &f, buf, off).map(drop)?))
}

fn name(sluice: bool, kind: DeviceKind, qd: usize) -> String {
    let who = if sluice { "sluice" } else { "plain" };
    let dev = if kind == DeviceKind::Emulated { "ssd" } else { "cache" };
    format!("{who}-{dev}-qd{qd}")
}

const KINDS: [DeviceKind; 2] = [DeviceKind::Emulated, DeviceKind::Buffered];

pub(crate) fn round(b: &IoBench, dir: &Path) -> Result<Vec<(String, Metrics)>> {
    let mut out = Vec::new();
    for kind in KINDS {
        for qd in [1, 32] {
            for sluice in [false, true] {
                out.push((name(sluice, kind, qd), read_loop(sluice, kind, qd, dir, b.seconds)?));
            }
        }
    }
    Ok(out)
}

pub(crate) fn ratios(runs: &[&Run]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for kind in KINDS {
        for qd in [1, 32] {
            let (s, p) = (name(true, kind, qd), name(false, kind, qd));
            out.push(ratio(runs, &format!("IOPS: {s} / {p} (target >= 0.9)"), &s, &p, "iops"));
            out.push(ratio(runs, &format!("p50: {s} / {p}"), &s, &p, "p50_us"));
        }
    }
    out
}
