//! The keyspace commands KEYS, SCAN and DBSIZE, with Redis's glob
//! patterns (`crate::glob`).
//!
//! Both walk the user keys in the store's order, which ends before the
//! reserved prefix (`keyspace::RESERVED`), so a sorted set's member
//! entries never show; a hash's fields live inside its value. Keys whose
//! values this server did not write (no type tag) are not Redis keys and
//! are skipped, as `RANGE` skips them, and so are expired keys.
//!
//! # SCAN's cursor
//!
//! Redis's cursor is an unsigned 64-bit number that clients parse as one,
//! so a key cannot travel in it. Here a cursor is a token standing for the
//! last key a SCAN call examined; the next call with it goes on with the
//! keys after that one. A key is a position in the store's order that
//! writes, deletes, flushes and compactions leave where it was, so the
//! cursor stays valid across all of them, and a key that exists from the
//! first call to the last is returned exactly once (Redis promises at
//! least once). The tokens are kept in a map bounded by the bytes of the
//! keys it holds, least recently used first out; a token the server no
//! longer knows (forgotten, or issued before a restart: tokens start from
//! the clock) is refused with Redis's "ERR invalid cursor" rather than
//! silently restarting the iteration.

use super::integer::{not_integer, parse_i64};
use super::store;
use super::value::run;
use crate::glob::glob_match;
use crate::keyspace::{decode_value, is_live, now_ms, Tag, RESERVED};
use crate::resp::Reply;
use crate::shared::Shared;

/// Keys examined per SCAN call when COUNT is not given, as in Redis.
const DEFAULT_SCAN_COUNT: usize = 10;

/// Keys KEYS reads from the store at a time.
const KEYS_CHUNK: usize = 1024;

/// User keys with their types, and the last key examined if the store
/// may have more after it.
struct Page {
    keys: Vec<(Vec<u8>, Tag)>,
    last: Option<Vec<u8>>,
}

/// Up to `count` user keys from `from` on.
fn user_keys(shared: &Shared, from: &[u8], count: usize) -> Result<Page, Reply> {
    let entries = store::scan(shared, from, Some(&[RESERVED]), count)?;
    let last = (entries.len() == count)
        .then(|| entries.last().map(|(k, _)| k.clone()))
        .flatten();
    let now = now_ms();
    let keys = entries
        .into_iter()
        .filter_map(|(k, v)| match decode_value(&v) {
            Some((tag, _, deadline)) if is_live(deadline, now) => Some((k, tag)),
            _ => None,
        })
        .collect();
    Ok(Page { keys, last })
}

/// The key right after `key` in the store's order.
fn after(mut key: Vec<u8>) -> Vec<u8> {
    key.push(0);
    key
}

/// Calls `f` with every user key, in key order, a page at a time.
fn every_key(shared: &Shared, mut f: impl FnMut(Vec<u8>)) -> Result<(), Reply> {
    let mut from = Vec::new();
    loop {
        let Page { keys, last } = user_keys(shared, &from, KEYS_CHUNK)?;
        keys.into_iter().for_each(|(k, _)| f(k));
        match last {
            Some(last) => from = after(last),
            None => return Ok(()),
        }
    }
}

/// `KEYS pattern`: every key that matches, in key order.
pub(super) fn keys(shared: &Shared, pattern: &[u8]) -> Reply {
    run(|| {
        let mut out = Vec::new();
        every_key(shared, |k| {
            if glob_match(pattern, &k) {
                out.push(Reply::Bulk(Some(k)));
            }
        })?;
        Ok(Reply::Array(out))
    })
}

/// `DBSIZE`: the number of keys. The store keeps no count (a SET does not
/// read whether its key existed), so this walks every key as KEYS does:
/// O(N), where Redis's DBSIZE is O(1).
pub(super) fn dbsize(shared: &Shared) -> Reply {
    run(|| {
        let mut n = 0;
        every_key(shared, |_| n += 1)?;
        Ok(Reply::Integer(n))
    })
}

/// A SCAN-like command's options after its cursor.
pub(super) struct ScanOptions<'a> {
    /// `None` for every key (`*` included: Redis skips the matching too).
    pub pattern: Option<&'a [u8]>,
    pub count: usize,
    /// SCAN's TYPE, lower case.
    pub type_filter: Option<Vec<u8>>,
}

/// The cursor and options of `SCAN cursor [MATCH pattern] [COUNT count]
/// [TYPE type]` (SSCAN's, without TYPE, if not `with_type`), refused as
/// Redis refuses them.
pub(super) fn scan_options(args: &[Vec<u8>], with_type: bool) -> Result<(u64, ScanOptions<'_>), Reply> {
    // Read as Redis reads it (C's strtoul): an empty cursor is 0.
    let cursor: u64 = match args[0].as_slice() {
        b"" => 0,
        text => std::str::from_utf8(text)
            .ok()
            .filter(|t| !t.starts_with(|c: char| c.is_ascii_whitespace()))
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| Reply::error("invalid cursor"))?,
    };
    let mut options = ScanOptions {
        pattern: None,
        count: DEFAULT_SCAN_COUNT,
        type_filter: None,
    };
    let mut rest = &args[1..];
    while let [option, value, tail @ ..] = rest {
        match option.to_ascii_lowercase().as_slice() {
            b"count" => {
                let n = parse_i64(value).ok_or_else(not_integer)?;
                options.count = usize::try_from(n)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| Reply::error("syntax error"))?;
            }
            b"match" => options.pattern = Some(value.as_slice()).filter(|p| *p != b"*"),
            b"type" if with_type => options.type_filter = Some(value.to_ascii_lowercase()),
            _ => return Err(Reply::error("syntax error")),
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(Reply::error("syntax error"));
    }
    Ok((cursor, options))
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`: examines up to
/// COUNT keys after the cursor's and replies with the next cursor ("0"
/// when the keys ran out) and those of them that match the pattern and
/// type. As in Redis, an unknown type matches nothing, and a page may be
/// empty while the cursor goes on.
pub(super) fn scan(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (
            token,
            ScanOptions {
                pattern,
                count,
                type_filter,
            },
        ) = scan_options(args, true)?;
        let from = match token {
            0 => Vec::new(),
            t => after(
                shared
                    .cursors
                    .resolve(t)
                    .ok_or_else(|| Reply::error("invalid cursor"))?,
            ),
        };
        let Page { keys, last } = user_keys(shared, &from, count)?;
        let next = last.map_or(0, |last| shared.cursors.issue(last));
        let page = keys
            .into_iter()
            .filter(|(k, tag)| {
                pattern.is_none_or(|p| glob_match(p, k))
                    && type_filter.as_deref().is_none_or(|t| t == Tag::name(*tag).as_bytes())
            })
            .map(|(k, _)| Reply::Bulk(Some(k)))
            .collect();
        Ok(scan_reply(next, page))
    })
}

/// A SCAN-like command's reply: the next cursor ("0": done) and a page.
pub(super) fn scan_reply(next: u64, page: Vec<Reply>) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(Some(next.to_string().into_bytes())),
        Reply::Array(page),
    ])
}
