//! List commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP and RPOP (with a
//! count), LMPOP, LLEN, LINDEX, LPOS, LRANGE, LSET, LTRIM, LMOVE,
//! RPOPLPUSH, LREM and LINSERT (and, waiting for an element,
//! `commands/blocking.rs`). A list
//! is a header under the user's key and one store entry per element (see
//! `keyspace`), so each of these touches only the elements it returns or
//! writes; a write holds the list's stripe lock and commits its elements
//! and the header in one batch. A list left empty is deleted, as Redis
//! deletes it.

use super::delete::make_collection;
use super::integer::{not_integer, parse_i64};
use super::store;
use super::value::{read_header, run};
use crate::keyspace::{check_user_key, with_deadline, Deadline, ListMeta, Tag};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// Which end of a list.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Left,
    Right,
}

impl End {
    pub(super) fn parse(arg: &[u8]) -> Result<End, Reply> {
        match arg.to_ascii_lowercase().as_slice() {
            b"left" => Ok(End::Left),
            b"right" => Ok(End::Right),
            _ => Err(Reply::error("syntax error")),
        }
    }
}

/// The header of the list at `key` and its deadline, `None` if absent, or
/// the refusal.
fn meta(shared: &Shared, key: &[u8]) -> Result<Option<(ListMeta, Deadline)>, Reply> {
    read_header(shared, key, Tag::List, "list header", ListMeta::decode)
}

/// Writes `meta` under `key` into `batch`, or deletes the key if the list
/// is empty.
fn put_meta(batch: &mut WriteBatch, key: &[u8], meta: &ListMeta, deadline: Deadline) {
    if meta.len() == 0 {
        batch.delete(key.to_vec());
    } else {
        batch.put(key.to_vec(), with_deadline(meta.encode(), deadline));
    }
}

fn element(shared: &Shared, meta: &ListMeta, position: u64) -> Result<Vec<u8>, Reply> {
    store::get(shared, &meta.element_key(position))?.ok_or_else(|| Reply::error("damaged list: an element is missing"))
}

/// Adds `elements` at `end`, one after another (so LPUSH's come out in
/// reverse).
fn push_into(batch: &mut WriteBatch, meta: &mut ListMeta, end: End, elements: &[Vec<u8>]) {
    for e in elements {
        let position = match end {
            End::Left => {
                meta.head -= 1;
                meta.head
            }
            End::Right => {
                meta.tail += 1;
                meta.tail - 1
            }
        };
        batch.put(meta.element_key(position), e.clone());
    }
}

/// LPUSH, RPUSH, and with `only_existing` LPUSHX, RPUSHX: the list's new
/// length (0 for an X form on a missing key).
pub(super) fn push(shared: &Shared, args: &[Vec<u8>], end: End, only_existing: bool) -> Reply {
    run(|| {
        let key = &args[0];
        check_user_key(key).map_err(Reply::error)?;
        let _lock = store::lock(shared, [key.as_slice()]);
        let mut batch = WriteBatch::new();
        let (mut meta, deadline) = match meta(shared, key)? {
            Some(found) => found,
            None if only_existing => return Ok(Reply::Integer(0)),
            None => {
                make_collection(shared, key, &mut batch)?;
                (ListMeta::fresh(), None)
            }
        };
        push_into(&mut batch, &mut meta, end, &args[1..]);
        put_meta(&mut batch, key, &meta, deadline);
        store::write(shared, batch)?;
        Ok(Reply::Integer(meta.len() as i64))
    })
}

/// Takes up to `count` elements from `end` into `batch`.
fn pop_from(
    shared: &Shared,
    batch: &mut WriteBatch,
    meta: &mut ListMeta,
    end: End,
    count: u64,
) -> Result<Vec<Vec<u8>>, Reply> {
    let mut taken = Vec::new();
    for _ in 0..count.min(meta.len()) {
        let position = match end {
            End::Left => {
                meta.head += 1;
                meta.head - 1
            }
            End::Right => {
                meta.tail -= 1;
                meta.tail
            }
        };
        taken.push(element(shared, meta, position)?);
        batch.delete(meta.element_key(position));
    }
    Ok(taken)
}

/// LPOP, RPOP `key [count]`: one element (or nil), or with a count an
/// array of up to that many (nil for a missing key).
pub(super) fn pop(shared: &Shared, args: &[Vec<u8>], end: End) -> Reply {
    run(|| {
        let count = match args.get(1) {
            None => None,
            Some(c) => match parse_i64(c) {
                Some(n) if n >= 0 => Some(n as u64),
                _ => return Err(Reply::error("value is out of range, must be positive")),
            },
        };
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta(shared, key)? else {
            return Ok(match count {
                None => Reply::Bulk(None),
                Some(_) => Reply::NullArray,
            });
        };
        let mut batch = WriteBatch::new();
        let taken = pop_from(shared, &mut batch, &mut meta, end, count.unwrap_or(1))?;
        if !taken.is_empty() {
            put_meta(&mut batch, key, &meta, deadline);
            store::write(shared, batch)?;
        }
        Ok(match count {
            None => Reply::Bulk(taken.into_iter().next()),
            Some(_) => Reply::Array(taken.into_iter().map(|e| Reply::Bulk(Some(e))).collect()),
        })
    })
}

/// LMPOP's arguments after its count of keys: the keys, the end, and how
/// many to pop (1 unless `COUNT count`).
pub(super) fn mpop_args(args: &[Vec<u8>]) -> Result<(&[Vec<u8>], End, u64), Reply> {
    let (keys, rest) = super::set::counted_keys(args)?;
    let Some((end, rest)) = rest.split_first() else {
        return Err(Reply::error("syntax error"));
    };
    let end = End::parse(end)?;
    let count = match rest {
        [] => 1,
        [word, n] if word.eq_ignore_ascii_case(b"count") => parse_i64(n)
            .and_then(|n| u64::try_from(n).ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| Reply::error("count should be greater than 0"))?,
        _ => return Err(Reply::error("syntax error")),
    };
    Ok((keys, end, count))
}

/// LMPOP's pop: `[key, [element ...]]` from the first of `keys` that is
/// not empty, `None` if all are.
pub(super) fn mpop(shared: &Shared, keys: &[Vec<u8>], end: End, count: u64) -> Result<Option<Reply>, Reply> {
    let count = count.to_string().into_bytes();
    for key in keys {
        match pop(shared, &[key.clone(), count.clone()], end) {
            Reply::NullArray => {}
            Reply::Array(popped) => {
                return Ok(Some(Reply::Array(vec![
                    Reply::Bulk(Some(key.clone())),
                    Reply::Array(popped),
                ])))
            }
            refused => return Err(refused),
        }
    }
    Ok(None)
}

/// `LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]`.
pub(super) fn lmpop(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (keys, end, count) = mpop_args(args)?;
        Ok(mpop(shared, keys, end, count)?.unwrap_or(Reply::NullArray))
    })
}

/// LMOVE `source destination LEFT|RIGHT LEFT|RIGHT`, and RPOPLPUSH (RIGHT
/// LEFT): the element moved, nil if the source is missing. Both keys are
/// checked before anything moves; a list moved onto itself rotates.
pub(super) fn lmove(shared: &Shared, args: &[Vec<u8>], ends: Option<(End, End)>) -> Reply {
    run(|| {
        let (from, to) = match ends {
            Some(ends) => ends,
            None => (End::parse(&args[2])?, End::parse(&args[3])?),
        };
        let (source, destination) = (&args[0], &args[1]);
        check_user_key(destination).map_err(Reply::error)?;
        let _lock = store::lock(shared, [source.as_slice(), destination.as_slice()]);
        let Some((mut src, src_deadline)) = meta(shared, source)? else {
            return Ok(Reply::Bulk(None));
        };
        let same = source == destination;
        let dst = if same { None } else { meta(shared, destination)? };
        let mut batch = WriteBatch::new();
        let moved = pop_from(shared, &mut batch, &mut src, from, 1)?;
        let (mut dst, dst_deadline) = match dst {
            _ if same => (src, src_deadline),
            Some(found) => found,
            None => {
                make_collection(shared, destination, &mut batch)?;
                (ListMeta::fresh(), None)
            }
        };
        push_into(&mut batch, &mut dst, to, &moved);
        if !same {
            put_meta(&mut batch, source, &src, src_deadline);
        }
        put_meta(&mut batch, destination, &dst, dst_deadline);
        store::write(shared, batch)?;
        Ok(Reply::Bulk(moved.into_iter().next()))
    })
}

/// LLEN, LINDEX, LRANGE. As Redis, LRANGE reads its bounds before the
/// key, LINDEX its index after.
pub(super) fn read_list(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let int = |arg: &[u8]| parse_i64(arg).ok_or_else(not_integer);
        match name {
            "llen" => Ok(Reply::Integer(
                meta(shared, &args[0])?.map_or(0, |(m, _)| m.len() as i64),
            )),
            "lindex" => {
                let Some((meta, _)) = meta(shared, &args[0])? else {
                    return Ok(Reply::Bulk(None));
                };
                Ok(match offset(&meta, int(&args[1])?) {
                    Some(at) => Reply::Bulk(Some(element(shared, &meta, meta.head + at)?)),
                    None => Reply::Bulk(None),
                })
            }
            _ => {
                let bounds = [int(&args[1])?, int(&args[2])?];
                let Some((start, stop, meta)) = meta(shared, &args[0])?
                    .and_then(|(meta, _)| span(&meta, bounds).map(|(start, stop)| (start, stop, meta)))
                else {
                    return Ok(Reply::Array(Vec::new()));
                };
                let from = meta.element_key(meta.head + start);
                let entries = store::scan(shared, &from, None, (stop - start + 1) as usize)?;
                Ok(Reply::Array(
                    entries.into_iter().map(|(_, e)| Reply::Bulk(Some(e))).collect(),
                ))
            }
        }
    })
}

/// An index as Redis reads one (negative: from the end) as an offset from
/// the head, if it is inside the list.
fn offset(meta: &ListMeta, index: i64) -> Option<u64> {
    let len = meta.len() as i64;
    let i = if index < 0 { index + len } else { index };
    (0..len).contains(&i).then_some(i as u64)
}

/// LRANGE's and LTRIM's `start stop`, clamped as Redis clamps them, as
/// offsets from the head; `None` for an empty range.
fn span(meta: &ListMeta, [start, stop]: [i64; 2]) -> Option<(u64, u64)> {
    let len = meta.len() as i64;
    let start = if start < 0 { (start + len).max(0) } else { start };
    let stop = if stop < 0 { stop + len } else { stop.min(len - 1) };
    (start <= stop && start < len).then_some((start as u64, stop as u64))
}

/// LSET `key index element`.
pub(super) fn lset(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        // As Redis: the key is looked up before the index is read.
        let Some((meta, _)) = meta(shared, key)? else {
            return Err(Reply::error("no such key"));
        };
        let index = parse_i64(&args[1]).ok_or_else(not_integer)?;
        let at = offset(&meta, index).ok_or_else(|| Reply::error("index out of range"))?;
        let mut batch = WriteBatch::new();
        batch.put(meta.element_key(meta.head + at), args[2].clone());
        store::write(shared, batch)?;
        Ok(Reply::ok())
    })
}

/// LTRIM `key start stop`: keeps only that range, deleting the elements
/// outside it (and the list, if none is left).
/// Every element of the list, in order: what LREM, LINSERT and LPOS
/// read, one scan.
fn all_elements(shared: &Shared, meta: &ListMeta) -> Result<Vec<Vec<u8>>, Reply> {
    let from = meta.element_key(meta.head);
    Ok(store::scan(shared, &from, None, meta.len() as usize)?
        .into_iter()
        .map(|(_, e)| e)
        .collect())
}

/// `LINSERT key BEFORE|AFTER pivot element`: the list's new length, -1 if
/// the pivot is not in it, 0 if the key is missing. The elements on the
/// shorter side of the point move, as LREM's do.
pub(super) fn linsert(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let before = match args[1].to_ascii_lowercase().as_slice() {
            b"before" => true,
            b"after" => false,
            _ => return Err(Reply::error("syntax error")),
        };
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let elements = all_elements(shared, &meta)?;
        let Some(pivot) = elements.iter().position(|e| *e == args[2]) else {
            return Ok(Reply::Integer(-1));
        };
        let at = if before { pivot } else { pivot + 1 };
        let mut batch = WriteBatch::new();
        if elements.len() - at <= at {
            // The elements from `at` on move one place towards the tail.
            for (j, e) in elements.iter().enumerate().skip(at) {
                batch.put(meta.element_key(meta.head + j as u64 + 1), e.clone());
            }
            batch.put(meta.element_key(meta.head + at as u64), args[3].clone());
            meta.tail += 1;
        } else {
            // The elements before `at` move one place towards the head.
            meta.head -= 1;
            for (j, e) in elements.iter().enumerate().take(at) {
                batch.put(meta.element_key(meta.head + j as u64), e.clone());
            }
            batch.put(meta.element_key(meta.head + at as u64), args[3].clone());
        }
        put_meta(&mut batch, key, &meta, deadline);
        store::write(shared, batch)?;
        Ok(Reply::Integer(meta.len() as i64))
    })
}

/// `LPOS key element [RANK rank] [COUNT count] [MAXLEN len]`: the index
/// of the `rank`th match (from the tail if negative), or with COUNT the
/// indexes of up to that many (0: all), looking at no more than MAXLEN
/// elements (0: all).
pub(super) fn lpos(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (mut rank, mut count, mut maxlen) = (1i64, None, 0usize);
        let mut rest = &args[2..];
        while let [option, value, tail @ ..] = rest {
            let option = option.to_ascii_lowercase();
            if !matches!(option.as_slice(), b"rank" | b"count" | b"maxlen") {
                return Err(Reply::error("syntax error"));
            }
            let n = parse_i64(value).ok_or_else(not_integer)?;
            match option.as_slice() {
                b"rank" if n == 0 => {
                    return Err(Reply::error(
                        "RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                    ))
                }
                b"rank" => rank = n,
                _ if n < 0 => {
                    let name = String::from_utf8_lossy(&option).to_ascii_uppercase();
                    return Err(Reply::error(format!("{name} can't be negative")));
                }
                b"count" => count = Some(n as usize),
                _ => maxlen = n as usize,
            }
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(Reply::error("syntax error"));
        }
        let none = || {
            if count.is_some() {
                Reply::Array(Vec::new())
            } else {
                Reply::Bulk(None)
            }
        };
        let Some((meta, _)) = meta(shared, &args[0])? else {
            return Ok(none());
        };
        let elements = all_elements(shared, &meta)?;
        let n = elements.len();
        let order: Box<dyn Iterator<Item = usize>> = if rank > 0 {
            Box::new(0..n)
        } else {
            Box::new((0..n).rev())
        };
        let looked = if maxlen == 0 { n } else { maxlen.min(n) };
        let wanted = match count {
            Some(0) => usize::MAX,
            Some(c) => c,
            None => 1,
        };
        let found: Vec<Reply> = order
            .take(looked)
            .filter(|&i| elements[i] == args[1])
            .skip(usize::try_from(rank.unsigned_abs() - 1).unwrap_or(usize::MAX))
            .take(wanted)
            .map(|i| Reply::Integer(i as i64))
            .collect();
        Ok(match count {
            Some(_) => Reply::Array(found),
            None => found.into_iter().next().unwrap_or_else(none),
        })
    })
}

/// `LREM key count element`: removes the first `count` elements equal to
/// `element` (from the tail if `count` is negative, all if 0); how many.
/// Elements are keyed by position, so the ones between a removed element
/// and the nearer end move up: the cost is that side's length, which is
/// small where LREM is most used (a reliable queue's in-flight list, the
/// element near one end).
pub(super) fn lrem(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let count = parse_i64(&args[1]).ok_or_else(not_integer)?;
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let elements = all_elements(shared, &meta)?;
        let matches = elements
            .iter()
            .enumerate()
            .filter(|(_, e)| **e == args[2])
            .map(|(i, _)| i);
        let limit = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
        let mut removed: Vec<usize> = match count {
            0 => matches.collect(),
            c if c > 0 => matches.take(limit).collect(),
            _ => matches.rev().take(limit).collect(),
        };
        removed.sort_unstable();
        let (Some(&first), Some(&last)) = (removed.first(), removed.last()) else {
            return Ok(Reply::Integer(0));
        };
        let kept_at = |i: &usize| removed.binary_search(i).is_err();
        let mut batch = WriteBatch::new();
        let n = elements.len();
        if n - first <= last + 1 {
            // Move the tail side up: what follows the first removed.
            let kept: Vec<&Vec<u8>> = (first..n).filter(kept_at).map(|i| &elements[i]).collect();
            for (j, e) in kept.iter().enumerate() {
                batch.put(meta.element_key(meta.head + (first + j) as u64), (*e).clone());
            }
            let new_tail = meta.tail - removed.len() as u64;
            for position in new_tail..meta.tail {
                batch.delete(meta.element_key(position));
            }
            meta.tail = new_tail;
        } else {
            // Move the head side down: what precedes the last removed.
            let kept: Vec<&Vec<u8>> = (0..=last).filter(kept_at).map(|i| &elements[i]).collect();
            let new_head = meta.head + removed.len() as u64;
            for (j, e) in kept.iter().enumerate() {
                batch.put(meta.element_key(new_head + j as u64), (*e).clone());
            }
            for position in meta.head..new_head {
                batch.delete(meta.element_key(position));
            }
            meta.head = new_head;
        }
        put_meta(&mut batch, key, &meta, deadline);
        store::write(shared, batch)?;
        Ok(Reply::Integer(removed.len() as i64))
    })
}

pub(super) fn ltrim(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let int = |arg: &[u8]| parse_i64(arg).ok_or_else(not_integer);
        let bounds = [int(&args[1])?, int(&args[2])?];
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta(shared, key)? else {
            return Ok(Reply::ok());
        };
        let (keep_from, keep_to) = match span(&meta, bounds) {
            Some((start, stop)) => (meta.head + start, meta.head + stop + 1),
            None => (meta.tail, meta.tail),
        };
        let mut batch = WriteBatch::new();
        for position in (meta.head..keep_from).chain(keep_to..meta.tail) {
            batch.delete(meta.element_key(position));
        }
        (meta.head, meta.tail) = (keep_from, keep_to);
        put_meta(&mut batch, key, &meta, deadline);
        store::write(shared, batch)?;
        Ok(Reply::ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(len: u64) -> ListMeta {
        ListMeta {
            version: 1,
            head: 100,
            tail: 100 + len,
        }
    }

    #[test]
    fn indexes_and_ranges_clamp_as_redis_clamps_them() {
        let m = list(5);
        assert_eq!(offset(&m, 0), Some(0));
        assert_eq!(offset(&m, -1), Some(4));
        assert_eq!(offset(&m, 5), None);
        assert_eq!(offset(&m, -6), None);
        assert_eq!(span(&m, [0, -1]), Some((0, 4)));
        assert_eq!(span(&m, [-100, 100]), Some((0, 4)));
        assert_eq!(span(&m, [1, -2]), Some((1, 3)));
        assert_eq!(span(&m, [3, 1]), None);
        assert_eq!(span(&m, [5, 10]), None);
        assert_eq!(span(&m, [0, -6]), None);
        assert_eq!(span(&list(0), [0, -1]), None);
    }

    #[test]
    fn a_header_round_trips_and_a_damaged_one_is_refused() {
        let m = list(3);
        let encoded = m.encode();
        assert_eq!(encoded[0], Tag::List as u8);
        assert_eq!(ListMeta::decode(&encoded[1..]), Some(m));
        let backwards = ListMeta { head: 5, tail: 4, ..m };
        assert_eq!(ListMeta::decode(&backwards.encode()[1..]), None);
        assert_eq!(ListMeta::decode(&[1, 2, 3]), None);
    }
}
