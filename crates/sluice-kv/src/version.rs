//! A version: the tables of every level at one moment, immutable and
//! shared (`Arc`) so that readers search it without holding the store's
//! lock while flush and compaction install new ones. L0 tables may
//! overlap and are searched newest first; each deeper level is a sorted
//! run of disjoint tables.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_io::Runtime;

use crate::error::Result;
use crate::manifest::TableEntry;
use crate::merge::Source;
use crate::options::Options;
use crate::sstable::{BlockCache, Table, TableMeta};
use crate::Value;

pub(crate) fn table_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.sst"))
}

pub(crate) struct TableHandle {
    pub table: Arc<Table>,
    pub meta: TableMeta,
}

impl TableHandle {
    /// Opens table `number` of `dir`, which `meta` describes.
    pub fn open(
        rt: &Runtime,
        dir: &Path,
        cache: &Arc<BlockCache>,
        number: u64,
        meta: TableMeta,
    ) -> Result<Arc<TableHandle>> {
        let table = Table::open(rt.open(table_path(dir, number), false)?, number, cache.clone())?;
        Ok(Arc::new(TableHandle {
            table: Arc::new(table),
            meta,
        }))
    }

    pub fn number(&self) -> u64 {
        self.table.number()
    }

    fn may_hold(&self, key: &[u8]) -> bool {
        self.meta.smallest.as_slice() <= key && key <= self.meta.largest.as_slice()
    }

    pub fn overlaps(&self, smallest: &[u8], largest: &[u8]) -> bool {
        self.meta.smallest.as_slice() <= largest && smallest <= self.meta.largest.as_slice()
    }
}

#[derive(Clone, Default)]
pub(crate) struct Version {
    pub levels: Vec<Vec<Arc<TableHandle>>>,
}

impl Version {
    pub fn new(levels: usize) -> Self {
        Version {
            levels: vec![Vec::new(); levels],
        }
    }

    /// Adds a table and keeps the level's order (L0 newest first, deeper
    /// levels by smallest key).
    pub fn add(&mut self, level: usize, t: Arc<TableHandle>) {
        let l = &mut self.levels[level];
        l.push(t);
        if level == 0 {
            l.sort_by_key(|t| std::cmp::Reverse(t.number()));
        } else {
            l.sort_by(|a, b| a.meta.smallest.cmp(&b.meta.smallest));
        }
    }

    pub fn remove(&mut self, numbers: &[u64]) {
        for l in &mut self.levels {
            l.retain(|t| !numbers.contains(&t.number()));
        }
    }

    /// The newest value of `key` in the tables; `None` if none holds it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        for t in self.levels[0].iter().filter(|t| t.may_hold(key)) {
            if let Some(v) = t.table.get(key)? {
                return Ok(Some(v));
            }
        }
        for level in &self.levels[1..] {
            let i = level.partition_point(|t| t.meta.largest.as_slice() < key);
            if let Some(t) = level.get(i).filter(|t| t.may_hold(key)) {
                if let Some(v) = t.table.get(key)? {
                    return Ok(Some(v));
                }
            }
        }
        Ok(None)
    }

    /// One source per L0 table (newest first), then one per deeper level,
    /// each starting at `start`.
    pub fn sources_from(&self, start: &[u8]) -> Vec<Source> {
        let mut out: Vec<Source> = self.levels[0]
            .iter()
            .map(|t| Box::new(t.table.iter_from(start)) as Source)
            .collect();
        for level in &self.levels[1..] {
            out.push(level_source(level, start, None));
        }
        out
    }

    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|t| t.meta.size).sum()
    }

    /// Bytes the levels hold beyond their targets (L0 counted in full once
    /// at its trigger): the compaction backlog reported to controllers.
    pub(crate) fn pending_bytes(&self, o: &Options) -> u64 {
        let l0 = if self.levels[0].len() >= o.l0_compaction_trigger {
            self.level_bytes(0)
        } else {
            0
        };
        let deeper: u64 = (1..self.levels.len())
            .map(|l| self.level_bytes(l).saturating_sub(o.level_target(l)))
            .sum();
        l0 + deeper
    }

    /// How near L0 is to slowing writes down: 0 up to its compaction
    /// trigger, 1 from its slowdown trigger, linear between. Controllers
    /// widen compaction's share of the device with it (SILK: L0's
    /// compaction must keep up before writes stall, whatever the
    /// foreground asks).
    pub(crate) fn stall_pressure(&self, o: &Options) -> f64 {
        let (tables, start, full) = (self.levels[0].len(), o.l0_compaction_trigger, o.l0_slowdown_trigger);
        if tables >= full {
            1.0
        } else if tables <= start {
            0.0
        } else {
            (tables - start) as f64 / (full - start) as f64
        }
    }

    pub fn entries(&self) -> Vec<TableEntry> {
        let mut out = Vec::new();
        for (level, tables) in self.levels.iter().enumerate() {
            for t in tables {
                out.push(TableEntry {
                    level,
                    number: t.number(),
                    meta: t.meta.clone(),
                });
            }
        }
        out
    }
}

/// The tables of one sorted level, chained, from `start`; with
/// `readahead`, whole tables read in chunks of that many bytes.
pub(crate) fn level_source(tables: &[Arc<TableHandle>], start: &[u8], readahead: Option<usize>) -> Source {
    let from = tables.partition_point(|t| t.meta.largest.as_slice() < start);
    let tables: Vec<Arc<Table>> = tables[from..].iter().map(|t| t.table.clone()).collect();
    let start = start.to_vec();
    Box::new(tables.into_iter().flat_map(move |t| match readahead {
        Some(bytes) => t.iter_readahead(bytes),
        None => t.iter_from(&start),
    }))
}
