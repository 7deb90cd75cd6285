//! The memtable: the newest writes, sorted in memory until a flush writes
//! them to an SSTable. Its size counts keys, values and a per-entry
//! overhead, against `Options::memtable_bytes`.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::Value;

/// Bookkeeping per entry counted against the budget (tree node share,
/// two vector headers).
const ENTRY_OVERHEAD: usize = 64;

#[derive(Default)]
pub(crate) struct Memtable {
    map: BTreeMap<Vec<u8>, Value>,
    bytes: usize,
    /// The WAL that holds this memtable's writes.
    pub(crate) wal: u64,
}

impl Memtable {
    pub(crate) fn new(wal: u64) -> Self {
        Memtable {
            wal,
            ..Memtable::default()
        }
    }

    pub(crate) fn insert(&mut self, key: Vec<u8>, value: Value) {
        let size = |klen: usize, v: &Value| klen + v.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD;
        let klen = key.len();
        self.bytes += size(klen, &value);
        if let Some(old) = self.map.insert(key, value) {
            self.bytes -= size(klen, &old);
        }
    }

    /// `None`: not here; `Some(None)`: deleted here.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Value> {
        self.map.get(key).cloned()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries with keys from `start` on, in order.
    pub(crate) fn range_from(&self, start: &[u8]) -> impl Iterator<Item = (&Vec<u8>, &Value)> {
        self.map.range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
    }
}
