//! Flush: the oldest frozen memtable becomes an L0 table, the manifest
//! records it, and the WALs it no longer needs are deleted. Runs on the
//! flush worker as the store's `flush` background task, or inline when
//! background work is off.

use std::sync::Arc;

use sluice_io::Runtime;

use crate::error::Result;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::sstable::{BlockCache, TableBuilder, TableOptions};
use crate::state::Inner;
use crate::version::{table_path, TableHandle};
use crate::wal;

/// Writes `mem` as table `number` in `dir`.
pub(crate) fn write_table(
    rt: &Runtime,
    dir: &std::path::Path,
    options: &Options,
    cache: &Arc<BlockCache>,
    number: u64,
    mem: &Memtable,
) -> Result<Arc<TableHandle>> {
    let mut b = TableBuilder::new(rt.open(table_path(dir, number), true)?, table_options(options));
    for (k, v) in mem.range_from(&[]) {
        b.add(k, v.as_deref())?;
    }
    TableHandle::open(rt, dir, cache, number, b.finish()?)
}

pub(crate) fn table_options(o: &Options) -> TableOptions {
    TableOptions {
        block_bytes: o.block_bytes,
        bloom_bits_per_key: o.bloom_bits_per_key,
    }
}

/// Flushes the oldest frozen memtable; `false` if there was none (or
/// another flush is running).
pub(crate) fn flush_one(inner: &Inner) -> Result<bool> {
    let mut st = inner.state.lock();
    let Some(mem) = st.imm.front().cloned().filter(|_| !st.flushing) else {
        return Ok(false);
    };
    st.flushing = true;
    let number = st.number();
    drop(st);
    let written = write_table(&inner.rt, &inner.dir, &inner.options, &inner.cache, number, &mem);
    let mut st = inner.state.lock();
    st.flushing = false;
    // A table cut short would hold space that a full disk needs for the retry.
    let handle = written.inspect_err(|_| remove_table(&inner.dir, number))?;
    inner
        .flush_task
        .set_backlog(st.imm.iter().skip(1).map(|m| m.bytes() as u64).sum());
    let mut version = (*st.version).clone();
    version.add(0, handle);
    let before = std::mem::replace(&mut st.version, Arc::new(version));
    let flushed = st.imm.pop_front();
    let manifest = st.manifest();
    if let Err(e) = manifest.store(&inner.rt, &inner.dir) {
        // Unrecorded, the table is as if never written: the memtable is
        // flushed again on retry.
        st.version = before;
        if let Some(mem) = flushed {
            st.imm.push_front(mem);
        }
        remove_table(&inner.dir, number);
        return Err(e);
    }
    inner.report_backlog(&st.version);
    let floor = manifest.wal_floor;
    drop(st);
    remove_wals_below(&inner.dir, floor);
    inner.done.notify_all();
    inner.work.notify_all();
    Ok(true)
}

/// Deletes a table that is not part of the store (its space is all it
/// holds; a table left behind is deleted when the store next opens).
pub(crate) fn remove_table(dir: &std::path::Path, number: u64) {
    let _ = std::fs::remove_file(table_path(dir, number));
}

/// Deletes WAL files numbered below `floor`; a file that cannot be
/// removed is only space, and the next flush tries again.
pub(crate) fn remove_wals_below(dir: &std::path::Path, floor: u64) {
    for n in wal::numbers(dir).into_iter().filter(|&n| n < floor) {
        let _ = std::fs::remove_file(wal::path(dir, n));
    }
}
