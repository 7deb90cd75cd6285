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
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

use crate::config::DeviceKind;
use crate::error::IoError;
use crate::runtime::SluiceFile;
use crate::task::Task;

/// Largest write-back I/O that adjacent buffered writes are merged into:
/// one such I/O holds a 125 MB/s device 2 ms, so critical I/O queued
/// behind it waits little (1 MiB made it wait 8 ms).
const MAX_WRITE_BACK: u64 = 256 << 10;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
