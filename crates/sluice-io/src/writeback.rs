//! RCP's caching layer (§4.3): buffered writes wait in memory (the page
//! cache) until they are written back, and how much dirty data a writer
//! may leave depends on its criticality. Non-critical writers are held to a
//! low share of the dirty budget (1% by default) and critical writers to a
//! high one (20%), so a burst of background writes cannot fill the cache
//! and throttle the foreground, and a foreground `sync` does not inherit a
//! large backlog of background dirty data.
//!
//! Departure from Linux and RCP: there is no flusher thread. A writer over
//! its limit writes back dirty files itself, as its own class, before it
//! continues; the effect on the writer (it cannot pass the limit) is the
//! same as waiting for the flusher, and the write-back I/O goes through the
//! same stages with the writer's criticality (and is promoted if a critical
//! task comes to depend on it).

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::config::{DeviceKind, RcpConfig};
use crate::error::IoError;
use crate::runtime::{FileInner, SluiceFile};
use crate::sched::Criticality;
use crate::task::Task;

/// Largest write-back I/O that adjacent buffered writes are merged into:
/// one such I/O holds a 125 MB/s device 2 ms, so critical I/O queued
/// behind it waits little (1 MiB made it wait 8 ms).
const MAX_WRITE_BACK: u64 = 256 << 10;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Dirty bytes of the whole runtime against the per-class limits.
pub(crate) struct DirtyBudget {
    total: AtomicU64,
    /// Limits for critical and non-critical writers, bytes.
    limits: [u64; 2],
    /// Files that may hold dirty data, oldest first.
    files: Mutex<Vec<Weak<FileInner>>>,
}

impl DirtyBudget {
    pub(crate) fn new(c: &RcpConfig) -> Self {
        let budget = c.dirty_budget_mb * 1e6;
        let critical = (budget * c.critical_dirty_ratio) as u64;
        let noncritical = if c.enabled && c.split_dirty {
            (budget * c.noncritical_dirty_ratio) as u64
        } else {
            critical
        };
        DirtyBudget {
            total: AtomicU64::new(0),
            limits: [critical, noncritical],
            files: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    fn limit(&self, class: Criticality) -> u64 {
        match class {
            Criticality::Critical => self.limits[0],
            Criticality::NonCritical => self.limits[1],
        }
    }

    /// Notes that `file` holds dirty data (once per file).
    fn register(&self, file: &Arc<FileInner>) {
        let mut files = lock(&self.files);
        files.retain(|w| w.strong_count() > 0);
        if !files.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(file))) {
            files.push(Arc::downgrade(file));
        }
    }

    /// The oldest file that still holds dirty data, forgetting clean ones.
    fn oldest_dirty(&self) -> Option<Arc<FileInner>> {
        let mut files = lock(&self.files);
        files.retain(|w| w.upgrade().is_some_and(|f| !lock(&f.dirty).is_empty()));
        files.first().and_then(Weak::upgrade)
    }
}

impl SluiceFile {
    /// Writes `data` at `offset` into the page cache and returns; the data
    /// reaches the device when it is written back ([`SluiceFile::write_back`],
    /// [`SluiceFile::sync`], or a writer over its dirty limit). On an
    /// `O_DIRECT` device there is no cache and this is [`SluiceFile::write_at`].
    pub fn write_buffered(&self, data: &[u8], offset: u64) -> Result<(), IoError> {
        if self.shared.device.kind() == DeviceKind::Direct {
            return self.write_at(data, offset);
        }
        self.check(data.as_ptr(), offset, data.len())?;
        let len = data.len() as u64;
        self.balance_dirty(len)?;
        self.inner
            .file
            .write_all_at(data, offset)
            .map_err(|e| self.device_error("buffered write", offset, data.len(), e))?;
        let was_clean = {
            let mut dirty = lock(&self.inner.dirty);
            match dirty.last_mut() {
                // Appends extend the last range, as the kernel merges
                // adjacent dirty pages into one write-back I/O.
                Some(last) if last.0 + last.1 == offset && last.1 + len <= MAX_WRITE_BACK => last.1 += len,
                _ => dirty.push((offset, len)),
            }
            dirty.len() == 1 && dirty[0].1 == len
        };
        self.shared.dirty.total.fetch_add(len, Ordering::AcqRel);
        // Registered after the file's lock is released: `oldest_dirty`
        // takes the list's lock and then each file's, never the reverse.
        if was_clean {
            self.shared.dirty.register(&self.inner);
        }
        Ok(())
    }

    /// Writes back the file's dirty data through the stages, with the
    /// caller's criticality; returns the bytes written back.
    pub fn write_back(&self) -> Result<u64, IoError> {
        let ranges = std::mem::take(&mut *lock(&self.inner.dirty));
        let mut written = 0;
        for (i, &(offset, len)) in ranges.iter().enumerate() {
            let write_out = |start, n| self.shared.device.write_out(&self.inner.file, offset + start, n);
            if let Err(e) = self.device_write(offset, len, write_out) {
                // Still dirty: keep it (and what follows) for the next try.
                lock(&self.inner.dirty).extend_from_slice(&ranges[i..]);
                self.shared.dirty.register(&self.inner);
                return Err(self.device_error("write-back", offset, len as usize, e));
            }
            self.shared.dirty.total.fetch_sub(len, Ordering::AcqRel);
            written += len;
        }
        Ok(written)
    }

    /// Before adding `len` dirty bytes: while the runtime's dirty data
    /// would pass the caller's limit, write back the oldest dirty file.
    /// The class is re-read every round, so a writer that inherits
    /// criticality while it is held here continues at the critical limit
    /// (RCP §4.4: the blocked task retries with its new priority).
    fn balance_dirty(&self, len: u64) -> Result<(), IoError> {
        let budget = &self.shared.dirty;
        let task = Task::current();
        loop {
            let class = self.shared.classify(&task);
            if budget.total() + len <= budget.limit(class) {
                return Ok(());
            }
            let Some(inner) = budget.oldest_dirty() else {
                return Ok(());
            };
            let file = SluiceFile {
                shared: self.shared.clone(),
                inner,
            };
            if file.write_back()? == 0 {
                // Someone else is writing it back; their I/O is on its way.
                return Ok(());
            }
        }
    }
}
