//! A slow emulated SSD and a flood of background writers, so that queueing
//! behind non-critical I/O costs tens of milliseconds and inheritance makes
//! a difference far above timing noise.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use sluice_core::device::{DeviceProfile, SsdConfig};
use sluice_io::{DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig, TaskKind};

/// One channel, 2 ms per operation.
pub fn slow_ssd(inheritance: bool) -> RuntimeConfig {
    RuntimeConfig {
        device: DeviceConfig {
            kind: DeviceKind::Emulated,
            depth: 4,
            profile: Some(DeviceProfile::Ssd(SsdConfig {
                channels: 1,
                read_us: 2000.0,
                write_us: 2000.0,
                flush_us: 500.0,
                channel_mb_s: 1000.0,
            })),
        },
        rcp: RcpConfig {
            inheritance,
            ..RcpConfig::default()
        },
    }
}

pub struct Flood {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// `n` background threads, each writing 4 KiB blocks to its own file.
pub fn flood(rt: &Runtime, dir: &std::path::Path, n: usize) -> Flood {
    let stop = Arc::new(AtomicBool::new(false));
    let bg = rt.register_background("flood", TaskKind::Compaction);
    let threads = (0..n)
        .map(|i| {
            let (rt, stop, bg) = (rt.clone(), stop.clone(), bg.clone());
            let path = dir.join(format!("flood-{i}"));
            std::thread::spawn(move || {
                let _bg = bg.enter();
                let f = rt.open(path, true).unwrap();
                let mut off = 0;
                while !stop.load(Ordering::Relaxed) {
                    f.write_at(&[7u8; 4096], off).unwrap();
                    off = (off + 4096) % (1 << 20);
                }
            })
        })
        .collect();
    Flood { stop, threads }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}
