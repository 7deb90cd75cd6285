//! Stream commands: XADD (NOMKSTREAM, MAXLEN and MINID trimming), XLEN,
//! XRANGE, XREVRANGE, XDEL, XTRIM, and XREAD (COUNT, BLOCK, `$`). Entries
//! are store entries keyed by their IDs (see `keyspace`), so a range of
//! IDs is one scan; a write holds the stream's stripe and commits its
//! entries and the header in one batch.
//!
//! Departures from Redis:
//!
//! - **Trimming with `~` is exact.** Redis trims only whole nodes of its
//!   radix tree, so `MAXLEN ~ 10` may leave tens of entries more; here an
//!   entry is a key of its own and there is no node to wait for, so `~`
//!   trims to the threshold as `=` does (LIMIT still caps how many go).
//!   The stream then holds what Redis promises, never fewer entries than
//!   asked, and XTRIM's count can be larger than Redis's.
//! - **XREVRANGE reads its range forward** and turns it around (the store
//!   scans forward only): its cost is the range's, whatever its COUNT.
//! - Consumer groups (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM,
//!   XAUTOCLAIM) and XINFO are not offered: they are unknown commands.

use std::collections::HashSet;
use std::time::Duration;

use super::blocking::wait;
use super::delete::make_collection;
use super::integer::{not_integer, parse_i64};
use super::session::Session;
use super::store;
use super::value::{read_header, run};
use crate::keyspace::{decode_hash, encode_fields, now_ms, with_deadline, Deadline, StreamId, StreamMeta, Tag};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

const MAX_ID: StreamId = (u64::MAX, u64::MAX);

fn invalid_id() -> Reply {
    Reply::error("Invalid stream ID specified as stream command argument")
}

fn syntax_error() -> Reply {
    Reply::error("syntax error")
}

/// The header of the stream at `key` and its deadline, `None` if absent,
/// or the refusal.
fn meta_with_deadline(shared: &Shared, key: &[u8]) -> Result<Option<(StreamMeta, Deadline)>, Reply> {
    read_header(shared, key, Tag::Stream, "stream header", StreamMeta::decode)
}

fn meta(shared: &Shared, key: &[u8]) -> Result<Option<StreamMeta>, Reply> {
    Ok(meta_with_deadline(shared, key)?.map(|(m, _)| m))
}

/// `ms-seq`, or `ms` with `missing` as its sequence.
fn parse_id(arg: &[u8], missing: u64) -> Result<StreamId, Reply> {
    let number = |t: &[u8]| -> Result<u64, Reply> {
        if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
            return Err(invalid_id());
        }
        std::str::from_utf8(t)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(invalid_id)
    };
    match arg.iter().position(|&b| b == b'-') {
        Some(dash) => Ok((number(&arg[..dash])?, number(&arg[dash + 1..])?)),
        None => Ok((number(arg)?, missing)),
    }
}

fn format_id((ms, seq): StreamId) -> Vec<u8> {
    format!("{ms}-{seq}").into_bytes()
}

/// The ID after `id`, if there is one.
fn next_id((ms, seq): StreamId) -> Option<StreamId> {
    match seq.checked_add(1) {
        Some(seq) => Some((ms, seq)),
        None => Some((ms.checked_add(1)?, 0)),
    }
}

/// The ID before `id`, if there is one.
fn previous_id((ms, seq): StreamId) -> Option<StreamId> {
    match seq.checked_sub(1) {
        Some(seq) => Some((ms, seq)),
        None => Some((ms.checked_sub(1)?, u64::MAX)),
    }
}

type Entry = (StreamId, Vec<(Vec<u8>, Vec<u8>)>);

/// Up to `limit` entries with IDs from `from` to `to`, both included, in
/// ID order.
fn entries(
    shared: &Shared,
    meta: &StreamMeta,
    from: StreamId,
    to: StreamId,
    limit: usize,
) -> Result<Vec<Entry>, Reply> {
    if from > to {
        return Ok(Vec::new());
    }
    let mut end = meta.entry_key(to);
    end.push(0);
    store::scan(shared, &meta.entry_key(from), Some(&end), limit)?
        .into_iter()
        .map(|(k, v)| {
            let id = meta.parse_entry_key(&k);
            id.zip(decode_hash(&v))
                .ok_or_else(|| Reply::error("damaged stream entry"))
        })
        .collect()
}

fn entry_reply((id, fields): Entry) -> Reply {
    let flat = fields
        .into_iter()
        .flat_map(|(f, v)| [Reply::Bulk(Some(f)), Reply::Bulk(Some(v))]);
    Reply::Array(vec![Reply::Bulk(Some(format_id(id))), Reply::Array(flat.collect())])
}

/// How a stream is trimmed: to a length, or below an ID.
#[derive(Clone, Copy)]
enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

/// A trim and the most entries it may take (`LIMIT`, with `~`).
#[derive(Clone, Copy)]
struct TrimSpec {
    trim: Trim,
    limit: Option<u64>,
}

/// XADD's and XTRIM's options, and what follows them.
struct TrimArgs<'a> {
    nomkstream: bool,
    spec: Option<TrimSpec>,
    rest: &'a [Vec<u8>],
}

/// XADD's and XTRIM's options before what follows them (XADD's ID and
/// fields, which `then` checks before LIMIT is): NOMKSTREAM (XADD's),
/// MAXLEN or MINID with `=` or `~`, LIMIT. Refused as Redis refuses them.
fn parse_trim(
    args: &[Vec<u8>],
    xadd: bool,
    then: impl FnOnce(&[Vec<u8>]) -> Result<(), Reply>,
) -> Result<TrimArgs<'_>, Reply> {
    let (mut nomkstream, mut trim, mut approximate, mut limit) = (false, None, false, None);
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let word = word.to_ascii_lowercase();
        let value = |at: usize| args.get(at).ok_or_else(syntax_error);
        match word.as_slice() {
            b"nomkstream" if xadd => nomkstream = true,
            b"maxlen" | b"minid" => {
                if trim.is_some() {
                    return Err(Reply::error(
                        "syntax error, MAXLEN and MINID options at the same time are not compatible",
                    ));
                }
                let mut at = i + 1;
                if let Some(mode) = args.get(at).filter(|m| m.as_slice() == b"~" || m.as_slice() == b"=") {
                    approximate = mode.as_slice() == b"~";
                    at += 1;
                }
                let threshold = value(at)?;
                trim = Some(if word == b"maxlen" {
                    let n = parse_i64(threshold).ok_or_else(not_integer)?;
                    Trim::MaxLen(u64::try_from(n).map_err(|_| Reply::error("The MAXLEN argument must be >= 0."))?)
                } else {
                    Trim::MinId(parse_id(threshold, 0)?)
                });
                i = at;
            }
            b"limit" => {
                let n = parse_i64(value(i + 1)?).ok_or_else(not_integer)?;
                limit = Some(u64::try_from(n).map_err(|_| Reply::error("The LIMIT argument must be >= 0."))?);
                i += 1;
            }
            _ if xadd => break,
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    then(&args[i..])?;
    if limit.is_some() && trim.is_none() {
        return Err(Reply::error(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if limit.is_some() && !approximate {
        return Err(Reply::error(
            "syntax error, LIMIT cannot be used without the special ~ option",
        ));
    }
    Ok(TrimArgs {
        nomkstream,
        spec: trim.map(|trim| TrimSpec { trim, limit }),
        rest: &args[i..],
    })
}

/// Deletes into `batch` the stored entries `spec` trims, and says whether
/// it trims `added` too: the entry XADD is adding, counted in `meta` but
/// not yet stored (the newest, so the last to go). Returns how many go.
fn trim(
    shared: &Shared,
    meta: &mut StreamMeta,
    spec: TrimSpec,
    added: Option<StreamId>,
    batch: &mut WriteBatch,
) -> Result<(u64, bool), Reply> {
    let cap = spec
        .limit
        .filter(|&l| l > 0)
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let (gone, added_goes) = match spec.trim {
        Trim::MaxLen(n) if meta.len <= n => return Ok((0, false)),
        Trim::MaxLen(n) => {
            let excess = usize::try_from(meta.len - n).unwrap_or(usize::MAX).min(cap);
            let gone = store::scan(shared, &meta.prefix(), Some(&meta.end()), excess)?;
            let added_goes = added.is_some() && gone.len() < excess;
            (gone, added_goes)
        }
        Trim::MinId(id) => {
            let gone = store::scan(shared, &meta.prefix(), Some(&meta.entry_key(id)), cap)?;
            let added_goes = added.is_some_and(|a| a < id) && gone.len() < cap;
            (gone, added_goes)
        }
    };
    for (k, _) in &gone {
        batch.delete(k.clone());
    }
    let count = gone.len() as u64 + u64::from(added_goes);
    meta.len = meta.len.saturating_sub(count);
    Ok((count, added_goes))
}

fn zero_id() -> Reply {
    Reply::error("The ID specified in XADD must be greater than 0-0")
}

/// The ID a new entry gets: `*` (the clock, or after the last ID), `ms-*`,
/// or as given; refused unless it exceeds the last.
fn new_id(arg: &[u8], last: StreamId) -> Result<StreamId, Reply> {
    let smaller = || Reply::error("The ID specified in XADD is equal or smaller than the target stream top item");
    let id = if arg == b"*" {
        let ms = now_ms().max(last.0);
        match if ms == last.0 { next_id(last) } else { Some((ms, 0)) } {
            Some(id) => id,
            None => {
                return Err(Reply::error(
                    "The stream has exhausted the last possible ID, unable to add more items",
                ))
            }
        }
    } else if let Some(ms) = arg.strip_suffix(b"-*") {
        let (ms, _) = parse_id(ms, 0)?;
        match ms.cmp(&last.0) {
            std::cmp::Ordering::Less => return Err(smaller()),
            std::cmp::Ordering::Equal => next_id(last).filter(|id| id.0 == ms).ok_or_else(smaller)?,
            std::cmp::Ordering::Greater => (ms, 0),
        }
    } else {
        parse_id(arg, 0)?
    };
    if id == (0, 0) {
        return Err(zero_id());
    }
    if id <= last {
        return Err(smaller());
    }
    Ok(id)
}

/// `XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]]
/// *|id field value [field value ...]`: the new entry's ID (nil with
/// NOMKSTREAM on a missing key).
pub(super) fn xadd(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        // A given ID is read before LIMIT is checked, and found 0-0 after,
        // both before the key is looked at, as in Redis.
        let given = |id: &[u8]| id != b"*" && !id.ends_with(b"-*");
        let TrimArgs { nomkstream, spec, rest } = parse_trim(&args[1..], true, |rest| {
            if rest.len() < 3 || rest.len() % 2 == 0 {
                return Err(Reply::error("wrong number of arguments for 'xadd' command"));
            }
            if given(&rest[0]) {
                parse_id(&rest[0], 0)?;
            }
            Ok(())
        })?;
        if given(&rest[0]) && parse_id(&rest[0], 0)? == (0, 0) {
            return Err(zero_id());
        }
        let _lock = store::lock(shared, [key.as_slice()]);
        let existing = meta_with_deadline(shared, key)?;
        if existing.is_none() && nomkstream {
            return Ok(Reply::Bulk(None));
        }
        let created = existing.is_none();
        let (mut meta, deadline) = existing.unwrap_or_else(|| (StreamMeta::fresh(), None));
        let id = new_id(&rest[0], meta.last)?;
        let fields: Vec<(Vec<u8>, Vec<u8>)> = rest[1..].chunks(2).map(|fv| (fv[0].clone(), fv[1].clone())).collect();
        let mut batch = WriteBatch::new();
        if created {
            make_collection(shared, key, &mut batch)?;
        }
        meta.len += 1;
        meta.last = id;
        let trimmed = match spec {
            Some(spec) => trim(shared, &mut meta, spec, Some(id), &mut batch)?.1,
            None => false,
        };
        if !trimmed {
            let mut value = Vec::new();
            encode_fields(&mut value, &fields);
            batch.put(meta.entry_key(id), value);
        }
        batch.put(key.clone(), with_deadline(meta.encode(), deadline));
        store::write(shared, batch)?;
        Ok(Reply::Bulk(Some(format_id(id))))
    })
}

/// `XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]`: how many
/// entries went.
pub(super) fn xtrim(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let spec = parse_trim(&args[1..], false, |_| Ok(()))?
            .spec
            .ok_or_else(syntax_error)?;
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta_with_deadline(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let mut batch = WriteBatch::new();
        let (gone, _) = trim(shared, &mut meta, spec, None, &mut batch)?;
        if gone > 0 {
            batch.put(key.clone(), with_deadline(meta.encode(), deadline));
            store::write(shared, batch)?;
        }
        Ok(Reply::Integer(gone as i64))
    })
}

/// `XDEL key id [id ...]`: how many of the entries existed. As in Redis,
/// the key is looked at first, then every ID is read before any entry
/// goes.
pub(super) fn xdel(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta_with_deadline(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let ids = args[1..]
            .iter()
            .map(|id| parse_id(id, 0))
            .collect::<Result<HashSet<_>, _>>()?;
        let mut batch = WriteBatch::new();
        for id in ids {
            let entry = meta.entry_key(id);
            if store::get(shared, &entry)?.is_some() {
                batch.delete(entry);
                meta.len = meta.len.saturating_sub(1);
            }
        }
        let gone = batch.len() as i64;
        if gone > 0 {
            batch.put(key.clone(), with_deadline(meta.encode(), deadline));
            store::write(shared, batch)?;
        }
        Ok(Reply::Integer(gone))
    })
}

/// `XLEN key`.
pub(super) fn xlen(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| Ok(Reply::Integer(meta(shared, &args[0])?.map_or(0, |m| m.len as i64))))
}

/// A range's end as XRANGE reads it: `-`, `+`, an ID (a missing sequence
/// is the lowest for a start, the highest for an end), or `(ID`, which
/// leaves the ID out.
fn range_end(arg: &[u8], start: bool) -> Result<StreamId, Reply> {
    match arg {
        b"-" => return Ok((0, 0)),
        b"+" => return Ok(MAX_ID),
        _ => {}
    }
    let missing = if start { 0 } else { u64::MAX };
    match arg.strip_prefix(b"(") {
        None => parse_id(arg, missing),
        Some(id) if start => {
            next_id(parse_id(id, missing)?).ok_or_else(|| Reply::error("invalid start ID for the interval"))
        }
        Some(id) => previous_id(parse_id(id, missing)?).ok_or_else(|| Reply::error("invalid end ID for the interval")),
    }
}

/// `XRANGE key start end [COUNT count]`, `XREVRANGE key end start [COUNT
/// count]`: the entries between, with their fields; a COUNT of 0 or less
/// is nil for a stream that exists, as in Redis.
pub(super) fn xrange(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let rev = name == "xrevrange";
        let (low, high) = if rev {
            (&args[2], &args[1])
        } else {
            (&args[1], &args[2])
        };
        let (from, to) = (range_end(low, true)?, range_end(high, false)?);
        let count = match &args[3..] {
            [] => None,
            [word, n] if word.eq_ignore_ascii_case(b"count") => Some(parse_i64(n).ok_or_else(not_integer)?),
            _ => return Err(syntax_error()),
        };
        let Some(meta) = meta(shared, &args[0])? else {
            return Ok(Reply::Array(Vec::new()));
        };
        if count.is_some_and(|n| n <= 0) {
            return Ok(Reply::NullArray);
        }
        let count = count.map_or(usize::MAX, |n| n as usize);
        let mut found = entries(shared, &meta, from, to, if rev { usize::MAX } else { count })?;
        if rev {
            found.reverse();
            found.truncate(count);
        }
        Ok(Reply::Array(found.into_iter().map(entry_reply).collect()))
    })
}

/// `XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id
/// [id ...]`: each stream's entries after its ID (`$`: after its last
/// now), nil if none has any; with BLOCK it waits for one, inside MULTI
/// it does not. In RESP3 a map of stream to entries, in RESP2 a list of
/// [stream, entries] pairs, as Redis replies.
pub(super) fn xread(shared: &Shared, session: &mut Session, _: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (mut count, mut block, mut i) = (0usize, None, 0);
        let streams = loop {
            let Some(word) = args.get(i) else {
                return Err(syntax_error());
            };
            let value = args.get(i + 1).ok_or_else(syntax_error);
            match word.to_ascii_lowercase().as_slice() {
                b"count" => count = parse_i64(value?).ok_or_else(not_integer)?.max(0) as usize,
                b"block" => {
                    let ms =
                        parse_i64(value?).ok_or_else(|| Reply::error("timeout is not an integer or out of range"))?;
                    let ms = u64::try_from(ms).map_err(|_| Reply::error("timeout is negative"))?;
                    block = Some((ms > 0).then(|| Duration::from_millis(ms)));
                }
                b"streams" => break &args[i + 1..],
                _ => return Err(syntax_error()),
            }
            i += 2;
        };
        if streams.is_empty() || streams.len() % 2 == 1 {
            return Err(Reply::error(
                "Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
            ));
        }
        let (keys, ids) = streams.split_at(streams.len() / 2);
        let metas = keys.iter().map(|k| meta(shared, k)).collect::<Result<Vec<_>, _>>()?;
        let since: Vec<StreamId> = match session.block.as_ref().filter(|b| !b.since.is_empty()) {
            Some(block) => block.since.clone(),
            None => ids
                .iter()
                .zip(&metas)
                .map(|(id, meta)| match id.as_slice() {
                    b"$" => Ok(meta.map_or((0, 0), |m| m.last)),
                    id => parse_id(id, 0),
                })
                .collect::<Result<_, _>>()?,
        };
        let resp3 = session.resp3;
        let read = || -> Result<Option<Reply>, Reply> {
            let mut found = Vec::new();
            for ((key, after), meta) in keys.iter().zip(&since).zip(&metas) {
                let Some(meta) = meta else { continue };
                let Some(from) = next_id(*after) else { continue };
                let got = entries(shared, meta, from, MAX_ID, if count == 0 { usize::MAX } else { count })?;
                if !got.is_empty() {
                    let got = Reply::Array(got.into_iter().map(entry_reply).collect());
                    found.push((Reply::Bulk(Some(key.clone())), got));
                }
            }
            Ok((!found.is_empty()).then(|| {
                if resp3 {
                    Reply::Map(found)
                } else {
                    Reply::Array(found.into_iter().map(|(k, e)| Reply::Array(vec![k, e])).collect())
                }
            }))
        };
        let Some(timeout) = block else {
            return Ok(read()?.unwrap_or(Reply::NullArray));
        };
        let reply = wait(shared, session, keys, timeout, Reply::NullArray, read)?;
        if let Some(block) = session.block.as_mut().filter(|b| b.since.is_empty()) {
            block.since = since;
        }
        Ok(reply)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_and_follow_as_redis_reads_them() {
        assert_eq!(parse_id(b"5-3", 0), Ok((5, 3)));
        assert_eq!(parse_id(b"5", 7), Ok((5, 7)));
        for bad in [&b"x"[..], b"5-", b"-3", b"+5", b"99999999999999999999", b"1-2-3"] {
            assert_eq!(parse_id(bad, 0), Err(invalid_id()), "{bad:?}");
        }
        assert_eq!(next_id((1, u64::MAX)), Some((2, 0)));
        assert_eq!(next_id(MAX_ID), None);
        assert_eq!(previous_id((2, 0)), Some((1, u64::MAX)));
        assert_eq!(previous_id((0, 0)), None);
        assert_eq!(range_end(b"(5-3", true), Ok((5, 4)));
        assert_eq!(range_end(b"6", false), Ok((6, u64::MAX)));
        assert!(range_end(b"(0-0", false).is_err());
    }

    #[test]
    fn new_ids_exceed_the_last() {
        assert_eq!(new_id(b"7-*", (7, 3)), Ok((7, 4)));
        assert_eq!(new_id(b"8-*", (7, 3)), Ok((8, 0)));
        assert!(new_id(b"6-*", (7, 3)).is_err());
        assert!(new_id(b"7-3", (7, 3)).is_err());
        assert!(new_id(b"0-0", (0, 0)).is_err());
        let auto = new_id(b"*", (0, 0)).unwrap();
        assert!(auto.0 > 1_700_000_000_000, "the clock: {auto:?}");
        assert_eq!(
            new_id(b"*", (u64::MAX, 5)),
            Ok((u64::MAX, 6)),
            "after a last ID ahead of the clock"
        );
        assert!(new_id(b"*", MAX_ID).is_err(), "exhausted");
    }
}
