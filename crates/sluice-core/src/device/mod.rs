//! Device timing models and the device view policies decide with.
//!
//! Seek-aware policies (SSTF, SCAN, FD-SCAN, SSEDV, TraQIOS) need the head
//! position and the access cost C_{i,x} of each pending job at the moment of
//! a decision; they get both from a [`DeviceView`] passed in at each `pop`.
//! The timing models live here, in the pure core, so that the simulator and
//! the I/O runtime share one implementation of each: the seek disk of
//! TraQIOS §4, an SSD with internal channels, and a capped cloud volume,
//! behind [`TimingModel`] and described in TOML by [`DeviceProfile`].

mod cloud_volume;
mod profile;
mod seek_disk;
mod ssd;
mod timing;

pub use cloud_volume::{CloudVolume, CloudVolumeConfig};
pub use profile::{DeviceProfile, SeekDiskProfile, SeekDiskTiming};
pub use seek_disk::{AvgAccess, SeekDisk, SeekDiskConfig, SeekDiskError};
pub use ssd::{Ssd, SsdConfig};
pub use timing::{Op, OpKind, ProfileError, TimingModel};

use crate::time::Nanos;

/// What a policy may ask of the device at a decision.
pub trait DeviceView {
    /// Current head position (cylinder, or block for devices without one).
    fn head(&self) -> u64;
    /// Access time of a job at `pos` if it were served next.
    fn cost(&self, pos: u64) -> Nanos;
}

/// A device where every access costs the same and position is meaningless;
/// for drivers and tests whose policy does not look at the device.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlatDevice {
    pub cost: Nanos,
}

impl DeviceView for FlatDevice {
    fn head(&self) -> u64 {
        0
    }
    fn cost(&self, _pos: u64) -> Nanos {
        self.cost
    }
}
