//! SCAN through the router: the router's cursor stands for a shard and
//! that shard's own cursor. A scan walks the shards one after another, in
//! the order of their slots, each from cursor 0 until it answers 0; the
//! router answers 0 once the last has. Keys are those of one shard at a
//! time, so a scan sees each key that lives through it at least once, as a
//! Redis SCAN does, as long as the shards do not change under it.
//!
//! The router keeps its cursors (a token for each pair of shard and
//! shard cursor) rather than packing the pair into the number: a
//! `sluice serve` cursor uses all 64 bits, and clients parse cursors as
//! 64-bit integers. Tokens are kept least recently used first out, and are
//! drawn from a keyed hash of a counter, so that no client can guess
//! another's (nor one of an earlier run of the router). Since the table is
//! shared (a client's pool may send a scan's calls on different
//! connections), a client that starts more than [`KEPT`] scans before
//! another continues its own ends that one with "invalid cursor".

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use lru::LruCache;

/// Cursors kept: a scan's cursor is needed until its next call, so this
/// bounds the scans in progress at once, not their length.
const KEPT: usize = 100_000;

/// Where a scan stands: the shard (its index among the shards that own
/// slots) and the cursor to send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub shard: usize,
    pub cursor: Vec<u8>,
}

pub struct ScanCursors {
    kept: Mutex<LruCache<u64, Position>>,
    next: AtomicU64,
    /// Keys of the hash that turns the counter into tokens, random per run.
    keys: RandomState,
}

impl Default for ScanCursors {
    fn default() -> Self {
        ScanCursors {
            kept: Mutex::new(LruCache::new(KEPT.try_into().expect("KEPT is not 0"))),
            next: AtomicU64::new(0),
            keys: RandomState::new(),
        }
    }
}

impl ScanCursors {
    /// Where the client's `cursor` stands, or why it is no cursor.
    pub fn position(&self, cursor: &[u8]) -> Result<Position, String> {
        if cursor == b"0" {
            return Ok(Position {
                shard: 0,
                cursor: b"0".to_vec(),
            });
        }
        let token = std::str::from_utf8(cursor).ok().and_then(|c| c.parse::<u64>().ok());
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        token
            .and_then(|t| kept.get(&t).cloned())
            .ok_or_else(|| "invalid cursor".to_string())
    }

    /// The client's cursor after shard `shard` of `shards` answered `next`:
    /// on in the same shard, on to the next one, or 0 at the end.
    pub fn after(&self, shard: usize, shards: usize, next: &[u8]) -> Vec<u8> {
        let position = if next != b"0" {
            Position {
                shard,
                cursor: next.to_vec(),
            }
        } else if shard + 1 < shards {
            Position {
                shard: shard + 1,
                cursor: b"0".to_vec(),
            }
        } else {
            return b"0".to_vec();
        };
        // Positive as a signed 64-bit number, as clients may parse it, and
        // never 0, which ends a scan.
        let token = (self.keys.hash_one(self.next.fetch_add(1, Ordering::Relaxed)) >> 1).max(1);
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).put(token, position);
        token.to_string().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_walks_each_shard_to_its_end_then_the_next() {
        let c = ScanCursors::default();
        assert_eq!(
            c.position(b"0").unwrap(),
            Position {
                shard: 0,
                cursor: b"0".to_vec()
            }
        );
        let mid = c.after(0, 2, b"17");
        assert_eq!(
            c.position(&mid).unwrap(),
            Position {
                shard: 0,
                cursor: b"17".to_vec()
            }
        );
        let next_shard = c.after(0, 2, b"0");
        assert_eq!(
            c.position(&next_shard).unwrap(),
            Position {
                shard: 1,
                cursor: b"0".to_vec()
            }
        );
        assert_eq!(c.after(1, 2, b"0"), b"0".to_vec(), "the last shard done: the scan is");
        assert!(c.position(b"12345").is_err());
        let (a, b) = (c.after(0, 2, b"5"), c.after(0, 2, b"6"));
        let parse = |t: &[u8]| std::str::from_utf8(t).unwrap().parse::<i64>().unwrap();
        assert!(parse(&a) > 0 && parse(&b) > 0);
        assert!(
            parse(&a).abs_diff(parse(&b)) > 1 << 20,
            "tokens follow no sequence: {a:?} {b:?}"
        );
        assert!(c.position(b"x").is_err());
    }
}
