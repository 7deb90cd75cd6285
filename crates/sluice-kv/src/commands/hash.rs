//! Hash commands, as YCSB's Redis client and others send them: HSET,
//! HMSET, HGET, HMGET, HGETALL, HDEL, HEXISTS, HLEN. A hash is one stored
//! value (see `keyspace`); writers hold the key's stripe lock across the
//! read-modify-write.

use super::delete::clear_entries;
use super::store;
use super::value::{read, run, Typed};
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

/// HGET, HMGET, HGETALL, HEXISTS, HLEN: reads of one hash.
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
        _ => Reply::Map(
            fields
                .into_iter()
                .map(|(f, v)| (Reply::Bulk(Some(f)), Reply::Bulk(Some(v))))
                .collect(),
        ),
    }
}
