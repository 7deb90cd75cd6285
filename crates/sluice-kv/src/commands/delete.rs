//! Deleting a value of any type: a set's or sorted set's members and a
//! list's elements go with it, whether the value is deleted or written over; and
//! deleting every value (FLUSHALL).

use std::sync::atomic::Ordering;

use super::store;
use super::value::{read_stored, run};
use crate::keyspace::{is_live, now_ms, ListMeta, SetMeta, StreamMeta, Tag, ZsetMeta};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// Entries FLUSHALL reads from the store at a time.
const FLUSH_CHUNK: usize = 4096;

/// `FLUSHALL [ASYNC|SYNC]` and `FLUSHDB [ASYNC|SYNC]` (the server has one
/// database): deletes every key, with every set's members and list's
/// elements, as one transaction: it holds every key stripe, readers see
/// the store whole or empty, a crash leaves it whole or empty, and every
/// WATCH of a key it deleted aborts. The deletes are kept until the
/// batch is written, so a flush needs memory for every key's name. ASYNC
/// is taken as SYNC: either way the space comes back at compaction, and
/// the reply comes once no key is left to read.
pub(crate) fn flush(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        match args {
            [] => {}
            [mode] if mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync") => {}
            _ => return Err(Reply::error("syntax error")),
        }
        store::as_one(shared, || delete_everything(shared))??;
        Ok(Reply::ok())
    })
}

/// Deletes every entry of the store, user keys and internal entries
/// alike, inside the running transaction.
fn delete_everything(shared: &Shared) -> Result<(), Reply> {
    let mut start = Vec::new();
    loop {
        let entries = store::scan(shared, &start, None, FLUSH_CHUNK)?;
        let Some((last, _)) = entries.last() else {
            return Ok(());
        };
        // The smallest key after `last`: the next chunk starts there.
        start = last.clone();
        start.push(0);
        // Inside a transaction this locks nothing: it names the stripes
        // written, for WATCH.
        let _lock = store::lock(shared, entries.iter().map(|(k, _)| k.as_slice()));
        let mut batch = WriteBatch::new();
        for (key, _) in entries {
            batch.delete(key);
        }
        store::write(shared, batch)?;
    }
}

/// Deletes the value `tag`, `body` stored at `key` (a sorted set's
/// members with it) into `batch`.
pub(crate) fn delete_value(
    shared: &Shared,
    key: &[u8],
    tag: Tag,
    body: &[u8],
    batch: &mut WriteBatch,
) -> Result<(), Reply> {
    match tag {
        Tag::Zset => delete_members(shared, body, batch)?,
        Tag::List => delete_elements(body, batch)?,
        Tag::Set => delete_set_members(shared, body, batch)?,
        Tag::Stream => delete_stream_entries(shared, body, batch)?,
        Tag::String | Tag::Hash => {}
    }
    batch.delete(key.to_vec());
    Ok(())
}

/// Deletes into `batch` the members or elements of the set, sorted set or
/// list at `key`, expired or not, which a write is about to put another value
/// in place of: no header would name them again. Reads the key only while
/// the store may hold a set or a list (`Shared::collections`), so that
/// a store of strings keeps a plain SET one write. The caller holds the
/// key's stripe.
pub(crate) fn clear_entries(shared: &Shared, key: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    if !shared.collections.load(Ordering::Relaxed) {
        return Ok(());
    }
    match read_stored(shared, key)? {
        Some((Tag::Zset, body, _)) => delete_members(shared, &body, batch),
        Some((Tag::List, body, _)) => delete_elements(&body, batch),
        Some((Tag::Set, body, _)) => delete_set_members(shared, &body, batch),
        Some((Tag::Stream, body, _)) => delete_stream_entries(shared, &body, batch),
        _ => Ok(()),
    }
}

/// Readies `key` for a set, sorted set or list made new by the caller: the
/// store may hold collections from now on, and the entries of one that
/// expired at `key` unseen go into `batch` with the new header.
pub(crate) fn make_collection(shared: &Shared, key: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    shared.collections.store(true, Ordering::Relaxed);
    clear_entries(shared, key, batch)
}

/// `DEL key [key ...]`: the number of live keys deleted, a key named
/// twice counted once. An expired value is deleted too, its space back,
/// but not counted, as in Redis.
pub(crate) fn del(shared: &Shared, keys: &[Vec<u8>]) -> Reply {
    run(|| {
        let _locks = store::lock(shared, keys.iter().map(Vec::as_slice));
        let mut batch = WriteBatch::new();
        let (mut existing, now) = (0, now_ms());
        let mut keys: Vec<&Vec<u8>> = keys.iter().collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let Some((tag, body, deadline)) = read_stored(shared, k)? else {
                continue;
            };
            existing += i64::from(is_live(deadline, now));
            delete_value(shared, k, tag, &body, &mut batch)?;
        }
        store::write(shared, batch)?;
        Ok(Reply::Integer(existing))
    })
}

/// Deletes every member entry of the set whose header is `body`, into
/// `batch`.
fn delete_members(shared: &Shared, body: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    let meta = ZsetMeta::decode(body).ok_or_else(|| Reply::error("damaged sorted set header"))?;
    for kind in [b'm', b's'] {
        // Through the store's scan, which inside a transaction also sees
        // the members its earlier commands added.
        let entries = store::scan(shared, &meta.prefix(kind), Some(&meta.end_of(kind)), usize::MAX)?;
        for (k, _) in entries {
            batch.delete(k);
        }
    }
    Ok(())
}

/// Deletes every member entry of the set whose header is `body`, into
/// `batch`.
fn delete_set_members(shared: &Shared, body: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    let meta = SetMeta::decode(body).ok_or_else(|| Reply::error("damaged set header"))?;
    delete_between(shared, &meta.prefix(), &meta.end(), batch)
}

/// Deletes every entry of the stream whose header is `body`, into `batch`.
fn delete_stream_entries(shared: &Shared, body: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    let meta = StreamMeta::decode(body).ok_or_else(|| Reply::error("damaged stream header"))?;
    delete_between(shared, &meta.prefix(), &meta.end(), batch)
}

/// Deletes every entry `from <= key < to` into `batch`.
fn delete_between(shared: &Shared, from: &[u8], to: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    for (k, _) in store::scan(shared, from, Some(to), usize::MAX)? {
        batch.delete(k);
    }
    Ok(())
}

/// Deletes every element of the list whose header is `body`, into
/// `batch`.
fn delete_elements(body: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    let meta = ListMeta::decode(body).ok_or_else(|| Reply::error("damaged list header"))?;
    for position in meta.head..meta.tail {
        batch.delete(meta.element_key(position));
    }
    Ok(())
}
