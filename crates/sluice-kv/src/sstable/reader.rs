//! Reading a table: one key through the bloom filter and the index, or
//! every key from a start in order, block by block, with data blocks shared
//! through the [`BlockCache`].
//!
//! `open` reads and checks the footer, the bloom block and the index, down
//! to the index's handles tiling the data region, so every later read stays
//! inside the file. A data block read from the file has its crc and entries
//! checked, and its first and last keys against the index, before it is
//! used or cached: a corrupt table gives an error, never a wrong value. A
//! table that passes `open` may still hold a corrupt data block, which is
//! found when that block is first read; LevelDB's `paranoid_checks` would
//! read every block at open, which a store opening hundreds of tables
//! cannot afford on its critical path.

use std::sync::Arc;

use sluice_io::SluiceFile;

use super::block::{unseal, Block};
use super::bloom::Bloom;
use super::cache::BlockCache;
use super::{Footer, Handle, FOOTER_LEN};
use crate::{KvError, Result, Value};

/// An open table, shared (`Arc`) by readers and iterators.
pub struct Table {
    file: SluiceFile,
    number: u64,
    cache: Arc<BlockCache>,
    bloom: Bloom,
    /// One entry per data block, in key (and file) order.
    index: Vec<IndexEntry>,
    entries: u64,
}

struct IndexEntry {
    last_key: Vec<u8>,
    handle: Handle,
}

impl Table {
    /// Opens the table in `file`, numbered `number` in the cache's keys.
    pub fn open(file: SluiceFile, number: u64, cache: Arc<BlockCache>) -> Result<Table> {
        let path = file.path();
        let size = std::fs::metadata(path)
            .map_err(|e| KvError::fs("reading the size of", path, e))?
            .len();
        let footer_at = size.checked_sub(FOOTER_LEN as u64).ok_or_else(|| {
            KvError::corruption(path, 0, format!("file of {size} bytes is shorter than a table footer"))
        })?;
        let footer = Footer::decode(&read_exact(&file, footer_at, FOOTER_LEN, "footer")?, path, footer_at)?;
        check_layout(&footer, footer_at).map_err(|what| KvError::corruption(path, footer_at, what))?;
        let len = footer_at - footer.bloom_offset;
        let mut bloom = read_exact(&file, footer.bloom_offset, len as usize, "bloom block and index")?;
        let index = bloom.split_off(footer.bloom_len as usize);
        let bloom = unseal(bloom, path, footer.bloom_offset, "bloom block")?;
        let bloom = Bloom::decode(bloom, path, footer.bloom_offset)?;
        let index = decode_index(unseal(index, path, footer.index_offset, "index")?, &file, &footer)?;
        Ok(Table {
            number,
            cache,
            bloom,
            index,
            entries: footer.entries,
            file,
        })
    }

    pub fn number(&self) -> u64 {
        self.number
    }

    /// Entries in the table, tombstones included, as its footer says.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// `None` if the table does not hold `key`; `Some(None)` if it holds a
    /// tombstone for it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        if !self.bloom.may_contain(key) {
            return Ok(None);
        }
        let i = self.index.partition_point(|e| e.last_key.as_slice() < key);
        if i == self.index.len() {
            return Ok(None);
        }
        let block = self.block(i)?;
        Ok(block.get(key).map(|v| v.map(<[u8]>::to_vec)))
    }

    /// Every entry, in key order.
    pub fn iter(self: &Arc<Self>) -> TableIter {
        TableIter {
            table: self.clone(),
            next_block: 0,
            block: None,
            pos: 0,
            start: None,
            readahead: None,
        }
    }

    /// All entries in key order, reading `bytes` of blocks per I/O and
    /// bypassing the block cache, for compaction: as RocksDB's
    /// `compaction_readahead_size`, one large read instead of one per
    /// 4 KiB block (on a device that charges per operation the difference
    /// is the compaction's speed), and a merge that reads every block once
    /// does not evict the foreground's hot blocks.
    pub fn iter_readahead(self: &Arc<Self>, bytes: usize) -> TableIter {
        TableIter {
            readahead: Some(Readahead {
                bytes,
                offset: 0,
                data: Vec::new(),
            }),
            ..self.iter()
        }
    }

    /// The entries whose keys are at least `start`, in key order.
    pub fn iter_from(self: &Arc<Self>, start: &[u8]) -> TableIter {
        TableIter {
            table: self.clone(),
            next_block: self.index.partition_point(|e| e.last_key.as_slice() < start),
            block: None,
            pos: 0,
            start: Some(start.to_vec()),
            readahead: None,
        }
    }

    /// Data block `i`, from the cache or read, checked and cached.
    fn block(&self, i: usize) -> Result<Arc<Block>> {
        let handle = &self.index[i].handle;
        if let Some(block) = self.cache.get(self.number, handle.offset) {
            return Ok(block);
        }
        let raw = read_exact(&self.file, handle.offset, handle.len as usize, "data block")?;
        let block = self.check_block(i, raw)?;
        self.cache.insert(self.number, handle.offset, block.clone());
        Ok(block)
    }

    /// Data block `i` through `ra`'s buffer, refilled with one read of
    /// `ra.bytes` (or to the end of the data blocks) when it lacks it.
    fn block_readahead(&self, i: usize, ra: &mut Readahead) -> Result<Arc<Block>> {
        let handle = &self.index[i].handle;
        let (start, len) = (handle.offset, handle.len as usize);
        let buffered = start >= ra.offset && start + len as u64 <= ra.offset + ra.data.len() as u64;
        if !buffered {
            let data_end = self.index.last().map_or(0, |e| e.handle.offset + e.handle.len as u64);
            let want = (ra.bytes as u64).max(len as u64).min(data_end - start);
            ra.data = read_exact(&self.file, start, want as usize, "data blocks")?;
            ra.offset = start;
        }
        let at = (start - ra.offset) as usize;
        self.check_block(i, ra.data[at..at + len].to_vec())
    }

    /// Decodes block `i` from its raw bytes and checks it against the index.
    fn check_block(&self, i: usize, raw: Vec<u8>) -> Result<Arc<Block>> {
        let IndexEntry { last_key, handle } = &self.index[i];
        let path = self.file.path();
        let block = Block::decode(unseal(raw, path, handle.offset, "data block")?, path, handle.offset)?;
        let prev = i.checked_sub(1).map(|p| self.index[p].last_key.as_slice());
        if block.last_key() != Some(last_key.as_slice()) || prev.is_some_and(|p| block.first_key() <= Some(p)) {
            return Err(KvError::corruption(
                path,
                handle.offset,
                "data block's keys disagree with the index",
            ));
        }
        Ok(Arc::new(block))
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.file.path())
            .field("number", &self.number)
            .field("blocks", &self.index.len())
            .field("entries", &self.entries)
            .finish()
    }
}

/// Reads exactly `len` bytes; a file ending sooner is corrupt.
fn read_exact(file: &SluiceFile, offset: u64, len: usize, what: &str) -> Result<Vec<u8>> {
    let mut buf = vec![0; len];
    let n = file.read_at(&mut buf, offset)?;
    if n < len {
        let what = format!("{what}: the file ends after {n} of its {len} bytes");
        return Err(KvError::corruption(file.path(), offset, what));
    }
    Ok(buf)
}

/// The bloom block must end where the index begins, the index where the
/// footer does.
fn check_layout(footer: &Footer, footer_at: u64) -> Result<(), &'static str> {
    if footer.bloom_offset.checked_add(footer.bloom_len) != Some(footer.index_offset) {
        return Err("footer: the bloom block does not end where the index begins");
    }
    if footer.index_offset.checked_add(footer.index_len) != Some(footer_at) {
        return Err("footer: the index does not end where the footer begins");
    }
    Ok(())
}

/// The index's entries, whose handles must tile `[0, bloom_offset)` in order.
fn decode_index(contents: Vec<u8>, file: &SluiceFile, footer: &Footer) -> Result<Vec<IndexEntry>> {
    let (path, at) = (file.path(), footer.index_offset);
    let block = Block::decode(contents, path, at)?;
    let mut index = Vec::with_capacity(block.len());
    let mut next = 0;
    for i in 0..block.len() {
        let (key, value) = block.entry(i);
        let handle = value
            .and_then(Handle::decode)
            .filter(|h| h.offset == next)
            .ok_or_else(|| KvError::corruption(path, at, format!("index entry {i}: no handle to the next block")))?;
        next = handle.offset + u64::from(handle.len);
        index.push(IndexEntry {
            last_key: key.to_vec(),
            handle,
        });
    }
    if next != footer.bloom_offset {
        return Err(KvError::corruption(
            path,
            at,
            "index: the data blocks do not end where the bloom block begins",
        ));
    }
    // Every block holds at least one entry, and a table with entries has a block.
    if footer.entries < index.len() as u64 || (footer.entries > 0 && index.is_empty()) {
        return Err(KvError::corruption(
            path,
            at,
            "index: block count disagrees with the footer's entry count",
        ));
    }
    Ok(index)
}

/// A table's entries in key order; a corrupt block yields one error and
/// ends the iteration.
pub struct TableIter {
    table: Arc<Table>,
    /// The next block to load; past the end, no more blocks.
    next_block: usize,
    block: Option<Arc<Block>>,
    /// The next entry of `block`.
    pos: usize,
    /// Where to start in the first block loaded; taken when it is.
    start: Option<Vec<u8>>,
    readahead: Option<Readahead>,
}

/// Blocks read ahead of a sequential iterator.
struct Readahead {
    bytes: usize,
    /// File offset of `data`.
    offset: u64,
    data: Vec<u8>,
}

impl Iterator for TableIter {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(block) = self.block.as_ref().filter(|b| self.pos < b.len()) {
                let (key, value) = block.entry(self.pos);
                self.pos += 1;
                return Some(Ok((key.to_vec(), value.map(<[u8]>::to_vec))));
            }
            if self.next_block >= self.table.index.len() {
                return None;
            }
            let loaded = match self.readahead.as_mut() {
                Some(ra) => self.table.block_readahead(self.next_block, ra),
                None => self.table.block(self.next_block),
            };
            match loaded {
                Ok(block) => {
                    self.pos = self.start.take().map_or(0, |start| block.seek(&start));
                    self.block = Some(block);
                    self.next_block += 1;
                }
                Err(e) => {
                    self.block = None;
                    self.next_block = self.table.index.len();
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use proptest::prelude::*;
    use sluice_io::Runtime;

    use super::*;
    use crate::sstable::block::CRC_LEN;
    use crate::sstable::testing::{build, open, runtime};
    use crate::sstable::{TableBuilder, TableMeta, TableOptions};

    type Entries = Vec<(Vec<u8>, Value)>;

    /// Keys of lengths 9 to 45; values tombstones, empty, or up to 300 bytes.
    fn sample(n: u32) -> Entries {
        (0..n)
            .map(|i| {
                let mut key = format!("key{i:06}").into_bytes();
                key.extend(std::iter::repeat_n(b'~', (i % 37) as usize));
                let value = match i % 11 {
                    0 => None,
                    1 => Some(Vec::new()),
                    _ => Some(vec![(i % 251) as u8; (i * 13 % 300) as usize]),
                };
                (key, value)
            })
            .collect()
    }

    fn collect(iter: TableIter) -> Entries {
        iter.collect::<Result<_>>().unwrap()
    }

    fn from(entries: &Entries, start: &[u8]) -> Entries {
        entries.iter().filter(|(k, _)| k.as_slice() >= start).cloned().collect()
    }

    fn after(key: &[u8]) -> Vec<u8> {
        [key, &[0]].concat()
    }

    fn sample_table(rt: &Runtime, path: &Path, n: u32, options: TableOptions) -> (Entries, Arc<Table>) {
        let entries = sample(n);
        build(rt, path, &entries, options);
        (entries, open(rt, path).unwrap())
    }

    fn assert_corruption(e: &KvError, path: &Path) {
        assert!(matches!(e, KvError::Corruption { path: p, .. } if p == path), "{e}");
    }

    #[test]
    fn readahead_yields_what_the_cached_path_does_and_checks_every_block() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        let (entries, table) = sample_table(&rt, &path, 2000, TableOptions::default());
        for bytes in [1, 4096, 10_000, 1 << 20] {
            let got: Entries = table.iter_readahead(bytes).map(Result::unwrap).collect();
            assert_eq!(got, entries, "readahead {bytes}");
        }
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[5000] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let table = open(&rt, &path).unwrap();
        let results: Vec<_> = table.iter_readahead(1 << 20).collect();
        let e = results.last().unwrap().as_ref().unwrap_err();
        assert_corruption(e, &path);
    }

    #[test]
    fn many_keys_round_trip_across_many_blocks() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        let entries = sample(3000);
        let meta = build(&rt, &path, &entries, TableOptions::default());
        let expected = TableMeta {
            size: std::fs::metadata(&path).unwrap().len(),
            entries: 3000,
            smallest: entries[0].0.clone(),
            largest: entries[2999].0.clone(),
        };
        assert_eq!(meta, expected);
        let table = open(&rt, &path).unwrap();
        assert!(table.index.len() > 50, "{} blocks", table.index.len());
        assert_eq!(table.entries(), 3000);
        for (k, v) in &entries {
            assert_eq!(table.get(k).unwrap(), Some(v.clone()), "{}", String::from_utf8_lossy(k));
        }
        assert_eq!(collect(table.iter()), entries);
    }

    #[test]
    fn iter_from_starts_at_the_first_key_not_below_start() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let (entries, table) = sample_table(&rt, &dir.path().join("t.sst"), 1000, TableOptions::default());
        let mut starts = vec![b"".to_vec(), b"key".to_vec(), b"key000500".to_vec(), b"zzz".to_vec()];
        starts.extend([1, 2, 499, 998, 999].map(|i| entries[i].0.clone()));
        starts.push(after(&entries[999].0));
        for e in &table.index {
            starts.push(e.last_key.clone());
            starts.push(after(&e.last_key));
        }
        for start in starts {
            assert_eq!(collect(table.iter_from(&start)), from(&entries, &start));
        }
    }

    #[test]
    fn missing_keys_are_none() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let (entries, table) = sample_table(&rt, &dir.path().join("t.sst"), 1000, TableOptions::default());
        let mut missing = vec![
            b"".to_vec(),
            b"a".to_vec(),
            b"key".to_vec(),
            b"key000001".to_vec(),
            b"zzz".to_vec(),
        ];
        missing.extend(entries.iter().step_by(7).map(|(k, _)| after(k)));
        for key in missing {
            assert_eq!(table.get(&key).unwrap(), None, "{}", String::from_utf8_lossy(&key));
        }
    }

    #[test]
    fn blocks_stay_within_the_target_unless_one_entry_is_larger() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        let options = TableOptions {
            block_bytes: 256,
            bloom_bits_per_key: 10,
        };
        let mut b = TableBuilder::new(rt.open(&path, true).unwrap(), options);
        let big = [9u8; 1000];
        for i in 0..500u32 {
            let len = if i % 100 == 0 { 1000 } else { (i % 40) as usize };
            b.add(format!("{i:05}").as_bytes(), Some(&big[..len])).unwrap();
        }
        let estimate = b.estimated_size();
        let meta = b.finish().unwrap();
        assert!(
            estimate.abs_diff(meta.size) * 20 < meta.size,
            "estimate {estimate}, size {}",
            meta.size
        );
        let table = open(&rt, &path).unwrap();
        for (i, e) in table.index.iter().enumerate() {
            let block = table.block(i).unwrap();
            let len = e.handle.len as usize - CRC_LEN;
            assert!(
                len <= 256 || block.len() == 1,
                "block {i}: {len} bytes, {} entries",
                block.len()
            );
        }
    }

    #[test]
    fn blocks_are_read_through_the_cache() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        let (entries, table) = sample_table(&rt, &path, 200, TableOptions::default());
        let (key, value) = &entries[0];
        assert_eq!(table.get(key).unwrap(), Some(value.clone()));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(table.get(key).unwrap(), Some(value.clone()));
        assert_corruption(&open(&rt, &path).unwrap().get(key).unwrap_err(), &path);
    }

    /// Open, a full iteration and a `get` of every key either succeed with
    /// the right entries or fail with corruption; at least one fails.
    fn check_flipped(rt: &Runtime, path: &Path, entries: &Entries, at: usize) {
        let table = match open(rt, path) {
            Ok(table) => table,
            Err(e) => return assert_corruption(&e, path),
        };
        let mut seen = 0;
        let mut failed = false;
        for item in table.iter() {
            match item {
                Ok(entry) => {
                    assert_eq!(entry, entries[seen], "byte {at}");
                    seen += 1;
                }
                Err(e) => {
                    assert_corruption(&e, path);
                    failed = true;
                }
            }
        }
        assert!(failed, "flipping byte {at} went unnoticed");
        for (k, v) in entries {
            match table.get(k) {
                Ok(got) => assert_eq!(got.as_ref(), Some(v), "byte {at}"),
                Err(e) => assert_corruption(&e, path),
            }
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_is_corruption_never_a_wrong_value() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        let options = TableOptions {
            block_bytes: 512,
            bloom_bits_per_key: 10,
        };
        let (entries, table) = sample_table(&rt, &path, 300, options);
        let original = std::fs::read(&path).unwrap();
        let size = original.len();
        let mut at: Vec<usize> = (0..size).step_by(101).collect();
        let bloom_at = table
            .index
            .last()
            .map_or(0, |e| e.handle.offset + u64::from(e.handle.len)) as usize;
        let mut regions: Vec<(usize, usize)> = table
            .index
            .iter()
            .map(|e| (e.handle.offset as usize, e.handle.len as usize))
            .collect();
        regions.push((bloom_at, 0));
        for (offset, len) in regions {
            at.extend([
                offset,
                offset + len / 2,
                (offset + len).saturating_sub(5),
                (offset + len).saturating_sub(1),
            ]);
        }
        at.extend(bloom_at..bloom_at + 8);
        at.extend(size - FOOTER_LEN - 64..size);
        drop(table);
        for &at in &at {
            let mut bytes = original.clone();
            bytes[at] ^= 0x5a;
            std::fs::write(&path, &bytes).unwrap();
            check_flipped(&rt, &path, &entries, at);
        }
    }

    #[test]
    fn a_truncated_or_padded_file_is_corruption() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        drop(sample_table(&rt, &path, 300, TableOptions::default()));
        let original = std::fs::read(&path).unwrap();
        let size = original.len();
        let mut files: Vec<Vec<u8>> = [0, 1, FOOTER_LEN - 1, FOOTER_LEN, size / 2, size - FOOTER_LEN, size - 1]
            .map(|len| original[..len].to_vec())
            .into();
        files.push([&original[..], &[0; 7]].concat());
        files.push(vec![0; 4096]);
        for bytes in files {
            std::fs::write(&path, &bytes).unwrap();
            assert_corruption(&open(&rt, &path).unwrap_err(), &path);
        }
    }

    fn keys() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0u8..4, 0..10)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A table built from any sorted map gives back exactly that map.
        #[test]
        fn any_sorted_map_round_trips(
            map in prop::collection::btree_map(keys(), prop::option::of(prop::collection::vec(any::<u8>(), 0..40)), 0..150),
            block_bytes in 1usize..400,
            start in keys(),
        ) {
            let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
            let path = dir.path().join("t.sst");
            let entries: Entries = map.clone().into_iter().collect();
            build(&rt, &path, &entries, TableOptions { block_bytes, bloom_bits_per_key: 10 });
            let table = open(&rt, &path).unwrap();
            prop_assert_eq!(collect(table.iter()), entries.clone());
            for (k, v) in &map {
                prop_assert_eq!(table.get(k).unwrap(), Some(v.clone()));
            }
            let tail: BTreeMap<_, _> = map.range(start.clone()..).map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(collect(table.iter_from(&start)), tail.into_iter().collect::<Entries>());
        }
    }
}
