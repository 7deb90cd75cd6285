//! SCAN's cursors: a token stands for the last key a SCAN call examined
//! (why a key and not a position: `commands/keys.rs`). Tokens are kept
//! least recently used first out, bounded by the bytes of their keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use lru::LruCache;

/// Bytes of keys the cursor map may hold: a few hundred thousand cursors
/// of ordinary keys, 256 of the largest (64 KiB).
const CURSOR_BYTES: usize = 16 << 20;

/// What one cursor costs beyond its key (map entry and list links).
const CURSOR_OVERHEAD: usize = 64;

/// SCAN's live cursors: token → the last key examined (see the module
/// doc).
pub(crate) struct Cursors {
    map: Mutex<(LruCache<u64, Vec<u8>>, usize)>,
    next: AtomicU64,
}

impl Cursors {
    pub fn new() -> Cursors {
        // Tokens of an earlier run of the server are below this one's
        // first as long as the clock moves forward, so they are unknown
        // rather than someone else's position.
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 & (u64::MAX >> 1));
        Cursors {
            map: Mutex::new((LruCache::unbounded(), 0)),
            next: AtomicU64::new(start.max(1)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (LruCache<u64, Vec<u8>>, usize)> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new token for `key`.
    pub(crate) fn issue(&self, key: Vec<u8>) -> u64 {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        map.1 += key.len() + CURSOR_OVERHEAD;
        map.0.put(token, key);
        while map.1 > CURSOR_BYTES {
            let Some((_, old)) = map.0.pop_lru() else {
                break;
            };
            map.1 -= old.len() + CURSOR_OVERHEAD;
        }
        token
    }

    /// The key a token stands for.
    pub(crate) fn resolve(&self, token: u64) -> Option<Vec<u8>> {
        self.lock().0.get(&token).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_stand_for_keys_until_forgotten() {
        let cursors = Cursors::new();
        let a = cursors.issue(b"a".to_vec());
        let b = cursors.issue(b"b".to_vec());
        assert!(a != 0 && b > a && a < 1 << 63);
        assert_eq!(cursors.resolve(a), Some(b"a".to_vec()));
        assert_eq!(cursors.resolve(a + 1000), None);
        let big = vec![b'k'; 64 << 10];
        for _ in 0..CURSOR_BYTES / big.len() + 1 {
            cursors.issue(big.clone());
        }
        assert_eq!(cursors.resolve(a), None, "the oldest go first");
        assert!(cursors.lock().1 <= CURSOR_BYTES);
    }
}
