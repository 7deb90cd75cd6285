//! What every wall-time run of `sluice bench deadline` shares, however
//! its reads reach the disk: its lead, its threads' timer slack, the disk
//! it is compared with the simulator on, and what it measures.

use std::time::Duration;

use anyhow::Result;
use sluice_core::device::{SeekDisk, SeekDiskConfig, SeekDiskProfile};
use sluice_core::metrics::Tardiness;
use sluice_core::time::to_ms;
use sluice_core::{Ctx, Nanos};

/// How long before the first arrival the run starts, so that arrivals are
/// not late from the start.
pub(super) const LEAD: Duration = Duration::from_millis(20);

/// What one wall-time run measured.
pub(super) struct Measured {
    pub tardiness_ms: f64,
    pub miss_ratio: f64,
    pub busy: f64,
}

impl Measured {
    /// A run that started at `start`, from each transaction's context and
    /// when it finished, and the time its I/Os held the device.
    pub fn of(finished: &[(Ctx, Nanos)], start: Nanos, held: u64) -> Measured {
        let mut tardiness = Tardiness::default();
        let mut end = start;
        for (ctx, done) in finished {
            tardiness.record(ctx, *done);
            end = end.max(*done);
        }
        Measured {
            tardiness_ms: to_ms(tardiness.average()),
            miss_ratio: tardiness.miss_ratio(),
            busy: held as f64 / end.saturating_sub(start).max(1) as f64,
        }
    }
}

/// Timed sleeps on this thread overshoot by 1 µs rather than the default
/// 50 µs of timer slack: think times and the emulated disk's reads are
/// sleeps, and the simulator they are compared with has none.
pub(super) fn fine_timer() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

/// The disk of a profile, as the simulator and the slack see it.
pub(super) fn seek_disk(p: &SeekDiskProfile) -> Result<SeekDisk> {
    Ok(SeekDisk::new(SeekDiskConfig {
        cylinders: p.cylinders,
        a_ms: p.a_ms,
        b: p.b,
        ..SeekDiskConfig::default()
    })?)
}
