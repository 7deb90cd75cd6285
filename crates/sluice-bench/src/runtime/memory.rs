//! Memory: what the runtime keeps per queued I/O, and whether its resident
//! memory grows with the I/Os it has completed (it must not).

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use sluice_core::policy::fifo::Fifo;
use sluice_core::{Ctx, Job};
use sluice_io::sched::{Criticality, Sched};
use sluice_io::{DeviceKind, RcpConfig};

use crate::process::status_mib;
use crate::runtime::device::{data_file, random_offset, runtime, READ};
use crate::runtime::runs::Metrics;

/// I/Os queued at once to measure bookkeeping per queued I/O.
const QUEUED: u64 = 200_000;
/// Reads per sample of the long run, and samples.
const PER_SAMPLE: u64 = 500_000;
const SAMPLES: usize = 4;
const THREADS: u64 = 8;

/// Resident bytes added per I/O waiting in the scheduler's queues.
fn bytes_per_queued_io() -> Result<f64> {
    let config = RcpConfig {
        critical_slots: QUEUED as usize,
        ..RcpConfig::default()
    };
    let before = status_mib("self", "VmRSS:");
    let mut s = Sched::new(config, 1, [Box::new(Fifo::default()), Box::new(Fifo::default())]);
    for seq in 0..QUEUED {
        s.submit(Job::new(seq, Ctx::new(seq, 0), 0, 0), Criticality::Critical, 0);
    }
    let after = status_mib("self", "VmRSS:");
    anyhow::ensure!(s.outstanding() as u64 == QUEUED, "the scheduler lost queued I/Os");
    Ok((after - before) * 1024.0 * 1024.0 / QUEUED as f64)
}

/// RSS after each `PER_SAMPLE` reads through the runtime on the page cache.
fn long_run(dir: &Path) -> Result<Vec<f64>> {
    let path = dir.join("long-run");
    data_file(&path, false)?;
    let rt = runtime(RcpConfig::default(), DeviceKind::Buffered)?;
    let f = rt.open(&path, false)?;
    let mut samples = Vec::new();
    for _ in 0..SAMPLES {
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let f = &f;
                s.spawn(move || -> Result<()> {
                    let mut buf = vec![0u8; READ];
                    let mut rng = 0x51ed27u64 ^ (t + 1);
                    for _ in 0..PER_SAMPLE / THREADS {
                        f.read_at(&mut buf, random_offset(&mut rng))?;
                    }
                    Ok(())
                });
            }
        });
        samples.push(status_mib("self", "VmRSS:"));
    }
    Ok(samples)
}

pub(crate) fn round(dir: &Path) -> Result<Vec<(String, Metrics)>> {
    // First, before the long run frees memory the allocator could reuse.
    let per_io = bytes_per_queued_io()?;
    let started = Instant::now();
    let samples = long_run(dir)?;
    let mut m = Metrics::from([
        ("rss_first_mib", samples[0]),
        ("rss_last_mib", samples[SAMPLES - 1]),
        ("reads_millions", (PER_SAMPLE * SAMPLES as u64) as f64 / 1e6),
        ("seconds", started.elapsed().as_secs_f64()),
    ]);
    m.insert("bytes_per_queued_io", per_io);
    Ok(vec![("memory".into(), m)])
}
