//! Device profiles as TOML describes them (`model = "ssd"` and the model's
//! parameters), each built into its [`TimingModel`].

use serde::{Deserialize, Serialize};

use super::cloud_volume::{CloudVolume, CloudVolumeConfig};
use super::seek_disk::{SeekDisk, SeekDiskConfig};
use super::ssd::{Ssd, SsdConfig};
use super::timing::{Op, OpKind, ProfileError, TimingModel};
use super::{DeviceView, DispatchView, FlatDevice, FILE_OFFSET_BITS};
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
///
/// Every file lies from the first cylinder on, its offset (not its id, the
/// bits of a device address above [`FILE_OFFSET_BITS`]) deciding where the
/// head goes: the disk stands for the one a database's data file
/// occupies, TraQIOS's setting. A store of several files (its log, its
/// tables) sees them overlap, so only a workload that reads one file, as
/// TraQIOS's experiments do, should rely on the head's position.
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

    /// The view a dispatcher keeps of this device ([`DispatchView`]): the
    /// seek disk's head and access times, a flat device otherwise (the SSD
    /// and the cloud volume cost the same wherever an I/O lies).
    pub fn dispatch_view(&self) -> Result<Box<dyn DispatchView>, ProfileError> {
        Ok(match self {
            DeviceProfile::SeekDisk(p) => Box::new(SeekDiskView::new(*p)?),
            _ => Box::new(FlatDevice::default()),
        })
    }

    /// C̄, the average access time deadline policies estimate slack with
    /// (TraQIOS §3.2.1): the seek disk's between two uniform cylinders;
    /// `None` for devices whose access time is not a matter of position.
    pub fn avg_access(&self) -> Result<Option<Nanos>, ProfileError> {
        Ok(match self {
            DeviceProfile::SeekDisk(p) => Some(SeekDiskView::new(*p)?.disk.avg_access()),
            _ => None,
        })
    }
}

impl SeekDiskProfile {
    /// The cylinder of a device address (see the type's doc); past the
    /// disk, its last cylinder.
    fn cylinder(&self, address: u64, cylinders: u64) -> u64 {
        let offset = address & ((1 << FILE_OFFSET_BITS) - 1);
        (offset / self.bytes_per_cylinder).min(cylinders - 1)
    }

    fn disk(&self) -> Result<SeekDisk, ProfileError> {
        if self.bytes_per_cylinder == 0 {
            return Err(ProfileError::invalid("bytes_per_cylinder", "at least 1", 0));
        }
        Ok(SeekDisk::new(SeekDiskConfig {
            cylinders: self.cylinders,
            a_ms: self.a_ms,
            b: self.b,
            ..SeekDiskConfig::default()
        })?)
    }
}

/// The seek disk as a dispatcher sees it: the head where the last
/// dispatched I/O leaves it, and byte addresses as cylinders.
#[derive(Debug)]
pub struct SeekDiskView {
    disk: SeekDisk,
    profile: SeekDiskProfile,
}

impl SeekDiskView {
    pub fn new(p: SeekDiskProfile) -> Result<Self, ProfileError> {
        Ok(SeekDiskView {
            disk: p.disk()?,
            profile: p,
        })
    }
}

impl DeviceView for SeekDiskView {
    fn head(&self) -> u64 {
        self.disk.head()
    }
    fn cost(&self, pos: u64) -> Nanos {
        self.disk.cost(pos)
    }
}

impl DispatchView for SeekDiskView {
    fn position(&self, offset: u64) -> u64 {
        self.profile.cylinder(offset, self.disk.cylinders())
    }
    fn dispatched(&mut self, pos: u64) {
        self.disk.set_head(pos);
    }
}

/// The seek disk serving one access at a time.
#[derive(Debug)]
pub struct SeekDiskTiming {
    disk: SeekDisk,
    profile: SeekDiskProfile,
    busy_until: Nanos,
}

impl SeekDiskTiming {
    pub fn new(p: SeekDiskProfile) -> Result<Self, ProfileError> {
        Ok(SeekDiskTiming {
            disk: p.disk()?,
            profile: p,
            busy_until: 0,
        })
    }
}

impl TimingModel for SeekDiskTiming {
    fn complete_at(&mut self, now: Nanos, op: Op) -> Nanos {
        let start = now.max(self.busy_until);
        let access = match op.kind {
            OpKind::Flush => 0,
            _ => self
                .disk
                .access(self.profile.cylinder(op.offset, self.disk.cylinders())),
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

    #[test]
    fn the_dispatch_view_moves_the_head_where_the_device_will_be() {
        let p = DeviceProfile::SeekDisk(SeekDiskProfile::default());
        let mut v = p.dispatch_view().unwrap();
        assert_eq!(v.position(100 << 20), 100);
        assert_eq!(v.position(u64::MAX), 999, "beyond the disk: its last cylinder");
        assert_eq!(
            v.position((3 << FILE_OFFSET_BITS) + (100 << 20)),
            100,
            "a file's offset places it, not its id"
        );
        assert_eq!(v.cost(100), 7_000_000, "head at 0: 4 + 0.3 * sqrt(100)");
        v.dispatched(100);
        assert_eq!((v.head(), v.cost(100)), (100, 4_000_000));
        let ssd = DeviceProfile::Ssd(SsdConfig::default()).dispatch_view().unwrap();
        assert_eq!((ssd.position(8192), ssd.cost(5)), (2, 0));
        let c_bar = p.avg_access().unwrap().unwrap() as f64 / 1e6;
        assert!((c_bar - 9.477).abs() < 0.01, "{c_bar}");
    }
}
