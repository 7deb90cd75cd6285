//! What `sluice bench io` measures: the parts, the device of the RCP
//! parts, and the workload's settings.

use std::path::PathBuf;

use sluice_io::DeviceKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Rcp,
    Bound,
    Overhead,
    Memory,
    Uring,
    /// rcp, overhead, memory and uring (bound is a separate sweep).
    All,
}

/// The device of parts `rcp` and `bound`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Medium {
    /// The emulated SSD.
    Ssd,
    /// The real disk under the directory, through O_DIRECT.
    Disk,
}

impl Medium {
    pub(crate) fn kind(self) -> DeviceKind {
        match self {
            Medium::Ssd => DeviceKind::Emulated,
            Medium::Disk => DeviceKind::Direct,
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct IoBench {
    pub part: Part,
    /// Device of parts rcp and bound.
    pub device: Medium,
    /// Seconds per configuration per round.
    pub seconds: f64,
    /// Rounds; each runs every configuration once.
    pub repeat: usize,
    /// Rounds whose CPU steal exceeds this fraction are set aside.
    pub max_steal: f64,
    /// Background writer threads (each keeps one write outstanding).
    pub background_threads: usize,
    /// Bytes per background write.
    pub background_block: usize,
    /// Background writes between two fsyncs.
    pub background_burst: usize,
    /// Foreground threads in the rcp part.
    pub foreground_threads: usize,
    /// Think time between a foreground thread's operations in the rcp part, µs.
    pub think_us: u64,
    /// Background rate of the static-rate scheme, MB/s.
    pub static_rate_mb: f64,
    /// Foreground p99 target of the rcp+controller scheme, µs.
    pub target_p99_us: u64,
    /// RCP's device bound while lifted (`noncritical_lifted_bound`) in
    /// the rcp part; `None`: the runtime's default.
    pub lifted_bound: Option<usize>,
    /// Directory for the benchmark's files (default: a fresh temporary one).
    pub dir: Option<PathBuf>,
    /// Directory for runs.json and the SVG plots.
    pub out: PathBuf,
    /// JSON instead of tables.
    pub json: bool,
}
