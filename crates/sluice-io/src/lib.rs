//! # sluice-io: a request-aware I/O runtime
//!
//! A storage engine links this crate to give every I/O its request's
//! context and to put critical-path I/O first at every layer, as RCP
//! (Kim et al., "Enlightening the I/O Path", FAST '17) does in the kernel,
//! here in user space:
//!
//! | RCP | here |
//! |---|---|
//! | enlightenment API (§4.1) | [`enter`] / [`CtxGuard`]: `ctx_begin/ctx_end` on the current thread |
//! | caching layer: dirty ratios per class (§4.3) | `writeback.rs`: [`SluiceFile::write_buffered`]; `dirty.rs`: `dirty_budget_mb`, `*_dirty_ratio` |
//! | admission slots per class (§4.3) | [`sched`]: `critical_slots`, `noncritical_slots` |
//! | two-queue dispatch, 10 ms starvation guard (§4.3) | [`sched`]: any sluice-core policy per queue |
//! | device bound on non-critical I/O (§4.3) | [`sched`]: `noncritical_device_bound`, and in bytes: `noncritical_piece_kb` (not in RCP, below); lifted to `noncritical_lifted_bound` while no critical I/O is expected, `critical_idle_ms` (not in RCP: see [`sched`]) |
//! | task dependency: locks, condition variables (§4.2.1) | [`sync`]: [`sync::Mutex`], [`sync::RwLock`], [`sync::Condvar`] |
//! | I/O dependency, `ncio` promotion (§4.2.2) | [`SluiceFile::sync`], [`SluiceFile::read_at`] promote outstanding writes |
//! | transitive dependency (§4.4) | [`task`]: blocking status, raise along the chain |
//! | background tasks with knobs, a controller (programmable background tasks §VI) | [`background`], [`control`] with controllers from `sluice-core` |
//! | TraQIOS's inputs (§2, §3.2.2): deadline D and N in the context, M as I/Os are issued, arrivals and finishes, the head | [`Runtime::enter`], `Job::at_index` from the task's count, [`sched`]'s `DispatchView` |
//!
//! # Embedding it
//!
//! A storage engine opens its files through a [`Runtime`]. A thread that
//! serves a request says so with [`enter`]: while the guard lives, every
//! I/O the thread makes carries the request's [`sluice_core::Ctx`] and is
//! critical. Work the engine does in the background (flush, compaction)
//! runs inside a [`Background`] task, whose [`Knobs`] a controller or an
//! operator turns:
//!
//! ```
//! use sluice_io::{enter, Knobs, Runtime, RuntimeConfig, TaskKind};
//! use sluice_core::Ctx;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let rt = Runtime::new(RuntimeConfig::default())?;
//! let file = rt.open(dir.path().join("table"), true)?;
//!
//! // A foreground request: its I/O goes first at every layer.
//! {
//!     let _request = enter(Ctx::new(1, rt.now()));
//!     file.write_at(b"hello", 0)?;
//!     file.sync()?;
//!     let mut buf = [0u8; 5];
//!     assert_eq!(file.read_at(&mut buf, 0)?, 5);
//!     assert_eq!(&buf, b"hello");
//! }
//!
//! // A background task, throttled to 1 MB/s of I/O.
//! let compaction = rt.register_background("compaction", TaskKind::Compaction);
//! compaction.set_knobs(Knobs { rate_bytes: Some(1e6), ..Knobs::default() });
//! {
//!     let _working = compaction.enter();
//!     file.write_buffered(b"merged", 4096)?; // waits in the dirty budget
//!     file.write_back()?;                    // written as the task's I/O
//! }
//! assert_eq!(compaction.stats().bytes, 6);
//! # Ok(())
//! # }
//! ```
//!
//! Departure from RCP: its device bound counts non-critical I/Os, and a
//! critical I/O can still find one large background I/O ahead of it in the
//! device (a 256 KiB compaction read holds a 125 MB/s cloud volume 2 ms).
//! Here a non-critical I/O larger than `noncritical_piece_kb` (64 KiB by
//! default) holds the device one piece at a time and gives it back between
//! pieces ([`sched::Sched::yield_device`]), so critical I/O waits behind one
//! piece, as the kernel's `max_sectors_kb` splitting would allow an
//! I/O scheduler to do. It cost the demo's compaction nothing measurable
//! and took its read p99 from 1.5× to 1.1× the settled store's
//! (`docs/reproductions/background-tasks.md`). A sequential background
//! task pays the device's latency per piece, though: where writes outrun
//! compaction, the [`ControlLoop`] grows the pieces (up to 8 times) as the
//! store nears a write stall ([`Runtime::set_noncritical_piece_kb`]), and
//! once the store slows its writers down it runs the background work as
//! critical (the writers wait on it), since under a foreground that keeps
//! the device busy non-critical I/O of any size gets only its gaps.
//!
//! Devices ([`device`]) are real files (buffered or `O_DIRECT`) or emulated
//! ones: a real file plus a sluice-core timing model, so that contention is
//! real in wall time and the data is really stored. The dispatch feeds the
//! model each I/O it lets in, in its order and at its time, whenever the
//! issuing thread wakes: an emulated device serves in dispatch order at
//! any depth, so a seek-aware policy (`sstf`, `traqios`) that the dispatch
//! runs with the head where the last I/O left it shortens real waits, and EDF's seeks cost real time: TraQIOS measured
//! in wall time against the simulator's prediction is `sluice bench
//! deadline` (`docs/reproductions/traqios.md`, "On real I/O").
//!
//! A server that runs its requests on a few threads, one per core, learns
//! from [`before_blocking`] when a thread is about to wait on the device or
//! a lock, so that it can hand the thread's other clients to another
//! thread first (`sluice serve`'s turns).
//!
//! I/O is a positional `pread`/`pwrite` on the calling thread. An io_uring
//! path was measured first (`sluice bench io --part uring`, numbers in
//! `docs/BENCHMARKS.md`): one ring halves the CPU per I/O at depth 32 on a
//! real disk but delivers fewer IOPS than blocking threads, and is slower
//! on the page cache, so it is not used. Not built: a ring per core fed by
//! dispatch, and seek-aware ordering inside the emulated device itself at
//! depths above 1 (every model serves in arrival order per channel).

pub mod background;
mod blocking;
pub mod config;
pub mod control;
pub mod device;
mod dirty;
pub mod error;
mod file;
pub mod runtime;
pub mod sched;
pub mod sync;
pub mod task;
mod writeback;

pub use background::{Background, BackgroundGuard, BackgroundStats, Knobs, TaskKind, UrgentGuard};
pub use blocking::{before_blocking, blocking};
pub use config::{DeviceConfig, DeviceKind, RcpConfig, RuntimeConfig};
pub use control::ControlLoop;
pub use device::AlignedBuf;
pub use error::IoError;
pub use runtime::{RequestGuard, Runtime, SluiceFile};
pub use task::{current_ctx, enter, CtxGuard, Task};
