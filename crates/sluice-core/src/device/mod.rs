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
pub use profile::{DeviceProfile, SeekDiskProfile, SeekDiskTiming, SeekDiskView};
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

/// The device view a dispatcher keeps between decisions (sluice-io's
/// dispatch; the simulator moves its [`SeekDisk`] itself): where a byte
/// address lies for the policies, and where the head is once what was
/// dispatched has been served. That is exact for a device that serves one
/// I/O at a time in dispatch order, the seek disk at depth 1, and a
/// lower bound on the head's travel at greater depths.
pub trait DispatchView: DeviceView + Send {
    /// The position policies see for the byte address `offset`: a
    /// cylinder on the seek disk, a 4 KiB block elsewhere.
    fn position(&self, offset: u64) -> u64;
    /// An I/O at `pos` entered the device.
    fn dispatched(&mut self, pos: u64);
}

/// Bytes per position on devices without a head.
pub const BLOCK: u64 = 4096;

/// Device addresses (sluice-io's): a file's id above this many bits, the
/// offset in the file below, so that different files never look adjacent.
pub const FILE_OFFSET_BITS: u32 = 30;

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

impl DispatchView for FlatDevice {
    fn position(&self, offset: u64) -> u64 {
        offset / BLOCK
    }
    fn dispatched(&mut self, _pos: u64) {}
}
