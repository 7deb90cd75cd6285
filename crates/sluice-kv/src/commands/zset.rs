//! Sorted-set commands, the part YCSB's Redis client uses for its key
//! index and scans: ZADD, ZREM, ZCARD, ZSCORE, ZRANGEBYSCORE (with
//! WITHSCORES and LIMIT). Members are store entries of their own (see
//! `keyspace`); a write holds the set's stripe lock and commits its
//! entries and the set's header in one batch.

use super::{read, run, Typed};
use crate::keyspace::{Tag, ZsetMeta, WRONGTYPE};
use crate::resp::Reply;
use crate::server::Shared;
use crate::WriteBatch;

/// The header of the set at `key`, `None` if absent, or the refusal.
fn meta(shared: &Shared, key: &[u8]) -> Result<Option<ZsetMeta>, Reply> {
    match read(shared, key)? {
        Typed::Absent => Ok(None),
        Typed::Found(Tag::Zset, body) => ZsetMeta::decode(&body)
            .map(Some)
            .ok_or_else(|| Reply::error("damaged sorted set header")),
        Typed::Found(..) => Err(Reply::Error(WRONGTYPE.into())),
    }
}

fn score_of(shared: &Shared, meta: &ZsetMeta, member: &[u8]) -> Result<Option<f64>, Reply> {
    let stored = shared.db.get(&meta.member_key(member)).map_err(Reply::error)?;
    Ok(stored.and_then(|b| Some(f64::from_be_bytes(b.as_slice().try_into().ok()?))))
}

/// A score as Redis reads one: a float (`inf`, `-inf` and Java's
/// `Infinity` included), never NaN.
fn parse_score(arg: &[u8]) -> Result<f64, Reply> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|f| !f.is_nan())
        .ok_or_else(|| Reply::error("value is not a valid float"))
}

fn format_score(score: f64) -> Vec<u8> {
    score.to_string().into_bytes()
}

/// `ZADD key score member [score member ...]`: the number of new members.
pub(super) fn zadd(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let mut pairs: Vec<(f64, &[u8])> = Vec::new();
        for sm in args[1..].chunks(2) {
            let score = parse_score(&sm[0]).map_err(|_| {
                Reply::error(
                    "ZADD options (NX, XX, GT, LT, CH, INCR) are not supported, or a score is not a valid float",
                )
            })?;
            // The last score given for a member wins, as in Redis.
            pairs.retain(|(_, m)| *m != sm[1].as_slice());
            pairs.push((score, &sm[1]));
        }
        let key = &args[0];
        let _lock = shared.locks.lock([key.as_slice()]);
        let mut meta = meta(shared, key)?.unwrap_or_else(ZsetMeta::fresh);
        let mut batch = WriteBatch::new();
        let mut added = 0;
        for (score, member) in pairs {
            match score_of(shared, &meta, member)? {
                Some(old) if old == score => continue,
                Some(old) => {
                    batch.delete(meta.score_key(old, member));
                }
                None => {
                    added += 1;
                    meta.card += 1;
                }
            }
            batch.put(meta.member_key(member), score.to_be_bytes().to_vec());
            batch.put(meta.score_key(score, member), Vec::new());
        }
        batch.put(key.clone(), meta.encode());
        shared.db.write(batch).map_err(Reply::error)?;
        Ok(Reply::Integer(added))
    })
}

/// `ZREM key member [member ...]`: the number removed; the set goes when
/// its last member does.
pub(super) fn zrem(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = shared.locks.lock([key.as_slice()]);
        let Some(mut meta) = meta(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let mut batch = WriteBatch::new();
        let mut removed = 0;
        let mut members: Vec<&Vec<u8>> = args[1..].iter().collect();
        members.sort();
        members.dedup();
        for member in members {
            if let Some(score) = score_of(shared, &meta, member)? {
                batch.delete(meta.member_key(member));
                batch.delete(meta.score_key(score, member));
                removed += 1;
            }
        }
        meta.card -= removed.min(meta.card);
        if meta.card == 0 {
            batch.delete(key.clone());
        } else {
            batch.put(key.clone(), meta.encode());
        }
        shared.db.write(batch).map_err(Reply::error)?;
        Ok(Reply::Integer(removed as i64))
    })
}

/// ZCARD and ZSCORE.
pub(super) fn read_zset(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let meta = meta(shared, &args[0])?;
        Ok(match (name, meta) {
            ("zcard", m) => Reply::Integer(m.map_or(0, |m| m.card as i64)),
            (_, None) => Reply::Bulk(None),
            (_, Some(m)) => Reply::Bulk(score_of(shared, &m, &args[1])?.map(format_score)),
        })
    })
}

/// A ZRANGEBYSCORE bound: `x`, `(x` (exclusive), `-inf`, `+inf`.
fn parse_bound(arg: &[u8]) -> Result<(f64, bool), Reply> {
    let bad = || Reply::error("min or max is not a float");
    match arg.strip_prefix(b"(") {
        Some(rest) => parse_score(rest).map(|s| (s, true)).map_err(|_| bad()),
        None => parse_score(arg).map(|s| (s, false)).map_err(|_| bad()),
    }
}

struct RangeOptions {
    with_scores: bool,
    offset: usize,
    count: Option<usize>,
}

fn parse_range_options(args: &[Vec<u8>]) -> Result<RangeOptions, Reply> {
    let mut o = RangeOptions {
        with_scores: false,
        offset: 0,
        count: None,
    };
    let mut rest = args;
    while let Some((first, tail)) = rest.split_first() {
        let number = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<i64>().ok());
        match first.to_ascii_lowercase().as_slice() {
            b"withscores" => {
                o.with_scores = true;
                rest = tail;
            }
            b"limit" if tail.len() >= 2 => {
                let (Some(off), Some(count)) = (number(&tail[0]), number(&tail[1])) else {
                    return Err(Reply::error("value is not an integer or out of range"));
                };
                // A negative offset selects nothing, as in Redis.
                o.offset = usize::try_from(off).map_err(|_| Reply::Array(Vec::new()))?;
                // A negative count is "all", as in Redis.
                o.count = usize::try_from(count).ok();
                rest = &tail[2..];
            }
            _ => return Err(Reply::error("syntax error")),
        }
    }
    Ok(o)
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`.
pub(super) fn zrangebyscore(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (min, min_excl) = parse_bound(&args[1])?;
        let (max, max_excl) = parse_bound(&args[2])?;
        let o = parse_range_options(&args[3..])?;
        let Some(meta) = meta(shared, &args[0])? else {
            return Ok(Reply::Array(Vec::new()));
        };
        let limit = o.count.map_or(usize::MAX, |c| o.offset.saturating_add(c));
        let entries = shared
            .db
            .scan(&meta.score_bound(min, min_excl), Some(&meta.end_of(b's')), limit)
            .map_err(Reply::error)?;
        let mut out = Vec::new();
        for (k, _) in entries.into_iter().skip(o.offset) {
            let Some((score, member)) = meta.parse_score_key(&k) else {
                break;
            };
            if score > max || (max_excl && score == max) {
                break;
            }
            out.push(Reply::Bulk(Some(member)));
            if o.with_scores {
                out.push(Reply::Bulk(Some(format_score(score))));
            }
        }
        Ok(Reply::Array(out))
    })
}

/// Deletes every member entry of the set at `key` (for DEL), into `batch`.
pub(super) fn delete_members(shared: &Shared, body: &[u8], batch: &mut WriteBatch) -> Result<(), Reply> {
    let meta = ZsetMeta::decode(body).ok_or_else(|| Reply::error("damaged sorted set header"))?;
    for kind in [b'm', b's'] {
        let entries = shared
            .db
            .scan(&meta.prefix(kind), Some(&meta.end_of(kind)), usize::MAX)
            .map_err(Reply::error)?;
        for (k, _) in entries {
            batch.delete(k);
        }
    }
    Ok(())
}
