//! An SSD: each operation costs a fixed per-operation latency (by kind)
//! plus its transfer time, and the device serves up to `channels`
//! operations at once, each on the channel that frees first. A simple model
//! of flash parallelism, enough to make dispatch depth matter.

use serde::{Deserialize, Serialize};

use super::timing::{positive, Op, OpKind, ProfileError, TimingModel};
use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SsdConfig {
    /// Independent internal channels.
    pub channels: u32,
    pub read_us: f64,
    pub write_us: f64,
    /// Cache flush (fsync) latency.
    pub flush_us: f64,
    /// Transfer bandwidth of one channel, MB/s (10^6 bytes).
    pub channel_mb_s: f64,
}

impl Default for SsdConfig {
    fn default() -> Self {
        SsdConfig {
            channels: 4,
            read_us: 80.0,
            write_us: 30.0,
            flush_us: 500.0,
            channel_mb_s: 200.0,
        }
    }
}

#[derive(Debug)]
pub struct Ssd {
    config: SsdConfig,
    /// When each channel is next free.
    free_at: Vec<Nanos>,
}

impl Ssd {
    pub fn new(config: SsdConfig) -> Result<Self, ProfileError> {
        if config.channels == 0 || config.channels > 1024 {
            return Err(ProfileError::invalid("channels", "in 1..=1024", config.channels));
        }
        for (field, v) in [
            ("read_us", config.read_us),
            ("write_us", config.write_us),
            ("flush_us", config.flush_us),
            ("channel_mb_s", config.channel_mb_s),
        ] {
            positive(field, v)?;
        }
        Ok(Ssd {
            config,
            free_at: vec![0; config.channels as usize],
        })
    }

    fn service(&self, op: Op) -> Nanos {
        let c = &self.config;
        let fixed_us = match op.kind {
            OpKind::Read => c.read_us,
            OpKind::Write => c.write_us,
            OpKind::Flush => c.flush_us,
        };
        // bytes / (MB/s) = microseconds.
        let transfer_us = op.len as f64 / c.channel_mb_s;
        ((fixed_us + transfer_us) * 1000.0).round() as Nanos
    }
}

impl TimingModel for Ssd {
    fn complete_at(&mut self, now: Nanos, op: Op) -> Nanos {
        let service = self.service(op);
        let channel = self.free_at.iter_mut().min().expect("at least one channel");
        let done = now.max(*channel) + service;
        *channel = done;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(len: u64) -> Op {
        Op {
            kind: OpKind::Read,
            offset: 0,
            len,
        }
    }

    #[test]
    fn channels_serve_in_parallel_then_queue() {
        let mut ssd = Ssd::new(SsdConfig {
            channels: 2,
            ..SsdConfig::default()
        })
        .unwrap();
        // 80 us + 4096 B / 200 MB/s = 80 + 20.48 us.
        assert_eq!(ssd.complete_at(0, read(4096)), 100_480);
        assert_eq!(ssd.complete_at(0, read(4096)), 100_480);
        assert_eq!(ssd.complete_at(0, read(4096)), 200_960, "third waits for a channel");
        assert_eq!(ssd.complete_at(1_000_000, read(0)), 1_080_000, "idle device");
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = SsdConfig {
            channels: 0,
            ..SsdConfig::default()
        };
        assert!(Ssd::new(bad).unwrap_err().to_string().contains("channels"));
        let bad = SsdConfig {
            read_us: -1.0,
            ..SsdConfig::default()
        };
        assert!(Ssd::new(bad).unwrap_err().to_string().contains("read_us"));
    }
}
