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
use sluice_io::{enter, DeviceKind, RcpConfig};

use super::{data_file, device, random_offset, ratio, runtime, IoBench, Metrics, Ratio, Run, READ};

/// `qd` threads of random reads for `seconds`, through the runtime or plain.
fn read_loop(through_sluice: bool, emulated: bool, qd: usize, dir: &Path, seconds: f64) -> Result<Metrics> {
    let path = dir.join(format!("reads-{qd}-{through_sluice}-{emulated}"));
    data_file(&path, false)?;
    let kind = if emulated {
        DeviceKind::Emulated
    } else {
        DeviceKind::Buffered
    };
    let rt = runtime(RcpConfig::default(), kind)?;
    let sluice_file = rt.open(&path, false)?;
    let plain_device = Device::new(&device(kind))?;
    let plain_file = std::fs::File::open(&path)?;
    let stop = AtomicBool::new(false);
    let hist = Mutex::new(LatencyHistogram::default());
    let ios = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for i in 0..qd {
            let (f, pf, dev, stop, hist, ios) = (&sluice_file, &plain_file, &plain_device, &stop, &hist, &ios);
            s.spawn(move || -> Result<()> {
                let mut local = LatencyHistogram::default();
                let mut buf = vec![0u8; READ];
                let mut rng = 0x2545f4914f6cdd1du64 ^ (i as u64 + 1);
                let _req = enter(Ctx::new(0, 0));
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let off = random_offset(&mut rng);
                    let t = Instant::now();
                    if through_sluice {
                        f.read_at(&mut buf, off)?;
                    } else {
                        plain_read(dev, pf, &mut buf, off)?;
                    }
                    local.record(t.elapsed().as_nanos() as u64);
                    n += 1;
                }
                ios.fetch_add(n, Ordering::Relaxed);
                hist.lock().expect("histogram").merge(&local);
                Ok(())
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    let secs = started.elapsed().as_secs_f64();
    let h = hist.into_inner().expect("histogram");
    Ok(Metrics::from([
        ("iops", ios.into_inner() as f64 / secs),
        ("p50_us", h.quantile(0.5) as f64 / 1e3),
        ("p99_us", h.quantile(0.99) as f64 / 1e3),
    ]))
}

fn name(sluice: bool, emulated: bool, qd: usize) -> String {
    let who = if sluice { "sluice" } else { "plain" };
    let dev = if emulated { "ssd" } else { "cache" };
    format!("{who}-{dev}-qd{qd}")
}

pub(super) fn round(b: &IoBench, dir: &Path) -> Result<Vec<(String, Metrics)>> {
    let mut out = Vec::new();
    for emulated in [true, false] {
        for qd in [1, 32] {
            for sluice in [false, true] {
                out.push((
                    name(sluice, emulated, qd),
                    read_loop(sluice, emulated, qd, dir, b.seconds)?,
                ));
            }
        }
    }
    Ok(out)
}

pub(super) fn ratios(runs: &[Run]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for emulated in [true, false] {
        for qd in [1, 32] {
            let (s, p) = (name(true, emulated, qd), name(false, emulated, qd));
            out.push(ratio(
                runs,
                &format!("IOPS: {s} / {p} (target >= 0.9)"),
                (&s, "iops"),
                (&p, "iops"),
            ));
            out.push(ratio(runs, &format!("p50: {s} / {p}"), (&s, "p50_us"), (&p, "p50_us")));
        }
    }
    out
}
