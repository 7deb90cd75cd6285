//! Expiry: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX, XX, GT, LT),
//! TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST. A deadline is stored with
//! its value (see `keyspace`), so setting or dropping one rewrites the
//! value, under the key's stripe lock like every other read-modify-write.

use super::delete::delete_value;
use super::integer::{not_integer, parse_i64};
use super::store;
use super::value::{read, run, Typed};
use crate::keyspace::{now_ms, tagged, with_deadline};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// `EXPIRE key seconds [NX|XX|GT|LT]` and its millisecond and absolute
/// forms: 1 if the deadline was set, 0 if the key is missing or an option
/// stopped it. A deadline already past deletes the key (and replies 1),
/// as in Redis. A key without a deadline counts as never expiring for GT
/// and LT.
pub(super) fn expire(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for opt in &args[2..] {
            match opt.to_ascii_lowercase().as_slice() {
                b"nx" => nx = true,
                b"xx" => xx = true,
                b"gt" => gt = true,
                b"lt" => lt = true,
                _ => {
                    let opt = String::from_utf8_lossy(opt);
                    return Err(Reply::error(format!("Unsupported option {opt}")));
                }
            }
        }
        if nx && (xx || gt || lt) {
            return Err(Reply::error(
                "NX and XX, GT or LT options at the same time are not compatible",
            ));
        }
        if gt && lt {
            return Err(Reply::error("GT and LT options at the same time are not compatible"));
        }
        let invalid = || Reply::error(format!("invalid expire time in '{name}' command"));
        let mut when = parse_i64(&args[1]).ok_or_else(not_integer)?;
        if matches!(name, "expire" | "expireat") {
            when = when.checked_mul(1000).ok_or_else(invalid)?;
        }
        let now = now_ms() as i64;
        if matches!(name, "expire" | "pexpire") {
            when = when.checked_add(now).ok_or_else(invalid)?;
        }
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Typed::Found(tag, body, current) = read(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let current = current.map(|at| at as i64);
        let stopped = (nx && current.is_some())
            || (xx && current.is_none())
            || (gt && current.is_none_or(|at| when <= at))
            || (lt && current.is_some_and(|at| when >= at));
        if stopped {
            return Ok(Reply::Integer(0));
        }
        if when <= now {
            let mut batch = WriteBatch::new();
            delete_value(shared, key, tag, &body, &mut batch)?;
            store::write(shared, batch)?;
        } else {
            let value = with_deadline(tagged(tag, &body), Some(when as u64));
            store::put(shared, key, &value)?;
        }
        Ok(Reply::Integer(1))
    })
}

/// TTL and PTTL (time left), EXPIRETIME and PEXPIRETIME (the deadline):
/// -2 for a missing key, -1 for a key that does not expire; seconds are
/// rounded to the nearest, as Redis rounds them.
pub(super) fn ttl(shared: &Shared, name: &str, key: &[u8]) -> Reply {
    run(|| {
        let Typed::Found(_, _, deadline) = read(shared, key)? else {
            return Ok(Reply::Integer(-2));
        };
        let Some(at) = deadline else {
            return Ok(Reply::Integer(-1));
        };
        let ms = match name {
            "ttl" | "pttl" => at.saturating_sub(now_ms()),
            _ => at,
        } as i64;
        Ok(Reply::Integer(if name.starts_with('p') {
            ms
        } else {
            ms.saturating_add(500) / 1000
        }))
    })
}

/// `PERSIST key`: 1 if the key had a deadline and now has none.
pub(super) fn persist(shared: &Shared, key: &[u8]) -> Reply {
    run(|| {
        let _lock = store::lock(shared, [key]);
        match read(shared, key)? {
            Typed::Found(tag, body, Some(_)) => {
                store::put(shared, key, &tagged(tag, &body))?;
                Ok(Reply::Integer(1))
            }
            _ => Ok(Reply::Integer(0)),
        }
    })
}
