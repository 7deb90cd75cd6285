//! Hash commands, as YCSB's Redis client and others send them: HSET,
//! HMSET, HSETNX, HGET, HMGET, HGETALL, HKEYS, HVALS, HSTRLEN, HDEL,
//! HEXISTS, HLEN, HINCRBY, HINCRBYFLOAT, HSCAN. A hash is one stored
//! value (see `keyspace`); writers hold the key's stripe lock across the
//! read-modify-write. HSCAN returns every field at once, with cursor 0,
//! as Redis does for a hash small enough to be one value.

use super::delete::clear_entries;
use super::integer::parse_i64;
use super::keys::{scan_options, scan_reply};
use super::long_double;
use super::store;
use super::value::{read, run, Typed};
use crate::glob::glob_match;
use crate::keyspace::{decode_hash, encode_hash, with_deadline, Deadline, Fields, Tag};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// The hash at `key` (empty if absent) and its deadline, or the reply
/// that refuses it.
fn fields(shared: &Shared, key: &[u8]) -> Result<(Fields, Deadline), Reply> {
    match read(shared, key)? {
        Typed::Absent => Ok((Vec::new(), None)),
        Typed::Found(Tag::Hash, body, deadline) => decode_hash(&body)
            .map(|f| (f, deadline))
            .ok_or_else(|| Reply::error("damaged hash value")),
        Typed::Found(..) => Err(Reply::Error(crate::keyspace::WRONGTYPE.into())),
    }
}

/// Stores `fields` at `key` with the hash's `deadline`, or deletes the
/// key when none are left. A hash `created` here may take the place of an
/// expired set or list, whose entries go with it.
fn save(shared: &Shared, key: &[u8], fields: &Fields, deadline: Deadline, created: bool) -> Result<(), Reply> {
    if fields.is_empty() {
        store::delete(shared, key)
    } else {
        let mut batch = WriteBatch::new();
        if created {
            clear_entries(shared, key, &mut batch)?;
        }
        batch.put(key, with_deadline(encode_hash(fields), deadline));
        store::write(shared, batch)
    }
}

/// `HSET key field value [field value ...]` (HMSET replies OK instead of
/// the number of new fields).
pub(super) fn hset(shared: &Shared, args: &[Vec<u8>], reply_ok: bool) -> Reply {
    let key = &args[0];
    let _lock = store::lock(shared, [key.as_slice()]);
    run(|| {
        let (mut fields, deadline) = fields(shared, key)?;
        // A stored hash is never empty: an emptied one is deleted.
        let created = fields.is_empty();
        let mut added = 0;
        for fv in args[1..].chunks(2) {
            match fields.iter_mut().find(|(f, _)| *f == fv[0]) {
                Some(slot) => slot.1 = fv[1].clone(),
                None => {
                    fields.push((fv[0].clone(), fv[1].clone()));
                    added += 1;
                }
            }
        }
        save(shared, key, &fields, deadline, created)?;
        Ok(if reply_ok { Reply::ok() } else { Reply::Integer(added) })
    })
}

/// `HSETNX key field value`: 1 if the field was new and is now set, 0 if
/// it was there (and is left alone).
pub(super) fn hsetnx(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let key = &args[0];
    let _lock = store::lock(shared, [key.as_slice()]);
    run(|| {
        let (mut fields, deadline) = fields(shared, key)?;
        if value_of(&fields, &args[1]).is_some() {
            return Ok(Reply::Integer(0));
        }
        let created = fields.is_empty();
        fields.push((args[1].clone(), args[2].clone()));
        save(shared, key, &fields, deadline, created)?;
        Ok(Reply::Integer(1))
    })
}

/// Sets `field` of the hash at `key` to what `next` makes of its current
/// value (`None` if absent); replies what `next` says.
fn update_field(
    shared: &Shared,
    key: &[u8],
    field: &[u8],
    next: impl FnOnce(Option<&[u8]>) -> Result<(Vec<u8>, Reply), Reply>,
) -> Reply {
    let _lock = store::lock(shared, [key]);
    run(|| {
        let (mut fields, deadline) = fields(shared, key)?;
        let created = fields.is_empty();
        let slot = fields.iter().position(|(f, _)| f == field);
        let (value, reply) = next(slot.map(|i| fields[i].1.as_slice()))?;
        match slot {
            Some(i) => fields[i].1 = value,
            None => fields.push((field.to_vec(), value)),
        }
        save(shared, key, &fields, deadline, created)?;
        Ok(reply)
    })
}

/// `HINCRBY key field increment`: the field's new integer (0 if absent).
pub(super) fn hincrby(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let Some(by) = parse_i64(&args[2]) else {
        return Reply::error("value is not an integer or out of range");
    };
    update_field(shared, &args[0], &args[1], |current| {
        let current = match current {
            None => 0,
            Some(v) => parse_i64(v).ok_or_else(|| Reply::error("hash value is not an integer"))?,
        };
        let next = current
            .checked_add(by)
            .ok_or_else(|| Reply::error("increment or decrement would overflow"))?;
        Ok((next.to_string().into_bytes(), Reply::Integer(next)))
    })
}

/// `HINCRBYFLOAT key field increment`, in `long double` as INCRBYFLOAT.
pub(super) fn hincrbyfloat(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let by = match long_double::parse(&args[2]) {
        None => return Reply::error("value is not a valid float"),
        Some(by) if !by.is_finite() => return Reply::error("value is NaN or Infinity"),
        Some(by) => by,
    };
    update_field(shared, &args[0], &args[1], |current| {
        let current =
            long_double::parse(current.unwrap_or(b"0")).ok_or_else(|| Reply::error("hash value is not a float"))?;
        let next = current
            .add(by)
            .filter(|v| v.is_finite())
            .ok_or_else(|| Reply::error("increment would produce NaN or Infinity"))?;
        let text = next.to_human().into_bytes();
        Ok((text.clone(), Reply::Bulk(Some(text))))
    })
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count]`: every field and
/// value, those whose field matches, and cursor 0.
pub(super) fn hscan(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        // Redis reads the cursor, then the key, then the options.
        scan_options(&args[1..2], false)?;
        let (fields, _) = fields(shared, &args[0])?;
        // A stored hash is never empty: this one is absent.
        if fields.is_empty() {
            return Ok(scan_reply(0, Vec::new()));
        }
        let (_, options) = scan_options(&args[1..], false)?;
        let page = fields
            .into_iter()
            .filter(|(f, _)| options.pattern.is_none_or(|p| glob_match(p, f)))
            .flat_map(|(f, v)| [Reply::Bulk(Some(f)), Reply::Bulk(Some(v))]);
        Ok(scan_reply(0, page.collect()))
    })
}

/// `HDEL key field [field ...]`: the number of fields removed.
pub(super) fn hdel(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let key = &args[0];
    let _lock = store::lock(shared, [key.as_slice()]);
    run(|| {
        let (mut fields, deadline) = fields(shared, key)?;
        let before = fields.len();
        fields.retain(|(f, _)| !args[1..].contains(f));
        let removed = (before - fields.len()) as i64;
        if removed > 0 {
            save(shared, key, &fields, deadline, false)?;
        }
        Ok(Reply::Integer(removed))
    })
}

fn value_of(fields: &Fields, field: &[u8]) -> Option<Vec<u8>> {
    fields.iter().find(|(f, _)| f == field).map(|(_, v)| v.clone())
}

/// HGET, HMGET, HGETALL, HKEYS, HVALS, HSTRLEN, HEXISTS, HLEN: reads of
/// one hash.
pub(super) fn read_hash(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (fields, _) = fields(shared, &args[0])?;
        Ok(answer(name, fields, &args[1..]))
    })
}

fn answer(name: &str, fields: Fields, asked: &[Vec<u8>]) -> Reply {
    match name {
        "hget" => Reply::Bulk(value_of(&fields, &asked[0])),
        "hmget" => Reply::Array(asked.iter().map(|f| Reply::Bulk(value_of(&fields, f))).collect()),
        "hexists" => Reply::Integer(i64::from(value_of(&fields, &asked[0]).is_some())),
        "hlen" => Reply::Integer(fields.len() as i64),
        "hstrlen" => Reply::Integer(value_of(&fields, &asked[0]).map_or(0, |v| v.len() as i64)),
        "hkeys" => Reply::Array(fields.into_iter().map(|(f, _)| Reply::Bulk(Some(f))).collect()),
        "hvals" => Reply::Array(fields.into_iter().map(|(_, v)| Reply::Bulk(Some(v))).collect()),
        _ => Reply::Map(
            fields
                .into_iter()
                .map(|(f, v)| (Reply::Bulk(Some(f)), Reply::Bulk(Some(v))))
                .collect(),
        ),
    }
}
