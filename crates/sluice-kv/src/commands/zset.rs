//! Sorted-set commands: ZADD (with NX, XX, GT, LT, CH, INCR), ZINCRBY
//! (ZADD's INCR, as in Redis), ZREM, ZCARD, ZSCORE, ZMSCORE, ZRANK,
//! ZREVRANK, ZPOPMIN, ZPOPMAX, ZRANGE in its Redis 6.2 form (by rank,
//! BYSCORE or BYLEX, REV, LIMIT, WITHSCORES) with the older range commands
//! it subsumes, and what counts or removes a range: ZCOUNT, ZLEXCOUNT,
//! ZREMRANGEBYSCORE, ZREMRANGEBYLEX, ZREMRANGEBYRANK. Members are store entries of their own (see
//! `keyspace`); a write holds the set's stripe lock and commits its
//! entries and the set's header in one batch. Scores are replied as
//! text in RESP3 too, where Redis replies doubles: `Reply` has no double.

use std::cmp::Ordering;
use std::collections::hash_map::{Entry, HashMap};

use super::delete::make_collection;
use super::integer::{not_integer, parse_i64};
use super::keys::{scan_options, scan_reply, ScanOptions};
use super::store;
use super::value::{read_header, run};
use crate::glob::glob_match;
use crate::keyspace::{with_deadline, Deadline, Tag, ZsetMeta};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// The header of the set at `key` and its deadline, `None` if absent, or
/// the refusal.
fn meta_with_deadline(shared: &Shared, key: &[u8]) -> Result<Option<(ZsetMeta, Deadline)>, Reply> {
    read_header(shared, key, Tag::Zset, "sorted set header", ZsetMeta::decode)
}

/// The header of the set at `key`, `None` if absent, or the refusal.
fn meta(shared: &Shared, key: &[u8]) -> Result<Option<ZsetMeta>, Reply> {
    Ok(meta_with_deadline(shared, key)?.map(|(m, _)| m))
}

fn score_of(shared: &Shared, meta: &ZsetMeta, member: &[u8]) -> Result<Option<f64>, Reply> {
    let stored = store::get(shared, &meta.member_key(member))?;
    Ok(stored.and_then(|b| Some(f64::from_be_bytes(b.as_slice().try_into().ok()?))))
}

fn not_float() -> Reply {
    Reply::error("value is not a valid float")
}

/// A score as Redis's `string2d` reads one: all of the text a float
/// (`inf`, `-inf` and Java's `Infinity` included), no leading space, never
/// NaN, and neither overflow to infinity nor underflow to zero.
fn parse_score(arg: &[u8]) -> Result<f64, Reply> {
    let text = std::str::from_utf8(arg).map_err(|_| not_float())?;
    let score: f64 = text.parse().map_err(|_| not_float())?;
    let literal_inf = text.to_ascii_lowercase().contains("inf");
    let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if score.is_nan() || (score.is_infinite() && !literal_inf) || (score == 0.0 && nonzero) {
        return Err(not_float());
    }
    Ok(score)
}

/// A score as Redis 7.0 writes one: C's `%.17g` (`0.1` is
/// `0.10000000000000001`), and `inf`, `-inf`.
fn format_score(score: f64) -> Vec<u8> {
    if score.is_infinite() {
        return if score > 0.0 { b"inf".to_vec() } else { b"-inf".to_vec() };
    }
    const PRECISION: i32 = 17;
    let scientific = format!("{:.*e}", PRECISION as usize - 1, score);
    let (mantissa, exp) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    let text = if (-4..PRECISION).contains(&exp) {
        trim(&format!("{:.*}", (PRECISION - 1 - exp) as usize, score))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    };
    text.into_bytes()
}

fn syntax_error() -> Reply {
    Reply::error("syntax error")
}

/// ZADD's options.
#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// Score-member pairs as given.
type Pairs<'a> = Vec<(f64, &'a [u8])>;

/// ZADD's options and score-member pairs, refused as Redis refuses them:
/// an odd or empty list of pairs is a syntax error, then the
/// incompatible options, then the scores.
fn parse_zadd(args: &[Vec<u8>]) -> Result<(AddFlags, Pairs<'_>), Reply> {
    let mut f = AddFlags::default();
    let mut i = 0;
    while let Some(opt) = args.get(i) {
        let flag = match opt.to_ascii_lowercase().as_slice() {
            b"nx" => &mut f.nx,
            b"xx" => &mut f.xx,
            b"gt" => &mut f.gt,
            b"lt" => &mut f.lt,
            b"ch" => &mut f.ch,
            b"incr" => &mut f.incr,
            _ => break,
        };
        *flag = true;
        i += 1;
    }
    let pairs = &args[i..];
    if pairs.is_empty() || pairs.len() % 2 == 1 {
        return Err(syntax_error());
    }
    if f.nx && f.xx {
        return Err(Reply::error("XX and NX options at the same time are not compatible"));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(Reply::error(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && pairs.len() > 2 {
        return Err(Reply::error("INCR option supports a single increment-element pair"));
    }
    let pairs = pairs
        .chunks(2)
        .map(|sm| parse_score(&sm[0]).map(|score| (score, sm[1].as_slice())))
        .collect::<Result<_, _>>()?;
    Ok((f, pairs))
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`:
/// the number of new members (of new and changed ones with CH), or with
/// INCR the member's new score (nil if an option stopped it). The pairs
/// apply in order, as in Redis, so `ZADD k CH 1 a 2 a` counts a new member
/// and a change. A score of -0 is stored as 0, as Redis stores it in a
/// small set.
pub(super) fn zadd(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let (f, pairs) = parse_zadd(&args[1..])?;
        let _lock = store::lock(shared, [key.as_slice()]);
        let existing = meta_with_deadline(shared, key)?;
        let created = existing.is_none();
        let Some((mut meta, deadline)) = existing.or_else(|| (!f.xx).then(|| (ZsetMeta::fresh(), None))) else {
            return Ok(if f.incr { Reply::Bulk(None) } else { Reply::Integer(0) });
        };
        // Each member's score in the store and as this command leaves it.
        let mut scores: HashMap<&[u8], (Option<f64>, Option<f64>)> = HashMap::new();
        let (mut added, mut updated, mut last) = (0, 0, None);
        for (score, member) in pairs {
            let slot = match scores.entry(member) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    let stored = score_of(shared, &meta, member)?;
                    e.insert((stored, stored))
                }
            };
            let new = match slot.1 {
                Some(_) if f.nx => continue,
                Some(current) => {
                    let new = if f.incr { score + current } else { score };
                    if new.is_nan() {
                        return Err(Reply::error("resulting score is not a number (NaN)"));
                    }
                    if (f.lt && new >= current) || (f.gt && new <= current) {
                        continue;
                    }
                    updated += i64::from(new != current);
                    new
                }
                None if f.xx => continue,
                None => {
                    added += 1;
                    score
                }
            };
            // Adding 0 turns -0 into 0 and leaves every other score alone.
            slot.1 = Some(new + 0.0);
            last = slot.1;
        }
        let mut batch = WriteBatch::new();
        for (member, (stored, now)) in scores {
            let Some(now) = now.filter(|&now| stored != Some(now)) else {
                continue;
            };
            match stored {
                Some(old) => {
                    batch.delete(meta.score_key(old, member));
                }
                None => meta.card += 1,
            }
            batch.put(meta.member_key(member), now.to_be_bytes().to_vec());
            batch.put(meta.score_key(now, member), Vec::new());
        }
        if !batch.is_empty() {
            if created {
                make_collection(shared, key, &mut batch)?;
            }
            batch.put(key.clone(), with_deadline(meta.encode(), deadline));
            store::write(shared, batch)?;
        }
        Ok(match (f.incr, f.ch) {
            (true, _) => last.map_or(Reply::Bulk(None), |s| Reply::Double(format_score(s))),
            (false, true) => Reply::Integer(added + updated),
            (false, false) => Reply::Integer(added),
        })
    })
}

/// `ZREM key member [member ...]`: the number removed; the set goes when
/// its last member does.
pub(super) fn zrem(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta_with_deadline(shared, key)? else {
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
        put_header(&mut batch, key, &meta, deadline);
        store::write(shared, batch)?;
        Ok(Reply::Integer(removed as i64))
    })
}

/// Puts the header of the set at `key` into `batch` as `meta` leaves it,
/// or deletes the key with the last member.
fn put_header(batch: &mut WriteBatch, key: &[u8], meta: &ZsetMeta, deadline: Deadline) {
    if meta.card == 0 {
        batch.delete(key.to_vec());
    } else {
        batch.put(key.to_vec(), with_deadline(meta.encode(), deadline));
    }
}

/// Deletes `entries` (score, member) of the set into `batch`, and counts
/// them out of `meta`.
fn remove_entries(batch: &mut WriteBatch, meta: &mut ZsetMeta, entries: &Entries) {
    for (score, member) in entries {
        batch.delete(meta.member_key(member));
        batch.delete(meta.score_key(*score, member));
    }
    meta.card = meta.card.saturating_sub(entries.len() as u64);
}

/// `ZMSCORE key member [member ...]`: each member's score, or nil.
pub(super) fn zmscore(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let meta = meta(shared, &args[0])?;
        let mut scores = Vec::with_capacity(args.len() - 1);
        for member in &args[1..] {
            let score = match &meta {
                Some(m) => score_of(shared, m, member)?,
                None => None,
            };
            scores.push(score.map_or(Reply::Bulk(None), |s| Reply::Double(format_score(s))));
        }
        Ok(Reply::Array(scores))
    })
}

/// `ZCOUNT key min max`, `ZLEXCOUNT key min max`, and
/// `ZREMRANGEBYSCORE`, `ZREMRANGEBYLEX`, `ZREMRANGEBYRANK key start stop`:
/// how many members the range selects, which the ZREM forms remove (the
/// set goes with its last member).
pub(super) fn count_or_remove_range(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let by = match name {
            "zcount" | "zremrangebyscore" => By::Score,
            "zlexcount" | "zremrangebylex" => By::Lex,
            _ => By::Rank,
        };
        let bounds = match by {
            By::Rank => {
                let number = |b: &[u8]| parse_i64(b).ok_or_else(not_integer);
                Bounds::Rank(number(&args[1])?, number(&args[2])?)
            }
            By::Score => Bounds::Score(parse_bound(&args[1])?, parse_bound(&args[2])?),
            By::Lex => Bounds::Lex(parse_lex(&args[1])?, parse_lex(&args[2])?),
        };
        let o = RangeOptions {
            by,
            rev: false,
            with_scores: false,
            offset: 0,
            count: -1,
        };
        let key = &args[0];
        let remove = name.starts_with("zrem");
        let _lock = remove.then(|| store::lock(shared, [key.as_slice()]));
        let Some((mut meta, deadline)) = meta_with_deadline(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let entries = select(shared, &meta, &o, bounds)?;
        if remove && !entries.is_empty() {
            let mut batch = WriteBatch::new();
            remove_entries(&mut batch, &mut meta, &entries);
            put_header(&mut batch, key, &meta, deadline);
            store::write(shared, batch)?;
        }
        Ok(Reply::Integer(entries.len() as i64))
    })
}

/// The members ZPOPMIN (`min`) or ZPOPMAX removes from the set at `key`:
/// up to `count`, lowest or highest first, with their scores; none if the
/// key is missing. ZPOPMAX reads the whole index, which the store scans
/// forward only.
pub(super) fn pop_extremes(shared: &Shared, key: &[u8], min: bool, count: u64) -> Result<Entries, Reply> {
    let _lock = store::lock(shared, [key]);
    let Some((mut meta, deadline)) = meta_with_deadline(shared, key)? else {
        return Ok(Vec::new());
    };
    let n = count.min(meta.card) as usize;
    if n == 0 {
        return Ok(Vec::new());
    }
    let (first, end) = (meta.prefix(b's'), meta.end_of(b's'));
    let entries = if min {
        index(shared, &meta, &first, &end, n)?
    } else {
        let mut all = index(shared, &meta, &first, &end, usize::MAX)?;
        let mut top = all.split_off(all.len().saturating_sub(n));
        top.reverse();
        top
    };
    let mut batch = WriteBatch::new();
    remove_entries(&mut batch, &mut meta, &entries);
    put_header(&mut batch, key, &meta, deadline);
    store::write(shared, batch)?;
    Ok(entries)
}

/// A member and its score, as the pops reply them.
pub(super) fn scored(score: f64, member: Vec<u8>) -> [Reply; 2] {
    [Reply::Bulk(Some(member)), Reply::Double(format_score(score))]
}

/// `ZSCAN key cursor [MATCH pattern] [COUNT count]`: every member and its
/// score in one page (cursor 0), as Redis answers for a small set (a
/// sorted set here is read whole by its score index anyway); scores as
/// bulk strings, in RESP3 too, as Redis gives a scan's reply.
pub(super) fn zscan(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        // Redis reads the cursor, then the key, then the options.
        scan_options(&args[1..2], false)?;
        let Some(meta) = meta(shared, &args[0])? else {
            return Ok(scan_reply(0, Vec::new()));
        };
        let (_, ScanOptions { pattern, .. }) = scan_options(&args[1..], false)?;
        let all = index(shared, &meta, &meta.prefix(b's'), &meta.end_of(b's'), usize::MAX)?;
        let page = all
            .into_iter()
            .filter(|(_, m)| pattern.is_none_or(|p| glob_match(p, m)))
            .flat_map(|(score, m)| [Reply::Bulk(Some(m)), Reply::Bulk(Some(format_score(score)))]);
        Ok(scan_reply(0, page.collect()))
    })
}

/// `ZPOPMIN key [count]`, `ZPOPMAX key [count]`: member, score, ...; in
/// RESP3 with a count, [member, score] pairs, as Redis 7 replies.
pub(super) fn zpop(shared: &Shared, name: &str, args: &[Vec<u8>], resp3: bool) -> Reply {
    run(|| {
        let count = match args {
            [_] => None,
            [_, count] => Some(
                parse_i64(count)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| Reply::error("value is out of range, must be positive"))?,
            ),
            _ => return Err(syntax_error()),
        };
        let entries = pop_extremes(shared, &args[0], name == "zpopmin", count.unwrap_or(1))?;
        let pairs = entries.into_iter().map(|(score, member)| scored(score, member));
        Ok(Reply::Array(if resp3 && count.is_some() {
            pairs.map(|pair| Reply::Array(pair.to_vec())).collect()
        } else {
            pairs.flatten().collect()
        }))
    })
}

/// ZCARD, ZSCORE, ZRANK, ZREVRANK. A rank counts the index entries
/// before the member's, one scan of that many keys.
pub(super) fn read_zset(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let meta = meta(shared, &args[0])?;
        let Some(m) = meta else {
            return Ok(if name == "zcard" {
                Reply::Integer(0)
            } else {
                Reply::Bulk(None)
            });
        };
        let Some(score) = args.get(1).map(|member| score_of(shared, &m, member)).transpose()? else {
            return Ok(Reply::Integer(m.card as i64));
        };
        Ok(match (name, score) {
            (_, None) => Reply::Bulk(None),
            ("zscore", Some(score)) => Reply::Double(format_score(score)),
            (_, Some(score)) => {
                let before = shared
                    .db
                    .scan(&m.prefix(b's'), Some(&m.score_key(score, &args[1])), usize::MAX)
                    .map_err(Reply::error)?
                    .len() as i64;
                Reply::Integer(if name == "zrank" {
                    before
                } else {
                    m.card as i64 - 1 - before
                })
            }
        })
    })
}

/// A score bound: `x`, `(x` (exclusive), `-inf`, `+inf`, read as Redis's
/// `zslParseRange` reads it, with C's lenient `strtod`: leading spaces are
/// skipped, an empty text is 0, and overflow is infinity.
fn parse_bound(arg: &[u8]) -> Result<(f64, bool), Reply> {
    let (text, exclusive) = match arg.strip_prefix(b"(") {
        Some(rest) => (rest, true),
        None => (arg, false),
    };
    let score = match std::str::from_utf8(text).map(|t| t.trim_start_matches(|c: char| c.is_ascii_whitespace())) {
        _ if text.is_empty() => Ok(0.0),
        Ok(t) => t.parse::<f64>().map_err(drop),
        Err(_) => Err(()),
    };
    match score {
        Ok(s) if !s.is_nan() => Ok((s, exclusive)),
        _ => Err(Reply::error("min or max is not a float")),
    }
}

/// A lexicographic bound: `-`, `+`, `[x` (inclusive), `(x` (exclusive).
#[derive(Clone)]
enum LexBound {
    Lowest,
    Highest,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

fn parse_lex(arg: &[u8]) -> Result<LexBound, Reply> {
    match arg {
        b"-" => Ok(LexBound::Lowest),
        b"+" => Ok(LexBound::Highest),
        [b'[', rest @ ..] => Ok(LexBound::Inclusive(rest.to_vec())),
        [b'(', rest @ ..] => Ok(LexBound::Exclusive(rest.to_vec())),
        _ => Err(Reply::error("min or max not valid string range item")),
    }
}

impl LexBound {
    fn exclusive(&self) -> bool {
        !matches!(self, LexBound::Inclusive(_))
    }

    /// Compares the bounds' strings as Redis's `sdscmplex`: `-` is below
    /// and `+` above every string.
    fn cmp_value(&self, other: &LexBound) -> Ordering {
        use LexBound::{Exclusive, Highest, Inclusive, Lowest};
        match (self, other) {
            (Lowest, Lowest) | (Highest, Highest) => Ordering::Equal,
            (Lowest, _) | (_, Highest) => Ordering::Less,
            (Highest, _) | (_, Lowest) => Ordering::Greater,
            (Inclusive(a) | Exclusive(a), Inclusive(b) | Exclusive(b)) => a.cmp(b),
        }
    }

    fn at_least(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Lowest => true,
            LexBound::Highest => false,
            LexBound::Inclusive(b) => member >= b.as_slice(),
            LexBound::Exclusive(b) => member > b.as_slice(),
        }
    }

    fn at_most(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Lowest => false,
            LexBound::Highest => true,
            LexBound::Inclusive(b) => member <= b.as_slice(),
            LexBound::Exclusive(b) => member < b.as_slice(),
        }
    }
}

/// What a range selects by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// What a range command's name fixes: nothing for ZRANGE, what it
/// selects by and its direction for the older ones.
struct RangeSpec {
    by: Option<By>,
    rev: Option<bool>,
}

impl RangeSpec {
    fn of(name: &str) -> RangeSpec {
        let (by, rev) = match name {
            "zrange" => return RangeSpec { by: None, rev: None },
            "zrevrange" => (By::Rank, true),
            "zrangebyscore" => (By::Score, false),
            "zrevrangebyscore" => (By::Score, true),
            "zrangebylex" => (By::Lex, false),
            _ => (By::Lex, true),
        };
        RangeSpec {
            by: Some(by),
            rev: Some(rev),
        }
    }
}

struct RangeOptions {
    by: By,
    rev: bool,
    with_scores: bool,
    offset: i64,
    count: i64,
}

/// The options after `key start stop`, as Redis's `zrangeGenericCommand`
/// parses them: an option a command's name already fixes (BYSCORE for
/// ZRANGEBYSCORE, REV for ZREVRANGE) is a syntax error; LIMIT needs
/// BYSCORE or BYLEX (unless it is `LIMIT x -1`), WITHSCORES refuses BYLEX.
fn parse_range_options(spec: &RangeSpec, args: &[Vec<u8>]) -> Result<RangeOptions, Reply> {
    let (mut by, mut rev) = (spec.by, spec.rev);
    let (mut with_scores, mut offset, mut count) = (false, 0, -1);
    let mut i = 0;
    while let Some(opt) = args.get(i) {
        match opt.to_ascii_lowercase().as_slice() {
            b"withscores" => with_scores = true,
            b"limit" if args.len() - i > 2 => {
                let number = |b: &[u8]| parse_i64(b).ok_or_else(not_integer);
                offset = number(&args[i + 1])?;
                count = number(&args[i + 2])?;
                i += 2;
            }
            b"rev" if rev.is_none() => rev = Some(true),
            b"byscore" if by.is_none() => by = Some(By::Score),
            b"bylex" if by.is_none() => by = Some(By::Lex),
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    let by = by.unwrap_or(By::Rank);
    if count != -1 && by == By::Rank {
        return Err(Reply::error(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by == By::Lex {
        return Err(Reply::error(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    Ok(RangeOptions {
        by,
        rev: rev.unwrap_or(false),
        with_scores,
        offset,
        count,
    })
}

/// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count]
/// [WITHSCORES]` and the older commands it subsumes (ZREVRANGE,
/// ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, with
/// `name` fixing what it says). WITHSCORES replies a flat member, score
/// list in RESP2 and member-score pairs in RESP3, as Redis does. The
/// store scans forward only, so
/// a reversed range reads its part of the index forward and turns it
/// around; a range by rank reads the index up to its last rank.
pub(super) fn zrange(shared: &Shared, name: &str, args: &[Vec<u8>], resp3: bool) -> Reply {
    run(|| {
        let o = parse_range_options(&RangeSpec::of(name), &args[3..])?;
        // Reversed score and lex ranges are given as max, min.
        let (low, high) = if o.rev && o.by != By::Rank {
            (&args[2], &args[1])
        } else {
            (&args[1], &args[2])
        };
        let bounds = match o.by {
            By::Rank => {
                let number = |b: &[u8]| parse_i64(b).ok_or_else(not_integer);
                Bounds::Rank(number(low)?, number(high)?)
            }
            By::Score => Bounds::Score(parse_bound(low)?, parse_bound(high)?),
            By::Lex => Bounds::Lex(parse_lex(low)?, parse_lex(high)?),
        };
        let Some(meta) = meta(shared, &args[0])? else {
            return Ok(Reply::Array(Vec::new()));
        };
        let entries = select(shared, &meta, &o, bounds)?;
        let mut out = Vec::with_capacity(entries.len() * (1 + usize::from(o.with_scores)));
        for (score, member) in entries {
            let (member, score) = (Reply::Bulk(Some(member)), Reply::Double(format_score(score)));
            match (o.with_scores, resp3) {
                (false, _) => out.push(member),
                (true, false) => out.extend([member, score]),
                (true, true) => out.push(Reply::Array(vec![member, score])),
            }
        }
        Ok(Reply::Array(out))
    })
}

enum Bounds {
    Rank(i64, i64),
    Score((f64, bool), (f64, bool)),
    Lex(LexBound, LexBound),
}

type Entries = Vec<(f64, Vec<u8>)>;

/// The set's index entries from `from` (a key bound) to `to`, at most
/// `limit` of them, in order.
fn index(shared: &Shared, meta: &ZsetMeta, from: &[u8], to: &[u8], limit: usize) -> Result<Entries, Reply> {
    let entries = store::scan(shared, from, Some(to), limit)?;
    Ok(entries.iter().filter_map(|(k, _)| meta.parse_score_key(k)).collect())
}

/// The entries a range selects, in reply order.
fn select(shared: &Shared, meta: &ZsetMeta, o: &RangeOptions, bounds: Bounds) -> Result<Entries, Reply> {
    let card = meta.card as i64;
    let (first, end) = (meta.prefix(b's'), meta.end_of(b's'));
    let ((min, min_excl), (max, max_excl)) = match bounds {
        Bounds::Rank(start, stop) => {
            let start = if start < 0 { (card + start).max(0) } else { start };
            let stop = if stop < 0 { card + stop } else { stop.min(card - 1) };
            if start > stop || start >= card {
                return Ok(Vec::new());
            }
            // Ranks counted from the end are, forward, card-1-stop ..= card-1-start.
            let (from, to) = if o.rev {
                (card - 1 - stop, card - 1 - start)
            } else {
                (start, stop)
            };
            let mut entries = index(shared, meta, &first, &end, to as usize + 1)?;
            entries.drain(..(from as usize).min(entries.len()));
            if o.rev {
                entries.reverse();
            }
            return Ok(entries);
        }
        // An offset past the end or below 0 selects nothing, as in Redis.
        _ if o.offset < 0 || (o.offset > 0 && o.offset >= card) => return Ok(Vec::new()),
        Bounds::Lex(min, max) => {
            let all = index(shared, meta, &first, &end, usize::MAX)?;
            return Ok(lex_range(all, &min, &max, o));
        }
        Bounds::Score(min, max) => (min, max),
    };
    if min > max || (min == max && (min_excl || max_excl)) {
        return Ok(Vec::new());
    }
    let to = meta.score_bound(max, !max_excl);
    let limit = match (o.rev, usize::try_from(o.count)) {
        (false, Ok(count)) => (o.offset as usize).saturating_add(count),
        _ => usize::MAX,
    };
    let mut entries = index(shared, meta, &meta.score_bound(min, min_excl), &to, limit)?;
    if o.rev {
        entries.reverse();
    }
    // A negative count is no limit, as in Redis.
    entries.drain(..(o.offset as usize).min(entries.len()));
    if let Ok(count) = usize::try_from(o.count) {
        entries.truncate(count);
    }
    Ok(entries)
}

/// A lex range as Redis walks it in a small set (ordered by score, then
/// member): nothing if the range is empty, the last member is below `min`
/// or the first above `max`; otherwise from the first member at or above
/// `min` (reversed: the last at or below `max`), if that one is inside the
/// range, it skips `offset` members whatever they are, then takes members
/// while they stay inside the range. On a set whose scores are all equal
/// (what BYLEX is for) that is every member in the range, in order.
fn lex_range(mut all: Entries, min: &LexBound, max: &LexBound, o: &RangeOptions) -> Entries {
    let empty_range = match min.cmp_value(max) {
        Ordering::Greater => true,
        Ordering::Equal => min.exclusive() || max.exclusive(),
        Ordering::Less => false,
    };
    let (Some((_, lowest)), Some((_, highest))) = (all.first(), all.last()) else {
        return Vec::new();
    };
    if empty_range || !min.at_least(highest) || !max.at_most(lowest) {
        return Vec::new();
    }
    if o.rev {
        all.reverse();
    }
    // Where the walk starts, and what keeps it going.
    let starts = |m: &[u8]| if o.rev { max.at_most(m) } else { min.at_least(m) };
    let inside = |m: &[u8]| if o.rev { min.at_least(m) } else { max.at_most(m) };
    let Some(start) = all.iter().position(|(_, m)| starts(m)) else {
        return Vec::new();
    };
    if !inside(&all[start].1) {
        return Vec::new();
    }
    let count = usize::try_from(o.count).unwrap_or(usize::MAX);
    all.into_iter()
        .skip(start)
        .skip(o.offset as usize)
        .take_while(|(_, m)| inside(m))
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_written_as_redis_7_0_writes_them() {
        for (score, redis) in [
            (0.1, "0.10000000000000001"),
            (2.5, "2.5"),
            (4.0, "4"),
            (-0.0, "-0"),
            (1e300, "1.0000000000000001e+300"),
            (1e-300, "1e-300"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (-2.5e-5, "-2.5000000000000001e-05"),
            (1e16, "10000000000000000"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(String::from_utf8(format_score(score)).unwrap(), redis, "{score}");
        }
    }

    #[test]
    fn scores_and_bounds_are_read_as_redis_reads_them() {
        for bad in ["1x", " 1", "1 ", "", "nan", "1e400", "-1e400", "1e-400"] {
            assert_eq!(parse_score(bad.as_bytes()), Err(not_float()), "{bad:?}");
        }
        for (text, want) in [
            ("Infinity", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("0e-400", 0.0),
            (".5", 0.5),
        ] {
            assert_eq!(parse_score(text.as_bytes()), Ok(want), "{text:?}");
        }
        assert_eq!(parse_bound(b""), Ok((0.0, false)), "strtod reads nothing as 0");
        assert_eq!(parse_bound(b"("), Ok((0.0, true)));
        assert_eq!(parse_bound(b" 1"), Ok((1.0, false)));
        assert_eq!(parse_bound(b"1e400"), Ok((f64::INFINITY, false)));
        assert!(parse_bound(b"1 ").is_err() && parse_bound(b"nan").is_err());
    }

    fn zadd_error(args: &[&str]) -> Option<Reply> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        parse_zadd(&args).err()
    }

    #[test]
    fn zadd_option_errors_are_redis_errors() {
        assert_eq!(zadd_error(&["NX", "5", "m"]), None);
        assert_eq!(zadd_error(&["XX", "GT", "CH", "INCR", "5", "m"]), None);
        assert_eq!(zadd_error(&["NX", "5"]), Some(syntax_error()));
        assert_eq!(zadd_error(&["1", "a", "2"]), Some(syntax_error()));
        assert_eq!(
            zadd_error(&["nx", "xx", "1", "a"]),
            Some(Reply::error("XX and NX options at the same time are not compatible"))
        );
        let gt_lt_nx = Some(Reply::error(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
        assert_eq!(zadd_error(&["GT", "LT", "1", "a"]), gt_lt_nx);
        assert_eq!(zadd_error(&["GT", "NX", "1", "a"]), gt_lt_nx);
        assert_eq!(
            zadd_error(&["INCR", "1", "a", "2", "b"]),
            Some(Reply::error("INCR option supports a single increment-element pair"))
        );
        assert_eq!(zadd_error(&["1x", "a"]), Some(not_float()));
    }

    #[test]
    fn lex_ranges_walk_as_a_small_redis_set_does() {
        let set = |members: &[&str]| -> Entries { members.iter().map(|m| (0.0, m.as_bytes().to_vec())).collect() };
        let walk = |members: &[&str], min: &str, max: &str, rev: bool, offset: i64, count: i64| -> Vec<String> {
            let o = RangeOptions {
                by: By::Lex,
                rev,
                with_scores: false,
                offset,
                count,
            };
            let (min, max) = (parse_lex(min.as_bytes()).unwrap(), parse_lex(max.as_bytes()).unwrap());
            lex_range(set(members), &min, &max, &o)
                .into_iter()
                .map(|(_, m)| String::from_utf8(m).unwrap())
                .collect()
        };
        let abcd = ["a", "b", "c", "d"];
        assert_eq!(walk(&abcd, "[b", "(d", false, 0, -1), ["b", "c"]);
        assert_eq!(walk(&abcd, "[b", "(d", true, 0, -1), ["c", "b"]);
        assert_eq!(walk(&abcd, "-", "+", false, 1, 2), ["b", "c"]);
        assert!(walk(&abcd, "(b", "(b", false, 0, -1).is_empty(), "an empty range");
        assert!(walk(&abcd, "+", "+", false, 0, -1).is_empty());
        // Out of lex order (scores differ), the walk is Redis's: it stops
        // at the first member past the range, is empty if the last member
        // is below min, and skips the offset without looking.
        assert_eq!(walk(&["b", "a", "d", "c"], "[b", "(d", false, 0, -1), ["b", "a"]);
        assert!(walk(&["b", ""], "(a", "(m3", false, 0, -1).is_empty());
        assert_eq!(walk(&["b", "z", "c"], "[b", "[c", false, 2, -1), ["c"]);
        assert!(parse_lex(b"b").is_err() && parse_lex(b"+x").is_err());
    }
}
