//! The commands `sluice serve` answers, with Redis's replies and error
//! texts where Redis has the command: strings (GET, SET, DEL, EXISTS,
//! MGET, MSET, TYPE, UNLINK (DEL: the space comes back at compaction
//! either way); SET's options, SETEX, PSETEX, GETSET, SETNX, MSETNX,
//! STRLEN, APPEND, SETRANGE, GETRANGE (and its old name SUBSTR), GETDEL and the counters in
//! `commands/string.rs`), RENAME and RENAMENX (`commands/rename.rs`), hashes
//! (`commands/hash.rs`), sets (`commands/set.rs`), sorted sets
//! (`commands/zset.rs`), streams (`commands/stream.rs`), KEYS, SCAN and
//! DBSIZE (`commands/keys.rs`), expiry (`commands/expire.rs`), transactions
//! (MULTI, EXEC, DISCARD, WATCH, UNWATCH: `commands/transaction.rs`),
//! CLIENT's own-connection subcommands (`commands/client.rs`), pub/sub
//! (`commands/pubsub.rs`), PING,
//! ECHO, TIME, INFO (its sections: `commands/info.rs`), AUTH, HELLO (RESP2 or RESP3), SELECT 0, QUIT, CONFIG GET
//! and SET (the background tasks' knobs: `commands/config.rs`), and
//! COMMAND (what clients read about each command: `commands/command.rs`). `RANGE start end [count]` scans string keys
//! `start <= key < end` (an empty `end` is unbounded) and replies with a
//! flat key, value list. How the types sit in the store: `keyspace.rs`;
//! how commands reach it, inside a transaction or not: `commands/store.rs`.
//!
//! Lists (`commands/list.rs`; which list commands are offered and why:
//! `keyspace.rs`; the blocking pops: `commands/blocking.rs`) and Lua scripts (EVAL, EVALSHA, SCRIPT:
//! `commands/script.rs`; the libraries Redis gives them: `commands/cjson.rs`,
//! `commands/cmsgpack.rs`, `commands/bitop.rs`, `commands/lua_struct.rs`). Deleting a value of any type, or writing another
//! over it, and FLUSHALL and FLUSHDB: `commands/delete.rs`.
//!
//! Every command is a row of one table ([`COMMANDS`]): its name, the
//! argument counts it takes, and how it runs. A command is refused by
//! name before it runs (unknown, or the wrong number of arguments), which
//! is also what `MULTI` checks before it queues one.

mod bitop;
mod blocking;
mod cjson;
mod client;
mod cmsgpack;
mod command;
mod config;
mod delete;
mod expire;
mod hash;
mod info;
mod integer;
mod keys;
mod list;
mod long_double;
mod lua_struct;
mod lua_table;
mod pubsub;
mod rename;
mod script;
mod session;
mod set;
mod store;
mod stream;
mod string;
mod transaction;
mod value;
mod zset;

pub(crate) use delete::delete_value;
pub(crate) use pubsub::{leave, take_notified};
pub(crate) use session::Session;
pub(crate) use store::{deferring, take_written};

use crate::keyspace::{decode_value, is_live, now_ms, Tag, RESERVED};
use crate::resp::Reply;
use crate::shared::Shared;
use list::End;
use string::{write_strings, Over};
use transaction::Exec;
use value::{read, read_many, run, string, Typed};

/// Keys `RANGE` returns when no count is given.
const DEFAULT_RANGE_COUNT: usize = 100;

/// Redis's refusal of a command before `AUTH`, where a password is set.
pub(crate) fn noauth() -> Reply {
    Reply::Error("NOAUTH Authentication required.".into())
}

/// A command the server answers.
struct Command {
    /// Lower case, as the table is searched.
    name: &'static str,
    /// Whether it takes this many arguments after its name.
    arity: fn(usize) -> bool,
    run: fn(&Shared, &mut Session, &str, &[Vec<u8>]) -> Reply,
}

const fn command(
    name: &'static str,
    arity: fn(usize) -> bool,
    run: fn(&Shared, &mut Session, &str, &[Vec<u8>]) -> Reply,
) -> Command {
    Command { name, arity, run }
}

/// SINTERSTORE, SUNIONSTORE, SDIFFSTORE, which need no session.
fn store_combined(shared: &Shared, _: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    set::store_combined(shared, name, args)
}

/// ZCOUNT, ZLEXCOUNT and the ZREMRANGEBY commands, which need no session.
fn count_or_remove_range(shared: &Shared, _: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    zset::count_or_remove_range(shared, name, args)
}

/// ZRANGE and its older forms, in the connection's protocol.
fn zrange(shared: &Shared, session: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    zset::zrange(shared, name, args, session.resp3)
}

/// Every command, by name (sorted, for the search).
const COMMANDS: &[Command] = &[
    command("append", |n| n == 2, |s, _, _, r| string::append(s, r)),
    command("auth", |n| n >= 1, |s, c, _, r| auth(s, c, r)),
    command("blmove", |n| n == 5, blocking::bmove),
    command("blmpop", |n| n >= 4, blocking::blmpop),
    command("blpop", |n| n >= 2, blocking::bpop),
    command("brpop", |n| n >= 2, blocking::bpop),
    command("brpoplpush", |n| n == 3, blocking::bmove),
    command("bzpopmax", |n| n >= 2, blocking::bzpop),
    command("bzpopmin", |n| n >= 2, blocking::bzpop),
    command("client", |n| n >= 1, |_, c, _, r| client::client(c, r)),
    command("command", |_| true, |_, _, _, r| command::command(r)),
    command("config", |n| n >= 1, |s, _, _, r| config::config(s, r)),
    command("dbsize", |n| n == 0, |s, _, _, _| keys::dbsize(s)),
    command("decr", |n| n == 1, |s, _, _, r| string::incr_by(s, &r[0], Ok(-1))),
    command(
        "decrby",
        |n| n == 2,
        |s, _, _, r| string::incr_by(s, &r[0], string::decrement(&r[1])),
    ),
    command("del", |n| n >= 1, |s, _, _, r| delete::del(s, r)),
    command("discard", |n| n == 0, |_, c, _, _| c.transaction.discard()),
    command("echo", |n| n == 1, |_, _, _, r| Reply::Bulk(Some(r[0].clone()))),
    command(
        "eval",
        |n| n >= 2,
        |s, c, name, r| script::eval(s, c, name, r, &from_script),
    ),
    command(
        "eval_ro",
        |n| n >= 2,
        |s, c, name, r| script::eval(s, c, name, r, &from_script),
    ),
    command(
        "evalsha",
        |n| n >= 2,
        |s, c, name, r| script::eval(s, c, name, r, &from_script),
    ),
    command(
        "evalsha_ro",
        |n| n >= 2,
        |s, c, name, r| script::eval(s, c, name, r, &from_script),
    ),
    command("exec", |n| n == 0, |s, c, _, _| exec(s, c)),
    command("exists", |n| n >= 1, |s, _, _, r| exists(s, r)),
    command("expire", |n| n >= 2, |s, _, name, r| expire::expire(s, name, r)),
    command("expireat", |n| n >= 2, |s, _, name, r| expire::expire(s, name, r)),
    command("expiretime", |n| n == 1, |s, _, name, r| expire::ttl(s, name, &r[0])),
    command("flushall", |_| true, |s, _, _, r| delete::flush(s, r)),
    command("flushdb", |_| true, |s, _, _, r| delete::flush(s, r)),
    command("get", |n| n == 1, |s, _, _, r| get(s, &r[0])),
    command("getdel", |n| n == 1, |s, _, _, r| string::getdel(s, &r[0])),
    command("getex", |n| n >= 1, |s, _, _, r| string::getex(s, r)),
    command("getrange", |n| n == 3, |s, _, _, r| string::getrange(s, r)),
    command("getset", |n| n == 2, |s, _, _, r| string::getset(s, r)),
    command("hdel", |n| n >= 2, |s, _, _, r| hash::hdel(s, r)),
    command("hello", |_| true, |s, c, _, r| hello(s, c, r)),
    command("hexists", |n| n == 2, |s, _, name, r| hash::read_hash(s, name, r)),
    command("hget", |n| n == 2, |s, _, name, r| hash::read_hash(s, name, r)),
    command("hgetall", |n| n == 1, |s, _, name, r| hash::read_hash(s, name, r)),
    command("hincrby", |n| n == 3, |s, _, _, r| hash::hincrby(s, r)),
    command("hincrbyfloat", |n| n == 3, |s, _, _, r| hash::hincrbyfloat(s, r)),
    command("hkeys", |n| n == 1, |s, _, name, r| hash::read_hash(s, name, r)),
    command("hlen", |n| n == 1, |s, _, name, r| hash::read_hash(s, name, r)),
    command("hmget", |n| n >= 2, |s, _, name, r| hash::read_hash(s, name, r)),
    command("hmset", |n| n >= 3 && n % 2 == 1, |s, _, _, r| hash::hset(s, r, true)),
    command("hscan", |n| n >= 2, |s, _, _, r| hash::hscan(s, r)),
    command("hset", |n| n >= 3 && n % 2 == 1, |s, _, _, r| hash::hset(s, r, false)),
    command("hsetnx", |n| n == 3, |s, _, _, r| hash::hsetnx(s, r)),
    command("hstrlen", |n| n == 2, |s, _, name, r| hash::read_hash(s, name, r)),
    command("hvals", |n| n == 1, |s, _, name, r| hash::read_hash(s, name, r)),
    command("incr", |n| n == 1, |s, _, _, r| string::incr_by(s, &r[0], Ok(1))),
    command(
        "incrby",
        |n| n == 2,
        |s, _, _, r| string::incr_by(s, &r[0], string::increment(&r[1])),
    ),
    command("incrbyfloat", |n| n == 2, |s, _, _, r| string::incrbyfloat(s, r)),
    command(
        "info",
        |_| true,
        |s, _, _, r| Reply::Bulk(Some(info::info(s, r).into_bytes())),
    ),
    command("keys", |n| n == 1, |s, _, _, r| keys::keys(s, &r[0])),
    command("lindex", |n| n == 2, |s, _, name, r| list::read_list(s, name, r)),
    command("linsert", |n| n == 4, |s, _, _, r| list::linsert(s, r)),
    command("llen", |n| n == 1, |s, _, name, r| list::read_list(s, name, r)),
    command("lmove", |n| n == 4, |s, _, _, r| list::lmove(s, r, None)),
    command("lmpop", |n| n >= 3, |s, _, _, r| list::lmpop(s, r)),
    command("lpop", |n| n == 1 || n == 2, |s, _, _, r| list::pop(s, r, End::Left)),
    command("lpos", |n| n >= 2, |s, _, _, r| list::lpos(s, r)),
    command("lpush", |n| n >= 2, |s, _, _, r| list::push(s, r, End::Left, false)),
    command("lpushx", |n| n >= 2, |s, _, _, r| list::push(s, r, End::Left, true)),
    command("lrange", |n| n == 3, |s, _, name, r| list::read_list(s, name, r)),
    command("lrem", |n| n == 3, |s, _, _, r| list::lrem(s, r)),
    command("lset", |n| n == 3, |s, _, _, r| list::lset(s, r)),
    command("ltrim", |n| n == 3, |s, _, _, r| list::ltrim(s, r)),
    command("mget", |n| n >= 1, |s, _, _, r| mget(s, r)),
    command("mset", |n| n >= 2 && n % 2 == 0, |s, _, _, r| mset(s, r)),
    command("msetnx", |n| n >= 2 && n % 2 == 0, |s, _, _, r| string::msetnx(s, r)),
    command("multi", |n| n == 0, |_, c, _, _| c.transaction.multi()),
    command("persist", |n| n == 1, |s, _, _, r| expire::persist(s, &r[0])),
    command("pexpire", |n| n >= 2, |s, _, name, r| expire::expire(s, name, r)),
    command("pexpireat", |n| n >= 2, |s, _, name, r| expire::expire(s, name, r)),
    command("pexpiretime", |n| n == 1, |s, _, name, r| expire::ttl(s, name, &r[0])),
    command("ping", |n| n <= 1, |_, c, _, r| ping(c, r)),
    command("psetex", |n| n == 3, |s, _, name, r| string::setex(s, name, r)),
    command("psubscribe", |n| n >= 1, pubsub::subscribe),
    command("pttl", |n| n == 1, |s, _, name, r| expire::ttl(s, name, &r[0])),
    command("publish", |n| n == 2, |s, _, _, r| pubsub::publish(s, r)),
    command("pubsub", |n| n >= 1, |s, _, _, r| pubsub::pubsub(s, r)),
    command("punsubscribe", |_| true, pubsub::unsubscribe),
    command(
        "quit",
        |_| true,
        |_, c, _, _| {
            c.quit = true;
            Reply::ok()
        },
    ),
    command("range", |n| (2..=3).contains(&n), |s, _, _, r| range(s, r)),
    command("rename", |n| n == 2, |s, _, _, r| rename::rename(s, r, false)),
    command("renamenx", |n| n == 2, |s, _, _, r| rename::rename(s, r, true)),
    // A server alone: a primary with no replicas, as clients that check
    // where they may write ask it.
    command(
        "role",
        |n| n == 0,
        |_, _, _, _| {
            let master = Reply::Bulk(Some(b"master".to_vec()));
            Reply::Array(vec![master, Reply::Integer(0), Reply::Array(Vec::new())])
        },
    ),
    command("rpop", |n| n == 1 || n == 2, |s, _, _, r| list::pop(s, r, End::Right)),
    command(
        "rpoplpush",
        |n| n == 2,
        |s, _, _, r| list::lmove(s, r, Some((End::Right, End::Left))),
    ),
    command("rpush", |n| n >= 2, |s, _, _, r| list::push(s, r, End::Right, false)),
    command("rpushx", |n| n >= 2, |s, _, _, r| list::push(s, r, End::Right, true)),
    command("sadd", |n| n >= 2, |s, _, _, r| set::sadd(s, r)),
    command("scan", |n| n >= 1, |s, _, _, r| keys::scan(s, r)),
    command("scard", |n| n == 1, |s, _, name, r| set::read_set(s, name, r)),
    command("script", |n| n >= 1, |s, _, _, r| script::script(s, r)),
    command("sdiff", |n| n >= 1, |s, _, name, r| set::combined(s, name, r)),
    command("sdiffstore", |n| n >= 2, store_combined),
    command(
        "select",
        |n| n == 1,
        |_, _, _, r| match r[0].as_slice() {
            b"0" => Reply::ok(),
            _ => Reply::error("DB index is out of range"),
        },
    ),
    command("set", |n| n >= 2, |s, _, _, r| string::set(s, r)),
    command("setex", |n| n == 3, |s, _, name, r| string::setex(s, name, r)),
    command("setnx", |n| n == 2, |s, _, _, r| string::setnx(s, r)),
    command("setrange", |n| n == 3, |s, _, _, r| string::setrange(s, r)),
    command("sinter", |n| n >= 1, |s, _, name, r| set::combined(s, name, r)),
    command("sintercard", |n| n >= 2, |s, _, _, r| set::sintercard(s, r)),
    command("sinterstore", |n| n >= 2, store_combined),
    command("sismember", |n| n == 2, |s, _, name, r| set::read_set(s, name, r)),
    command("smembers", |n| n == 1, |s, _, name, r| set::read_set(s, name, r)),
    command("smismember", |n| n >= 2, |s, _, name, r| set::read_set(s, name, r)),
    command("smove", |n| n == 3, |s, _, _, r| set::smove(s, r)),
    command("spop", |n| n >= 1, |s, _, _, r| set::spop(s, r)),
    command("srandmember", |n| n >= 1, |s, _, _, r| set::srandmember(s, r)),
    command("srem", |n| n >= 2, |s, _, _, r| set::srem(s, r)),
    command("sscan", |n| n >= 2, |s, _, _, r| set::sscan(s, r)),
    command("strlen", |n| n == 1, |s, _, _, r| string::strlen(s, &r[0])),
    command("subscribe", |n| n >= 1, pubsub::subscribe),
    command("substr", |n| n == 3, |s, _, _, r| string::getrange(s, r)),
    command("sunion", |n| n >= 1, |s, _, name, r| set::combined(s, name, r)),
    command("sunionstore", |n| n >= 2, store_combined),
    command("time", |n| n == 0, |_, _, _, _| time()),
    // The store keeps no access times: TOUCH counts the keys that exist.
    command("touch", |n| n >= 1, |s, _, _, r| exists(s, r)),
    command("ttl", |n| n == 1, |s, _, name, r| expire::ttl(s, name, &r[0])),
    command("type", |n| n == 1, |s, _, _, r| type_of(s, &r[0])),
    command("unlink", |n| n >= 1, |s, _, _, r| delete::del(s, r)),
    command("unsubscribe", |_| true, pubsub::unsubscribe),
    command("unwatch", |n| n == 0, |_, c, _, _| c.transaction.unwatch()),
    command("watch", |n| n >= 1, |s, c, _, r| watch(s, c, r)),
    command("xadd", |n| n >= 4, |s, _, _, r| stream::xadd(s, r)),
    command("xdel", |n| n >= 2, |s, _, _, r| stream::xdel(s, r)),
    command("xlen", |n| n == 1, |s, _, _, r| stream::xlen(s, r)),
    command("xrange", |n| n >= 3, |s, _, name, r| stream::xrange(s, name, r)),
    command("xread", |n| n >= 3, stream::xread),
    command("xrevrange", |n| n >= 3, |s, _, name, r| stream::xrange(s, name, r)),
    command("xtrim", |n| n >= 3, |s, _, _, r| stream::xtrim(s, r)),
    command("zadd", |n| n >= 3, |s, _, _, r| zset::zadd(s, r)),
    command("zcard", |n| n == 1, |s, _, name, r| zset::read_zset(s, name, r)),
    command("zcount", |n| n == 3, count_or_remove_range),
    command(
        "zincrby",
        |n| n == 3,
        |s, _, _, r| zset::zadd(s, &[r[0].clone(), b"INCR".to_vec(), r[1].clone(), r[2].clone()]),
    ),
    command("zlexcount", |n| n == 3, count_or_remove_range),
    command("zmscore", |n| n >= 2, |s, _, _, r| zset::zmscore(s, r)),
    command("zpopmax", |n| n >= 1, |s, c, name, r| zset::zpop(s, name, r, c.resp3)),
    command("zpopmin", |n| n >= 1, |s, c, name, r| zset::zpop(s, name, r, c.resp3)),
    command("zrange", |n| n >= 3, zrange),
    command("zrangebylex", |n| n >= 3, zrange),
    command("zrangebyscore", |n| n >= 3, zrange),
    command("zrank", |n| n == 2, |s, _, name, r| zset::read_zset(s, name, r)),
    command("zrem", |n| n >= 2, |s, _, _, r| zset::zrem(s, r)),
    command("zremrangebylex", |n| n == 3, count_or_remove_range),
    command("zremrangebyrank", |n| n == 3, count_or_remove_range),
    command("zremrangebyscore", |n| n == 3, count_or_remove_range),
    command("zrevrange", |n| n >= 3, zrange),
    command("zrevrangebylex", |n| n >= 3, zrange),
    command("zrevrangebyscore", |n| n >= 3, zrange),
    command("zrevrank", |n| n == 2, |s, _, name, r| zset::read_zset(s, name, r)),
    command("zscan", |n| n >= 2, |s, _, _, r| zset::zscan(s, r)),
    command("zscore", |n| n == 2, |s, _, name, r| zset::read_zset(s, name, r)),
];

fn lookup(name: &str) -> Option<&'static Command> {
    COMMANDS
        .binary_search_by(|c| c.name.cmp(name))
        .ok()
        .map(|i| &COMMANDS[i])
}

/// Redis's refusal of a command it does not know: the name as sent, then
/// the first arguments, quoted, up to 128 bytes of them (each cut to fit),
/// line breaks made spaces so that the error stays one line.
fn unknown_command(args: &[Vec<u8>]) -> Reply {
    let lossy = |b: &[u8], max: usize| String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned();
    let mut shown = String::new();
    for arg in &args[1..] {
        if shown.len() >= 128 {
            break;
        }
        shown.push_str(&format!("'{}' ", lossy(arg, 128 - shown.len())));
    }
    let message = format!(
        "unknown command '{}', with args beginning with: {shown}",
        lossy(&args[0], 128)
    );
    Reply::error(message.replace(['\r', '\n'], " "))
}

/// Runs a client's command, or queues it inside `MULTI`.
pub(crate) fn execute(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    if !session.authenticated && !matches!(name.as_str(), "auth" | "hello" | "quit" | "ping") {
        return noauth();
    }
    let rest = &args[1..];
    let refusal = match lookup(&name) {
        None => unknown_command(args),
        Some(c) if !(c.arity)(rest.len()) => Reply::error(format!("wrong number of arguments for '{name}' command")),
        Some(_) if session.subscriptions() > 0 && !session.resp3 && !pubsub::allowed_while_subscribed(&name) => {
            Reply::error(format!(
                "Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
            ))
        }
        Some(_) if session.transaction.queueing() && !transaction::runs_at_once(&name) => {
            return session.transaction.queue(args, transaction::MAX_QUEUED_BYTES)
        }
        Some(c) => return (c.run)(shared, session, &name, rest),
    };
    // A refused EXEC ends the transaction, and says so, as Redis's does.
    if name == "exec" {
        let _ = session.transaction.discard();
        return match refusal {
            Reply::Error(e) => Reply::Error(format!(
                "EXECABORT Transaction discarded because of: {}",
                e.strip_prefix("ERR ").unwrap_or(&e)
            )),
            other => other,
        };
    }
    session.transaction.refused();
    refusal
}

/// A command a script calls (`redis.call`), refused as Redis refuses
/// unknown commands and those scripts may not call.
fn from_script(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    match lookup(&name) {
        None => Reply::error("Unknown Redis command called from script"),
        Some(_) if !command::allowed_in_scripts(name.as_bytes()) => {
            Reply::error("This Redis command is not allowed from script")
        }
        Some(c) if !(c.arity)(args.len() - 1) => Reply::error("Wrong number of args calling Redis command from script"),
        Some(c) => (c.run)(shared, session, &name, &args[1..]),
    }
}

/// `PING [message]`: PONG or the message; on a connection subscribed in
/// RESP2, the two as a pair, as Redis answers there.
fn ping(session: &Session, args: &[Vec<u8>]) -> Reply {
    if session.subscriptions() > 0 && !session.resp3 {
        let message = args.first().cloned().unwrap_or_default();
        return Reply::Array(vec![Reply::Bulk(Some(b"pong".to_vec())), Reply::Bulk(Some(message))]);
    }
    match args {
        [msg] => Reply::Bulk(Some(msg.clone())),
        _ => Reply::Simple("PONG".into()),
    }
}

/// `WATCH key...`: EXEC will abort if one of them is written, or expires.
fn watch(shared: &Shared, session: &mut Session, keys: &[Vec<u8>]) -> Reply {
    let deadline = |k: &[u8]| match read(shared, k)? {
        Typed::Found(_, _, deadline) => Ok(deadline),
        Typed::Absent => Ok(None),
    };
    session.transaction.watch(&shared.locks, keys, deadline)
}

/// `EXEC`: runs the queued commands holding every key stripe, their writes
/// in one batch; nil if a watched key may have been written or has expired.
fn exec(shared: &Shared, session: &mut Session) -> Reply {
    let (queued, watched, expires) = match session.transaction.exec() {
        Exec::Answer(reply) => return reply,
        Exec::Run(queued, watched, expires) => (queued, watched, expires),
    };
    let mut all = shared.locks.lock_all();
    let written = watched.iter().any(|&(stripe, count)| all.count(stripe) != count);
    if written || expires.is_some_and(|at| at <= now_ms()) {
        return Reply::NullArray;
    }
    let run = || {
        queued
            .iter()
            .map(|args| {
                let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
                let c = lookup(&name).expect("queued commands were looked up");
                (c.run)(shared, session, &name, &args[1..])
            })
            .collect()
    };
    store::atomically(shared, &mut all, run).map_or_else(|refused| refused, Reply::Array)
}

/// `TIME`: the server's clock, seconds and microseconds since the Unix
/// epoch, as two bulk strings.
fn time() -> Reply {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let bulk = |n: u64| Reply::Bulk(Some(n.to_string().into_bytes()));
    Reply::Array(vec![bulk(since.as_secs()), bulk(u64::from(since.subsec_micros()))])
}

fn get(shared: &Shared, key: &[u8]) -> Reply {
    run(|| Ok(Reply::Bulk(string(shared, key)?)))
}

fn mset(shared: &Shared, pairs: &[Vec<u8>]) -> Reply {
    let _locks = store::lock(shared, pairs.iter().step_by(2).map(Vec::as_slice));
    run(|| write_strings(shared, pairs, None, Over::Unread).map(|()| Reply::ok()))
}

fn exists(shared: &Shared, keys: &[Vec<u8>]) -> Reply {
    run(|| {
        let found = read_many(shared, keys)?;
        Ok(Reply::Integer(
            found.iter().filter(|t| !matches!(t, Typed::Absent)).count() as i64,
        ))
    })
}

/// MGET: a key that holds no string is nil, as in Redis.
fn mget(shared: &Shared, keys: &[Vec<u8>]) -> Reply {
    run(|| {
        let values = read_many(shared, keys)?.into_iter().map(|t| match t {
            Typed::Found(Tag::String, body, _) => Reply::Bulk(Some(body)),
            _ => Reply::Bulk(None),
        });
        Ok(Reply::Array(values.collect()))
    })
}

fn type_of(shared: &Shared, key: &[u8]) -> Reply {
    run(|| {
        let name = match read(shared, key)? {
            Typed::Absent => "none",
            Typed::Found(tag, ..) => tag.name(),
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
    match store::scan(shared, &args[0], Some(end), count) {
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
        Err(refused) => refused,
    }
}

/// `AUTH password` or `AUTH user password`; the user becomes the tenant.
/// Without a configured password any user is accepted, which is how a
/// client names its tenant.
fn auth(shared: &Shared, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let (user, password) = match args {
        [p] => (None, p),
        [u, p] => (Some(String::from_utf8_lossy(u).into_owned()), p),
        _ => return Reply::error("syntax error"),
    };
    match &shared.options.password {
        Some(want) if want.as_bytes() != password.as_slice() => {
            return Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
        }
        None if user.is_none() => {
            return Reply::error(
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            )
        }
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
/// answers with the server's properties, as Redis does; `SETNAME` names
/// the connection as `CLIENT SETNAME` does.
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
    let (mut credentials, mut setname) = (None, None);
    while let [option, tail @ ..] = rest {
        rest = match (option.to_ascii_lowercase().as_slice(), tail) {
            (b"auth", [user, password, tail @ ..]) => {
                credentials = Some([user.clone(), password.clone()]);
                tail
            }
            (b"setname", [name, tail @ ..]) => {
                setname = Some(name);
                tail
            }
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
    if let Some(name) = setname {
        if let Err(refused) = session.client.set_name(name) {
            return refused;
        }
    }
    session.resp3 = resp3;
    let text = |s: &str| Reply::Bulk(Some(s.as_bytes().to_vec()));
    Reply::Map(vec![
        (text("server"), text("sluice")),
        (text("version"), text(env!("CARGO_PKG_VERSION"))),
        (text("proto"), Reply::Integer(if resp3 { 3 } else { 2 })),
        // Redis's fields in Redis's order: clients that read the RESP2
        // reply by position take the mode from the ninth element.
        (text("id"), Reply::Integer(session.id as i64)),
        (text("mode"), text("standalone")),
        (text("role"), text("master")),
        (text("modules"), Reply::Array(Vec::new())),
    ])
}
