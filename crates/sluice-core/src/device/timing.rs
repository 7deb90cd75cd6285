//! The timing model an emulated device consults: given an operation and the
//! time it reaches the device, when would the device have finished it?
//! One implementation per model serves both the simulator (virtual time) and
//! `sluice-io`'s emulated devices (wall time), so that a figure measured in
//! one can be checked in the other.
//!
//! Every model serves operations in the order they reach it (first come,
//! first served per channel), like a device whose internal queue knows
//! nothing of priorities: that is what makes unbounded non-critical
//! dispatch hurt critical I/O (RCP §2.1).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{CloudVolume, CloudVolumeConfig, SeekDisk, SeekDiskConfig, Ssd, SsdConfig};
use crate::time::Nanos;

/// Read or write, as the models cost them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    /// A flush of the device's volatile cache (fsync).
    Flush,
}

/// One operation as a timing model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    /// Byte offset on the device.
    pub offset: u64,
    /// Bytes transferred.
    pub len: u64,
}

/// A device's timing: completion time of an operation that reaches the
/// device at `now`. Calls come in non-decreasing `now`.
pub trait TimingModel: Send {
    fn complete_at(&mut self, now: Nanos, op: Op) -> Nanos;
}

/// A device profile as TOML describes it: `model = "ssd"` and the model's
/// parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DeviceProfile {
    SeekDisk(SeekDiskProfile),
    Ssd(SsdConfig),
    CloudVolume(CloudVolumeConfig),
}

/// The seek disk with the byte span mapped onto its cylinders.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SeekDiskProfile {
    pub cylinders: u64,
    pub a_ms: f64,
    pub b: f64,
    /// Bytes per cylinder: offset / bytes_per_cylinder is the cylinder.
    pub bytes_per_cylinder: u64,
}

impl Default for SeekDiskProfile {
    fn default() -> Self {
        let d = SeekDiskConfig::default();
        SeekDiskProfile {
            cylinders: d.cylinders,
            a_ms: d.a_ms,
            b: d.b,
            bytes_per_cylinder: 1 << 20,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ProfileError {
    #[error("{field} must be {what}, got {got}")]
    Invalid {
        field: &'static str,
        what: &'static str,
        got: String,
    },
    #[error(transparent)]
    SeekDisk(#[from] super::SeekDiskError),
}

impl ProfileError {
    pub(crate) fn invalid(field: &'static str, what: &'static str, got: impl ToString) -> Self {
        ProfileError::Invalid {
            field,
            what,
            got: got.to_string(),
        }
    }
}

/// Checks that a parameter is a finite number above zero.
pub(crate) fn positive(field: &'static str, v: f64) -> Result<f64, ProfileError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(ProfileError::invalid(field, "a finite number > 0", v))
    }
}

impl DeviceProfile {
    /// Builds the timing model, checking every parameter.
    pub fn build(&self) -> Result<Box<dyn TimingModel>, ProfileError> {
        Ok(match self {
            DeviceProfile::SeekDisk(p) => Box::new(SeekDiskTiming::new(*p)?),
            DeviceProfile::Ssd(c) => Box::new(Ssd::new(*c)?),
            DeviceProfile::CloudVolume(c) => Box::new(CloudVolume::new(*c)?),
        })
    }
}

/// The seek disk serving one access at a time.
#[derive(Debug)]
pub struct SeekDiskTiming {
    disk: SeekDisk,
    bytes_per_cylinder: u64,
    busy_until: Nanos,
}

impl SeekDiskTiming {
    pub fn new(p: SeekDiskProfile) -> Result<Self, ProfileError> {
        if p.bytes_per_cylinder == 0 {
            return Err(ProfileError::invalid("bytes_per_cylinder", "at least 1", 0));
        }
        Ok(SeekDiskTiming {
            disk: SeekDisk::new(SeekDiskConfig {
                cylinders: p.cylinders,
                a_ms: p.a_ms,
                b: p.b,
                ..SeekDiskConfig::default()
            })?,
            bytes_per_cylinder: p.bytes_per_cylinder,
            busy_until: 0,
        })
    }
}

impl TimingModel for SeekDiskTiming {
    fn complete_at(&mut self, now: Nanos, op: Op) -> Nanos {
        let start = now.max(self.busy_until);
        let access = match op.kind {
            OpKind::Flush => 0,
            _ => self.disk.access(op.offset / self.bytes_per_cylinder),
        };
        self.busy_until = start + access;
        self.busy_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_from_toml_and_reject_unknown_fields() {
        let p: DeviceProfile = toml::from_str("model = \"ssd\"\nchannels = 4\n").unwrap();
        assert!(matches!(p, DeviceProfile::Ssd(SsdConfig { channels: 4, .. })));
        let err = toml::from_str::<DeviceProfile>("model = \"ssd\"\nchanels = 4\n").unwrap_err();
        assert!(err.to_string().contains("chanels"), "{err}");
        let err = toml::from_str::<DeviceProfile>("model = \"tape\"\n").unwrap_err();
        assert!(err.to_string().contains("tape"), "{err}");
    }

    #[test]
    fn seek_disk_serves_one_access_at_a_time() {
        let mut d = SeekDiskTiming::new(SeekDiskProfile::default()).unwrap();
        let op = |cyl: u64| Op {
            kind: OpKind::Read,
            offset: cyl << 20,
            len: 4096,
        };
        // Head at 0: 4 ms + 0.3 * sqrt(100) = 7 ms.
        assert_eq!(d.complete_at(0, op(100)), 7_000_000);
        // Queued behind the first: starts at 7 ms, same cylinder costs 4 ms.
        assert_eq!(d.complete_at(1_000_000, op(100)), 11_000_000);
    }
}
