//! Set commands: SADD, SREM, SCARD, SISMEMBER, SMISMEMBER, SMEMBERS,
//! SINTER, SUNION and SDIFF with their STORE forms, SINTERCARD, SMOVE,
//! SPOP, SRANDMEMBER and SSCAN. Members are store entries of their own, in the
//! order of their hashes (see `keyspace`); a write holds the stripes of
//! its keys and commits the members and the set's header in one batch.
//!
//! # Random members
//!
//! In a set of up to [`SAMPLE_ALL`] members, SPOP and SRANDMEMBER read
//! every member and pick among them uniformly, as Redis does. In a larger
//! one, reading every member would make each pop cost the whole set, so
//! they start from a random point of the hash space instead: n distinct
//! members are the n from that point on (past the last member, the first
//! ones), and SRANDMEMBER's repeated members (a negative count) are one
//! such point each. A member's chance is then the width of the gap of
//! hashes before it: close to even, since the hash spreads members
//! evenly, but not exact, and the members of one pop are neighbours in
//! hash order. Redis samples its large hash tables the same way (a
//! random bucket, then the entries near it).

use std::collections::HashSet;

use rand::seq::index;
use rand::Rng;

use super::delete::make_collection;
use super::integer::{not_integer, parse_i64};
use super::keys::{scan_options, scan_reply, ScanOptions};
use super::store;
use super::value::{read_header, run};
use crate::glob::glob_match;
use crate::keyspace::{with_deadline, Deadline, SetMeta, Tag};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// Sets up to this size are read whole to pick random members from.
const SAMPLE_ALL: u64 = 1024;

fn damaged() -> Reply {
    Reply::error("damaged set")
}

/// The header of the set at `key` and its deadline, `None` if absent, or
/// the refusal.
fn meta_with_deadline(shared: &Shared, key: &[u8]) -> Result<Option<(SetMeta, Deadline)>, Reply> {
    read_header(shared, key, Tag::Set, "set", SetMeta::decode)
}

fn meta(shared: &Shared, key: &[u8]) -> Result<Option<SetMeta>, Reply> {
    Ok(meta_with_deadline(shared, key)?.map(|(m, _)| m))
}

fn contains(shared: &Shared, meta: &SetMeta, member: &[u8]) -> Result<bool, Reply> {
    Ok(store::get(shared, &meta.member_key(member))?.is_some())
}

/// Up to `limit` members whose hashes are `from` or more, with their
/// hashes, in hash order.
fn members_from(shared: &Shared, meta: &SetMeta, from: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, Reply> {
    store::scan(shared, &meta.position(from), Some(&meta.end()), limit)?
        .into_iter()
        .map(|(k, _)| meta.parse_member_key(&k).ok_or_else(damaged))
        .collect()
}

fn members(shared: &Shared, meta: Option<&SetMeta>) -> Result<Vec<Vec<u8>>, Reply> {
    let Some(meta) = meta else { return Ok(Vec::new()) };
    Ok(members_from(shared, meta, 0, usize::MAX)?
        .into_iter()
        .map(|(_, m)| m)
        .collect())
}

fn bulks(members: Vec<Vec<u8>>) -> Vec<Reply> {
    members.into_iter().map(|m| Reply::Bulk(Some(m))).collect()
}

/// Puts the header of the set at `key` into `batch` as `meta` leaves it,
/// or deletes the key with the last member.
fn put_header(batch: &mut WriteBatch, key: &[u8], meta: &SetMeta, deadline: Deadline) {
    if meta.card == 0 {
        batch.delete(key.to_vec());
    } else {
        batch.put(key.to_vec(), with_deadline(meta.encode(), deadline));
    }
}

/// `SADD key member [member ...]`: the number of members added.
pub(super) fn sadd(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let existing = meta_with_deadline(shared, key)?;
        let created = existing.is_none();
        let (mut meta, deadline) = existing.unwrap_or_else(|| (SetMeta::fresh(), None));
        let mut batch = WriteBatch::new();
        let mut seen = HashSet::new();
        let before = meta.card;
        for member in &args[1..] {
            // A new set's version has no members to look up.
            if seen.insert(member) && (created || !contains(shared, &meta, member)?) {
                batch.put(meta.member_key(member), Vec::new());
                meta.card += 1;
            }
        }
        let added = meta.card - before;
        if added > 0 {
            if created {
                make_collection(shared, key, &mut batch)?;
            }
            put_header(&mut batch, key, &meta, deadline);
            store::write(shared, batch)?;
        }
        Ok(Reply::Integer(added as i64))
    })
}

/// `SREM key member [member ...]`: the number removed; the set goes when
/// its last member does.
pub(super) fn srem(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta_with_deadline(shared, key)? else {
            return Ok(Reply::Integer(0));
        };
        let mut batch = WriteBatch::new();
        let mut seen = HashSet::new();
        let before = meta.card;
        for member in &args[1..] {
            if seen.insert(member) && contains(shared, &meta, member)? {
                batch.delete(meta.member_key(member));
                meta.card = meta.card.saturating_sub(1);
            }
        }
        let removed = before - meta.card;
        if removed > 0 {
            put_header(&mut batch, key, &meta, deadline);
            store::write(shared, batch)?;
        }
        Ok(Reply::Integer(removed as i64))
    })
}

/// SCARD, SISMEMBER, SMISMEMBER, SMEMBERS: reads of one set.
pub(super) fn read_set(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let meta = meta(shared, &args[0])?;
        let is_member = |m: &[u8]| -> Result<Reply, Reply> {
            let found = match &meta {
                Some(meta) => contains(shared, meta, m)?,
                None => false,
            };
            Ok(Reply::Integer(i64::from(found)))
        };
        Ok(match name {
            "scard" => Reply::Integer(meta.map_or(0, |m| m.card as i64)),
            "sismember" => is_member(&args[1])?,
            "smismember" => Reply::Array(args[1..].iter().map(|m| is_member(m)).collect::<Result<_, _>>()?),
            _ => Reply::Set(bulks(members(shared, meta.as_ref())?)),
        })
    })
}

/// How SINTER, SUNION and SDIFF combine their sets.
#[derive(Clone, Copy)]
enum Op {
    Inter,
    Union,
    Diff,
}

impl Op {
    fn of(name: &str) -> Op {
        match name.trim_end_matches("store") {
            "sinter" => Op::Inter,
            "sunion" => Op::Union,
            _ => Op::Diff,
        }
    }
}

/// The members of the sets at `keys` combined by `op`, a missing key an
/// empty set. Every key's type is checked before any member is read, so
/// a key of another type is refused wherever it stands, as in Redis.
fn combine(shared: &Shared, op: Op, keys: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, Reply> {
    let metas: Vec<Option<SetMeta>> = keys.iter().map(|k| meta(shared, k)).collect::<Result<_, _>>()?;
    // A member is kept if every other set has it (Inter) or none does
    // (Diff): one lookup per member and set, from the smallest set for
    // Inter, as Redis does.
    let kept = |candidates: &SetMeta, others: &[&SetMeta], wanted: bool| -> Result<Vec<Vec<u8>>, Reply> {
        let mut out = Vec::new();
        for member in members(shared, Some(candidates))? {
            let mut keep = true;
            for other in others {
                if contains(shared, other, &member)? != wanted {
                    keep = false;
                    break;
                }
            }
            if keep {
                out.push(member);
            }
        }
        Ok(out)
    };
    match op {
        Op::Union => {
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            for meta in metas.iter().flatten() {
                out.extend(
                    members(shared, Some(meta))?
                        .into_iter()
                        .filter(|m| seen.insert(m.clone())),
                );
            }
            Ok(out)
        }
        Op::Inter => {
            let Some(mut all) = metas.iter().copied().collect::<Option<Vec<SetMeta>>>() else {
                return Ok(Vec::new());
            };
            all.sort_by_key(|m| m.card);
            let others: Vec<&SetMeta> = all[1..].iter().collect();
            kept(&all[0], &others, true)
        }
        Op::Diff => {
            let Some(first) = &metas[0] else { return Ok(Vec::new()) };
            let others: Vec<&SetMeta> = metas[1..].iter().flatten().collect();
            kept(first, &others, false)
        }
    }
}

/// `SINTER`, `SUNION`, `SDIFF key [key ...]`.
pub(super) fn combined(shared: &Shared, name: &str, keys: &[Vec<u8>]) -> Reply {
    run(|| Ok(Reply::Set(bulks(combine(shared, Op::of(name), keys)?))))
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`: the size of the
/// intersection, at most `limit` (0: no limit).
pub(super) fn sintercard(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (keys, rest) = counted_keys(args)?;
        let limit = match rest {
            [] => 0,
            [word, n] if word.eq_ignore_ascii_case(b"limit") => parse_i64(n)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Reply::error("LIMIT can't be negative"))?,
            _ => return Err(Reply::error("syntax error")),
        };
        let card = combine(shared, Op::Inter, keys)?.len();
        Ok(Reply::Integer(if limit > 0 { card.min(limit) } else { card } as i64))
    })
}

/// Arguments in two parts.
type Parts<'a> = (&'a [Vec<u8>], &'a [Vec<u8>]);

/// The keys of a command that counts them first (`numkeys key ...`, as
/// SINTERCARD and LMPOP take them), and the arguments after them.
pub(super) fn counted_keys(args: &[Vec<u8>]) -> Result<Parts<'_>, Reply> {
    let n = parse_i64(&args[0])
        .filter(|&n| n > 0)
        .ok_or_else(|| Reply::error("numkeys should be greater than 0"))? as usize;
    if n > args.len() - 1 {
        return Err(Reply::error("Number of keys can't be greater than number of args"));
    }
    Ok((&args[1..=n], &args[n + 1..]))
}

/// `SINTERSTORE`, `SUNIONSTORE`, `SDIFFSTORE destination key [key ...]`:
/// the combined set replaces whatever `destination` held (its expiry
/// too), or deletes it if empty; the reply is its size. The keys' stripes
/// are held throughout, so no write to a source lands in between.
pub(super) fn store_combined(shared: &Shared, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (destination, sources) = (&args[0], &args[1..]);
        let _lock = store::lock(shared, args.iter().map(Vec::as_slice));
        let result = combine(shared, Op::of(name), sources)?;
        // Nothing to store where nothing is: no write, as in Redis, so a
        // WATCH of the destination holds.
        if result.is_empty() && store::get(shared, destination)?.is_none() {
            return Ok(Reply::Integer(0));
        }
        let mut batch = WriteBatch::new();
        make_collection(shared, destination, &mut batch)?;
        let mut meta = SetMeta::fresh();
        for member in &result {
            batch.put(meta.member_key(member), Vec::new());
        }
        meta.card = result.len() as u64;
        put_header(&mut batch, destination, &meta, None);
        store::write(shared, batch)?;
        Ok(Reply::Integer(meta.card as i64))
    })
}

/// `SMOVE source destination member`: 1 if the member moved (or, with
/// the two keys the same, if it is there), else 0. A missing source is 0
/// before the destination's type is looked at, as in Redis.
pub(super) fn smove(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (source, destination, member) = (&args[0], &args[1], &args[2]);
        let _lock = store::lock(shared, [source.as_slice(), destination.as_slice()]);
        let Some((mut from, from_deadline)) = meta_with_deadline(shared, source)? else {
            return Ok(Reply::Integer(0));
        };
        let to = meta_with_deadline(shared, destination)?;
        let present = contains(shared, &from, member)?;
        if source == destination || !present {
            return Ok(Reply::Integer(i64::from(present)));
        }
        let mut batch = WriteBatch::new();
        batch.delete(from.member_key(member));
        from.card = from.card.saturating_sub(1);
        put_header(&mut batch, source, &from, from_deadline);
        let created = to.is_none();
        let (mut to, to_deadline) = to.unwrap_or_else(|| (SetMeta::fresh(), None));
        if created || !contains(shared, &to, member)? {
            if created {
                make_collection(shared, destination, &mut batch)?;
            }
            batch.put(to.member_key(member), Vec::new());
            to.card += 1;
            put_header(&mut batch, destination, &to, to_deadline);
        }
        store::write(shared, batch)?;
        Ok(Reply::Integer(1))
    })
}

/// `n` random members of the set (see the module doc): distinct ones, at
/// most all of them, or each drawn afresh.
fn sample(shared: &Shared, meta: &SetMeta, n: u64, distinct: bool) -> Result<Vec<Vec<u8>>, Reply> {
    let mut rng = rand::thread_rng();
    if n == 0 {
        return Ok(Vec::new());
    }
    if meta.card <= SAMPLE_ALL || (distinct && n >= meta.card) {
        let all = members(shared, Some(meta))?;
        if all.is_empty() {
            return Err(damaged());
        }
        return Ok(if distinct {
            let picked = index::sample(&mut rng, all.len(), (n as usize).min(all.len()));
            picked.into_iter().map(|i| all[i].clone()).collect()
        } else {
            (0..n).map(|_| all[rng.gen_range(0..all.len())].clone()).collect()
        });
    }
    // From a random point on, then from the first member: fewer than
    // `card` members, so the second read stops short of the point.
    let mut from_point = |n: usize| -> Result<Vec<Vec<u8>>, Reply> {
        let mut run = members_from(shared, meta, rng.gen(), n)?;
        if run.len() < n {
            run.extend(members_from(shared, meta, 0, n - run.len())?);
        }
        Ok(run.into_iter().map(|(_, m)| m).collect())
    };
    if distinct {
        return from_point(n as usize);
    }
    let mut out = Vec::new();
    for _ in 0..n {
        out.extend(from_point(1)?);
    }
    Ok(out)
}

/// `SPOP key [count]`: one random member removed (nil for a missing
/// key), or with a count a set of up to that many.
pub(super) fn spop(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let key = &args[0];
        let count = match args {
            [_] => None,
            [_, count] => Some(
                parse_i64(count)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| Reply::error("value is out of range, must be positive"))?,
            ),
            _ => return Err(Reply::error("syntax error")),
        };
        let _lock = store::lock(shared, [key.as_slice()]);
        let Some((mut meta, deadline)) = meta_with_deadline(shared, key)? else {
            return Ok(count.map_or(Reply::Bulk(None), |_| Reply::Set(Vec::new())));
        };
        let picked = sample(shared, &meta, count.unwrap_or(1).min(meta.card), true)?;
        if !picked.is_empty() {
            let mut batch = WriteBatch::new();
            for member in &picked {
                batch.delete(meta.member_key(member));
            }
            meta.card = meta.card.saturating_sub(picked.len() as u64);
            put_header(&mut batch, key, &meta, deadline);
            store::write(shared, batch)?;
        }
        Ok(match count {
            None => Reply::Bulk(picked.into_iter().next()),
            Some(_) => Reply::Set(bulks(picked)),
        })
    })
}

/// `SRANDMEMBER key [count]`: one random member (nil for a missing key),
/// or with a count up to that many distinct ones, or with a negative
/// count exactly that many, repeats allowed.
pub(super) fn srandmember(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let count = match args {
            [_] => None,
            [_, count] => match parse_i64(count).ok_or_else(not_integer)? {
                i64::MIN => {
                    return Err(Reply::error(
                        "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                    ))
                }
                n => Some(n),
            },
            _ => return Err(Reply::error("syntax error")),
        };
        let Some(meta) = meta(shared, &args[0])? else {
            return Ok(count.map_or(Reply::Bulk(None), |_| Reply::Array(Vec::new())));
        };
        Ok(match count {
            None => Reply::Bulk(sample(shared, &meta, 1, true)?.into_iter().next()),
            Some(n) if n >= 0 => Reply::Array(bulks(sample(shared, &meta, (n as u64).min(meta.card), true)?)),
            Some(n) => Reply::Array(bulks(sample(shared, &meta, n.unsigned_abs(), false)?)),
        })
    })
}

/// `SSCAN key cursor [MATCH pattern] [COUNT count]`. The cursor is a
/// point of the hash space (see `keyspace`): a page is up to COUNT
/// members from it, and the next cursor the hash of the first member not
/// returned, "0" once none is left. Writes between calls move no member,
/// so a member present throughout is returned, and once unless another
/// member shares its 64-bit hash.
pub(super) fn sscan(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    run(|| {
        // Redis reads the cursor, then the key, then the options.
        scan_options(&args[1..2], false)?;
        let Some(meta) = meta(shared, &args[0])? else {
            return Ok(scan_reply(0, Vec::new()));
        };
        let (cursor, ScanOptions { pattern, count, .. }) = scan_options(&args[1..], false)?;
        let mut page = members_from(shared, &meta, cursor, count.saturating_add(1))?;
        let next = if page.len() > count {
            page.pop().map_or(0, |(hash, _)| hash)
        } else {
            0
        };
        let found = page
            .into_iter()
            .map(|(_, m)| m)
            .filter(|m| pattern.is_none_or(|p| glob_match(p, m)))
            .collect();
        Ok(scan_reply(next, bulks(found)))
    })
}
