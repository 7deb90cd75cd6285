//! Leveled compaction, as LevelDB and RocksDB pick it: the level furthest
//! over its target (L0 by its table count over `l0_compaction_trigger`,
//! deeper levels by bytes) compacts; all of L0 merges with the L1 tables
//! it overlaps, a deeper level pushes its first table into the tables it
//! overlaps one level down. From `l0_slowdown_trigger`, L0 goes first.
//! Output is split into tables of about `table_bytes`. Deletions are
//! dropped when no deeper level could hold an older value. With
//! `drop_expired`, an expired string or hash is dropped as a deletion is
//! (a deletion in its place where a deeper level could hold an older
//! value), as Kvrocks's compaction filter reclaims expired keys. Runs on the
//! compaction worker as the store's `compaction` background task (its
//! rate knob throttles it through sluice-io), or inline.

use std::sync::Arc;

use crate::error::Result;
use crate::flush::{remove_table, table_options};
use crate::keyspace::{expired_entry, now_ms};
use crate::merge::{MergeIter, Source};
use crate::options::Options;
use crate::sstable::TableBuilder;
use crate::state::{Inner, State};
use crate::version::{level_source, table_path, TableHandle, Version};

/// Bytes a compaction reads from an input table per I/O: large enough to
/// cost few operations, small enough that one read holds a device only a
/// couple of milliseconds (256 KiB is 2 ms at 125 MB/s) before a waiting
/// foreground read gets its turn. With 1 MiB the demo's read p99 during
/// compaction was 2.5x worse (docs/BENCHMARKS.md, "`sluice demo`: YCSB on
/// sluice-kv with compaction active").
const READAHEAD: usize = 256 << 10;

/// What one compaction merges: `inputs` of `level` and the overlapping
/// `next` tables of `level + 1`.
struct Pick {
    level: usize,
    inputs: Vec<Arc<TableHandle>>,
    next: Vec<Arc<TableHandle>>,
}

/// How far each level is over its target: L0 by table count, deeper
/// levels by bytes. Above 1 means it needs compaction.
fn score(v: &Version, o: &Options, level: usize) -> f64 {
    if level == 0 {
        v.levels[0].len() as f64 / o.l0_compaction_trigger as f64
    } else {
        v.level_bytes(level) as f64 / o.level_target(level) as f64
    }
}

/// Whether a compaction should start now.
pub(crate) fn needed(st: &State, o: &Options) -> bool {
    !st.compacting && pick(&st.version, o).is_some()
}

fn pick(v: &Version, o: &Options) -> Option<Pick> {
    let last = v.levels.len() - 1;
    let (level, s) = if v.levels[0].len() >= o.l0_slowdown_trigger {
        // Every write is delayed now, and stopped soon, until L0 shrinks:
        // L0 goes first whatever the deeper levels' scores, as SILK puts
        // L0's compaction ahead of the others.
        (0, score(v, o, 0))
    } else {
        (0..last)
            .map(|l| (l, score(v, o, l)))
            .max_by(|a, b| a.1.total_cmp(&b.1))?
    };
    if s < 1.0 {
        return None;
    }
    let inputs = if level == 0 {
        v.levels[0].clone()
    } else {
        v.levels[level][..1].to_vec()
    };
    let smallest = inputs.iter().map(|t| &t.meta.smallest).min()?;
    let largest = inputs.iter().map(|t| &t.meta.largest).max()?;
    let next = v.levels[level + 1]
        .iter()
        .filter(|t| t.overlaps(smallest, largest))
        .cloned()
        .collect();
    Some(Pick { level, inputs, next })
}

/// Runs one compaction if a level needs one; `false` if none does (or
/// another is running).
pub(crate) fn compact_one(inner: &Inner) -> Result<bool> {
    let mut st = inner.state.lock();
    if st.compacting {
        return Ok(false);
    }
    let Some(p) = pick(&st.version, &inner.options) else {
        return Ok(false);
    };
    st.compacting = true;
    let version = st.version.clone();
    drop(st);
    let mut created = Vec::new();
    let merged = merge(inner, &p, &version, &mut created);
    let mut st = inner.state.lock();
    st.compacting = false;
    // Tables cut short, or not recorded, would hold space that a full
    // disk needs for the retry.
    let remove_created = || created.iter().for_each(|&n| remove_table(&inner.dir, n));
    let outputs = merged.inspect_err(|_| remove_created())?;
    let mut next = (*st.version).clone();
    let gone: Vec<u64> = p.inputs.iter().chain(&p.next).map(|t| t.number()).collect();
    next.remove(&gone);
    for t in outputs {
        next.add(p.level + 1, t);
    }
    let before = std::mem::replace(&mut st.version, Arc::new(next));
    if let Err(e) = st.manifest().store(&inner.rt, &inner.dir) {
        st.version = before;
        remove_created();
        return Err(e);
    }
    inner.report_backlog(&st.version);
    drop(st);
    for n in gone {
        let _ = std::fs::remove_file(table_path(&inner.dir, n));
    }
    inner.done.notify_all();
    inner.work.notify_all();
    Ok(true)
}

/// Merges the picked tables into new tables for `level + 1`; the number
/// of every table it starts goes into `created`.
fn merge(inner: &Inner, p: &Pick, v: &Version, created: &mut Vec<u64>) -> Result<Vec<Arc<TableHandle>>> {
    let mut sources: Vec<Source> = p
        .inputs
        .iter()
        .map(|t| Box::new(t.table.iter_readahead(READAHEAD)) as Source)
        .collect();
    sources.push(level_source(&p.next, &[], Some(READAHEAD)));
    let bottom = v.levels[p.level + 2..].iter().all(Vec::is_empty);
    let now = now_ms();
    let mut outputs = Vec::new();
    let mut builder: Option<(u64, TableBuilder)> = None;
    for item in MergeIter::new(sources) {
        let (k, mut v) = item?;
        if inner.options.drop_expired && v.as_deref().is_some_and(|v| expired_entry(&k, v, now)) {
            v = None;
        }
        if v.is_none() && bottom {
            continue;
        }
        if builder.is_none() {
            let number = inner.state.lock().number();
            created.push(number);
            let file = inner.rt.open(table_path(&inner.dir, number), true)?;
            builder = Some((number, TableBuilder::new(file, table_options(&inner.options))));
        }
        let (_, b) = builder.as_mut().expect("builder was just created");
        b.add(&k, v.as_deref())?;
        if b.estimated_size() >= inner.options.table_bytes {
            outputs.push(finish(inner, builder.take().expect("builder is open"))?);
        }
    }
    if let Some(open) = builder {
        outputs.push(finish(inner, open)?);
    }
    Ok(outputs)
}

fn finish(inner: &Inner, (number, b): (u64, TableBuilder)) -> Result<Arc<TableHandle>> {
    TableHandle::open(&inner.rt, &inner.dir, &inner.cache, number, b.finish()?)
}
