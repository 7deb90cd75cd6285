//! A file's state shared by its handles: the open file, the buffered
//! writes not yet written back and the writes still in flight.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex};

pub(crate) struct FileInner {
    pub(crate) id: u32,
    pub(crate) path: PathBuf,
    pub(crate) file: std::fs::File,
    /// Buffered writes not yet written back: (offset, len).
    pub(crate) dirty: Mutex<Vec<(u64, u64)>>,
    pub(crate) pending: Mutex<Pending>,
    pub(crate) drained: Condvar,
}

/// The writes in flight, and who waits for some of them to finish.
#[derive(Default)]
pub(crate) struct Pending {
    /// Outstanding writes: (seq, offset, len).
    pub(crate) writes: Vec<(u64, u64, u64)>,
    /// Waiters on `drained`: a write that ends with none makes no system
    /// call (the WAL's every append is such a write).
    pub(crate) waiting: usize,
}

impl FileInner {
    pub(crate) fn file_read(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match std::os::unix::fs::FileExt::read_at(&self.file, &mut buf[done..], offset + done as u64)? {
                0 => break,
                n => done += n,
            }
        }
        Ok(done)
    }
}
