//! Opening a store: the manifest's tables are opened (a table the manifest
//! does not list is left over from an interrupted flush or compaction and
//! is deleted), the WALs the manifest still needs are replayed into a
//! memtable, and that memtable is flushed at once to an L0 table, so the
//! store starts with one empty WAL.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use sluice_io::Runtime;

use crate::error::{KvError, Result};
use crate::flush::{remove_wals_below, write_table};
use crate::manifest::Manifest;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::sstable::BlockCache;
use crate::state::State;
use crate::version::{TableHandle, Version};
use crate::wal::{self, Wal};

pub(crate) fn recover(rt: &Runtime, dir: &Path, options: &Options, cache: &Arc<BlockCache>) -> Result<State> {
    let manifest = Manifest::load(rt, dir)?.unwrap_or(Manifest {
        next_number: 1,
        ..Manifest::default()
    });
    let mut version = open_tables(rt, dir, options, cache, &manifest)?;
    remove_orphan_tables(dir, &manifest);
    let (mem, last_seq, wal_max) = replay_wals(rt, dir, manifest.wal_floor, manifest.last_seq)?;
    let mut next_number = manifest.next_number.max(wal_max + 1);
    if !mem.is_empty() {
        version.add(0, write_table(rt, dir, options, cache, next_number, &mem)?);
        next_number += 1;
    }
    let st = State {
        mem: Memtable::new(next_number),
        imm: VecDeque::new(),
        wal: Wal::create(rt, dir, next_number)?,
        version: Arc::new(version),
        next_number: next_number + 1,
        last_seq,
        flushing: false,
        compacting: false,
        closing: false,
        stopped: None,
        wal_failed: false,
    };
    st.manifest().store(rt, dir)?;
    remove_wals_below(dir, st.mem.wal);
    Ok(st)
}

fn open_tables(
    rt: &Runtime,
    dir: &Path,
    options: &Options,
    cache: &Arc<BlockCache>,
    manifest: &Manifest,
) -> Result<Version> {
    let mut version = Version::new(options.max_levels);
    for t in &manifest.tables {
        if t.level >= options.max_levels {
            let what = format!("table {} is at level {}, beyond max_levels", t.number, t.level);
            return Err(KvError::corruption(dir.join("MANIFEST"), 0, what));
        }
        version.add(t.level, TableHandle::open(rt, dir, cache, t.number, t.meta.clone())?);
    }
    Ok(version)
}

fn remove_orphan_tables(dir: &Path, manifest: &Manifest) {
    let listed: Vec<u64> = manifest.tables.iter().map(|t| t.number).collect();
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    for e in entries {
        let name = e.file_name();
        let number = name.to_str().and_then(|n| n.strip_suffix(".sst")?.parse::<u64>().ok());
        if number.is_some_and(|n| !listed.contains(&n)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Replays the WALs numbered `floor` and above, oldest first: the
/// memtable they rebuild, the last sequence number, the highest WAL.
fn replay_wals(rt: &Runtime, dir: &Path, floor: u64, mut last_seq: u64) -> Result<(Memtable, u64, u64)> {
    let mut mem = Memtable::new(0);
    let numbers: Vec<u64> = wal::numbers(dir).into_iter().filter(|&n| n >= floor).collect();
    for &n in &numbers {
        wal::replay(rt, &wal::path(dir, n), |seq, batch| {
            last_seq = last_seq.max((seq + batch.len() as u64).saturating_sub(1));
            for (k, v) in batch.ops {
                mem.insert(k, v);
            }
        })?;
    }
    Ok((mem, last_seq, numbers.last().copied().unwrap_or(0)))
}
