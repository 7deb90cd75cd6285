//! I/O pressure stall (Linux PSI, /proc/pressure/io): the share of time in
//! which every task that had work was waiting on I/O. On a shared disk a
//! slow WAL flush stops every commit at once, and a run's tail latency then
//! measures the disk, not the scheduling (docs/BENCHMARKS.md, "SLO
//! classes").
//! A run's average hides such a stall, so benchmarks record the worst
//! second of each run beside its CPU steal.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Samples the I/O stall every second until [`IoStallWatch::worst_second`].
pub struct IoStallWatch {
    stop: Sender<()>,
    thread: JoinHandle<Option<f64>>,
}

impl IoStallWatch {
    pub fn start() -> IoStallWatch {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut last = (Instant::now(), full_stall_us()?);
            let mut worst: f64 = 0.0;
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1)) {
                let now = (Instant::now(), full_stall_us()?);
                let elapsed_us = (now.0 - last.0).as_micros().max(1) as f64;
                worst = worst.max(now.1.saturating_sub(last.1) as f64 / elapsed_us);
                last = now;
            }
            Some(worst)
        });
        IoStallWatch { stop, thread }
    }

    /// The largest fraction of a second stalled on I/O since the start;
    /// `None` where the kernel has no PSI.
    pub fn worst_second(self) -> Option<f64> {
        let _ = self.stop.send(());
        self.thread.join().ok().flatten()
    }
}

/// Microseconds since boot in which all non-idle tasks were stalled on I/O.
fn full_stall_us() -> Option<u64> {
    parse_full(&std::fs::read_to_string("/proc/pressure/io").ok()?)
}

fn parse_full(psi: &str) -> Option<u64> {
    let line = psi.lines().find(|l| l.starts_with("full "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_full_stall_total() {
        let psi = "some avg10=0.02 avg60=2.05 avg300=2.26 total=987867950\nfull avg10=0.02 avg60=1.63 avg300=1.72 total=237128127\n";
        assert_eq!(parse_full(psi), Some(237_128_127));
        assert_eq!(parse_full("some avg10=0 total=5\n"), None);
    }

    #[test]
    fn a_watch_stops_when_asked() {
        let started = Instant::now();
        let worst = IoStallWatch::start().worst_second();
        assert!(started.elapsed() < Duration::from_secs(1), "it waited for a sample");
        if std::path::Path::new("/proc/pressure/io").exists() {
            assert_eq!(worst, Some(0.0), "no whole second elapsed");
        }
    }
}
