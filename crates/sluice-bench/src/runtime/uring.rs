//! Part `uring`: should the runtime submit through io_uring? Measured
//! before choosing (the answer is in sluice-io's crate doc). 4 KiB random
//! reads at queue depth 1 and 32: `qd` threads each calling `pread` (what
//! the runtime does now) against one thread keeping `qd` reads in flight in
//! an io_uring ring, on the page cache and on the real disk (`O_DIRECT`).
//! IOPS and CPU time per I/O.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use io_uring::{opcode, types, IoUring};
use sluice_core::metrics::LatencyHistogram;
use sluice_io::AlignedBuf;

use crate::process::own_cpu_seconds;
use crate::runtime::config::IoBench;
use crate::runtime::device::{data_file, random_offset, READ};
use crate::runtime::overhead::{read_metrics, threads};
use crate::runtime::runs::{ratio, Metrics, Ratio, Run};

/// Page cache, or the real disk through O_DIRECT.
const MEDIA: [(&str, bool); 2] = [("cache", false), ("disk", true)];

fn open(path: &Path, direct: bool) -> Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path).with_context(|| format!("opening {}", path.display()))
}

/// Puts a read of `buf` at `offset` into the ring, tagged with `slot`.
fn push(ring: &mut IoUring, file: &File, buf: &mut AlignedBuf, offset: u64, slot: usize) -> Result<()> {
    let read = opcode::Read::new(types::Fd(file.as_raw_fd()), buf.as_mut_ptr(), READ as u32)
        .offset(offset)
        .build()
        .user_data(slot as u64);
    // SAFETY: the buffer and the file outlive the ring's use of them: every
    // submitted read is reaped before `ring_loop` returns.
    unsafe { ring.submission().push(&read) }.context("io_uring submission queue full")
}

/// One thread keeping `qd` reads in flight for `seconds`.
fn ring_loop(file: &File, qd: usize, seconds: f64) -> Result<Metrics> {
    let mut ring = IoUring::new(qd.next_power_of_two() as u32).context("io_uring_setup")?;
    let mut bufs: Vec<AlignedBuf> = (0..qd).map(|_| AlignedBuf::zeroed(READ)).collect();
    let mut issued = vec![Instant::now(); qd];
    let mut rng = 0x2545f4914f6cdd1du64;
    let (mut hist, mut ios, mut in_flight) = (LatencyHistogram::default(), 0u64, 0);
    for (slot, buf) in bufs.iter_mut().enumerate() {
        push(&mut ring, file, buf, random_offset(&mut rng), slot)?;
        in_flight += 1;
    }
    let (started, cpu) = (Instant::now(), own_cpu_seconds());
    let deadline = started + Duration::from_secs_f64(seconds);
    while in_flight > 0 {
        ring.submit_and_wait(1).context("io_uring_enter")?;
        let done: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (slot, result) in done {
            in_flight -= 1;
            if result < 0 {
                bail!("io_uring read: {}", std::io::Error::from_raw_os_error(-result));
            }
            hist.record(issued[slot].elapsed().as_nanos() as u64);
            ios += 1;
            if Instant::now() < deadline {
                issued[slot] = Instant::now();
                push(&mut ring, file, &mut bufs[slot], random_offset(&mut rng), slot)?;
                in_flight += 1;
            }
        }
    }
    let (secs, cpu) = (started.elapsed().as_secs_f64(), own_cpu_seconds() - cpu);
    Ok(read_metrics(ios, secs, cpu, &hist))
}

pub(crate) fn round(b: &IoBench, dir: &Path) -> Result<Vec<(String, Metrics)>> {
    let path = dir.join("uring-data");
    data_file(&path, true)?;
    let mut out = Vec::new();
    for (medium, direct) in MEDIA {
        let file = open(&path, direct)?;
        for qd in [1, 32] {
            let pread = threads(qd, b.seconds, |buf, off| Ok(file.read_exact_at(buf, off)?))?;
            out.push((format!("pread-{medium}-qd{qd}"), pread));
            out.push((format!("uring-{medium}-qd{qd}"), ring_loop(&file, qd, b.seconds)?));
        }
    }
    Ok(out)
}

pub(crate) fn ratios(runs: &[&Run]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for (medium, _) in MEDIA {
        for qd in [1, 32] {
            let (u, p) = (format!("uring-{medium}-qd{qd}"), format!("pread-{medium}-qd{qd}"));
            out.push(ratio(runs, &format!("IOPS: {u} / {p}"), &u, &p, "iops"));
            out.push(ratio(runs, &format!("CPU per I/O: {u} / {p}"), &u, &p, "cpu_us_per_io"));
        }
    }
    out
}
