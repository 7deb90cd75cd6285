//! String commands that read before they write: SET with its options
//! (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL), SETEX, PSETEX, GETSET,
//! SETNX, MSETNX, APPEND, SETRANGE, GETRANGE, GETDEL, GETEX, STRLEN, and the
//! counters INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT. As in Redis, a SET
//! drops the key's expiry unless KEEPTTL, and APPEND, SETRANGE and the
//! counters keep it.
//!
//! The store has no compare-and-set, so a read-modify-write holds its
//! key's stripe lock (`KeyLocks`) from the read to the write; every other
//! writer of a key (SET, MSET, DEL, the hash and sorted-set writes) takes
//! the same stripe, so two connections incrementing one key never both
//! read the same old value.

use super::delete::clear_entries;
use super::integer::{not_integer, parse_i64};
use super::long_double::{self, LongDouble};
use super::store;
use super::value::{read, read_many, run, string, string_with_deadline, Typed};
use crate::keyspace::{check_user_key, now_ms, tagged, with_deadline, Deadline, Tag, WRONGTYPE};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// How a SET expires its key, as given (EX, PX, EXAT, PXAT).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpiryUnit {
    Seconds,
    Milliseconds,
    UnixSeconds,
    UnixMilliseconds,
}

/// The deadline (unix ms) an expiry of `unit` and `value` gives, checked
/// as Redis's `getExpireMillisecondsOrReply` checks it: a positive
/// integer that neither overflows in milliseconds nor added to now.
fn expiry_deadline(command: &str, unit: ExpiryUnit, value: &[u8]) -> Result<u64, Reply> {
    let time = parse_i64(value).ok_or_else(not_integer)?;
    let invalid = || Reply::error(format!("invalid expire time in '{command}' command"));
    if time <= 0 {
        return Err(invalid());
    }
    let ms = match unit {
        ExpiryUnit::Seconds | ExpiryUnit::UnixSeconds => time.checked_mul(1000).ok_or_else(invalid)?,
        ExpiryUnit::Milliseconds | ExpiryUnit::UnixMilliseconds => time,
    };
    let at = match unit {
        ExpiryUnit::Seconds | ExpiryUnit::Milliseconds => ms.checked_add(now_ms() as i64).ok_or_else(invalid)?,
        ExpiryUnit::UnixSeconds | ExpiryUnit::UnixMilliseconds => ms,
    };
    Ok(at as u64)
}

#[derive(Default)]
struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    deadline: Deadline,
}

/// SET's options as Redis parses them: NX and XX exclude each other,
/// KEEPTTL excludes every expiry, and an expiry excludes the others but
/// may be repeated (the last one counts); anything else is a syntax error.
fn parse_set_options(args: &[Vec<u8>]) -> Result<SetOptions, Reply> {
    let mut o = SetOptions::default();
    let mut expiry: Option<(ExpiryUnit, &[u8])> = None;
    let mut i = 0;
    while i < args.len() {
        let opt = args[i].to_ascii_lowercase();
        let next = args.get(i + 1);
        let unit = match opt.as_slice() {
            b"ex" => Some(ExpiryUnit::Seconds),
            b"px" => Some(ExpiryUnit::Milliseconds),
            b"exat" => Some(ExpiryUnit::UnixSeconds),
            b"pxat" => Some(ExpiryUnit::UnixMilliseconds),
            _ => None,
        };
        match (opt.as_slice(), unit, next) {
            (b"nx", ..) if !o.xx => o.nx = true,
            (b"xx", ..) if !o.nx => o.xx = true,
            (b"get", ..) => o.get = true,
            (b"keepttl", ..) if expiry.is_none() => o.keep_ttl = true,
            (_, Some(unit), Some(value)) if !o.keep_ttl && expiry.is_none_or(|(u, _)| u == unit) => {
                expiry = Some((unit, value));
                i += 1;
            }
            _ => return Err(Reply::error("syntax error")),
        }
        i += 1;
    }
    if let Some((unit, value)) = expiry {
        o.deadline = Some(expiry_deadline("set", unit, value)?);
    }
    Ok(o)
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`: OK,
/// or nil when NX or XX stops it; with GET, the old value (nil if none)
/// whether or not it set, and WRONGTYPE (nothing set) if the key holds no
/// string.
pub(super) fn set(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let o = parse_set_options(&args[2..])?;
        save(shared, &args[0], &args[1], &o)
    })
}

/// `SETEX key seconds value`, `PSETEX key milliseconds value`.
pub(super) fn setex(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let unit = if name == "setex" {
            ExpiryUnit::Seconds
        } else {
            ExpiryUnit::Milliseconds
        };
        let o = SetOptions {
            deadline: Some(expiry_deadline(name, unit, &args[1])?),
            ..SetOptions::default()
        };
        save(shared, &args[0], &args[2], &o)
    })
}

/// SET's write, under the key's stripe: GET's old value is read in the
/// same hold as the write, and KEEPTTL keeps the deadline of whatever the
/// key held, of any type, as Redis does. A SET without NX, XX, GET or
/// KEEPTTL does not read the key while the store holds no set or list
/// (`delete::clear_entries`): the plain SET that redis-benchmark sends
/// stays one write.
fn save(shared: &Shared, key: &[u8], value: &[u8], o: &SetOptions) -> Result<Reply, Reply> {
    let _lock = store::lock(shared, [key]);
    let current = if o.nx || o.xx || o.get || o.keep_ttl {
        read(shared, key)?
    } else {
        Typed::Absent
    };
    let old = match (&current, o.get) {
        (Typed::Found(Tag::String, body, _), true) => Some(body.clone()),
        (Typed::Found(..), true) => return Err(Reply::Error(WRONGTYPE.into())),
        _ => None,
    };
    let (found, deadline) = match current {
        Typed::Absent => (false, o.deadline),
        Typed::Found(_, _, kept) if o.keep_ttl => (true, kept),
        Typed::Found(..) => (true, o.deadline),
    };
    let done = |set: bool| match (o.get, set) {
        (true, _) => Reply::Bulk(old.clone()),
        (false, true) => Reply::ok(),
        (false, false) => Reply::Bulk(None),
    };
    if (o.nx && found) || (o.xx && !found) {
        return Ok(done(false));
    }
    let over = match current {
        Typed::Found(Tag::String, ..) => Over::LiveString,
        _ => Over::Unread,
    };
    write_strings(shared, &[key.to_vec(), value.to_vec()], deadline, over)?;
    Ok(done(true))
}

/// What the caller of [`write_strings`] knows of the values it writes over.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// Nothing: a set or list may be there, its entries to delete.
    Unread,
    /// Every key holds a live string, read under the stripe the caller
    /// still holds: no entries to look for, so the key is not read again.
    LiveString,
}

/// What a read of the string at a key (`value::string_with_deadline`)
/// tells [`write_strings`]: a string found is live; none found may still
/// be a set or list that expired, with entries left to delete.
fn over<T>(read: &Option<T>) -> Over {
    match read {
        Some(_) => Over::LiveString,
        None => Over::Unread,
    }
}

/// Writes string `pairs` (key, value, key, value, ...) in one batch, each
/// to expire at `deadline`, the entries of a set or list they replace
/// deleted with it (unless `over` says there is none); the caller holds
/// their keys' stripes.
pub(crate) fn write_strings(shared: &Shared, pairs: &[Vec<u8>], deadline: Deadline, over: Over) -> Result<(), Reply> {
    // The stored value is longer than the client's by its tag (and its
    // deadline): the limit a client sees is that much lower, and named as
    // such.
    let limit = shared.db.options().max_value_bytes - with_deadline(vec![0], deadline).len();
    let mut batch = WriteBatch::new();
    for kv in pairs.chunks(2) {
        check_user_key(&kv[0]).map_err(Reply::error)?;
        if kv[1].len() > limit {
            return Err(Reply::error(crate::KvError::ValueTooLarge {
                len: kv[1].len(),
                limit,
            }));
        }
        if over == Over::Unread {
            clear_entries(shared, &kv[0], &mut batch)?;
        }
        batch.put(kv[0].clone(), with_deadline(tagged(Tag::String, &kv[1]), deadline));
    }
    store::write(shared, batch)
}

/// `GETSET key value`: SET with GET.
pub(super) fn getset(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    set(shared, &[args[0].clone(), args[1].clone(), b"GET".to_vec()])
}

/// `SETNX key value`: 1 if it set the key, 0 if the key exists.
pub(super) fn setnx(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    match set(shared, &[args[0].clone(), args[1].clone(), b"NX".to_vec()]) {
        Reply::Simple(_) => Reply::Integer(1),
        Reply::Bulk(None) => Reply::Integer(0),
        other => other,
    }
}

/// `MSETNX key value [key value ...]`: sets every pair and answers 1 if
/// none of the keys exists (of any type), else sets nothing and answers 0.
pub(super) fn msetnx(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let keys: Vec<Vec<u8>> = args.iter().step_by(2).cloned().collect();
        let _lock = store::lock(shared, keys.iter().map(Vec::as_slice));
        if read_many(shared, &keys)?.iter().any(|t| matches!(t, Typed::Found(..))) {
            return Ok(Reply::Integer(0));
        }
        write_strings(shared, args, None, Over::Unread)?;
        Ok(Reply::Integer(1))
    })
}

/// The longest string Redis builds (`proto-max-bulk-len`), which SETRANGE
/// checks before it pads.
const MAX_STRING: u64 = 512 << 20;

/// `SETRANGE key offset value`: writes `value` into the string at `offset`,
/// padding with zero bytes; answers the new length. An empty `value`
/// changes nothing (no key is made), and the expiry is kept.
pub(super) fn setrange(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (key, value) = (&args[0], &args[2]);
        let offset = parse_i64(&args[1]).ok_or_else(not_integer)?;
        let offset = u64::try_from(offset).map_err(|_| Reply::error("offset is out of range"))?;
        let _lock = store::lock(shared, [key.as_slice()]);
        let current = string_with_deadline(shared, key)?;
        if value.is_empty() {
            return Ok(Reply::Integer(current.map_or(0, |(v, _)| v.len() as i64)));
        }
        let end = offset + value.len() as u64;
        if end > MAX_STRING {
            return Err(Reply::error("string exceeds maximum allowed size (proto-max-bulk-len)"));
        }
        let over = over(&current);
        let (mut stored, deadline) = current.unwrap_or_default();
        let (offset, end) = (offset as usize, end as usize);
        if stored.len() < end {
            stored.resize(end, 0);
        }
        stored[offset..end].copy_from_slice(value);
        let len = stored.len() as i64;
        write_strings(shared, &[key.clone(), stored], deadline, over)?;
        Ok(Reply::Integer(len))
    })
}

/// `GETRANGE key start end`: the bytes of the string from `start` to `end`
/// inclusive, negative offsets counted from its end, as Redis cuts them;
/// empty for a missing key.
pub(super) fn getrange(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let start = parse_i64(&args[1]).ok_or_else(not_integer)?;
        let end = parse_i64(&args[2]).ok_or_else(not_integer)?;
        let value = string(shared, &args[0])?.unwrap_or_default();
        Ok(Reply::Bulk(Some(cut(&value, start, end).to_vec())))
    })
}

/// GETRANGE's bytes of `value`, by Redis's `getrangeCommand`.
fn cut(value: &[u8], start: i64, end: i64) -> &[u8] {
    let len = value.len() as i64;
    if start < 0 && end < 0 && start > end {
        return &[];
    }
    let from_end = |i: i64| if i < 0 { len.saturating_add(i).max(0) } else { i };
    let (start, end) = (from_end(start), from_end(end).min(len - 1));
    if start > end || len == 0 {
        return &[];
    }
    &value[start as usize..=end as usize]
}

/// `STRLEN key`: 0 for a missing key.
pub(super) fn strlen(shared: &Shared, key: &[u8]) -> Reply {
    run(|| Ok(Reply::Integer(string(shared, key)?.map_or(0, |v| v.len() as i64))))
}

/// `APPEND key value`: the new length; a missing key is created.
pub(super) fn append(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let current = string_with_deadline(shared, key)?;
        let over = over(&current);
        let (mut value, deadline) = current.unwrap_or_default();
        value.extend_from_slice(&args[1]);
        let len = value.len() as i64;
        write_strings(shared, &[key.clone(), value], deadline, over)?;
        Ok(Reply::Integer(len))
    })
}

/// `GETDEL key`: the value, and the key is gone; nil if there was none.
pub(super) fn getdel(shared: &Shared, key: &[u8]) -> Reply {
    run(|| {
        let _lock = store::lock(shared, [key]);
        let value = string(shared, key)?;
        if value.is_some() {
            store::delete(shared, key)?;
        }
        Ok(Reply::Bulk(value))
    })
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`: the string at `key`
/// (nil if none), its expiry set or, with PERSIST, removed. As in Redis,
/// the options' syntax is checked first, then the key, then the expiry's
/// value; a deadline already past deletes the key.
pub(super) fn getex(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        // None: no change; Some(None): PERSIST; Some(Some(..)): an expiry.
        let change = match &args[1..] {
            [] => None,
            [opt] if opt.eq_ignore_ascii_case(b"persist") => Some(None),
            [opt, value] => {
                let unit = match opt.to_ascii_lowercase().as_slice() {
                    b"ex" => ExpiryUnit::Seconds,
                    b"px" => ExpiryUnit::Milliseconds,
                    b"exat" => ExpiryUnit::UnixSeconds,
                    b"pxat" => ExpiryUnit::UnixMilliseconds,
                    _ => return Err(Reply::error("syntax error")),
                };
                Some(Some((unit, value)))
            }
            _ => return Err(Reply::error("syntax error")),
        };
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((value, deadline)) = string_with_deadline(shared, key)? else {
            return Ok(Reply::Bulk(None));
        };
        let new = match change {
            None => deadline,
            Some(None) => None,
            Some(Some((unit, time))) => Some(expiry_deadline("getex", unit, time)?),
        };
        match new {
            Some(at) if at <= now_ms() => store::delete(shared, key)?,
            _ if new != deadline => write_strings(shared, &[key.clone(), value.clone()], new, Over::LiveString)?,
            _ => {}
        }
        Ok(Reply::Bulk(Some(value)))
    })
}

/// INCRBY's increment.
pub(super) fn increment(arg: &[u8]) -> Result<i64, Reply> {
    parse_i64(arg).ok_or_else(not_integer)
}

/// DECRBY's decrement, as the increment it adds.
pub(super) fn decrement(arg: &[u8]) -> Result<i64, Reply> {
    match increment(arg)? {
        i64::MIN => Err(Reply::error("decrement would overflow")),
        by => Ok(-by),
    }
}

/// INCR, DECR, INCRBY, DECRBY: adds `by` to the integer at `key` (0 if
/// absent). A bad increment is refused before the key is looked at, as
/// Redis does, so a bad INCRBY on a hash is "not an integer", not
/// WRONGTYPE.
pub(super) fn incr_by(shared: &Shared, key: &[u8], by: Result<i64, Reply>) -> Reply {
    run(|| {
        let by = by?;
        let _lock = store::lock(shared, [key]);
        let stored = string_with_deadline(shared, key)?;
        let over = over(&stored);
        let (current, deadline) = match stored {
            None => (0, None),
            Some((v, deadline)) => (parse_i64(&v).ok_or_else(not_integer)?, deadline),
        };
        let next = current
            .checked_add(by)
            .ok_or_else(|| Reply::error("increment or decrement would overflow"))?;
        write_strings(shared, &[key.to_vec(), next.to_string().into_bytes()], deadline, over)?;
        Ok(Reply::Integer(next))
    })
}

/// `INCRBYFLOAT key increment`, in `long double` as Redis computes it
/// (see `long_double`); the new value is stored and replied as text.
pub(super) fn incrbyfloat(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let not_float = || Reply::error("value is not a valid float");
        let stored = string_with_deadline(shared, key)?;
        let over = over(&stored);
        let (current, deadline) = match stored {
            None => (long_double::parse(b"0"), None),
            Some((v, deadline)) => (long_double::parse(&v), deadline),
        };
        let current = current.ok_or_else(not_float)?;
        let by = long_double::parse(&args[1]).ok_or_else(not_float)?;
        let next = current
            .add(by)
            .filter(|v: &LongDouble| v.is_finite())
            .ok_or_else(|| Reply::error("increment would produce NaN or Infinity"))?;
        let text = next.to_human().into_bytes();
        write_strings(shared, &[key.clone(), text.clone()], deadline, over)?;
        Ok(Reply::Bulk(Some(text)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_cuts_as_redis_does() {
        let v = b"Hello World";
        for (start, end, want) in [
            (0, 3, &b"Hell"[..]),
            (-3, -1, b"rld"),
            (0, -1, b"Hello World"),
            (10, 100, b"d"),
            (11, 20, b""),
            (5, 3, b""),
            (-1, -5, b""),
            (-100, 2, b"Hel"),
            (i64::MIN, i64::MAX, b"Hello World"),
        ] {
            assert_eq!(cut(v, start, end), want, "{start} {end}");
        }
        assert_eq!(cut(b"", 0, -1), b"");
    }

    #[test]
    fn integers_are_read_as_string2ll_reads_them() {
        for (text, want) in [
            ("0", Some(0)),
            ("-12", Some(-12)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("01", None),
            ("-0", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("", None),
            ("-", None),
            ("1.0", None),
        ] {
            assert_eq!(parse_i64(text.as_bytes()), want, "{text:?}");
        }
    }

    fn options(args: &[&str]) -> Result<(bool, bool, bool, bool), Reply> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        parse_set_options(&args).map(|o| (o.nx, o.xx, o.get, o.deadline.is_some()))
    }

    #[test]
    fn set_options_are_refused_as_redis_refuses_them() {
        let syntax = Err(Reply::error("syntax error"));
        assert_eq!(options(&["nx", "GET"]), Ok((true, false, true, false)));
        assert_eq!(options(&["get", "get", "xx"]), Ok((false, true, true, false)));
        assert_eq!(options(&["px", "10", "PX", "20"]), Ok((false, false, false, true)));
        assert_eq!(options(&["xx", "nx"]), syntax);
        assert_eq!(options(&["keepttl", "ex", "5"]), syntax);
        assert_eq!(options(&["ex", "5", "px", "5"]), syntax);
        assert_eq!(options(&["ex"]), syntax);
        assert_eq!(options(&["bogus"]), syntax);
        assert_eq!(options(&["ex", "abc"]), Err(not_integer()));
        let invalid = Err(Reply::error("invalid expire time in 'set' command"));
        assert_eq!(options(&["ex", "0"]), invalid);
        assert_eq!(options(&["ex", "-5"]), invalid);
        assert_eq!(options(&["ex", "9223372036854776"]), invalid);
    }
}
