//! The store: writes go to the WAL and the memtable, reads search the
//! memtables and then the current version (`version`); full memtables are frozen
//! and flushed ([`crate::flush`]), and levels are compacted
//! ([`crate::compaction`]), both as sluice-io background tasks.
//!
//! Dependencies go through sluice-io's inheriting primitives, so that a
//! critical writer lifts whoever it waits for: the store's state lock is a
//! [`sluice_io::sync::Mutex`]; a writer stalled on L0 or on frozen
//! memtables waits on a [`Condvar`] that flush and compaction signal (they
//! become its inferred helpers); group commit's followers wait on the
//! leader's lock while it syncs the WAL (RocksDB raises compaction to user
//! priority while writes stall; here it happens through inheritance).
//!
//! # A failed write to disk
//!
//! When a WAL append or sync, a flush or a compaction fails (a full disk,
//! most often), the store stops taking writes, each refused with the
//! failure named ([`KvError::Background`]); reads go on, and nothing
//! acknowledged is lost. What failed is retried, pausing 50 ms and
//! doubling up to 5 s between tries, and writes resume once it succeeds:
//! a failed WAL is never appended to again (a record may be cut short in
//! it, or its pages dropped by a failed sync), so its memtable moves onto
//! a new WAL and writes resume once that memtable is flushed to a table;
//! a failed flush or compaction is run again. Without background workers
//! the next writer retries. The stop and the resumption are logged.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_io::sync::{Condvar, Mutex, MutexGuard};
use sluice_io::{Background, Runtime, TaskKind};

use crate::batch::WriteBatch;
use crate::error::{KvError, Result};
use crate::memtable::Memtable;
use crate::merge::{MergeIter, Source};
use crate::options::Options;
use crate::sstable::BlockCache;
use crate::state::{Failed, Inner, State};
use crate::wal::{Tail, Wal};
use crate::{compaction, flush, recovery, Value};

/// The pause before retrying a failed write to disk, doubling up to the
/// second: soon enough that a passing failure costs little, rare enough
/// that a full disk is not hammered.
const RETRY_PAUSE: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(5));

/// How often a paused compaction worker looks at its knobs again: a
/// controller's resume takes effect within this.
const PAUSED_RECHECK: Duration = Duration::from_millis(10);

/// Sizes per level and of the memtables, for reports and controllers.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// (tables, bytes) per level.
    pub levels: Vec<(usize, u64)>,
    pub memtable_bytes: usize,
    pub immutables: usize,
    /// Bytes by which levels exceed their targets, plus L0 beyond its trigger.
    pub pending_compaction_bytes: u64,
}

/// A write applied to the store but not yet durable: its place in its
/// WAL ([`Db::apply`], [`Db::sync_to`]).
#[derive(Clone)]
pub struct Unsynced {
    number: u64,
    end: u64,
    tail: Arc<Tail>,
}

impl Unsynced {
    /// Adds `self` to `pending`, keeping the furthest write of each WAL.
    pub fn merge_into(self, pending: &mut Vec<Unsynced>) {
        match pending.iter_mut().find(|p| p.number == self.number) {
            Some(p) => p.end = p.end.max(self.end),
            None => pending.push(self),
        }
    }
}

pub struct Db {
    inner: Arc<Inner>,
    workers: Vec<JoinHandle<()>>,
    /// The directory's `LOCK` file, locked while the store is open (and
    /// released after the workers are joined: fields drop after `drop`).
    _lock: std::fs::File,
}

impl Db {
    /// Opens (or creates) the store in `dir`, replaying its WALs.
    ///
    /// One store at a time per directory: a second open, in this process or
    /// another, fails with [`KvError::InUse`] while the first is open. Two
    /// would each take the other's new tables for leftovers of a crash and
    /// delete them.
    pub fn open(rt: Runtime, dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| KvError::fs("creating", &dir, e))?;
        let lock = lock_dir(&dir)?;
        let cache = Arc::new(BlockCache::new(options.block_cache_bytes));
        let state = recovery::recover(&rt, &dir, &options, &cache)?;
        let inner = Arc::new(Inner {
            flush_task: rt.register_background(format!("flush {}", dir.display()), TaskKind::Flush),
            compaction_task: rt.register_background(format!("compaction {}", dir.display()), TaskKind::Compaction),
            dir,
            rt,
            cache,
            state: Mutex::new(state),
            work: Condvar::new(),
            done: Condvar::new(),
            synced: Mutex::new((0, 0)),
            options,
        });
        inner.report_backlog(&inner.state.lock().version);
        let workers = if inner.options.background {
            let flush_work = |st: &State, _: &Options| !st.flushing && (!st.imm.is_empty() || st.wal_failed);
            vec![
                spawn_worker(
                    inner.clone(),
                    inner.flush_task.clone(),
                    Failed::Flush,
                    flush_work,
                    Inner::flush_step,
                ),
                spawn_worker(
                    inner.clone(),
                    inner.compaction_task.clone(),
                    Failed::Compaction,
                    compaction::needed,
                    Inner::compaction_step,
                ),
            ]
        } else {
            Vec::new()
        };
        Ok(Db {
            inner,
            workers,
            _lock: lock,
        })
    }

    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(b)
    }

    pub fn delete(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b)
    }

    /// Applies `batch` atomically; durable when it returns if `sync` is on.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        match self.apply(batch)? {
            Some(unsynced) => self.sync_to(&[unsynced]),
            None => Ok(()),
        }
    }

    /// Applies `batch` atomically, visible to reads at once; with `sync`
    /// on, it is durable only once [`Db::sync_to`] has returned for what
    /// this returns. A server answering a pipeline applies each of its
    /// writes and syncs once before it answers any, as Redis does with
    /// `appendfsync always`.
    pub fn apply(&self, batch: WriteBatch) -> Result<Option<Unsynced>> {
        self.validate(&batch)?;
        if batch.is_empty() {
            return Ok(None);
        }
        let inner = &self.inner;
        let mut st = inner.state.lock();
        self.make_room(&mut st)?;
        let seq = st.last_seq + 1;
        // A failed append may leave part of a record in the WAL; a later
        // record written over it could leave garbage behind that replay
        // would call corruption. So the store stops taking writes (reads
        // go on), as RocksDB does on a WAL error, until the WAL is replaced.
        let end = match st.wal.append(seq, &batch, inner.options.sync) {
            Ok(end) => end,
            Err(e) => {
                st.stop(Failed::Wal, &e);
                drop(st);
                inner.work.notify_all();
                return Err(e);
            }
        };
        st.last_seq += batch.len() as u64;
        for (k, v) in batch.ops {
            st.mem.insert(k, v);
        }
        Ok(inner.options.sync.then(|| Unsynced {
            number: st.wal.number,
            end,
            tail: st.wal.tail.clone(),
        }))
    }

    /// Makes the writes `unsynced` names durable, one sync per WAL they
    /// went to (a WAL may have been replaced between them), shared with
    /// every other writer waiting for the same WAL.
    pub fn sync_to(&self, unsynced: &[Unsynced]) -> Result<()> {
        let inner = &self.inner;
        for u in unsynced {
            // After a failed fsync the kernel may have dropped the dirty
            // pages; nothing written since can be trusted to be durable.
            inner
                .commit(u.number, u.end, &u.tail)
                .inspect_err(|e| inner.fail(Failed::Wal, e))?;
        }
        Ok(())
    }

    /// Refuses a batch the store would not take (empty or oversized keys
    /// and values), naming what is wrong.
    pub(crate) fn validate(&self, batch: &WriteBatch) -> Result<()> {
        let o = &self.inner.options;
        for (k, v) in &batch.ops {
            if k.is_empty() {
                return Err(KvError::EmptyKey);
            }
            if k.len() > o.max_key_bytes {
                return Err(KvError::KeyTooLarge {
                    len: k.len(),
                    limit: o.max_key_bytes,
                });
            }
            if let Some(v) = v.as_ref().filter(|v| v.len() > o.max_value_bytes) {
                return Err(KvError::ValueTooLarge {
                    len: v.len(),
                    limit: o.max_value_bytes,
                });
            }
        }
        Ok(())
    }

    /// Write stalls as RocksDB has them: stop while L0 is at its stop
    /// trigger or too many memtables wait for flush; delay once per write
    /// from the slowdown trigger; freeze the memtable when it is full.
    fn make_room(&self, st: &mut MutexGuard<'_, State>) -> Result<()> {
        let (inner, o) = (&self.inner, &self.inner.options);
        let (mut delayed, mut retried) = (false, false);
        loop {
            if st.stopped.is_some() && !o.background && !retried {
                // Without workers, the writer retries what failed; its
                // outcome is the stop's, checked next.
                retried = true;
                let _ = MutexGuard::unlocked(st, || inner.retry_flush());
            }
            st.check()?;
            let l0 = st.version.levels[0].len();
            if l0 >= o.l0_stop_trigger || st.imm.len() >= o.max_immutables {
                if o.background {
                    // The writer waits on the worker whose work stops it: a
                    // critical writer raises that one (RCP §4.2.1), where
                    // the condvar would infer whichever signalled last (the
                    // compaction, while frozen memtables wait for a flush
                    // starved behind the foreground's I/O).
                    let stopping = if st.imm.len() >= o.max_immutables {
                        &inner.flush_task
                    } else {
                        &inner.compaction_task
                    };
                    inner.work.notify_all();
                    match stopping.worker() {
                        Some(worker) => inner.done.wait_helped_by(st, worker),
                        None => inner.done.wait(st),
                    }
                } else {
                    MutexGuard::unlocked(st, || inner.catch_up())?;
                }
            } else if l0 >= o.l0_slowdown_trigger && !delayed {
                delayed = true;
                MutexGuard::unlocked(st, || {
                    sluice_io::blocking();
                    std::thread::sleep(Duration::from_micros(o.slowdown_delay_us))
                });
            } else if st.mem.bytes() >= o.memtable_bytes {
                inner.freeze(st)?;
            } else {
                return Ok(());
            }
        }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let st = self.inner.state.lock();
        if let Some(v) = in_memtables(&st, key) {
            return Ok(v);
        }
        let version = st.version.clone();
        drop(st);
        Ok(version.get(key)?.flatten())
    }

    /// The values at `keys`, all as of one moment: a batch written
    /// meanwhile is seen whole or not at all. The memtables are read under
    /// the state lock, and what they do not hold from the tables of that
    /// moment's version.
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let st = self.inner.state.lock();
        let found: Vec<Option<Value>> = keys.iter().map(|k| in_memtables(&st, k)).collect();
        let version = st.version.clone();
        drop(st);
        keys.iter()
            .zip(found)
            .map(|(k, f)| match f {
                Some(v) => Ok(v),
                None => Ok(version.get(k)?.flatten()),
            })
            .collect()
    }

    /// Up to `limit` live entries with `start <= key < end` (no `end`: to
    /// the last key), in key order.
    pub fn scan(&self, start: &[u8], end: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let in_range = |k: &[u8]| end.is_none_or(|e| k < e);
        let snapshot = |m: &Memtable| -> Source {
            let entries: Vec<_> = m
                .range_from(start)
                .take_while(|(k, _)| in_range(k))
                .map(|(k, v)| Ok((k.clone(), v.clone())))
                .collect();
            Box::new(entries.into_iter())
        };
        let st = self.inner.state.lock();
        let mut sources = vec![snapshot(&st.mem)];
        sources.extend(st.imm.iter().rev().map(|m| snapshot(m)));
        let version = st.version.clone();
        drop(st);
        sources.extend(version.sources_from(start));
        let mut out = Vec::new();
        for item in MergeIter::new(sources) {
            let (k, v): (Vec<u8>, Value) = item?;
            if !in_range(&k) || out.len() >= limit {
                break;
            }
            if let Some(v) = v {
                out.push((k, v));
            }
        }
        Ok(out)
    }

    /// Freezes the memtable and flushes every frozen one.
    pub fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        let mut st = inner.state.lock();
        if !st.mem.is_empty() {
            inner.freeze(&mut st)?;
        }
        while !st.imm.is_empty() {
            st.check()?;
            if inner.options.background {
                inner.done.wait(&mut st);
            } else {
                drop(st);
                flush::flush_one(inner)?;
                st = inner.state.lock();
            }
        }
        Ok(())
    }

    /// Runs compactions until no level needs one (waiting for one the
    /// background worker is running).
    pub fn compact(&self) -> Result<()> {
        let inner = &self.inner;
        loop {
            if compaction::compact_one(inner)? {
                continue;
            }
            let mut st = inner.state.lock();
            st.check()?;
            if !st.compacting {
                return Ok(());
            }
            inner.done.wait(&mut st);
        }
    }

    pub fn stats(&self) -> Stats {
        let st = self.inner.state.lock();
        let v = &st.version;
        Stats {
            levels: (0..v.levels.len())
                .map(|l| (v.levels[l].len(), v.level_bytes(l)))
                .collect(),
            memtable_bytes: st.mem.bytes(),
            immutables: st.imm.len(),
            pending_compaction_bytes: v.pending_bytes(&self.inner.options),
        }
    }

    /// The I/O runtime the store's files are on.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn flush_task(&self) -> &Arc<Background> {
        &self.inner.flush_task
    }

    pub fn compaction_task(&self) -> &Arc<Background> {
        &self.inner.compaction_task
    }
}

impl Inner {
    /// Makes the memtable immutable and starts a new one with a new WAL.
    /// With `sync` on, the old WAL is synced first, so group commit may
    /// treat every record of a WAL older than the current one as durable.
    pub fn freeze(&self, st: &mut State) -> Result<()> {
        if self.options.sync {
            // Under the sync lock, so that no commit writes the log's
            // records between this write and this sync.
            let mut synced = self.synced.lock();
            let end = match st.wal.tail.sync() {
                Ok(end) => end,
                Err(e) => {
                    drop(synced);
                    st.stop(Failed::Wal, &e);
                    self.work.notify_all();
                    return Err(e);
                }
            };
            *synced = (*synced).max((st.wal.number, end));
        }
        let number = st.number();
        let wal = Wal::create(&self.rt, &self.dir, number)?;
        let mem = std::mem::replace(&mut st.mem, Memtable::new(number));
        st.imm.push_back(Arc::new(mem));
        st.wal = wal;
        self.work.notify_all();
        Ok(())
    }

    /// Group commit: the first writer to arrive writes and syncs the WAL's
    /// every record appended so far; writers whose records that sync
    /// covered return without syncing again.
    fn commit(&self, number: u64, end: u64, tail: &Tail) -> Result<()> {
        let mut synced = self.synced.lock();
        if *synced >= (number, end) {
            return Ok(());
        }
        let durable = tail.sync()?;
        *synced = (*synced).max((number, durable));
        Ok(())
    }

    /// Moves the memtable of a failed WAL onto a new WAL. The failed WAL
    /// is not appended to again; its records stay in memory until their
    /// memtable is flushed, and replay (after a crash before that) stops
    /// at the record it cut short.
    pub fn replace_failed_wal(&self) -> Result<()> {
        let mut st = self.state.lock();
        if !st.wal_failed {
            return Ok(());
        }
        let number = st.number();
        let wal = Wal::create(&self.rt, &self.dir, number)?;
        let mem = std::mem::replace(&mut st.mem, Memtable::new(number));
        if !mem.is_empty() {
            st.imm.push_back(Arc::new(mem));
        }
        st.wal = wal;
        st.wal_failed = false;
        Ok(())
    }

    /// The flush worker's step: a failed WAL replaced, then the oldest
    /// frozen memtable flushed; writes stopped by a WAL or a flush resume
    /// once none is left.
    fn flush_step(&self) -> Result<bool> {
        self.replace_failed_wal()?;
        let flushed = flush::flush_one(self)?;
        self.state.lock().resume(&[Failed::Wal, Failed::Flush]);
        Ok(flushed)
    }

    /// The compaction worker's step; writes stopped by a compaction resume
    /// once it succeeds. While the task is paused it picks nothing, so that
    /// the compaction that runs on resuming takes all of L0 that gathered
    /// meanwhile (fewer, larger merges: L1 is rewritten once for all of
    /// it). Once L0 reaches its stop trigger, writers wait for compaction:
    /// it then runs whatever its knobs say, since a pause (left by a
    /// controller that died, say) must not stop writes for good.
    fn compaction_step(&self) -> Result<bool> {
        let task = &self.compaction_task;
        let stopped = self.state.lock().version.levels[0].len() >= self.options.l0_stop_trigger;
        let _urgent = stopped.then(|| task.urgent());
        if task.knobs().paused && task.bound_by_knobs() {
            std::thread::sleep(PAUSED_RECHECK);
            return Ok(false);
        }
        let compacted = compaction::compact_one(self)?;
        self.state.lock().resume(&[Failed::Compaction]);
        Ok(compacted)
    }

    /// A writer's retry without background workers: the flush worker's
    /// steps until every frozen memtable is flushed.
    fn retry_flush(&self) -> Result<()> {
        while self.flush_step()? {}
        Ok(())
    }

    /// With background work off, a stalled writer does it itself.
    fn catch_up(&self) -> Result<()> {
        if !flush::flush_one(self)? {
            compaction::compact_one(self)?;
        }
        Ok(())
    }

    /// Records a failed write to disk: writers are refused with it until
    /// a retry succeeds.
    pub fn fail(&self, failed: Failed, e: &KvError) {
        self.state.lock().stop(failed, e);
        self.done.notify_all();
        self.work.notify_all();
    }
}

/// A background worker: runs `step` as `task` whenever `has_work` says so,
/// until the store closes. A failed step stops writes as `failed` and is
/// retried after a pause that doubles while it keeps failing.
fn spawn_worker(
    inner: Arc<Inner>,
    task: Arc<Background>,
    failed: Failed,
    has_work: fn(&State, &Options) -> bool,
    step: fn(&Inner) -> Result<bool>,
) -> JoinHandle<()> {
    // The worker has entered its task before the store opens: a writer
    // stopped on the task from its first write finds whom to raise.
    let entered = Arc::new(std::sync::Barrier::new(2));
    let handle = std::thread::spawn({
        let entered = entered.clone();
        move || {
            let _task = task.enter();
            entered.wait();
            let mut pause = RETRY_PAUSE.0;
            loop {
                let mut st = inner.state.lock();
                while !st.closing && !has_work(&st, &inner.options) {
                    inner.work.wait(&mut st);
                }
                if st.closing {
                    return;
                }
                drop(st);
                match step(&inner) {
                    Ok(_) => pause = RETRY_PAUSE.0,
                    Err(e) => {
                        inner.fail(failed, &e);
                        tracing::debug!("{} failed: {e}; retrying in {pause:?}", task.name());
                        let retry_at = Instant::now() + pause;
                        let mut st = inner.state.lock();
                        while let Some(left) = retry_at.checked_duration_since(Instant::now()).filter(|_| !st.closing) {
                            inner.work.wait_timeout(&mut st, left);
                        }
                        pause = (pause * 2).min(RETRY_PAUSE.1);
                    }
                }
            }
        }
    });
    entered.wait();
    handle
}

impl Drop for Db {
    fn drop(&mut self) {
        // A step under way ends before its worker does: one held by a
        // pause or a rate (left by an operator or a controller) runs
        // through it, or closing would wait on the pause for good.
        let _urgent = [self.inner.flush_task.urgent(), self.inner.compaction_task.urgent()];
        self.inner.state.lock().closing = true;
        self.inner.work.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Takes the lock on `dir`'s `LOCK` file (an advisory `flock`, released
/// by the kernel when the process dies, so a crash leaves no stale lock).
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| KvError::fs("opening", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(KvError::InUse { dir: dir.to_path_buf() }),
        Err(std::fs::TryLockError::Error(e)) => Err(KvError::fs("locking", &path, e)),
    }
}

/// The newest entry for `key` in the memtables, newest first: a value, a
/// delete (`Some(None)`), or nothing (`None`: look in the tables).
fn in_memtables(st: &State, key: &[u8]) -> Option<Value> {
    std::iter::once(&st.mem)
        .chain(st.imm.iter().rev().map(|m| &**m))
        .find_map(|m| m.get(key))
}
