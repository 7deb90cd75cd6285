//! Merging sorted sources (memtables, tables, levels) into one sorted
//! stream in which each key appears once, with its newest value.
//!
//! Sources come newest first; each yields its keys in strictly increasing
//! order. A min-heap holds each source's next entry, ordered by key and
//! then by source, so the first entry popped for a key is the newest and
//! the others for that key are skipped. Tombstones are yielded like values:
//! a scan drops them, a compaction keeps them unless it writes the bottom
//! level, and the merge cannot know which it serves.
//!
//! LevelDB's merging iterator compares every child on each step, fine for
//! its few children; a heap costs `log n` per entry however many L0 tables
//! a write burst leaves. Unlike LevelDB's, this iterator only goes forward
//! and pulls from a source only when its previous entry has been consumed.

use std::cmp::Ordering;
use std::collections::binary_heap::{BinaryHeap, PeekMut};

use crate::{Result, Value};

/// A sorted source of entries.
pub type Source = Box<dyn Iterator<Item = Result<(Vec<u8>, Value)>> + Send>;

/// The sources merged, newest first; yields an error from any source once
/// and then ends.
pub struct MergeIter {
    sources: Vec<Source>,
    heap: BinaryHeap<Head>,
    /// Sources whose entry was consumed and must be pulled again before
    /// the heap's top can be trusted.
    stale: Vec<usize>,
    failed: bool,
}

/// A source's next entry.
struct Head {
    key: Vec<u8>,
    source: usize,
    value: Value,
}

impl Ord for Head {
    /// Reversed, so that the max-heap pops the smallest key, and for equal
    /// keys the newest source.
    fn cmp(&self, other: &Self) -> Ordering {
        (&other.key, other.source).cmp(&(&self.key, self.source))
    }
}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head {}

impl MergeIter {
    pub fn new(sources: Vec<Source>) -> Self {
        MergeIter {
            stale: (0..sources.len()).collect(),
            heap: BinaryHeap::with_capacity(sources.len()),
            sources,
            failed: false,
        }
    }

    /// Pulls the next entry of every stale source onto the heap.
    fn refill(&mut self) -> Result<()> {
        while let Some(source) = self.stale.pop() {
            if let Some(entry) = self.sources[source].next() {
                let (key, value) = entry?;
                self.heap.push(Head { key, source, value });
            }
        }
        Ok(())
    }
}

impl Iterator for MergeIter {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Err(e) = self.refill() {
            self.failed = true;
            return Some(Err(e));
        }
        let newest = self.heap.pop()?;
        self.stale.push(newest.source);
        while let Some(older) = self.heap.peek_mut() {
            if older.key != newest.key {
                break;
            }
            self.stale.push(PeekMut::pop(older).source);
        }
        Some(Ok((newest.key, newest.value)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::KvError;

    type Entries = Vec<(Vec<u8>, Value)>;

    fn source(entries: &[(&str, Option<&str>)]) -> Source {
        let entries: Vec<_> = entries
            .iter()
            .map(|(k, v)| Ok((k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))))
            .collect();
        Box::new(entries.into_iter())
    }

    fn merged(sources: Vec<Source>) -> Entries {
        MergeIter::new(sources).collect::<Result<_>>().unwrap()
    }

    fn expected(entries: &[(&str, Option<&str>)]) -> Entries {
        entries
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn newest_source_wins_and_tombstones_are_yielded() {
        let newest = source(&[("b", Some("b2")), ("d", None), ("f", Some("f2"))]);
        let middle = source(&[("a", Some("a1")), ("b", None), ("f", None)]);
        let oldest = source(&[("b", Some("b0")), ("c", Some("c0")), ("d", Some("d0")), ("g", None)]);
        assert_eq!(
            merged(vec![newest, middle, oldest]),
            expected(&[
                ("a", Some("a1")),
                ("b", Some("b2")),
                ("c", Some("c0")),
                ("d", None),
                ("f", Some("f2")),
                ("g", None),
            ])
        );
    }

    #[test]
    fn no_sources_or_empty_sources_yield_nothing() {
        assert!(merged(vec![]).is_empty());
        assert!(merged(vec![source(&[]), source(&[])]).is_empty());
        assert_eq!(
            merged(vec![source(&[]), source(&[("a", Some(""))])]),
            expected(&[("a", Some(""))])
        );
    }

    #[test]
    fn an_error_is_yielded_once_and_ends_the_merge() {
        let failing: Source = Box::new(
            vec![
                Ok((b"b".to_vec(), Some(b"1".to_vec()))),
                Err(KvError::corruption("t", 7, "bad block")),
                Ok((b"d".to_vec(), None)),
            ]
            .into_iter(),
        );
        let mut merge = MergeIter::new(vec![source(&[("a", None), ("c", None), ("e", None)]), failing]);
        assert_eq!(merge.next().unwrap().unwrap().0, b"a");
        assert_eq!(merge.next().unwrap().unwrap().0, b"b");
        assert!(matches!(merge.next(), Some(Err(KvError::Corruption { offset: 7, .. }))));
        assert!(merge.next().is_none());
        assert!(merge.next().is_none());
    }

    #[test]
    fn sources_are_pulled_only_as_far_as_needed() {
        let poisoned: Source = Box::new(
            vec![
                Ok((b"a".to_vec(), None)),
                Err(KvError::corruption("t", 0, "never reached")),
            ]
            .into_iter(),
        );
        let mut merge = MergeIter::new(vec![poisoned]);
        assert!(matches!(merge.next(), Some(Ok(_))));
    }

    fn maps() -> impl Strategy<Value = Vec<BTreeMap<Vec<u8>, Value>>> {
        let key = prop::collection::vec(0u8..4, 0..3);
        let value = prop::option::of(prop::collection::vec(any::<u8>(), 0..3));
        prop::collection::vec(prop::collection::btree_map(key, value, 0..20), 0..6)
    }

    proptest! {
        /// The merge equals applying the sources oldest to newest to a map.
        #[test]
        fn merge_matches_a_map_model(sources in maps()) {
            let mut model = BTreeMap::new();
            for map in sources.iter().rev() {
                model.extend(map.clone());
            }
            let boxed = sources
                .into_iter()
                .map(|m| Box::new(m.into_iter().map(Ok)) as Source)
                .collect();
            prop_assert_eq!(merged(boxed), model.into_iter().collect::<Entries>());
        }
    }
}
