//! Blocks: the crc framing every block of a table shares, and the data
//! block's sorted entries (the index block reuses them with block handles
//! as values).
//!
//! An entry is `[klen u32][vlen u32][key][value]`, `vlen = u32::MAX`
//! marking a tombstone. LevelDB and RocksDB share key prefixes between
//! neighbours and keep restart points to search by; here every key is
//! stored whole, and decoding a block (once, before it enters the cache)
//! records where each entry starts, so a lookup is a plain binary search
//! over the block. The cost is the space shared prefixes would save; the
//! gain is a decoder with few rules, each checked.

use std::path::Path;

use crate::{KvError, Result};

/// The `vlen` of a tombstone.
const TOMBSTONE: u32 = u32::MAX;
const HEADER_LEN: usize = 8;
pub(crate) const CRC_LEN: usize = 4;

/// The most entry bytes one block may hold: with its crc, a block's
/// length is a `u32`.
pub(crate) const MAX_CONTENTS: usize = u32::MAX as usize - CRC_LEN;

/// The most key and value bytes one entry may hold, so that a block of
/// that entry alone is within [`MAX_CONTENTS`].
pub(crate) const MAX_PAYLOAD: usize = MAX_CONTENTS - HEADER_LEN;

pub(crate) fn le_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

pub(crate) fn le_u64(buf: &[u8], at: usize) -> Option<u64> {
    let bytes = buf.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Appends the crc of `contents`, making them a block as stored.
pub(crate) fn seal(mut contents: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&contents);
    contents.extend_from_slice(&crc.to_le_bytes());
    contents
}

/// Checks and strips the crc of a block read from `offset` of `path`.
pub(crate) fn unseal(mut raw: Vec<u8>, path: &Path, offset: u64, what: &str) -> Result<Vec<u8>> {
    let body = raw.len().saturating_sub(CRC_LEN);
    let stored = le_u32(&raw, body)
        .ok_or_else(|| KvError::corruption(path, offset, format!("{what} of {} bytes has no checksum", raw.len())))?;
    if crc32c::crc32c(&raw[..body]) != stored {
        return Err(KvError::corruption(path, offset, format!("{what} checksum mismatch")));
    }
    raw.truncate(body);
    Ok(raw)
}

/// The bytes an entry adds to a block.
pub(crate) fn entry_len(key: &[u8], value: Option<&[u8]>) -> usize {
    HEADER_LEN + key.len() + value.map_or(0, <[u8]>::len)
}

/// Entries being gathered into one block; the caller adds them in
/// increasing key order, each within [`MAX_PAYLOAD`].
#[derive(Default)]
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
}

impl BlockBuilder {
    pub(crate) fn add(&mut self, key: &[u8], value: Option<&[u8]>) {
        let vlen = value.map_or(TOMBSTONE, |v| v.len() as u32);
        self.buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&vlen.to_le_bytes());
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(value.unwrap_or_default());
    }

    /// Bytes of entries so far, without the crc.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The block as stored, crc included; the builder starts over empty.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        seal(std::mem::take(&mut self.buf))
    }
}

/// A block's verified entries.
#[derive(Debug)]
pub(crate) struct Block {
    data: Vec<u8>,
    /// Where each entry starts in `data`; every entry found in bounds.
    starts: Vec<usize>,
}

impl Block {
    /// Parses a block's contents (crc already checked and stripped), read
    /// from `offset` of `path`: every entry must lie inside the block and
    /// the keys must strictly increase.
    pub(crate) fn decode(data: Vec<u8>, path: &Path, offset: u64) -> Result<Block> {
        let mut starts = Vec::new();
        let mut pos = 0;
        let mut prev: Option<&[u8]> = None;
        while pos < data.len() {
            let at = offset + pos as u64;
            let end = entry_end(&data, pos)
                .ok_or_else(|| KvError::corruption(path, at, "block entry runs past the end of its block"))?;
            let key = key_at(&data, pos);
            if prev.is_some_and(|p| p >= key) {
                return Err(KvError::corruption(path, at, "block keys out of order"));
            }
            prev = Some(key);
            starts.push(pos);
            pos = end;
        }
        Ok(Block { data, starts })
    }

    /// Bytes this block holds in memory, as the cache counts them.
    pub(crate) fn charge(&self) -> usize {
        self.data.capacity() + self.starts.capacity() * std::mem::size_of::<usize>()
    }

    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    pub(crate) fn entry(&self, i: usize) -> (&[u8], Option<&[u8]>) {
        let pos = self.starts[i];
        let key = key_at(&self.data, pos);
        let value_at = pos + HEADER_LEN + key.len();
        let value = match verified_u32(&self.data, pos + 4) {
            TOMBSTONE => None,
            vlen => Some(&self.data[value_at..value_at + vlen as usize]),
        };
        (key, value)
    }

    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        self.starts.first().map(|&pos| key_at(&self.data, pos))
    }

    pub(crate) fn last_key(&self) -> Option<&[u8]> {
        self.starts.last().map(|&pos| key_at(&self.data, pos))
    }

    /// The index of the first entry whose key is at least `key`.
    pub(crate) fn seek(&self, key: &[u8]) -> usize {
        self.starts.partition_point(|&pos| key_at(&self.data, pos) < key)
    }

    /// `None` if the block lacks `key`; `Some(None)` for a tombstone.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        let i = self.seek(key);
        (i < self.len())
            .then(|| self.entry(i))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// Where the entry at `pos` ends, if all of it lies inside `data`.
fn entry_end(data: &[u8], pos: usize) -> Option<usize> {
    let (klen, vlen) = (le_u32(data, pos)?, le_u32(data, pos + 4)?);
    let vlen = if vlen == TOMBSTONE { 0 } else { vlen as usize };
    let end = (pos + HEADER_LEN).checked_add(klen as usize)?.checked_add(vlen)?;
    (end <= data.len()).then_some(end)
}

/// The key of an entry [`entry_end`] has found in bounds.
fn key_at(data: &[u8], pos: usize) -> &[u8] {
    let start = pos + HEADER_LEN;
    &data[start..start + verified_u32(data, pos) as usize]
}

/// A header field of an entry [`entry_end`] has found in bounds.
fn verified_u32(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(entries: &[(&[u8], Option<&[u8]>)]) -> Vec<u8> {
        let mut b = BlockBuilder::default();
        for (k, v) in entries {
            b.add(k, *v);
        }
        b.finish()
    }

    fn decoded(raw: Vec<u8>) -> Result<Block> {
        let contents = unseal(raw, Path::new("t"), 100, "data block")?;
        Block::decode(contents, Path::new("t"), 100)
    }

    #[test]
    fn entries_round_trip_with_empty_values_and_tombstones() {
        let entries: [(&[u8], Option<&[u8]>); 4] =
            [(b"a", Some(b"1")), (b"b", Some(b"")), (b"c", None), (b"dd", Some(b"x"))];
        let block = decoded(built(&entries)).unwrap();
        assert_eq!(block.len(), 4);
        for (i, (k, v)) in entries.iter().enumerate() {
            assert_eq!(block.entry(i), (*k, *v));
            assert_eq!(block.get(k), Some(*v));
        }
        assert_eq!(block.first_key(), Some(&b"a"[..]));
        assert_eq!(block.last_key(), Some(&b"dd"[..]));
        assert_eq!(block.get(b"bb"), None);
        assert_eq!(block.get(b"e"), None);
        assert_eq!(block.seek(b""), 0);
        assert_eq!(block.seek(b"bb"), 2);
        assert_eq!(block.seek(b"z"), 4);
    }

    #[test]
    fn every_flipped_bit_fails_the_checksum() {
        let raw = built(&[(b"key", Some(b"value")), (b"key2", None)]);
        for bit in 0..raw.len() * 8 {
            let mut bad = raw.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(matches!(decoded(bad), Err(KvError::Corruption { offset: 100, .. })));
        }
    }

    #[test]
    fn too_short_for_a_checksum_is_corruption() {
        assert!(unseal(vec![1, 2, 3], Path::new("t"), 0, "data block").is_err());
        assert_eq!(unseal(seal(Vec::new()), Path::new("t"), 0, "data block").unwrap(), b"");
    }

    #[test]
    fn malformed_entries_are_corruption_at_the_entry() {
        let overlong = {
            let mut b = BlockBuilder::default();
            b.add(b"a", Some(b"1"));
            let mut data = b.buf.clone();
            data.extend_from_slice(&5u32.to_le_bytes());
            data.extend_from_slice(&0u32.to_le_bytes());
            data.extend_from_slice(b"abc");
            data
        };
        let unsorted = {
            let mut b = BlockBuilder::default();
            b.add(b"b", None);
            b.add(b"a", None);
            b.buf.clone()
        };
        let huge_klen = [u32::MAX.to_le_bytes(), 0u32.to_le_bytes()].concat();
        for (data, at) in [(overlong, 110), (unsorted, 109), (huge_klen, 100), (vec![0; 7], 100)] {
            match Block::decode(data, Path::new("t"), 100) {
                Err(KvError::Corruption { offset, .. }) => assert_eq!(offset, at),
                other => panic!("{other:?}"),
            }
        }
    }
}
