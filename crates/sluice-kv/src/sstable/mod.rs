//! # SSTables: sorted, immutable files of keys and values
//!
//! A flush or a compaction writes a table once, front to back, with
//! [`TableBuilder`]; [`Table`] reads it by key or in key order, with data
//! blocks shared through a [`BlockCache`].
//!
//! ## On-disk format
//!
//! Integers are little-endian. Every block (data, bloom, index) is its
//! contents followed by a crc32c (Castagnoli) of the contents, `u32`.
//!
//! ```text
//! 0              data block 0
//!                data block 1 ... data block n-1
//! bloom_offset   bloom block
//! index_offset   index block
//! size - 52      footer
//!
//! data block     entry* | crc u32
//!   entry        klen u32 | vlen u32 | key | value
//!                (vlen = u32::MAX: a tombstone, no value bytes)
//!                keys strictly increasing, within the block and across blocks
//! bloom block    bit array (>= 8 bytes) | k u8 | crc u32
//! index block    a data block with one entry per data block, in file order:
//!                key = the data block's last key,
//!                value = handle: offset u64 | len u32 (len counts the crc)
//! footer         0  bloom_offset u64
//!                8  bloom_len    u64 (counts the crc)
//!                16 index_offset u64
//!                24 index_len    u64 (counts the crc)
//!                32 entries      u64 (tombstones included)
//!                40 magic        u64, the bytes "SLCTBL01"
//!                48 crc u32 of bytes 0..48
//! ```
//!
//! The data blocks tile `[0, bloom_offset)`, the bloom block ends where the
//! index begins and the index where the footer begins; [`Table::open`]
//! checks all of it, so no handle can point outside the file.
//!
//! ## Where this departs from LevelDB/RocksDB, and why
//!
//! - No compression and no per-block type byte. Sluice studies how I/O is
//!   scheduled; raw blocks keep an I/O's size what the format says it is.
//! - No prefix compression or restart points (see [`block`]): whole keys,
//!   binary-searched within a block.
//! - The index holds each block's full last key, not a shortest separator,
//!   so the builder needs no comparator tricks; the index is a little larger.
//! - One bloom filter for the whole table (like RocksDB's full filters),
//!   not one per 2 KiB of data, and no metaindex: the footer points straight
//!   at the bloom and index blocks, the only meta blocks there are.
//! - The footer carries its own crc (LevelDB's relies on the magic alone),
//!   so a torn or bit-flipped footer is caught rather than misread.
//! - Every crc is always checked: LevelDB checks data blocks only with
//!   `verify_checksums`. A crc costs little beside a read from the device,
//!   and a wrong value is worse than an error.
//! - Blocks are not aligned, so tables need a buffered or emulated device:
//!   an `O_DIRECT` device rejects their unaligned reads and writes.

mod block;
mod bloom;
mod builder;
mod cache;
mod reader;

use std::path::Path;

pub use builder::{TableBuilder, TableMeta, TableOptions};
pub use cache::BlockCache;
pub use reader::{Table, TableIter};

use crate::{KvError, Result};
use block::{le_u32, le_u64};

// The fixed-size records that tie the blocks together live here, beside
// the format they are part of: block handles and the footer.

/// "SLCTBL01" as the footer stores it.
const MAGIC: u64 = u64::from_le_bytes(*b"SLCTBL01");
const FOOTER_LEN: usize = 52;
const HANDLE_LEN: usize = 12;

/// Where a data block lies in the file; `len` counts its crc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Handle {
    offset: u64,
    len: u32,
}

impl Handle {
    fn encode(&self) -> [u8; HANDLE_LEN] {
        let mut out = [0; HANDLE_LEN];
        out[..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Handle> {
        if bytes.len() != HANDLE_LEN {
            return None;
        }
        Some(Handle {
            offset: le_u64(bytes, 0)?,
            len: le_u32(bytes, 8)?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Footer {
    bloom_offset: u64,
    bloom_len: u64,
    index_offset: u64,
    index_len: u64,
    entries: u64,
}

impl Footer {
    fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut out = [0; FOOTER_LEN];
        let fields = [
            self.bloom_offset,
            self.bloom_len,
            self.index_offset,
            self.index_len,
            self.entries,
            MAGIC,
        ];
        for (slot, field) in out.chunks_exact_mut(8).zip(fields) {
            slot.copy_from_slice(&field.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out[..48]);
        out[48..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes the footer found at `offset` of `path`, checking magic and crc.
    fn decode(bytes: &[u8], path: &Path, offset: u64) -> Result<Footer> {
        let bad = |what: &str| KvError::corruption(path, offset, format!("footer: {what}"));
        let field = |i: usize| le_u64(bytes, 8 * i).ok_or_else(|| bad("truncated"));
        if field(5)? != MAGIC {
            return Err(bad("bad magic number; not a sluice table"));
        }
        let stored = le_u32(bytes, 48).ok_or_else(|| bad("truncated"))?;
        if crc32c::crc32c(&bytes[..48]) != stored {
            return Err(bad("checksum mismatch"));
        }
        Ok(Footer {
            bloom_offset: field(0)?,
            bloom_len: field(1)?,
            index_offset: field(2)?,
            index_len: field(3)?,
            entries: field(4)?,
        })
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;
    use std::sync::Arc;

    use sluice_io::{Runtime, RuntimeConfig};

    use super::{BlockCache, Table, TableBuilder, TableMeta, TableOptions};
    use crate::{Result, Value};

    pub(crate) fn runtime() -> Runtime {
        Runtime::new(RuntimeConfig::default()).unwrap()
    }

    pub(crate) fn build(rt: &Runtime, path: &Path, entries: &[(Vec<u8>, Value)], options: TableOptions) -> TableMeta {
        let mut b = TableBuilder::new(rt.open(path, true).unwrap(), options);
        for (k, v) in entries {
            b.add(k, v.as_deref()).unwrap();
        }
        b.finish().unwrap()
    }

    /// Opens with a cache of its own, so no block comes from another test.
    pub(crate) fn open(rt: &Runtime, path: &Path) -> Result<Arc<Table>> {
        let cache = Arc::new(BlockCache::new(1 << 20));
        Ok(Arc::new(Table::open(rt.open(path, false)?, 1, cache)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trips_and_rejects_any_flipped_bit() {
        let footer = Footer {
            bloom_offset: 1 << 40,
            bloom_len: 77,
            index_offset: (1 << 40) + 77,
            index_len: 300,
            entries: 12345,
        };
        let bytes = footer.encode();
        assert_eq!(Footer::decode(&bytes, Path::new("t"), 9).unwrap(), footer);
        for bit in 0..FOOTER_LEN * 8 {
            let mut bad = bytes;
            bad[bit / 8] ^= 1 << (bit % 8);
            let err = Footer::decode(&bad, Path::new("t"), 9).unwrap_err();
            assert!(matches!(err, KvError::Corruption { offset: 9, .. }), "{err}");
        }
    }

    #[test]
    fn handle_round_trips_and_needs_exactly_twelve_bytes() {
        let handle = Handle {
            offset: 4097,
            len: 4100,
        };
        assert_eq!(Handle::decode(&handle.encode()), Some(handle));
        assert_eq!(Handle::decode(&handle.encode()[..11]), None);
        assert_eq!(Handle::decode(&[0; 13]), None);
    }
}
