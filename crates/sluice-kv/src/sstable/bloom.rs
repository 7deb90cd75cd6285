//! The bloom filter over a table's keys: a `get` for a key the table lacks
//! usually reads no data block.
//!
//! LevelDB's filter, hash and all: one 32-bit hash per key, and the k probes
//! derived from it by double hashing (each probe adds the hash rotated by 17
//! bits). It is written here by hand, not taken from a crate, because the
//! bits are part of the on-disk format and must not change when a
//! dependency's version does.
//!
//! Departures: one filter covers the whole table (as RocksDB's full
//! filters), not one per 2 KiB of data, so a lookup probes once; and k is
//! `round(bits_per_key * ln 2)` where LevelDB truncates `bits_per_key *
//! 0.69`, the false-positive optimum (7 probes, not 6, at 10 bits per key).

use std::path::Path;

use crate::{KvError, Result};

const SEED: u32 = 0xbc9f_1d34;
const MAX_PROBES: u8 = 30;
const MIN_BITS: usize = 64;

/// The filter's hash of a key: LevelDB's `BloomHash`.
pub(crate) fn hash(key: &[u8]) -> u32 {
    leveldb_hash(key, SEED)
}

/// LevelDB's `Hash(data, n, seed)`, a Murmur-like hash.
fn leveldb_hash(data: &[u8], seed: u32) -> u32 {
    const M: u32 = 0xc6a4_a793;
    let mut h = seed ^ (data.len() as u32).wrapping_mul(M);
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        h = h.wrapping_add(u32::from_le_bytes([word[0], word[1], word[2], word[3]]));
        h = h.wrapping_mul(M);
        h ^= h >> 16;
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        for (i, &b) in rest.iter().enumerate() {
            h = h.wrapping_add(u32::from(b) << (8 * i));
        }
        h = h.wrapping_mul(M);
        h ^= h >> 24;
    }
    h
}

fn probes(bits_per_key: usize) -> u8 {
    (bits_per_key as f64 * std::f64::consts::LN_2)
        .round()
        .clamp(1.0, f64::from(MAX_PROBES)) as u8
}

/// The bloom block's contents for keys with these [`hash`]es: the bit
/// array, then the number of probes.
pub(crate) fn build(hashes: &[u32], bits_per_key: usize) -> Vec<u8> {
    let bytes = hashes.len().saturating_mul(bits_per_key).max(MIN_BITS).div_ceil(8);
    let bits = bytes as u64 * 8;
    let k = probes(bits_per_key);
    let mut out = vec![0u8; bytes + 1];
    for &h in hashes {
        for pos in positions(h, k, bits) {
            out[(pos / 8) as usize] |= 1 << (pos % 8);
        }
    }
    out[bytes] = k;
    out
}

/// The bits a key with hash `h` sets, each below `bits`.
fn positions(mut h: u32, k: u8, bits: u64) -> impl Iterator<Item = u64> {
    let delta = h.rotate_right(17);
    (0..k).map(move |_| {
        let pos = u64::from(h) % bits;
        h = h.wrapping_add(delta);
        pos
    })
}

/// A decoded bloom block.
pub(crate) struct Bloom {
    bits: Vec<u8>,
    k: u8,
}

impl Bloom {
    /// Takes a bloom block's contents (crc checked), read from `offset` of `path`.
    pub(crate) fn decode(mut contents: Vec<u8>, path: &Path, offset: u64) -> Result<Bloom> {
        let k = contents.pop().unwrap_or(0);
        if contents.is_empty() {
            return Err(KvError::corruption(path, offset, "bloom block has no bits"));
        }
        if !(1..=MAX_PROBES).contains(&k) {
            return Err(KvError::corruption(path, offset, format!("bloom block has {k} probes")));
        }
        Ok(Bloom { bits: contents, k })
    }

    /// False only if the key is certainly not in the table.
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        let bits = self.bits.len() as u64 * 8;
        positions(hash(key), self.k, bits).all(|pos| self.bits[(pos / 8) as usize] & (1 << (pos % 8)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(keys: impl Iterator<Item = Vec<u8>>, bits_per_key: usize) -> Bloom {
        let hashes: Vec<u32> = keys.map(|k| hash(&k)).collect();
        Bloom::decode(build(&hashes, bits_per_key), Path::new("t"), 0).unwrap()
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:08}").into_bytes()
    }

    /// LevelDB's `util/hash_test.cc` vectors: the format is LevelDB's hash.
    #[test]
    fn hash_matches_leveldb() {
        let data5: [u8; 48] = [
            0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(hash(&[]), 0xbc9f_1d34);
        assert_eq!(hash(&[0x62]), 0xef13_45c4);
        assert_eq!(hash(&[0xc3, 0x97]), 0x5b66_3814);
        assert_eq!(hash(&[0xe2, 0x99, 0xa5]), 0x323c_078f);
        assert_eq!(hash(&[0xe1, 0x80, 0xb9, 0x32]), 0xed21_633a);
        assert_eq!(leveldb_hash(&data5, 0x1234_5678), 0xf333_dabb);
    }

    #[test]
    fn probes_round_and_clamp() {
        assert_eq!(probes(0), 1);
        assert_eq!(probes(10), 7);
        assert_eq!(probes(100), 30);
    }

    #[test]
    fn no_false_negatives_and_about_one_percent_false_positives() {
        let bloom = filter((0..10_000).map(key), 10);
        assert!((0..10_000).all(|i| bloom.may_contain(&key(i))));
        let false_positives = (10_000..20_000).filter(|&i| bloom.may_contain(&key(i))).count();
        assert!(false_positives < 300, "{false_positives} false positives in 10000");
    }

    #[test]
    fn small_and_empty_filters_work() {
        let empty = filter(std::iter::empty(), 10);
        assert_eq!(empty.bits.len(), MIN_BITS / 8);
        assert!(!empty.may_contain(b"anything"));
        let one = filter(std::iter::once(b"only".to_vec()), 0);
        assert!(one.may_contain(b"only"));
    }

    #[test]
    fn bad_probe_counts_and_missing_bits_are_corruption() {
        for contents in [vec![], vec![7], vec![0xff, 0], vec![0xff, MAX_PROBES + 1]] {
            assert!(matches!(
                Bloom::decode(contents, Path::new("t"), 5),
                Err(KvError::Corruption { offset: 5, .. })
            ));
        }
    }
}
