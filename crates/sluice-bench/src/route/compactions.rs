//! Which shards compact when, sampled while a run is measured: every
//! 200 ms each shard's INFO says how many bytes its compaction has moved,
//! and a shard whose count grew since the last sample was compacting. A
//! run then says for how much of its time any shard compacted and how
//! many did at once: what a compaction schedule changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::shards::info;

const EVERY: Duration = Duration::from_millis(200);

/// The samples of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Overlap {
    samples: u64,
    /// Samples in which at least one shard compacted.
    any: u64,
    /// Shards compacting, summed over the samples.
    shards: u64,
}

impl Overlap {
    /// The share of the run during which some shard compacted.
    pub fn any_share(&self) -> f64 {
        self.any as f64 / self.samples.max(1) as f64
    }

    /// Shards compacting at once, while any did.
    pub fn at_once(&self) -> f64 {
        self.shards as f64 / self.any.max(1) as f64
    }

    fn add(&mut self, compacting: usize) {
        self.samples += 1;
        self.any += u64::from(compacting > 0);
        self.shards += compacting as u64;
    }
}

/// The sampling thread; [`Sampler::stop`] ends it and gives its samples.
pub(crate) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Overlap>,
}

impl Sampler {
    pub fn start(ports: Vec<u16>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut overlap = Overlap::default();
            let mut last: Vec<Option<u64>> = ports.iter().map(|&p| compacted(p)).collect();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(EVERY);
                let now: Vec<Option<u64>> = ports.iter().map(|&p| compacted(p)).collect();
                let compacting = now
                    .iter()
                    .zip(&last)
                    .filter(|(n, l)| matches!((n, l), (Some(n), Some(l)) if n > l))
                    .count();
                overlap.add(compacting);
                last = now;
            }
            overlap
        });
        Sampler { stop, thread }
    }

    pub fn stop(self) -> Overlap {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Bytes the shard's compaction has moved since it started; `None` if it
/// cannot be read.
fn compacted(port: u16) -> Option<u64> {
    bytes_moved(&info(port).ok()?)
}

fn bytes_moved(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix("compaction:bytes="))?
        .split(',')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_count_the_shards_compacting_at_once() {
        assert_eq!(
            bytes_moved("flush:bytes=9,ios=1\r\ncompaction:bytes=512,ios=2,backlog_bytes=0\r\n"),
            Some(512)
        );
        assert_eq!(bytes_moved("redis_version:7\r\n"), None);
        let mut o = Overlap::default();
        for compacting in [0, 2, 1, 0] {
            o.add(compacting);
        }
        assert_eq!((o.any_share(), o.at_once()), (0.5, 1.5));
    }
}
