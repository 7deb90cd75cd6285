//! The store as commands see it: the server's store, or, while `EXEC` runs
//! a transaction on this thread, the store with the transaction's writes
//! laid over it, written as one batch when the transaction ends. While the
//! server answers a batch of a connection's requests ([`deferring`]),
//! writes are applied at once and made durable together at its end, before
//! any of its replies is sent.
//!
//! A transaction's commands run one after another on the thread that runs
//! `EXEC`, as every command runs on one thread inside its request context,
//! so the overlay belongs to the thread, and commands keep taking only
//! what the connections share.
//!
//! `EXEC` holds every key stripe while it runs (see
//! [`crate::keyspace::KeyLocks`]), so a command inside it locks nothing;
//! the stripes it would have locked are remembered, so that `WATCH`ers of
//! its keys see them written.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::thread::LocalKey;

use crate::keyspace::{AllHeld, Held, RESERVED};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::{Unsynced, WriteBatch};

/// Key-value pairs in key order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

thread_local! {
    static PENDING: RefCell<Option<Pending>> = const { RefCell::new(None) };
    /// Writes applied while [`deferring`] runs, not yet durable.
    static UNSYNCED: RefCell<Option<Vec<Unsynced>>> = const { RefCell::new(None) };
    /// The command holding a [`Lock`] on this thread has written.
    static WROTE: Cell<bool> = const { Cell::new(false) };
    /// User keys written while a client was blocked ([`take_written`]).
    static WRITTEN: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// What a running transaction has written so far.
#[derive(Default)]
struct Pending {
    /// The latest write of each key: a value, or `None` for a delete.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Stripes of the keys its commands wrote.
    stripes: Vec<usize>,
    /// Stripes the running command would have locked.
    locked: Vec<usize>,
}

/// The value at `key`.
pub(crate) fn get(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    let pending = PENDING.with_borrow(|p| p.as_ref().and_then(|p| p.writes.get(key).cloned()));
    match pending {
        Some(written) => Ok(written),
        None => shared.db.get(key).map_err(Reply::error),
    }
}

/// The values at `keys`, all as of one moment (see [`crate::Db::get_many`]).
pub(crate) fn get_many(shared: &Shared, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, Reply> {
    let stored = shared.db.get_many(keys).map_err(Reply::error)?;
    Ok(PENDING.with_borrow(|p| match p {
        None => stored,
        Some(p) => keys
            .iter()
            .zip(stored)
            .map(|(k, s)| p.writes.get(*k).cloned().unwrap_or(s))
            .collect(),
    }))
}

/// Writes `batch` at once, or into the running transaction. An empty
/// batch writes nothing, so it moves no WATCH count (DEL of missing keys).
pub(crate) fn write(shared: &Shared, batch: WriteBatch) -> Result<(), Reply> {
    if batch.is_empty() {
        return Ok(());
    }
    let batch = PENDING.with_borrow_mut(|p| match p {
        Some(p) => {
            // Refused now, by the command that wrote it, not at the end.
            shared.db.validate(&batch).map_err(Reply::error)?;
            p.writes.extend(batch.ops);
            p.stripes.extend_from_slice(&p.locked);
            Ok(None)
        }
        None => Ok(Some(batch)),
    })?;
    match batch {
        Some(batch) => commit(shared, batch),
        None => Ok(()),
    }
}

/// Writes `batch` to the store: durable now, or by the end of
/// [`deferring`].
fn commit(shared: &Shared, batch: WriteBatch) -> Result<(), Reply> {
    WROTE.set(true);
    if shared.waiters.wrote() {
        let keys = batch
            .ops
            .iter()
            .map(|(k, _)| k)
            .filter(|k| k.first() != Some(&RESERVED));
        WRITTEN.with_borrow_mut(|w| w.extend(keys.cloned()));
    }
    let deferred = UNSYNCED.with_borrow(Option::is_some);
    if !deferred {
        return shared.db.write(batch).map_err(Reply::error);
    }
    if let Some(unsynced) = shared.db.apply(batch).map_err(Reply::error)? {
        UNSYNCED.with_borrow_mut(|u| unsynced.merge_into(u.get_or_insert_with(Vec::new)));
    }
    Ok(())
}

/// The user keys this thread wrote while a client was blocked: the
/// poller wakes the clients waiting for them once the writer's step is
/// done (`crate::blocked`).
pub(crate) fn take_written() -> Vec<Vec<u8>> {
    WRITTEN.take()
}

/// Runs `f` with the writes of its commands applied but not yet made
/// durable; returns what `f` returned and what the caller must sync
/// ([`crate::Db::sync_to`]) before it answers any of them.
pub(crate) fn deferring<R>(f: impl FnOnce() -> R) -> (R, Vec<Unsynced>) {
    scoped(&UNSYNCED, f)
}

pub(crate) fn put(shared: &Shared, key: &[u8], value: &[u8]) -> Result<(), Reply> {
    let mut batch = WriteBatch::new();
    batch.put(key, value);
    write(shared, batch)
}

pub(crate) fn delete(shared: &Shared, key: &[u8]) -> Result<(), Reply> {
    let mut batch = WriteBatch::new();
    batch.delete(key);
    write(shared, batch)
}

/// Up to `limit` live entries with `start <= key < end` (no `end`: to the
/// last key), in key order.
pub(crate) fn scan(shared: &Shared, start: &[u8], end: Option<&[u8]>, limit: usize) -> Result<Entries, Reply> {
    let in_range = |k: &[u8]| end.is_none_or(|e| k < e);
    let written: Vec<(Vec<u8>, Option<Vec<u8>>)> = PENDING.with_borrow(|p| {
        p.as_ref().map_or_else(Vec::new, |p| {
            p.writes
                .range(start.to_vec()..)
                .take_while(|(k, _)| in_range(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
    });
    // Each written key removes at most one stored entry from the first
    // `limit`, so `limit` more stored entries than writes are enough: any
    // entry past them sorts after the first `limit` of the merge.
    let stored = shared
        .db
        .scan(start, end, limit.saturating_add(written.len()))
        .map_err(Reply::error)?;
    if written.is_empty() {
        return Ok(stored.into_iter().take(limit).collect());
    }
    let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = stored.into_iter().collect();
    for (k, v) in written {
        match v {
            Some(v) => merged.insert(k, v),
            None => merged.remove(&k),
        };
    }
    Ok(merged.into_iter().take(limit).collect())
}

/// A command's hold on the stripes of the keys it may write. If it wrote
/// (its batch reached the store, even if the store then refused it), their
/// counts move when it lets go, so that `WATCH`ers of its keys see it.
pub(crate) struct Lock<'s>(Option<Held<'s>>);

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        if let Some(held) = &mut self.0 {
            if WROTE.take() {
                held.wrote();
            }
        }
    }
}

/// Locks the stripes of `keys` for a write; inside a transaction, which
/// holds them all, notes them for its writes instead.
pub(crate) fn lock<'s, 'k>(shared: &'s Shared, keys: impl IntoIterator<Item = &'k [u8]>) -> Lock<'s> {
    let stripes = shared.locks.stripes_of(keys);
    PENDING.with_borrow_mut(|p| match p {
        Some(p) => {
            p.locked = stripes;
            Lock(None)
        }
        None => {
            let held = shared.locks.lock(stripes);
            WROTE.set(false);
            Lock(Some(held))
        }
    })
}

/// Whether a transaction (EXEC) runs on this thread: it holds every
/// stripe and gathers the writes.
pub(crate) fn in_transaction() -> bool {
    PENDING.with_borrow(Option::is_some)
}

/// Runs `f` as one transaction: its writes are read back by its own reads
/// and reach the store in one batch at the end, and the counts of the
/// stripes they wrote move, for `WATCH`. The caller holds every stripe
/// (`all`). Returns what `f` returned, or the store's refusal of the batch
/// (then nothing of it was written).
pub(crate) fn atomically<R>(shared: &Shared, all: &mut AllHeld<'_>, f: impl FnOnce() -> R) -> Result<R, Reply> {
    let (out, pending) = scoped(&PENDING, f);
    let mut batch = WriteBatch::new();
    for (k, v) in pending.writes {
        match v {
            Some(v) => batch.put(k, v),
            None => batch.delete(k),
        };
    }
    commit(shared, batch)?;
    all.wrote(&pending.stripes);
    Ok(out)
}

/// Runs `f` as one transaction holding every stripe ([`atomically`]), or,
/// inside a running transaction (EXEC, a script), as part of that one,
/// which already holds them and gathers the writes.
pub(crate) fn as_one<R>(shared: &Shared, f: impl FnOnce() -> R) -> Result<R, Reply> {
    if in_transaction() {
        return Ok(f());
    }
    atomically(shared, &mut shared.locks.lock_all(), f)
}

/// Runs `f` with `state` set afresh on this thread; returns what `f`
/// returned and what the state held at its end. The state is cleared even
/// if `f` unwinds, so the thread's next command does not run inside it.
fn scoped<T: Default + 'static, R>(state: &'static LocalKey<RefCell<Option<T>>>, f: impl FnOnce() -> R) -> (R, T) {
    struct Clear<T: 'static>(&'static LocalKey<RefCell<Option<T>>>);
    impl<T> Drop for Clear<T> {
        fn drop(&mut self) {
            self.0.with_borrow_mut(|s| *s = None);
        }
    }
    state.with_borrow_mut(|s| *s = Some(T::default()));
    let clear = Clear(state);
    let out = f();
    let held = state.with_borrow_mut(Option::take).unwrap_or_default();
    drop(clear);
    (out, held)
}
