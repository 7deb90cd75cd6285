//! A cloud block volume (EBS gp3-like): a base latency per operation and
//! two caps enforced as token rates, operations per second and bytes per
//! second. An operation starts when both budgets allow it; the caps, not
//! the media, decide throughput, so a burst of background I/O delays
//! everything behind it.

use serde::{Deserialize, Serialize};

use super::timing::{positive, Op, ProfileError, TimingModel};
use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CloudVolumeConfig {
    pub iops: f64,
    /// Bandwidth cap, MB/s (10^6 bytes).
    pub mb_s: f64,
    /// Latency every operation pays on top of its wait for the caps.
    pub base_latency_us: f64,
}

impl Default for CloudVolumeConfig {
    fn default() -> Self {
        CloudVolumeConfig {
            iops: 3000.0,
            mb_s: 125.0,
            base_latency_us: 1000.0,
        }
    }
}

#[derive(Debug)]
pub struct CloudVolume {
    ns_per_op: f64,
    ns_per_byte: f64,
    base: Nanos,
    /// When the IOPS budget next admits an operation.
    ops_free_at: f64,
    /// When the bandwidth budget next admits a byte.
    bytes_free_at: f64,
}

impl CloudVolume {
    pub fn new(c: CloudVolumeConfig) -> Result<Self, ProfileError> {
        let iops = positive("iops", c.iops)?;
        let mb_s = positive("mb_s", c.mb_s)?;
        if !(c.base_latency_us.is_finite() && c.base_latency_us >= 0.0) {
            return Err(ProfileError::invalid(
                "base_latency_us",
                "a finite number >= 0",
                c.base_latency_us,
            ));
        }
        Ok(CloudVolume {
            ns_per_op: 1e9 / iops,
            ns_per_byte: 1e3 / mb_s,
            base: (c.base_latency_us * 1000.0).round() as Nanos,
            ops_free_at: 0.0,
            bytes_free_at: 0.0,
        })
    }
}

impl TimingModel for CloudVolume {
    fn complete_at(&mut self, now: Nanos, op: Op) -> Nanos {
        let start = (now as f64).max(self.ops_free_at).max(self.bytes_free_at);
        self.ops_free_at = start + self.ns_per_op;
        let transfer = op.len as f64 * self.ns_per_byte;
        self.bytes_free_at = start + transfer;
        (start + transfer).round() as Nanos + self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::OpKind;

    fn write(len: u64) -> Op {
        Op {
            kind: OpKind::Write,
            offset: 0,
            len,
        }
    }

    #[test]
    fn iops_cap_spaces_small_operations() {
        let mut v = CloudVolume::new(CloudVolumeConfig {
            iops: 1000.0,
            mb_s: 1000.0,
            base_latency_us: 100.0,
        })
        .unwrap();
        // 1 ms per op at 1000 IOPS; 4096 B at 1000 MB/s = 4.096 us.
        assert_eq!(v.complete_at(0, write(4096)), 4_096 + 100_000);
        assert_eq!(v.complete_at(0, write(4096)), 1_000_000 + 4_096 + 100_000);
    }

    #[test]
    fn bandwidth_cap_spaces_large_operations() {
        let mut v = CloudVolume::new(CloudVolumeConfig::default()).unwrap();
        // 1 MB at 125 MB/s = 8 ms; the second starts when the first's bytes are through.
        assert_eq!(v.complete_at(0, write(1_000_000)), 8_000_000 + 1_000_000);
        assert_eq!(v.complete_at(0, write(1_000_000)), 16_000_000 + 1_000_000);
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = CloudVolumeConfig {
            iops: 0.0,
            ..CloudVolumeConfig::default()
        };
        assert!(CloudVolume::new(bad).unwrap_err().to_string().contains("iops"));
    }
}
