//! The commands `sluice serve` answers, with Redis's replies and error
//! texts where Redis has the command: strings (GET, SET, DEL, EXISTS,
//! MGET, MSET, TYPE; SET's options, SETEX, PSETEX, GETSET, SETNX, STRLEN,
//! APPEND, GETDEL and the counters in `commands/string.rs`), hashes
//! (`commands/hash.rs`), sorted sets (`commands/zset.rs`), KEYS and SCAN
//! (`commands/keys.rs`), expiry (`commands/expire.rs`), PING, ECHO, INFO,
//! AUTH, HELLO (RESP2 or RESP3), SELECT 0, QUIT, and what redis-benchmark
//! and redis-cli ask on connecting (CONFIG GET, COMMAND: answered with
//! empty lists). `RANGE start end [count]` scans string keys
//! `start <= key < end` (an empty `end` is unbounded) and replies with a
//! flat key, value list. How the types sit in the store: `keyspace.rs`.

mod delete;
mod expire;
mod hash;
mod keys;
mod long_double;
mod string;
mod value;
mod zset;

use std::fmt::Write;

use crate::keyspace::{decode_value, is_live, now_ms, Tag, RESERVED};
use crate::resp::Reply;
use crate::shared::Shared;
use value::{read, run, string, write_strings, Typed};

/// Keys `RANGE` returns when no count is given.
const DEFAULT_RANGE_COUNT: usize = 100;

/// One connection's state.
pub(crate) struct Session {
    pub tenant: u32,
    pub authenticated: bool,
    pub quit: bool,
    /// The client asked for RESP3 (`HELLO 3`).
    pub resp3: bool,
}

/// Redis's refusal of a command before `AUTH`, where a password is set.
pub(crate) fn noauth() -> Reply {
    Reply::Error("NOAUTH Authentication required.".into())
}

pub(crate) fn execute(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    if !session.authenticated && !matches!(name.as_str(), "auth" | "hello" | "quit" | "ping") {
        return noauth();
    }
    let rest = &args[1..];
    let arity = |ok: bool, f: &dyn Fn() -> Reply| {
        if ok {
            f()
        } else {
            Reply::error(format!("wrong number of arguments for '{name}' command"))
        }
    };
    match name.as_str() {
        "get" => arity(rest.len() == 1, &|| get(shared, &rest[0])),
        "set" => arity(rest.len() >= 2, &|| string::set(shared, rest)),
        "setex" | "psetex" => arity(rest.len() == 3, &|| string::setex(shared, &name, rest)),
        "getset" => arity(rest.len() == 2, &|| string::getset(shared, rest)),
        "setnx" => arity(rest.len() == 2, &|| string::setnx(shared, rest)),
        "strlen" => arity(rest.len() == 1, &|| string::strlen(shared, &rest[0])),
        "append" => arity(rest.len() == 2, &|| string::append(shared, rest)),
        "getdel" => arity(rest.len() == 1, &|| string::getdel(shared, &rest[0])),
        "incr" => arity(rest.len() == 1, &|| string::incr_by(shared, &rest[0], Ok(1))),
        "decr" => arity(rest.len() == 1, &|| string::incr_by(shared, &rest[0], Ok(-1))),
        "incrby" => arity(rest.len() == 2, &|| {
            string::incr_by(shared, &rest[0], string::increment(&rest[1]))
        }),
        "decrby" => arity(rest.len() == 2, &|| {
            string::incr_by(shared, &rest[0], string::decrement(&rest[1]))
        }),
        "incrbyfloat" => arity(rest.len() == 2, &|| string::incrbyfloat(shared, rest)),
        "del" => arity(!rest.is_empty(), &|| delete::del(shared, rest)),
        "exists" => arity(!rest.is_empty(), &|| exists(shared, rest)),
        "mget" => arity(!rest.is_empty(), &|| mget(shared, rest)),
        "mset" => arity(!rest.is_empty() && rest.len().is_multiple_of(2), &|| mset(shared, rest)),
        "type" => arity(rest.len() == 1, &|| type_of(shared, &rest[0])),
        "range" => arity((2..=3).contains(&rest.len()), &|| range(shared, rest)),
        "expire" | "pexpire" | "expireat" | "pexpireat" => {
            arity(rest.len() >= 2, &|| expire::expire(shared, &name, rest))
        }
        "ttl" | "pttl" | "expiretime" | "pexpiretime" => {
            arity(rest.len() == 1, &|| expire::ttl(shared, &name, &rest[0]))
        }
        "persist" => arity(rest.len() == 1, &|| expire::persist(shared, &rest[0])),
        "keys" => arity(rest.len() == 1, &|| keys::keys(shared, &rest[0])),
        "scan" => arity(!rest.is_empty(), &|| keys::scan(shared, rest)),
        "hset" | "hmset" => arity(rest.len() >= 3 && rest.len() % 2 == 1, &|| {
            hash::hset(shared, rest, name == "hmset")
        }),
        "hdel" => arity(rest.len() >= 2, &|| hash::hdel(shared, rest)),
        "hget" | "hexists" => arity(rest.len() == 2, &|| hash::read_hash(shared, &name, rest)),
        "hmget" => arity(rest.len() >= 2, &|| hash::read_hash(shared, &name, rest)),
        "hgetall" | "hlen" => arity(rest.len() == 1, &|| hash::read_hash(shared, &name, rest)),
        "zadd" => arity(rest.len() >= 3, &|| zset::zadd(shared, rest)),
        "zincrby" => arity(rest.len() == 3, &|| {
            zset::zadd(
                shared,
                &[rest[0].clone(), b"INCR".to_vec(), rest[1].clone(), rest[2].clone()],
            )
        }),
        "zrem" => arity(rest.len() >= 2, &|| zset::zrem(shared, rest)),
        "zcard" => arity(rest.len() == 1, &|| zset::read_zset(shared, &name, rest)),
        "zscore" | "zrank" | "zrevrank" => arity(rest.len() == 2, &|| zset::read_zset(shared, &name, rest)),
        "zrange" | "zrevrange" | "zrangebyscore" | "zrevrangebyscore" | "zrangebylex" | "zrevrangebylex" => {
            arity(rest.len() >= 3, &|| zset::zrange(shared, &name, rest, session.resp3))
        }
        "ping" => match rest {
            [] => Reply::Simple("PONG".into()),
            [msg] => Reply::Bulk(Some(msg.clone())),
            _ => arity(false, &|| Reply::ok()),
        },
        "echo" => arity(rest.len() == 1, &|| Reply::Bulk(Some(rest[0].clone()))),
        "info" => Reply::Bulk(Some(info(shared).into_bytes())),
        "auth" => auth(shared, session, rest),
        "hello" => hello(shared, session, rest),
        "select" => arity(rest.len() == 1, &|| match rest[0].as_slice() {
            b"0" => Reply::ok(),
            _ => Reply::error("DB index is out of range"),
        }),
        "config" | "command" => Reply::Array(Vec::new()),
        "quit" => {
            session.quit = true;
            Reply::ok()
        }
        _ => Reply::error(format!("unknown command '{name}'")),
    }
}

fn get(shared: &Shared, key: &[u8]) -> Reply {
    run(|| Ok(Reply::Bulk(string(shared, key)?)))
}

fn mset(shared: &Shared, pairs: &[Vec<u8>]) -> Reply {
    let _locks = shared.locks.lock(pairs.iter().step_by(2).map(Vec::as_slice));
    run(|| write_strings(shared, pairs, None).map(|()| Reply::ok()))
}

fn exists(shared: &Shared, keys: &[Vec<u8>]) -> Reply {
    run(|| {
        let mut n = 0;
        for k in keys {
            n += i64::from(!matches!(read(shared, k)?, Typed::Absent));
        }
        Ok(Reply::Integer(n))
    })
}

/// MGET: a key that holds no string is nil, as in Redis.
fn mget(shared: &Shared, keys: &[Vec<u8>]) -> Reply {
    run(|| {
        let mut values = Vec::with_capacity(keys.len());
        for k in keys {
            let v = match read(shared, k)? {
                Typed::Found(Tag::String, body, _) => Some(body),
                _ => None,
            };
            values.push(Reply::Bulk(v));
        }
        Ok(Reply::Array(values))
    })
}

fn type_of(shared: &Shared, key: &[u8]) -> Reply {
    run(|| {
        let name = match read(shared, key)? {
            Typed::Absent => "none",
            Typed::Found(Tag::String, ..) => "string",
            Typed::Found(Tag::Hash, ..) => "hash",
            Typed::Found(Tag::Zset, ..) => "zset",
        };
        Ok(Reply::Simple(name.into()))
    })
}

fn range(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let count = match args
        .get(2)
        .map(|c| std::str::from_utf8(c).ok().and_then(|s| s.parse().ok()))
    {
        None => DEFAULT_RANGE_COUNT,
        Some(Some(n)) => n,
        Some(None) => return Reply::error("value is not an integer or out of range"),
    };
    // Never into the internal key space; an empty end is its start.
    let end = match args[1].as_slice() {
        [] => &[RESERVED][..],
        e => e.min(&[RESERVED][..]),
    };
    let now = now_ms();
    match shared.db.scan(&args[0], Some(end), count) {
        Ok(entries) => Reply::Array(
            entries
                .into_iter()
                .filter_map(|(k, v)| match decode_value(&v) {
                    Some((Tag::String, body, deadline)) if is_live(deadline, now) => {
                        Some([Reply::Bulk(Some(k)), Reply::Bulk(Some(body.to_vec()))])
                    }
                    _ => None,
                })
                .flatten()
                .collect(),
        ),
        Err(e) => Reply::error(e),
    }
}

/// `AUTH password` or `AUTH user password`; the user becomes the tenant.
/// Without a configured password any user is accepted, which is how a
/// client names its tenant.
fn auth(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let (user, password) = match args {
        [p] => (None, p),
        [u, p] => (Some(String::from_utf8_lossy(u).into_owned()), p),
        _ => return Reply::error("wrong number of arguments for 'auth' command"),
    };
    match &shared.options.password {
        Some(want) if want.as_bytes() != password.as_slice() => {
            return Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
        }
        None if user.is_none() => return Reply::error("AUTH <password> called without any password configured"),
        _ => {}
    }
    session.authenticated = true;
    if let Some(user) = user {
        session.tenant = shared.tenant(&user);
    }
    Reply::ok()
}

/// `HELLO [protover [AUTH user password] [SETNAME name]]`: picks RESP2 or
/// RESP3 for the replies that follow, authenticates as `AUTH` does, and
/// answers with the server's properties, as Redis does. The name is
/// accepted and not kept (`CLIENT` is not served).
fn hello(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let mut resp3 = session.resp3;
    let mut rest = args;
    if let [version, tail @ ..] = args {
        resp3 = match version.as_slice() {
            b"2" => false,
            b"3" => true,
            _ => return Reply::Error("NOPROTO unsupported protocol version".into()),
        };
        rest = tail;
    }
    let mut credentials = None;
    while let [option, tail @ ..] = rest {
        rest = match (option.to_ascii_lowercase().as_slice(), tail) {
            (b"auth", [user, password, tail @ ..]) => {
                credentials = Some([user.clone(), password.clone()]);
                tail
            }
            (b"setname", [_, tail @ ..]) => tail,
            _ => {
                let option = String::from_utf8_lossy(option);
                return Reply::error(format!("Syntax error in HELLO option '{option}'"));
            }
        };
    }
    if let Some(credentials) = credentials {
        if let Reply::Error(e) = auth(shared, session, &credentials) {
            return Reply::Error(e);
        }
    }
    if !session.authenticated {
        return Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into(),
        );
    }
    session.resp3 = resp3;
    let text = |s: &str| Reply::Bulk(Some(s.as_bytes().to_vec()));
    Reply::Map(vec![
        (text("server"), text("sluice")),
        (text("version"), text(env!("CARGO_PKG_VERSION"))),
        (text("proto"), Reply::Integer(if resp3 { 3 } else { 2 })),
        (text("mode"), text("standalone")),
        (text("role"), text("master")),
        (text("modules"), Reply::Array(Vec::new())),
    ])
}

/// `INFO`: tenants, background tasks and levels, in Redis's `key:value`
/// sections.
fn info(shared: &Shared) -> String {
    let mut s = String::from("# Server\r\nsluice_version:");
    s.push_str(env!("CARGO_PKG_VERSION"));
    s.push_str("\r\n\r\n# Tenants\r\n");
    shared.with_tenants(|tenants| {
        for t in tenants.filter(|t| t.ops > 0) {
            let _ = write!(
                s,
                "tenant_{}:ops={},errors={},mean_us={:.1},p99_us={:.1},deadlines={},missed={}\r\n",
                t.name,
                t.ops,
                t.errors,
                t.latency.mean() / 1e3,
                t.latency.quantile(0.99) as f64 / 1e3,
                t.deadlines,
                t.missed
            );
        }
    });
    s.push_str("\r\n# Background\r\n");
    let db = &shared.db;
    for task in [db.flush_task(), db.compaction_task()] {
        let st = task.stats();
        let rate = st
            .knobs
            .rate_bytes
            .map_or("unlimited".to_string(), |r| format!("{r:.0}"));
        let _ = write!(
            s,
            "{}:bytes={},ios={},backlog_bytes={},rate_bytes={},paused={}\r\n",
            st.kind, st.bytes, st.ios, st.backlog_bytes, rate, st.knobs.paused
        );
    }
    let stats = db.stats();
    s.push_str("\r\n# Store\r\n");
    for (level, (tables, bytes)) in stats.levels.iter().enumerate() {
        let _ = write!(s, "level{level}:tables={tables},bytes={bytes}\r\n");
    }
    let _ = write!(
        s,
        "memtable_bytes:{}\r\nimmutable_memtables:{}\r\npending_compaction_bytes:{}\r\n",
        stats.memtable_bytes, stats.immutables, stats.pending_compaction_bytes
    );
    s
}
