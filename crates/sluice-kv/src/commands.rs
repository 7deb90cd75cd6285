//! The commands `sluice serve` answers, with Redis's replies and error
//! texts where Redis has the command: GET, SET, DEL, EXISTS, MGET, MSET,
//! PING, ECHO, INFO, AUTH, SELECT 0, QUIT, and what redis-benchmark and
//! redis-cli ask on connecting (CONFIG GET, COMMAND: answered with empty
//! lists). `RANGE start end [count]` scans keys `start <= key < end` (an
//! empty `end` is unbounded) and replies with a flat key, value list.

use std::fmt::Write;

use crate::resp::Reply;
use crate::server::Shared;
use crate::{Db, WriteBatch};

/// Keys `RANGE` returns when no count is given.
const DEFAULT_RANGE_COUNT: usize = 100;

/// One connection's state.
pub(crate) struct Session {
    pub tenant: u32,
    pub authenticated: bool,
    pub quit: bool,
}

pub(crate) fn execute(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    if !session.authenticated && !matches!(name.as_str(), "auth" | "quit" | "ping") {
        return Reply::Error("NOAUTH Authentication required.".into());
    }
    let db = &*shared.db;
    let rest = &args[1..];
    let arity = |ok: bool, f: &dyn Fn() -> Reply| {
        if ok {
            f()
        } else {
            Reply::error(format!("wrong number of arguments for '{name}' command"))
        }
    };
    match name.as_str() {
        "get" => arity(rest.len() == 1, &|| get(db, &rest[0])),
        "set" => arity(rest.len() >= 2, &|| set(db, rest)),
        "del" => arity(!rest.is_empty(), &|| del(db, rest)),
        "exists" => arity(!rest.is_empty(), &|| exists(db, rest)),
        "mget" => arity(!rest.is_empty(), &|| mget(db, rest)),
        "mset" => arity(!rest.is_empty() && rest.len().is_multiple_of(2), &|| mset(db, rest)),
        "range" => arity((2..=3).contains(&rest.len()), &|| range(db, rest)),
        "ping" => match rest {
            [] => Reply::Simple("PONG".into()),
            [msg] => Reply::Bulk(Some(msg.clone())),
            _ => arity(false, &|| Reply::ok()),
        },
        "echo" => arity(rest.len() == 1, &|| Reply::Bulk(Some(rest[0].clone()))),
        "info" => Reply::Bulk(Some(info(shared).into_bytes())),
        "auth" => auth(shared, session, rest),
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

fn get(db: &Db, key: &[u8]) -> Reply {
    db.get(key).map_or_else(Reply::error, Reply::Bulk)
}

fn set(db: &Db, args: &[Vec<u8>]) -> Reply {
    if args.len() > 2 {
        return Reply::error("SET options (EX, PX, NX, XX, ...) are not supported");
    }
    db.put(&args[0], &args[1]).map_or_else(Reply::error, |()| Reply::ok())
}

fn count_existing(db: &Db, keys: &[Vec<u8>]) -> Result<i64, crate::KvError> {
    let mut n = 0;
    for k in keys {
        n += i64::from(db.get(k)?.is_some());
    }
    Ok(n)
}

fn del(db: &Db, keys: &[Vec<u8>]) -> Reply {
    let existing = match count_existing(db, keys) {
        Ok(n) => n,
        Err(e) => return Reply::error(e),
    };
    let mut batch = WriteBatch::new();
    for k in keys {
        batch.delete(k.clone());
    }
    db.write(batch).map_or_else(Reply::error, |()| Reply::Integer(existing))
}

fn exists(db: &Db, keys: &[Vec<u8>]) -> Reply {
    count_existing(db, keys).map_or_else(Reply::error, Reply::Integer)
}

fn mget(db: &Db, keys: &[Vec<u8>]) -> Reply {
    let values: Result<Vec<Reply>, crate::KvError> = keys.iter().map(|k| Ok(Reply::Bulk(db.get(k)?))).collect();
    values.map_or_else(Reply::error, Reply::Array)
}

fn mset(db: &Db, pairs: &[Vec<u8>]) -> Reply {
    let mut batch = WriteBatch::new();
    for kv in pairs.chunks(2) {
        batch.put(kv[0].clone(), kv[1].clone());
    }
    db.write(batch).map_or_else(Reply::error, |()| Reply::ok())
}

fn range(db: &Db, args: &[Vec<u8>]) -> Reply {
    let count = match args
        .get(2)
        .map(|c| std::str::from_utf8(c).ok().and_then(|s| s.parse().ok()))
    {
        None => DEFAULT_RANGE_COUNT,
        Some(Some(n)) => n,
        Some(None) => return Reply::error("value is not an integer or out of range"),
    };
    let end = Some(args[1].as_slice()).filter(|e| !e.is_empty());
    match db.scan(&args[0], end, count) {
        Ok(entries) => Reply::Array(
            entries
                .into_iter()
                .flat_map(|(k, v)| [Reply::Bulk(Some(k)), Reply::Bulk(Some(v))])
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

/// `INFO`: tenants, background tasks and levels, in Redis's `key:value`
/// sections.
fn info(shared: &Shared) -> String {
    let mut s = String::from("# Server\r\nsluice_version:");
    s.push_str(env!("CARGO_PKG_VERSION"));
    s.push_str("\r\n\r\n# Tenants\r\n");
    shared.with_tenants(|tenants| {
        for t in tenants.iter().filter(|t| t.ops > 0) {
            let _ = write!(
                s,
                "tenant_{}:ops={},errors={},mean_us={:.1},p99_us={:.1}\r\n",
                t.name,
                t.ops,
                t.errors,
                t.latency.mean() / 1e3,
                t.latency.quantile(0.99) as f64 / 1e3
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
