//! The block cache: verified, decoded data blocks shared by every table of
//! a store, least recently used first out, bounded in bytes.
//!
//! LevelDB's cache is sharded with a lock per shard; this is one LRU behind
//! one mutex, held only to look up or insert (never across I/O), which is
//! enough for the thread counts Sluice runs. Blocks are cached after their
//! crc and entries are checked, so a hit needs no verification.

use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use super::block::Block;

/// A table's number and a block's offset in it.
type Key = (u64, u64);

pub struct BlockCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    blocks: LruCache<Key, Arc<Block>>,
    /// The sum of the cached blocks' charges.
    used: usize,
}

impl BlockCache {
    /// A cache holding at most `bytes` of blocks; 0 caches nothing.
    pub fn new(bytes: usize) -> Self {
        BlockCache {
            capacity: bytes,
            inner: Mutex::new(Inner {
                blocks: LruCache::unbounded(),
                used: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The cache's state is consistent between statements, so a panic
        // elsewhere while it was held leaves nothing to repair.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, table: u64, offset: u64) -> Option<Arc<Block>> {
        self.lock().blocks.get(&(table, offset)).cloned()
    }

    pub(crate) fn insert(&self, table: u64, offset: u64, block: Arc<Block>) {
        let charge = block.charge();
        // A block over the whole budget would only evict everything else.
        if charge > self.capacity {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.blocks.put((table, offset), block) {
            inner.used -= old.charge();
        }
        inner.used += charge;
        while inner.used > self.capacity {
            let Some((_, evicted)) = inner.blocks.pop_lru() else {
                break;
            };
            inner.used -= evicted.charge();
        }
    }
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity)
            .field("used", &inner.used)
            .field("blocks", &inner.blocks.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::sstable::block::BlockBuilder;

    fn block(value_len: usize) -> Arc<Block> {
        let mut b = BlockBuilder::default();
        b.add(b"k", Some(&vec![7; value_len]));
        let mut raw = b.finish();
        raw.truncate(raw.len() - 4);
        Arc::new(Block::decode(raw, Path::new("t"), 0).unwrap())
    }

    fn cached(cache: &BlockCache) -> Vec<Key> {
        let mut keys: Vec<Key> = cache.lock().blocks.iter().map(|(k, _)| *k).collect();
        keys.sort();
        keys
    }

    #[test]
    fn evicts_least_recently_used_to_stay_within_budget() {
        let charge = block(100).charge();
        let cache = BlockCache::new(3 * charge);
        for offset in 0..3 {
            cache.insert(1, offset, block(100));
        }
        assert!(cache.get(1, 0).is_some());
        cache.insert(2, 0, block(100));
        assert_eq!(cached(&cache), vec![(1, 0), (1, 2), (2, 0)]);
        assert_eq!(cache.lock().used, 3 * charge);
    }

    #[test]
    fn replacing_a_block_does_not_count_it_twice() {
        let cache = BlockCache::new(1 << 20);
        cache.insert(1, 0, block(100));
        cache.insert(1, 0, block(100));
        assert_eq!(cache.lock().used, block(100).charge());
    }

    #[test]
    fn a_block_over_budget_is_not_cached_and_evicts_nothing() {
        let cache = BlockCache::new(block(100).charge());
        cache.insert(1, 0, block(100));
        cache.insert(1, 1, block(1000));
        assert_eq!(cached(&cache), vec![(1, 0)]);
        let none = BlockCache::new(0);
        none.insert(1, 0, block(0));
        assert!(none.get(1, 0).is_none());
    }
}
