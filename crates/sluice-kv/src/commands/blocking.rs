//! The blocking pops: BLPOP, BRPOP, BLMPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN
//! and BZPOPMAX. Each tries its non-blocking form (LPOP, RPOP, ZPOPMIN,
//! ZPOPMAX on each key in turn; LMPOP, LMOVE, RPOPLPUSH);
//! if every key is empty it leaves a [`Block`] in the session, and the
//! connection waits without a worker until a key is written or the
//! timeout passes (`crate::blocked`), then runs the command again. Inside
//! MULTI they do not wait, as in Redis: an empty key answers nil at once.

use std::time::{Duration, Instant};

use super::list::{self, End};
use super::session::{Block, Session};
use super::store;
use super::value::run;
use super::zset;
use crate::resp::Reply;
use crate::shared::Shared;

/// A timeout in seconds, as Redis reads one: a float, 0 for none.
pub(super) fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let seconds: f64 = std::str::from_utf8(arg)
        .ok()
        .and_then(|t| t.parse().ok())
        .filter(|s: &f64| !s.is_nan())
        .ok_or_else(|| Reply::error("timeout is not a float or out of range"))?;
    if seconds * 1000.0 > i64::MAX as f64 {
        return Err(Reply::error("timeout is out of range"));
    }
    if seconds < 0.0 {
        return Err(Reply::error("timeout is negative"));
    }
    Ok((seconds > 0.0).then(|| Duration::from_secs_f64(seconds)))
}

/// Runs `attempt` (`Ok(None)`: every key empty); if it finds nothing,
/// blocks the session on `keys` until its deadline, or answers at once:
/// `in_multi` inside a transaction, the null array (as Redis answers every
/// blocking pop that timed out) once the deadline has passed. The
/// deadline is set by the command's first run and kept by the runs that
/// follow a wake.
pub(super) fn wait(
    shared: &Shared,
    session: &mut Session,
    keys: &[Vec<u8>],
    timeout: Option<Duration>,
    in_multi: Reply,
    attempt: impl FnOnce() -> Result<Option<Reply>, Reply>,
) -> Result<Reply, Reply> {
    let generation = shared.waiters.generation();
    let mut found = attempt();
    // Woken to find a key of another type (a transaction pushed, then set
    // a string there), it waits on, as Redis's blocked clients do: only
    // its first look reports WRONGTYPE.
    if session.block.is_some() && matches!(&found, Err(Reply::Error(e)) if e.starts_with("WRONGTYPE")) {
        found = Ok(None);
    }
    if !matches!(found, Ok(None)) {
        session.block = None;
        return found.map(|reply| reply.unwrap_or(Reply::NullArray));
    }
    let deadline = match &session.block {
        Some(block) => block.deadline,
        None => timeout.map(|t| Instant::now() + t),
    };
    if store::in_transaction() {
        session.block = None;
        return Ok(in_multi);
    }
    if deadline.is_some_and(|at| Instant::now() >= at) {
        session.block = None;
        return Ok(Reply::NullArray);
    }
    match &mut session.block {
        Some(block) => block.generation = generation,
        None => {
            session.block = Some(Block {
                keys: keys.to_vec(),
                deadline,
                generation,
                request: Vec::new(),
                since: Vec::new(),
            })
        }
    }
    // Not sent: the request runs again when the connection is woken.
    Ok(Reply::NullArray)
}

/// `BLPOP key [key ...] timeout`, `BRPOP ...`: `[key, element]` from the
/// first key that has one, nil once the timeout passes.
pub(super) fn bpop(shared: &Shared, session: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (keys, timeout) = args.split_at(args.len() - 1);
        let timeout = parse_timeout(&timeout[0])?;
        let end = if name == "blpop" { End::Left } else { End::Right };
        wait(shared, session, keys, timeout, Reply::NullArray, || {
            for key in keys {
                match list::pop(shared, std::slice::from_ref(key), end) {
                    Reply::Bulk(Some(element)) => {
                        return Ok(Some(Reply::Array(vec![
                            Reply::Bulk(Some(key.clone())),
                            Reply::Bulk(Some(element)),
                        ])))
                    }
                    Reply::Bulk(None) => {}
                    refused => return Err(refused),
                }
            }
            Ok(None)
        })
    })
}

/// `BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]`:
/// LMPOP's reply, nil once the timeout passes.
pub(super) fn blmpop(shared: &Shared, session: &mut Session, _: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let timeout = parse_timeout(&args[0])?;
        let (keys, end, count) = list::mpop_args(&args[1..])?;
        wait(shared, session, keys, timeout, Reply::NullArray, || {
            list::mpop(shared, keys, end, count)
        })
    })
}

/// `BZPOPMIN key [key ...] timeout`, `BZPOPMAX ...`: `[key, member,
/// score]` from the first key that has a member, nil once the timeout
/// passes.
pub(super) fn bzpop(shared: &Shared, session: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (keys, timeout) = args.split_at(args.len() - 1);
        let timeout = parse_timeout(&timeout[0])?;
        let min = name == "bzpopmin";
        wait(shared, session, keys, timeout, Reply::NullArray, || {
            for key in keys {
                if let Some((score, member)) = zset::pop_extremes(shared, key, min, 1)?.pop() {
                    let [member, score] = zset::scored(score, member);
                    return Ok(Some(Reply::Array(vec![Reply::Bulk(Some(key.clone())), member, score])));
                }
            }
            Ok(None)
        })
    })
}

/// `BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout`, and
/// `BRPOPLPUSH source destination timeout` (RIGHT LEFT): the element
/// moved; once the timeout passes the null array, as Redis answers.
pub(super) fn bmove(shared: &Shared, session: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    run(|| {
        let (ends, timeout) = match name {
            "brpoplpush" => ((End::Right, End::Left), &args[2]),
            _ => ((End::parse(&args[2])?, End::parse(&args[3])?), &args[4]),
        };
        let timeout = parse_timeout(timeout)?;
        wait(
            shared,
            session,
            &args[..1],
            timeout,
            Reply::Bulk(None),
            || match list::lmove(shared, &args[..2], Some(ends)) {
                Reply::Bulk(Some(element)) => Ok(Some(Reply::Bulk(Some(element)))),
                Reply::Bulk(None) => Ok(None),
                refused => Err(refused),
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_as_redis_reads_them() {
        assert_eq!(parse_timeout(b"0"), Ok(None));
        assert_eq!(parse_timeout(b"1.5"), Ok(Some(Duration::from_millis(1500))));
        for (bad, why) in [
            (&b"x"[..], "not a float"),
            (b" 1", "not a float"),
            (b"nan", "not a float"),
            (b"-1", "negative"),
            (b"inf", "out of range"),
            (b"1e300", "out of range"),
        ] {
            let Err(Reply::Error(e)) = parse_timeout(bad) else {
                panic!("{bad:?} accepted")
            };
            assert!(e.contains(why), "{e} for {bad:?}");
        }
    }
}
