//! Writing a table: entries in increasing key order, front to back.
//!
//! Each data block goes to the file as soon as it is full, through
//! `write_buffered`, so the caller's I/O class (flush or compaction, both
//! background work) governs its write-back; `finish` writes the bloom
//! block, index and footer in one write and syncs once.
//!
//! LevelDB closes a block once it has grown past the target size; here a
//! block is closed before an entry that would take it past the target, so
//! blocks stay within it unless one entry alone is larger.

use sluice_io::SluiceFile;

use super::block::{self, BlockBuilder, MAX_CONTENTS, MAX_PAYLOAD};
use super::{bloom, Footer, Handle, FOOTER_LEN};
use crate::{KvError, Result};

/// How tables are laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableOptions {
    /// Target bytes of entries per data block (before the crc).
    pub block_bytes: usize,
    /// Bloom filter bits per key; about 1% false positives at 10.
    pub bloom_bits_per_key: usize,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_bytes: 4096,
            bloom_bits_per_key: 10,
        }
    }
}

/// What a finished table holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableMeta {
    /// File size in bytes.
    pub size: u64,
    /// Entries, tombstones included.
    pub entries: u64,
    /// The first key, empty for a table without entries.
    pub smallest: Vec<u8>,
    /// The last key, empty for a table without entries.
    pub largest: Vec<u8>,
}

/// Writes one table into an empty file. After an error the file holds no
/// usable table and the builder should be dropped.
pub struct TableBuilder {
    file: SluiceFile,
    options: TableOptions,
    block: BlockBuilder,
    index: BlockBuilder,
    /// Bytes written so far: where the next block goes.
    offset: u64,
    /// The bloom hash of every key, for the filter `finish` builds.
    hashes: Vec<u32>,
    smallest: Vec<u8>,
    last_key: Vec<u8>,
}

impl TableBuilder {
    pub fn new(file: SluiceFile, options: TableOptions) -> Self {
        TableBuilder {
            file,
            options,
            block: BlockBuilder::default(),
            index: BlockBuilder::default(),
            offset: 0,
            hashes: Vec::new(),
            smallest: Vec::new(),
            last_key: Vec::new(),
        }
    }

    /// Adds an entry, `None` being a tombstone. Keys must strictly
    /// increase; a key out of order is refused and changes nothing.
    pub fn add(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.check(key, value)?;
        let target = self.options.block_bytes.min(MAX_CONTENTS);
        if !self.block.is_empty() && self.block.len() + block::entry_len(key, value) > target {
            self.flush_block()?;
        }
        if self.hashes.is_empty() {
            self.smallest = key.to_vec();
        }
        self.block.add(key, value);
        self.hashes.push(bloom::hash(key));
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        Ok(())
    }

    fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if !self.hashes.is_empty() && key <= self.last_key.as_slice() {
            return Err(KvError::KeyOrder {
                path: self.file.path().to_path_buf(),
            });
        }
        if key.len() > MAX_PAYLOAD {
            return Err(KvError::KeyTooLarge {
                len: key.len(),
                limit: MAX_PAYLOAD,
            });
        }
        let (len, limit) = (value.map_or(0, <[u8]>::len), MAX_PAYLOAD - key.len());
        if len > limit {
            return Err(KvError::ValueTooLarge { len, limit });
        }
        Ok(())
    }

    /// About the size the file would have if finished now.
    pub fn estimated_size(&self) -> u64 {
        let bloom = self.hashes.len() * self.options.bloom_bits_per_key / 8;
        self.offset + (self.block.len() + self.index.len() + bloom + FOOTER_LEN) as u64
    }

    /// Writes the open block and indexes it under its last key.
    fn flush_block(&mut self) -> Result<()> {
        let raw = self.block.finish();
        self.file.write_buffered(&raw, self.offset)?;
        let handle = Handle {
            offset: self.offset,
            // Within u32: a block's entries stay within `MAX_CONTENTS`.
            len: raw.len() as u32,
        };
        self.index.add(&self.last_key, Some(&handle.encode()));
        self.offset += raw.len() as u64;
        Ok(())
    }

    /// Writes the last block, the bloom block, the index and the footer,
    /// and syncs the file.
    pub fn finish(mut self) -> Result<TableMeta> {
        if !self.block.is_empty() {
            self.flush_block()?;
        }
        let mut tail = block::seal(bloom::build(&self.hashes, self.options.bloom_bits_per_key));
        let bloom_len = tail.len() as u64;
        tail.extend_from_slice(&self.index.finish());
        let footer = Footer {
            bloom_offset: self.offset,
            bloom_len,
            index_offset: self.offset + bloom_len,
            index_len: tail.len() as u64 - bloom_len,
            entries: self.hashes.len() as u64,
        };
        tail.extend_from_slice(&footer.encode());
        self.file.write_buffered(&tail, self.offset)?;
        self.file.sync()?;
        Ok(TableMeta {
            size: self.offset + tail.len() as u64,
            entries: footer.entries,
            smallest: self.smallest,
            largest: self.last_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sstable::testing::{open, runtime};

    #[test]
    fn keys_out_of_order_are_refused_and_change_nothing() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        let mut b = TableBuilder::new(rt.open(&path, true).unwrap(), TableOptions::default());
        b.add(b"b", Some(b"1")).unwrap();
        for key in [&b"b"[..], b"a", b""] {
            assert!(matches!(b.add(key, None), Err(KvError::KeyOrder { path: p }) if p == path));
        }
        b.add(b"c", None).unwrap();
        let meta = b.finish().unwrap();
        assert_eq!(
            (meta.entries, meta.smallest, meta.largest),
            (2, b"b".to_vec(), b"c".to_vec())
        );
        let table = open(&rt, &path).unwrap();
        assert_eq!(table.get(b"a").unwrap(), None);
        assert_eq!(table.get(b"b").unwrap(), Some(Some(b"1".to_vec())));
        assert_eq!(table.get(b"c").unwrap(), Some(None));
    }

    #[test]
    fn an_empty_table_is_a_valid_table() {
        let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
        let path = dir.path().join("t.sst");
        let meta = TableBuilder::new(rt.open(&path, true).unwrap(), TableOptions::default())
            .finish()
            .unwrap();
        assert_eq!(meta.entries, 0);
        assert_eq!(meta.size, std::fs::metadata(&path).unwrap().len());
        let table = open(&rt, &path).unwrap();
        assert_eq!(table.get(b"x").unwrap(), None);
        assert_eq!(table.iter().count(), 0);
        assert_eq!(table.iter_from(b"x").count(), 0);
    }
}
