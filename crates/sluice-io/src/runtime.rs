//! The runtime a storage engine links: files on one device, every I/O
//! carrying its task's context through RCP's stages ([`crate::sched`]) to
//! the device, and I/O dependencies resolved by promotion (RCP §4.2.2): a
//! critical task that syncs a file, or reads a range, that outstanding
//! non-critical writes still hold promotes those writes wherever they wait.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Duration;

use rustc_hash::FxHashMap;
use sluice_core::device::{FlatDevice, Op, OpKind};
use sluice_core::{Class, Ctx, Job, Nanos};

use crate::background::{current_background, Background, TaskKind};
use crate::config::RuntimeConfig;
use crate::device::{address, Device};
use crate::dirty::DirtyBudget;
use crate::error::IoError;
use crate::file::FileInner;
use crate::sched::{Criticality, Location, Occupancy, Sched};
use crate::task::{enter, Blocker, CtxGuard, Promote, Task};

/// A handle to the runtime; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    config: RuntimeConfig,
    pub(crate) device: Device,
    state: Mutex<State>,
    next_seq: AtomicU64,
    next_file: AtomicU32,
    background: Mutex<Vec<Arc<Background>>>,
    pub(crate) dirty: DirtyBudget,
    /// The piece size in force, KiB: `rcp.noncritical_piece_kb` until a
    /// controller sets it ([`Runtime::set_noncritical_piece_kb`]).
    piece_kb: AtomicU64,
}

struct State {
    sched: Sched,
    /// Threads waiting for their I/O to enter the device.
    parked: FxHashMap<u64, Thread>,
    /// On an emulated device: the piece each outstanding I/O performs
    /// next, for the dispatch to start it on the model.
    pieces: FxHashMap<u64, Op>,
    /// On an emulated device: when the model finishes each I/O the
    /// dispatch let in, until its thread takes it.
    finish: FxHashMap<u64, Nanos>,
    /// The parked thread that keeps the policy's wake time (the timer),
    /// and that time: see [`Shared::arm`].
    timer: Option<u64>,
    armed: Option<Nanos>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, IoError> {
        config.validate()?;
        let spec = config.rcp.policy_spec()?;
        let slack = config.slack_model()?;
        let build = || {
            spec.build(&config.rcp.options, slack)
                .map_err(|e| IoError::Config(format!("rcp.policy: {e}")))
        };
        let view = match &config.device.profile {
            Some(p) => p
                .dispatch_view()
                .map_err(|e| IoError::Config(format!("device.profile: {e}")))?,
            None => Box::new(FlatDevice::default()),
        };
        let sched = Sched::new(config.rcp.clone(), config.device.depth, [build()?, build()?]).with_view(view);
        Ok(Runtime {
            shared: Arc::new(Shared {
                device: Device::new(&config.device)?,
                dirty: DirtyBudget::new(&config.rcp),
                piece_kb: AtomicU64::new(config.rcp.noncritical_piece_kb),
                config,
                state: Mutex::new(State {
                    sched,
                    parked: FxHashMap::default(),
                    pieces: FxHashMap::default(),
                    finish: FxHashMap::default(),
                    timer: None,
                    armed: None,
                }),
                next_seq: AtomicU64::new(1),
                next_file: AtomicU32::new(0),
                background: Mutex::new(Vec::new()),
            }),
        })
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// Opens (or creates) a file on the runtime's device.
    pub fn open(&self, path: impl AsRef<Path>, create: bool) -> Result<SluiceFile, IoError> {
        let path = path.as_ref().to_path_buf();
        let file = self.shared.device.open(&path, create)?;
        Ok(SluiceFile {
            shared: self.shared.clone(),
            inner: Arc::new(FileInner {
                id: self.shared.next_file.fetch_add(1, Ordering::Relaxed),
                path,
                file,
                pending: Mutex::default(),
                dirty: Mutex::new(Vec::new()),
                drained: Condvar::new(),
            }),
        })
    }

    /// Registers a background task; threads work for it through
    /// [`Background::enter`].
    pub fn register_background(&self, name: impl Into<String>, kind: TaskKind) -> Arc<Background> {
        let bg = Arc::new(Background::new(name.into(), kind));
        lock(&self.shared.background).push(bg.clone());
        bg
    }

    /// Every registered background task, in registration order.
    pub fn background_tasks(&self) -> Vec<Arc<Background>> {
        lock(&self.shared.background).clone()
    }

    /// Bytes written with `write_buffered` and not yet written back.
    pub fn dirty_bytes(&self) -> u64 {
        self.shared.dirty.total()
    }

    /// What waits where right now.
    pub fn occupancy(&self) -> Occupancy {
        lock(&self.shared.state).sched.occupancy()
    }

    /// Sets the largest piece, KiB, in which a non-critical I/O holds the
    /// device (0: whole I/Os), for I/O that starts from now on: what a
    /// controller widens as a write stall nears (see
    /// [`ControlLoop`](crate::ControlLoop)).
    pub fn set_noncritical_piece_kb(&self, kb: u64) {
        self.shared.piece_kb.store(kb, Ordering::Relaxed);
    }

    /// The piece size in force, KiB.
    pub fn noncritical_piece_kb(&self) -> u64 {
        self.shared.piece_kb.load(Ordering::Relaxed)
    }

    /// Nanoseconds since the runtime started: its clock.
    pub fn now(&self) -> u64 {
        self.shared.device.now()
    }

    /// Nanoseconds I/Os have held the device, each from its dispatch to
    /// its completion, summed: at depth 1, the time the device was busy.
    pub fn device_held(&self) -> u64 {
        lock(&self.shared.state).sched.held()
    }

    /// Begins a request on the current thread, as [`enter`](crate::enter)
    /// does, and tells the runtime's policies that it arrived now and,
    /// when the guard drops, that it finished: deadline policies need
    /// both (TraQIOS's m counts the expected I/Os of the requests in the
    /// system, and its success rate U counts the deadlines met).
    pub fn enter(&self, ctx: Ctx) -> RequestGuard {
        self.request_arrived(&ctx);
        RequestGuard {
            guard: enter(ctx),
            shared: self.shared.clone(),
            ctx,
        }
    }

    /// Tells the runtime's policies that the request `ctx` arrived now,
    /// for a request that spans several entries (a transaction of several
    /// commands, each run inside [`enter`](crate::enter)): it arrives once,
    /// before its first, and finishes once ([`Runtime::request_finished`]),
    /// after its last. [`Runtime::enter`] does both for a request of one.
    pub fn request_arrived(&self, ctx: &Ctx) {
        lock(&self.shared.state).sched.request_arrived(ctx, self.now());
    }

    /// Tells the runtime's policies that the request `ctx` finished now
    /// (see [`Runtime::request_arrived`]).
    pub fn request_finished(&self, ctx: &Ctx) {
        lock(&self.shared.state).sched.request_finished(ctx, self.now());
    }
}

/// A request in progress on the current thread ([`Runtime::enter`]).
#[must_use = "the request ends when the guard is dropped"]
pub struct RequestGuard {
    guard: CtxGuard,
    shared: Arc<Shared>,
    ctx: Ctx,
}

impl RequestGuard {
    /// I/Os the request has issued on this thread so far.
    pub fn ios(&self) -> u32 {
        self.guard.ios()
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let now = self.shared.device.now();
        lock(&self.shared.state).sched.request_finished(&self.ctx, now);
    }
}

impl Promote for Shared {
    fn promote(&self, seq: u64) {
        if !self.config.rcp.inheritance {
            return;
        }
        let mut st = lock(&self.state);
        let now = self.device.now();
        let ready = st.sched.promote(seq, now);
        self.dispatched(&mut st, &ready);
    }
}

impl Shared {
    /// The scheduler let `ready` into the device: starts each on the
    /// emulated device's model, in this order and at its dispatch time,
    /// and wakes the threads that wait to perform them.
    fn dispatched(&self, st: &mut State, ready: &[u64]) {
        for &seq in ready {
            if self.device.is_modelled() {
                let entered = st.sched.entered(seq).expect("a dispatched I/O is in the device");
                let op = st.pieces[&seq];
                let finish = self.device.start(entered, op).expect("a modelled device");
                st.finish.insert(seq, finish);
            }
            if let Some(t) = st.parked.remove(&seq) {
                t.unpark();
            }
        }
        if st.timer.is_some_and(|t| ready.contains(&t)) {
            st.timer = None;
        }
        self.arm(st);
    }

    /// A policy that holds queued I/O back with the device free (`cfq`'s
    /// anticipation) must be asked again at its wake time though nothing
    /// arrives or finishes. One of the threads parked for their I/O keeps
    /// that time, the timer: there is always one, since every queued I/O
    /// has its thread parked. Costs one check per step for every other
    /// policy, which never holds I/O back.
    fn arm(&self, st: &mut State) {
        let wake = st.sched.wake_at();
        if wake.is_none() {
            st.armed = None;
            return;
        }
        if wake == st.armed && st.timer.is_some() {
            return;
        }
        st.armed = wake;
        st.timer = st.parked.iter().next().map(|(&seq, t)| {
            t.unpark();
            seq
        });
    }

    /// For the parked thread of I/O `seq`: if it is the timer, steps the
    /// scheduler once the wake time has come, and returns how long to
    /// sleep until it comes; `None`: sleep until unparked.
    fn keep_time(&self, st: &mut State, seq: u64) -> Option<Duration> {
        if st.timer != Some(seq) {
            return None;
        }
        let at = st.armed?;
        let now = self.device.now();
        if now < at {
            return Some(Duration::from_nanos(at - now));
        }
        // What the step leaves held back re-arms a timer (this thread
        // again, unparked, if its I/O still waits).
        (st.timer, st.armed) = (None, None);
        let ready = st.sched.poll(now);
        self.dispatched(st, &ready);
        if st.sched.wake_at().is_some_and(|at| at <= now) {
            // The policy's queue cannot be served yet (critical I/O goes
            // first, or the device bound holds): the next arrival or
            // completion steps the scheduler and arms a timer again.
            st.timer = None;
        }
        None
    }

    pub(crate) fn classify(&self, task: &Task) -> Criticality {
        let raised = current_background().is_some_and(|b| b.knobs().critical);
        if raised || task.is_critical(self.config.rcp.inheritance) {
            Criticality::Critical
        } else {
            Criticality::NonCritical
        }
    }

    /// Runs one I/O through the stages: waits until it may enter the device,
    /// performs it there, and leaves. `io` performs bytes `[start, start +
    /// len)` of the operation; a non-critical I/O larger than the piece size
    /// is performed piece by piece, giving the device back between pieces
    /// (see [`RcpConfig::noncritical_piece_kb`](crate::RcpConfig)).
    fn io(
        self: &Arc<Self>,
        file: &FileInner,
        op: Op,
        seq: u64,
        mut io: impl FnMut(u64, u64) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        crate::blocking();
        let task = Task::current();
        if let Some(bg) = current_background() {
            bg.throttle(&task, self.config.rcp.inheritance, op.len);
        }
        let class = self.classify(&task);
        let now = self.device.now();
        let (ctx, index) = task.next_access().unwrap_or_else(|| {
            let ctx = Ctx {
                class: Class::Background,
                ..Ctx::new(seq, now)
            };
            (ctx, 1)
        });
        let job = Job::new(seq, ctx, op.offset, now)
            .at_index(index)
            .with_tag(file.id as u64);
        let mut result = Ok(());
        let mut done = now;
        for (i, (start, len)) in self.pieces(op.len, class).enumerate() {
            let piece = Op {
                offset: op.offset + start,
                len,
                ..op
            };
            let finish = if i == 0 {
                self.enter(&task, job, class, piece, now)
            } else {
                self.next_piece(&task, seq, piece, done)
            };
            (result, done) = self.device.perform(finish, || io(start, len));
            if result.is_err() {
                break;
            }
        }
        let mut st = lock(&self.state);
        if self.device.is_modelled() {
            st.pieces.remove(&seq);
        }
        let ready = st.sched.complete(seq, done);
        self.dispatched(&mut st, &ready);
        drop(st);
        if let Some(bg) = current_background() {
            bg.account(op.len);
        }
        result
    }

    /// The pieces `(start, len)` an I/O of `len` bytes is performed in:
    /// one, unless it is non-critical and larger than the piece size.
    fn pieces(&self, len: u64, class: Criticality) -> impl Iterator<Item = (u64, u64)> {
        let piece = match class {
            Criticality::NonCritical if self.config.rcp.enabled => self.piece_kb.load(Ordering::Relaxed) << 10,
            _ => 0,
        };
        let step = if piece == 0 { len.max(1) } else { piece };
        (0..len.max(1))
            .step_by(step as usize)
            .map(move |start| (start, step.min(len - start)))
    }

    /// Submits the job (its `pos` still the device address) at `now`, its
    /// first piece `piece`, and waits until it is in the device; returns
    /// when an emulated device finishes the piece.
    fn enter(self: &Arc<Self>, task: &Arc<Task>, mut job: Job, class: Criticality, piece: Op, now: u64) -> Option<u64> {
        let seq = job.seq;
        let mut st = lock(&self.state);
        if self.device.is_modelled() {
            st.pieces.insert(seq, piece);
        }
        job.pos = st.sched.position(job.pos);
        let ready = st.sched.submit(job, class, now);
        self.await_device(st, task, seq, &ready, piece, now)
    }

    /// Between two pieces: gives the device back and waits to re-enter it
    /// for `piece` (or keeps it: see [`Sched::yield_device`]); `now` is when
    /// the device finished the last piece.
    fn next_piece(self: &Arc<Self>, task: &Arc<Task>, seq: u64, piece: Op, now: u64) -> Option<u64> {
        let mut st = lock(&self.state);
        if self.device.is_modelled() {
            st.pieces.insert(seq, piece);
        }
        let ready = st.sched.yield_device(seq, now);
        self.await_device(st, task, seq, &ready, piece, now)
    }

    /// After a scheduler step at `now` that let `ready` in: starts and
    /// wakes them, and waits until `seq` is in the device; returns when an
    /// emulated device finishes `piece`. (No clock read on the fast path:
    /// on the page cache the clock is a visible share of the cost.)
    fn await_device(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        task: &Arc<Task>,
        seq: u64,
        ready: &[u64],
        piece: Op,
        now: u64,
    ) -> Option<u64> {
        self.dispatched(&mut st, ready);
        if st.sched.location(seq) == Some(Location::Device) {
            // In `ready`, or it kept the device between pieces, which
            // starts the piece where the last one finished.
            return st.finish.remove(&seq).or_else(|| self.device.start(now, piece));
        }
        st.parked.insert(seq, std::thread::current());
        self.arm(&mut st);
        drop(st);
        task.begin_wait(Blocker::Io(self.clone(), seq));
        let mut sleep = None;
        let finish = loop {
            match sleep {
                Some(d) => std::thread::park_timeout(d),
                None => std::thread::park(),
            }
            let mut st = lock(&self.state);
            if st.sched.location(seq) == Some(Location::Device) {
                break st.finish.remove(&seq);
            }
            sleep = self.keep_time(&mut st, seq);
        };
        task.end_wait();
        finish
    }

    fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }
}

/// A file on the runtime's device. Clones share the file.
#[derive(Clone)]
pub struct SluiceFile {
    pub(crate) shared: Arc<Shared>,
    pub(crate) inner: Arc<FileInner>,
}

impl std::fmt::Debug for SluiceFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceFile").field("path", &self.inner.path).finish()
    }
}

impl SluiceFile {
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub(crate) fn device_error(&self, op: &'static str, offset: u64, len: usize, source: std::io::Error) -> IoError {
        IoError::Device {
            op,
            path: self.inner.path.clone(),
            offset,
            len,
            source,
        }
    }

    /// Checks a request before any bookkeeping; returns its end offset.
    pub(crate) fn check(&self, ptr: *const u8, offset: u64, len: usize) -> Result<u64, IoError> {
        self.shared.device.check_alignment(&self.inner.path, ptr, offset, len)?;
        offset.checked_add(len as u64).ok_or_else(|| IoError::Range {
            path: self.inner.path.clone(),
            offset,
            len,
        })
    }

    /// Reads into `buf` at `offset`; returns the bytes read (short at the
    /// end of the file). Waits first for outstanding writes to the range.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, IoError> {
        let s = &self.shared;
        let end = self.check(buf.as_ptr(), offset, buf.len())?;
        self.wait_for_writes(|&(_, o, l)| o < end && offset < o + l);
        let op = Op {
            kind: OpKind::Read,
            offset: address(self.inner.id, offset),
            len: buf.len() as u64,
        };
        let len = buf.len();
        // Bytes read so far; a short piece (the end of the file) ends the read.
        let mut done = 0;
        s.io(&self.inner, op, s.next_seq(), |start, n| {
            if done == start as usize {
                let piece = &mut buf[done..done + n as usize];
                done += self.inner.file_read(piece, offset + start)?;
            }
            Ok(())
        })
        .map_err(|e| self.device_error("read", offset, len, e))?;
        Ok(done)
    }

    /// Writes all of `data` at `offset`, to the device (for a write that
    /// may wait in memory first, see [`SluiceFile::write_buffered`]).
    pub fn write_at(&self, data: &[u8], offset: u64) -> Result<(), IoError> {
        self.check(data.as_ptr(), offset, data.len())?;
        self.device_write(offset, data.len() as u64, |start, n| {
            let piece = &data[start as usize..(start + n) as usize];
            std::os::unix::fs::FileExt::write_all_at(&self.inner.file, piece, offset + start)
        })
        .map_err(|e| self.device_error("write", offset, data.len(), e))
    }

    /// One write I/O of `len` bytes at `offset` through the stages, visible
    /// to dependent reads and syncs while it is outstanding; `io` writes
    /// bytes `[start, start + len)` of it.
    pub(crate) fn device_write(
        &self,
        offset: u64,
        len: u64,
        io: impl FnMut(u64, u64) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let s = &self.shared;
        let seq = s.next_seq();
        lock(&self.inner.pending).writes.push((seq, offset, len));
        let op = Op {
            kind: OpKind::Write,
            offset: address(self.inner.id, offset),
            len,
        };
        let result = s.io(&self.inner, op, seq, io);
        let mut pending = lock(&self.inner.pending);
        pending.writes.retain(|p| p.0 != seq);
        if pending.waiting > 0 {
            drop(pending);
            self.inner.drained.notify_all();
        }
        result
    }

    /// Makes every write acknowledged so far durable: writes back the
    /// file's dirty data, waits for outstanding writes to the file
    /// (promoting them for a critical caller), then flushes the device.
    pub fn sync(&self) -> Result<(), IoError> {
        self.write_back()?;
        self.wait_for_writes(|_| true);
        let s = &self.shared;
        let op = Op {
            kind: OpKind::Flush,
            offset: address(self.inner.id, 0),
            len: 0,
        };
        s.io(&self.inner, op, s.next_seq(), |_, _| {
            s.device.sync_data(&self.inner.file)
        })
        .map_err(|e| self.device_error("sync", 0, 0, e))
    }

    /// Waits until the outstanding writes that `depends` selects are done;
    /// a critical caller promotes them first (an I/O dependency).
    fn wait_for_writes(&self, depends: impl Fn(&(u64, u64, u64)) -> bool) {
        let mut pending = lock(&self.inner.pending);
        let awaited: Vec<u64> = pending.writes.iter().filter(|p| depends(p)).map(|p| p.0).collect();
        let Some(&last) = awaited.last() else { return };
        let task = Task::current();
        drop(pending);
        crate::blocking();
        if task.is_critical(self.shared.config.rcp.inheritance) {
            for &seq in &awaited {
                self.shared.promote(seq);
            }
        }
        task.begin_wait(Blocker::Io(self.shared.clone(), last));
        pending = lock(&self.inner.pending);
        while pending.writes.iter().any(|p| awaited.contains(&p.0)) {
            pending.waiting += 1;
            pending = self.inner.drained.wait(pending).unwrap_or_else(|e| e.into_inner());
            pending.waiting -= 1;
        }
        drop(pending);
        task.end_wait();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use sluice_core::device::{DeviceProfile, SsdConfig, TimingModel};

    use super::*;
    use crate::config::{DeviceConfig, DeviceKind, RcpConfig};

    const SERVICE: Nanos = 1_000_000;

    /// One channel, `SERVICE` an operation, every finish recorded.
    struct Recorder {
        free_at: Nanos,
        finishes: Arc<Mutex<Vec<Nanos>>>,
    }

    impl TimingModel for Recorder {
        fn complete_at(&mut self, now: Nanos, _op: Op) -> Nanos {
            self.free_at = now.max(self.free_at) + SERVICE;
            lock(&self.finishes).push(self.free_at);
            self.free_at
        }
    }

    #[test]
    fn the_model_serves_in_dispatch_order_whenever_threads_wake() {
        let finishes = Arc::new(Mutex::new(Vec::new()));
        let mut rt = Runtime::new(RuntimeConfig {
            device: DeviceConfig {
                kind: DeviceKind::Emulated,
                depth: 2,
                profile: Some(DeviceProfile::Ssd(SsdConfig::default())),
            },
            rcp: RcpConfig::default(),
        })
        .unwrap();
        let recorder = Recorder {
            free_at: 0,
            finishes: finishes.clone(),
        };
        let shared = Arc::get_mut(&mut rt.shared).expect("not yet shared");
        shared.device = std::mem::replace(&mut shared.device, Device::new(&DeviceConfig::default()).unwrap())
            .with_model(Box::new(recorder));
        let dir = tempfile::tempdir().unwrap();
        let file = rt.open(dir.path().join("f"), true).unwrap();
        // The threads that get the device first hold it (in wall time)
        // until all eight reads wait, so every later read is dispatched
        // by a completion whose thread wakes late.
        let queued = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..8u64)
            .map(|i| {
                let (file, queued) = (file.clone(), queued.clone());
                std::thread::spawn(move || {
                    let _ctx = crate::enter(Ctx::new(i + 1, 0));
                    let op = Op {
                        kind: OpKind::Read,
                        offset: i << 12,
                        len: 4096,
                    };
                    let s = &file.shared;
                    s.io(&file.inner, op, s.next_seq(), |_, _| {
                        while !queued.load(Ordering::Acquire) {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                        Ok(())
                    })
                    .unwrap();
                })
            })
            .collect();
        while rt.occupancy().queued[0] < 6 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        queued.store(true, Ordering::Release);
        readers.into_iter().for_each(|r| r.join().unwrap());
        let mut finishes = lock(&finishes).clone();
        finishes.sort_unstable();
        assert_eq!(finishes.len(), 8);
        // From the second read on the device always had one waiting: it
        // never idles, though each read's thread woke milliseconds late.
        for pair in finishes[1..].windows(2) {
            assert_eq!(pair[1] - pair[0], SERVICE, "{finishes:?}");
        }
        let st = lock(&rt.shared.state);
        assert!(st.pieces.is_empty() && st.finish.is_empty(), "nothing left behind");
    }

    #[test]
    fn an_io_held_back_by_anticipation_enters_when_the_window_ends() {
        const IDLE_MS: u64 = 30;
        let mut rcp = RcpConfig {
            policy: "cfq".into(),
            ..RcpConfig::default()
        };
        rcp.options.cfq.idle_ms = IDLE_MS as f64;
        let rt = Runtime::new(RuntimeConfig {
            device: DeviceConfig::default(),
            rcp,
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = rt.open(dir.path().join("f"), true).unwrap();
        file.write_at(&[7; 4096], 0).unwrap();
        let read = |file: &SluiceFile, tenant: u32| {
            let _ctx = crate::enter(Ctx::new(u64::from(tenant), 0).with_tenant(tenant, 1.0));
            file.read_at(&mut [0; 4096], 0).unwrap();
        };
        let started = std::time::Instant::now();
        // Tenant 1 gets the turn; the device then waits for its next read.
        read(&file, 1);
        let (done, finished) = std::sync::mpsc::channel();
        let other = file.clone();
        std::thread::spawn(move || {
            read(&other, 2);
            done.send(started.elapsed()).unwrap();
        });
        // Nothing else happens: only the timer lets tenant 2's read in.
        let waited = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("the held-back read entered the device");
        assert!(
            waited >= Duration::from_millis(IDLE_MS),
            "held for the window: {waited:?}"
        );
        let st = lock(&rt.shared.state);
        assert_eq!((st.sched.outstanding(), st.parked.len()), (0, 0), "nothing left behind");
        assert_eq!(st.timer, None);
    }

    #[test]
    fn every_io_of_many_tenants_enters_under_anticipation() {
        let mut rcp = RcpConfig {
            policy: "cfq".into(),
            ..RcpConfig::default()
        };
        rcp.options.cfq = sluice_core::policy::cfq::CfqOptions {
            slice_ms: 3.0,
            idle_ms: 1.0,
        };
        let rt = Runtime::new(RuntimeConfig {
            device: DeviceConfig {
                depth: 2,
                ..DeviceConfig::default()
            },
            rcp,
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = rt.open(dir.path().join("f"), true).unwrap();
        file.write_at(&[7; 1 << 16], 0).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        // Twelve threads of four tenants, and two with no request context
        // (non-critical I/O in the other queue), each reading in a loop and
        // now and then pausing past the window, so that turns pass by the
        // timer as well as by arrivals.
        for t in 0..14u32 {
            let (file, done) = (file.clone(), done.clone());
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    if i % 5 == u64::from(t % 5) {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    let _ctx = (t < 12).then(|| crate::enter(Ctx::new(i, 0).with_tenant(t % 4, 1.0)));
                    file.read_at(&mut [0; 4096], (i % 16) << 12).unwrap();
                }
                done.send(()).unwrap();
            });
        }
        for _ in 0..14 {
            finished
                .recv_timeout(Duration::from_secs(20))
                .expect("every reader's I/O entered the device");
        }
        let st = lock(&rt.shared.state);
        assert_eq!((st.sched.outstanding(), st.parked.len()), (0, 0), "nothing left behind");
    }
}
