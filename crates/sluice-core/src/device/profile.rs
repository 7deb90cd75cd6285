//! Device profiles as TOML describes them (`model = "ssd"` and the model's
//! parameters), each built into its [`TimingModel`].

use serde::{Deserialize, Serialize};

use super::cloud_volume::{CloudVolume, CloudVolumeConfig};
use super::seek_disk::{SeekDisk, SeekDiskConfig};
use super::ssd::{Ssd, SsdConfig};
use super::timing::{Op, OpKind, ProfileError, TimingModel};
use crate::time::Nanos;

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
