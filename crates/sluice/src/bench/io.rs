//! `sluice bench io` (the benchmark is `sluice_bench::runtime`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use sluice_bench::runtime::{IoBench, Medium, Part};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PartArg {
    Rcp,
    Bound,
    Overhead,
    Memory,
    Uring,
    /// rcp, overhead, memory and uring (bound is a separate sweep)
    All,
}

/// The device of parts `rcp` and `bound`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MediumArg {
    /// The emulated SSD
    Ssd,
    /// The real disk under --dir, through O_DIRECT
    Disk,
}

/// The I/O runtime on an emulated SSD: RCP against FIFO, and overhead
#[derive(Args)]
#[command(
    long_about = "The I/O runtime on an emulated SSD (4 channels, 80 us reads, 30 us writes \
    plus transfer at 200 MB/s per channel, device queue depth 32) or on the real disk.\n\n\
    rcp: the micro-benchmark of RCP 7.6. Foreground threads do synchronous 4 KiB random reads, \
    and every 4th operation a 4 KiB write plus sync, with think time; background writers write \
    bursts through the page cache and fsync after each, saturating the device. Side by side: \
    fifo (no priorities), static-rate (fifo plus a fixed background rate limit), dispatch-only \
    (critical first at dispatch, nothing else), rcp (every layer plus inheritance), \
    rcp+controller (rcp with the background controller fed foreground p99), and the \
    foreground alone; background throughput with a light foreground (one thread, 5 ms think \
    time) beside the background alone.\n\n\
    bound: the light foreground against the background writers with the bound on \
    non-critical I/Os at the device swept from 1 to 32 (RCP Fig. 11).\n\n\
    overhead: 4 KiB random reads through sluice-io against a plain pread loop on the same \
    device, at queue depth 1 and 32, on the emulated SSD and on the page cache (no timing \
    model: the runtime's CPU cost shows).\n\n\
    memory: bytes of bookkeeping per queued I/O, and resident memory sampled over a long \
    run of reads (it must not grow with the I/Os completed).\n\n\
    uring: 4 KiB random reads by threads calling pread against one thread keeping as many \
    reads in flight in an io_uring ring, at queue depth 1 and 32, on the page cache and on \
    the real disk (O_DIRECT): IOPS and CPU time per I/O.\n\n\
    Configurations are interleaved in every round; rounds with CPU steal above --max-steal are \
    set aside; ratios are paired within rounds."
)]
pub struct IoArgs {
    /// Which part to run
    #[arg(long, value_enum, default_value = "all")]
    pub part: PartArg,
    /// Device of parts rcp and bound
    #[arg(long, value_enum, default_value = "ssd")]
    pub device: MediumArg,
    /// Seconds per configuration per round
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Rounds; each round runs every configuration once
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Set aside rounds whose CPU steal exceeds this fraction
    #[arg(long, default_value_t = 0.10)]
    pub max_steal: f64,
    /// Background writer threads (each keeps one write outstanding)
    #[arg(long, default_value_t = 128)]
    pub background_threads: usize,
    /// Bytes per background write
    #[arg(long, default_value_t = 16384)]
    pub background_block: usize,
    /// Background writes between two fsyncs
    #[arg(long, default_value_t = 64)]
    pub background_burst: usize,
    /// Foreground threads in the rcp part
    #[arg(long, default_value_t = 2)]
    pub foreground_threads: usize,
    /// Think time between a foreground thread's operations in the rcp part, microseconds
    #[arg(long, default_value_t = 100)]
    pub think_us: u64,
    /// Background rate of the static-rate scheme, MB/s
    #[arg(long, default_value_t = 50.0)]
    pub static_rate_mb: f64,
    /// Foreground p99 target of the rcp+controller scheme, microseconds
    #[arg(long, default_value_t = 1000)]
    pub target_p99_us: u64,
    /// Non-critical I/Os at the device while RCP's bound is lifted, in the rcp part (default: the runtime's, 8; 0 = the device's depth)
    #[arg(long)]
    pub lifted_bound: Option<usize>,
    /// Directory for the benchmark's files (default: fresh ones, the emulated SSD's in /dev/shm so that the host's disk adds no stalls of its own)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Directory for runs.json and the SVG plots
    #[arg(long, default_value = "results/bench-io")]
    pub out: PathBuf,
    /// Print JSON instead of tables
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: IoArgs) -> Result<()> {
    print!(
        "{}",
        sluice_bench::runtime::run(&IoBench {
            part: match a.part {
                PartArg::Rcp => Part::Rcp,
                PartArg::Bound => Part::Bound,
                PartArg::Overhead => Part::Overhead,
                PartArg::Memory => Part::Memory,
                PartArg::Uring => Part::Uring,
                PartArg::All => Part::All,
            },
            device: match a.device {
                MediumArg::Ssd => Medium::Ssd,
                MediumArg::Disk => Medium::Disk,
            },
            seconds: a.seconds,
            repeat: a.repeat,
            max_steal: a.max_steal,
            background_threads: a.background_threads,
            background_block: a.background_block,
            background_burst: a.background_burst,
            foreground_threads: a.foreground_threads,
            think_us: a.think_us,
            static_rate_mb: a.static_rate_mb,
            target_p99_us: a.target_p99_us,
            lifted_bound: a.lifted_bound,
            dir: a.dir,
            out: a.out,
            json: a.json,
        })?
    );
    Ok(())
}
