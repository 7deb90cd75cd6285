//! A client writing 4 KiB values at a steady rate to keys of the first
//! shard, or of every shard, so that they flush and compact while `sluice
//! bench route`'s scans run (`--writer`, `--write-all`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::target::{Resp, Target};

/// The writing thread, stopped when dropped.
pub(crate) struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    /// `per_sec` writes a second through `router` to the first of `shards`
    /// shards, or to all of them (`all`); none if `per_sec` is not above 0.
    pub fn start(router: SocketAddr, shards: usize, per_sec: f64, all: bool) -> Option<Writer> {
        if per_sec <= 0.0 {
            return None;
        }
        // A hash tag whose slot is in the first shard's range; none: the
        // keys' own slots, spread over every shard.
        let tag = if all {
            String::new()
        } else {
            let first_shard_slots = 16384 / shards as u16;
            let tag = (0u32..)
                .map(|i| format!("w{i}"))
                .find(|t| sluice_resp::slot::slot(t.as_bytes()) < first_shard_slots)
                .expect("some tag hashes into the first shard");
            format!("{{{tag}}}")
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let Ok(target) = Resp::new(router) else { return };
            let Ok(mut client) = target.client() else {
                return;
            };
            let value = vec![b'w'; 4096];
            let start = Instant::now();
            let mut n = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let due = start + Duration::from_secs_f64(n as f64 / per_sec);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let key = format!("{tag}w{}", n % 1_000_000);
                if client.write(key.as_bytes(), &value).is_err() {
                    return;
                }
                n += 1;
            }
        });
        Some(Writer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
