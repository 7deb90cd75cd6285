//! `sluice serve` against Redis 7, reply for reply: random sequences of
//! string, counter, hash (field counters included), set, sorted-set, list and stream commands
//! (blocking pops and reads with a short timeout included), pub/sub on
//! the connection itself (what it publishes to its own channels), and
//! expiry
//! (errors included) go to both, over RESP2 and RESP3, and every reply
//! must be the same. Where Redis's order is its hash table's (KEYS,
//! HGETALL, SMEMBERS, SSCAN's page), both replies are sorted before they
//! are compared; SRANDMEMBER's members are random, so only how many come
//! back is compared, and SPOP pops with a count that takes every member.
//! Stream IDs are given (`*` would take each server's clock) and trims
//! are exact (`~` is exact here only: `commands/stream.rs`). Time enters
//! as relative expiries of 100 s or more, read back by TTL (whose seconds
//! may round apart by one when the two reads straddle a boundary), and as
//! absolute ones far in the future or long past (EXPIREAT 1), which GT
//! and LT compare: two relative expiries given a moment apart would
//! compare by that moment.
//!
//! Each case writes keys of its own (a fresh prefix), so the two stores
//! start every case empty as far as the case can see.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::resp::{encode_command, parse_reply, Limits, Reply};
use sluice_kv::{Db, Options, Server, ServerOptions};

/// A private redis-server, stopped when dropped.
struct Redis {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

fn redis_server() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("redis-server is missing under CI=true: scripts/test.sh installs redis-server");
        }
        eprintln!("skipping: redis-server is not installed (scripts/test.sh installs it)");
    }
    found
}

impl Redis {
    /// Starts one on a free port. The port is free when chosen, but another
    /// test may start its own server on it first; then this one exits, and
    /// the server that answers is the other test's. So a start counts only
    /// when the server answering is this child (its process id), else it
    /// is tried again on another port.
    fn start() -> Option<Redis> {
        let program = redis_server()?;
        for _ in 0..10 {
            if let Some(redis) = Redis::start_on_a_free_port(&program) {
                return Some(redis);
            }
        }
        panic!("redis-server did not start on any of 10 ports");
    }

    fn start_on_a_free_port(program: &Path) -> Option<Redis> {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(program)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting redis-server");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let started = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                return None;
            }
            if let Ok(stream) = TcpStream::connect(addr) {
                // Whatever else holds the port may answer anything, or
                // drop the connection.
                let info = Conn::on(stream).try_call(&words(&["INFO", "server"]));
                let ours = format!("process_id:{}\r\n", child.id());
                if matches!(&info, Ok(Reply::Bulk(Some(text))) if text.windows(ours.len()).any(|w| w == ours.as_bytes()))
                {
                    return Some(Redis { child, addr, _dir: dir });
                }
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sluice() -> (SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Arc::new(Db::open(rt, dir.path(), Options::default()).unwrap());
    let server = Server::bind("127.0.0.1:0", db, ServerOptions::default()).unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    (addr, dir)
}

/// A connection that sends one command and reads its reply.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn connect(addr: SocketAddr) -> Conn {
        Conn::on(TcpStream::connect(addr).unwrap())
    }

    fn on(stream: TcpStream) -> Conn {
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    fn call(&mut self, args: &[String]) -> Reply {
        match self.try_call(args) {
            Ok(reply) => reply,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    /// The reply to `args`, or why none came.
    fn try_call(&mut self, args: &[String]) -> std::io::Result<Reply> {
        let mut wire = Vec::new();
        encode_command(args, &mut wire);
        self.stream.write_all(&wire)?;
        // Messages a command published to this connection itself come
        // before its reply: they are gathered with it.
        let mut messages = Vec::new();
        loop {
            if let Some((reply, n)) = parse_reply(&self.buf, &Limits::default()).map_err(std::io::Error::other)? {
                self.buf.drain(..n);
                let message = matches!(&reply, Reply::Push(p) if matches!(p.first(),
                    Some(Reply::Bulk(Some(kind))) if kind == b"message" || kind == b"pmessage"));
                if message {
                    messages.push(reply);
                    continue;
                }
                if messages.is_empty() {
                    return Ok(reply);
                }
                messages.push(reply);
                return Ok(Reply::Array(messages));
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The reply with Redis's hash-table orders taken out.
fn normalized(command: &str, reply: Reply) -> Reply {
    let sorted = |mut items: Vec<Reply>| {
        items.sort_by_key(|k| format!("{k:?}"));
        items
    };
    match (command, reply) {
        ("SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "SPOP", Reply::Set(items)) => Reply::Set(sorted(items)),
        ("SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "SPOP", Reply::Array(items)) => Reply::Array(sorted(items)),
        ("SRANDMEMBER", Reply::Array(items)) => Reply::Integer(items.len() as i64),
        ("SSCAN", Reply::Array(mut page)) if page.len() == 2 => {
            if let Reply::Array(items) = page.pop().unwrap() {
                page.push(Reply::Array(sorted(items)));
            }
            Reply::Array(page)
        }
        ("KEYS", Reply::Array(mut keys)) => {
            keys.sort_by_key(|k| format!("{k:?}"));
            Reply::Array(keys)
        }
        ("HGETALL", Reply::Array(flat)) => {
            let mut pairs: Vec<(Reply, Reply)> = flat
                .chunks(2)
                .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or(Reply::Bulk(None))))
                .collect();
            pairs.sort_by_key(|(f, _)| format!("{f:?}"));
            Reply::Map(pairs)
        }
        ("HGETALL", Reply::Map(mut pairs)) => {
            pairs.sort_by_key(|(f, _)| format!("{f:?}"));
            Reply::Map(pairs)
        }
        // The line Redis names in a script's errors (`, on @user_script:1.`)
        // is a documented departure (`commands/script.rs`).
        ("EVAL", Reply::Error(e)) => Reply::Error(match e.split_once(", on @user_script:") {
            Some((head, _)) => head.to_string(),
            None => e,
        }),
        (_, reply) => reply,
    }
}

/// Two TTLs of one deadline, read a moment apart: each server rounds the
/// seconds left, and the moment may cross a rounding boundary.
fn within_a_second(a: &Reply, b: &Reply) -> bool {
    matches!((a, b), (Reply::Integer(a), Reply::Integer(b)) if *a > 0 && *b > 0 && a.abs_diff(*b) <= 1)
}

fn words(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// Commands with `@` where a key goes (replaced by the case's key).
fn command() -> impl Strategy<Value = Vec<String>> {
    let key = prop::sample::select(vec!["@a", "@b", "@c"]);
    let value = prop::sample::select(vec![
        "",
        "0",
        "1",
        "-1",
        "10",
        "abc",
        "3.5",
        "9223372036854775807",
        " 1",
        "1e3",
    ]);
    let int = prop::sample::select(vec![
        "0",
        "1",
        "-3",
        "100",
        "x",
        "9223372036854775807",
        "-9223372036854775808",
    ]);
    let float = prop::sample::select(vec![
        "0", "1.5", "-2", "1e2", "inf", "abc", "0.1", "-0", "5.0e3", "0x10", "1.1",
    ]);
    let field = prop::sample::select(vec!["f", "g", "h"]);
    let member = prop::sample::select(vec!["m", "n", "o", "p"]);
    let set_member = prop::sample::select(vec!["m", "n", "o", "1", "2"]);
    let score = prop::sample::select(vec!["0", "1", "-1", "2.5", "+inf", "-inf", "1e3", "x"]);
    let range = prop::sample::select(vec!["0", "1", "-1", "-2", "5", "x"]);
    let bound = prop::sample::select(vec!["-inf", "+inf", "0", "(1", "2.5", "x", "1"]);
    let lex = prop::sample::select(vec!["-", "+", "[m", "(n", "[o", "x"]);
    let set_opt = prop::sample::select(vec![
        "",
        "NX",
        "XX",
        "GET",
        "EX 100",
        "PX 200000",
        "KEEPTTL",
        "NX GET",
        "XX EX 300",
        "EX 0",
        "EX x",
        "NX XX",
    ]);
    let zadd_opt = prop::sample::select(vec![
        "", "NX", "XX", "GT", "LT", "CH", "INCR", "XX CH", "GT CH", "NX GT", "NX INCR",
    ]);
    let getex_opt = prop::sample::select(vec![
        "",
        "EX 100",
        "PX 200000",
        "PERSIST",
        "EX 0",
        "EX 100 PX 5",
        "BOGUS",
    ]);
    // GT and LT compare deadlines: relative ones given a moment apart
    // differ by that moment, so they compare absolute ones.
    let expire_opt = prop::sample::select(vec!["", "NX", "XX", "NX XX", "BOGUS"]);
    let expire_at_opt = prop::sample::select(vec!["", "NX", "XX", "GT", "LT", "GT LT", "NX GT"]);
    let at = prop::sample::select(vec!["4000000000", "4100000000", "1"]);
    let count = prop::sample::select(vec!["0", "1", "2", "5", "-1", "x"]);
    // Scripts over the sequence's keys: reads, read-modify-writes, and
    // the reply conversions (nil, status, error, tables, numbers).
    let script = prop::sample::select(vec![
        "return redis.call('get', KEYS[1])",
        "return redis.call('incr', KEYS[1])",
        "return redis.call('set', KEYS[1], ARGV[1])",
        "return redis.pcall('hget', KEYS[1], 'f')",
        "return {redis.call('exists', KEYS[1]), redis.call('type', KEYS[1])}",
        "local v = redis.call('lrange', KEYS[1], 0, -1); return #v",
        "return redis.call('zadd', KEYS[1], 1.5, ARGV[1])",
        "return tonumber(ARGV[1])",
        "return redis.call('del', KEYS[1]) == 1",
    ]);
    let end = prop::sample::select(vec!["LEFT", "RIGHT", "left", "UP"]);
    let split = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    prop_oneof![
        (key.clone(), value.clone(), set_opt).prop_map(move |(k, v, o)| [words(&["SET", k, v]), split(o)].concat()),
        key.clone().prop_map(|k| words(&["GET", k])),
        (key.clone(), value.clone()).prop_map(|(k, v)| words(&["GETSET", k, v])),
        (key.clone(), value.clone()).prop_map(|(k, v)| words(&["SETNX", k, v])),
        (key.clone(), value.clone()).prop_map(|(k, v)| words(&["SETEX", k, "100", v])),
        key.clone().prop_map(|k| words(&["STRLEN", k])),
        (key.clone(), value.clone()).prop_map(|(k, v)| words(&["APPEND", k, v])),
        key.clone().prop_map(|k| words(&["GETDEL", k])),
        (key.clone(), value.clone(), key.clone(), value.clone()).prop_map(|(k, v, l, w)| words(&["MSET", k, v, l, w])),
        (key.clone(), key.clone()).prop_map(|(k, l)| words(&["MGET", k, l, "@z"])),
        (key.clone(), key.clone()).prop_map(|(k, l)| words(&["DEL", k, l])),
        (key.clone(), key.clone()).prop_map(|(k, l)| words(&["EXISTS", k, l, k])),
        key.clone().prop_map(|k| words(&["TYPE", k])),
        key.clone().prop_map(|k| words(&["INCR", k])),
        key.clone().prop_map(|k| words(&["DECR", k])),
        (key.clone(), int.clone()).prop_map(|(k, n)| words(&["INCRBY", k, n])),
        (key.clone(), int.clone()).prop_map(|(k, n)| words(&["DECRBY", k, n])),
        (key.clone(), float.clone()).prop_map(|(k, f)| words(&["INCRBYFLOAT", k, f])),
        (key.clone(), field.clone(), value.clone()).prop_map(|(k, f, v)| words(&["HSET", k, f, v])),
        (key.clone(), field.clone(), value.clone(), field.clone())
            .prop_map(|(k, f, v, g)| words(&["HSET", k, f, v, g, v])),
        (key.clone(), field.clone(), value.clone()).prop_map(|(k, f, v)| words(&["HMSET", k, f, v])),
        (key.clone(), field.clone()).prop_map(|(k, f)| words(&["HGET", k, f])),
        (key.clone(), field.clone(), field.clone()).prop_map(|(k, f, g)| words(&["HMGET", k, f, g])),
        key.clone().prop_map(|k| words(&["HGETALL", k])),
        (key.clone(), field.clone(), field.clone()).prop_map(|(k, f, g)| words(&["HDEL", k, f, g])),
        (key.clone(), field.clone()).prop_map(|(k, f)| words(&["HEXISTS", k, f])),
        key.clone().prop_map(|k| words(&["HLEN", k])),
        (key.clone(), zadd_opt, score.clone(), member.clone()).prop_map(move |(k, o, s, m)| [
            words(&["ZADD", k]),
            split(o),
            words(&[s, m])
        ]
        .concat()),
        (
            key.clone(),
            score.clone(),
            member.clone(),
            score.clone(),
            member.clone()
        )
            .prop_map(|(k, s, m, t, n)| words(&["ZADD", k, s, m, t, n])),
        (key.clone(), score.clone(), member.clone()).prop_map(|(k, s, m)| words(&["ZINCRBY", k, s, m])),
        (key.clone(), member.clone(), member.clone()).prop_map(|(k, m, n)| words(&["ZREM", k, m, n])),
        key.clone().prop_map(|k| words(&["ZCARD", k])),
        (key.clone(), member.clone()).prop_map(|(k, m)| words(&["ZSCORE", k, m])),
        (key.clone(), member.clone()).prop_map(|(k, m)| words(&["ZRANK", k, m])),
        (key.clone(), member.clone()).prop_map(|(k, m)| words(&["ZREVRANK", k, m])),
        (key.clone(), range.clone(), range.clone(), any::<bool>()).prop_map(|(k, a, b, w)| {
            let mut c = words(&["ZRANGE", k, a, b]);
            if w {
                c.push("WITHSCORES".into());
            }
            c
        }),
        (key.clone(), bound.clone(), bound.clone(), any::<bool>(), any::<bool>()).prop_map(|(k, a, b, rev, limit)| {
            let mut c = words(&["ZRANGE", k, a, b, "BYSCORE"]);
            if rev {
                c.push("REV".into());
            }
            if limit {
                c.extend(words(&["LIMIT", "1", "2"]));
            }
            c.push("WITHSCORES".into());
            c
        }),
        (key.clone(), bound.clone(), bound.clone()).prop_map(|(k, a, b)| words(&[
            "ZRANGEBYSCORE",
            k,
            a,
            b,
            "WITHSCORES"
        ])),
        (key.clone(), bound.clone(), bound.clone()).prop_map(|(k, a, b)| words(&["ZREVRANGEBYSCORE", k, a, b])),
        (key.clone(), lex.clone(), lex.clone()).prop_map(|(k, a, b)| words(&["ZRANGEBYLEX", k, a, b])),
        (key.clone(), range.clone(), range.clone()).prop_map(|(k, a, b)| words(&["ZREVRANGE", k, a, b])),
        (key.clone(), expire_opt).prop_map(move |(k, o)| [words(&["EXPIRE", k, "100"]), split(o)].concat()),
        (key.clone(), at, expire_at_opt).prop_map(move |(k, t, o)| [words(&["EXPIREAT", k, t]), split(o)].concat()),
        key.clone().prop_map(|k| words(&["PEXPIRE", k, "300000"])),
        key.clone().prop_map(|k| words(&["TTL", k])),
        key.clone().prop_map(|k| words(&["PERSIST", k])),
        key.clone().prop_map(|k| words(&["KEYS", &format!("{k}*")])),
        any::<bool>().prop_map(|all| words(&[if all { "FLUSHALL" } else { "FLUSHDB" }])),
        (key.clone(), range.clone(), range.clone(), any::<bool>()).prop_map(|(k, a, b, old)| words(&[
            if old { "SUBSTR" } else { "GETRANGE" },
            k,
            a,
            b
        ])),
        (key.clone(), key.clone()).prop_map(|(k, l)| words(&["UNLINK", k, l])),
        (key.clone(), range.clone(), value.clone()).prop_map(|(k, o, v)| words(&["SETRANGE", k, o, v])),
        (key.clone(), value.clone(), key.clone(), value.clone())
            .prop_map(|(k, v, l, w)| words(&["MSETNX", k, v, l, w])),
        (key.clone(), key.clone(), any::<bool>()).prop_map(|(k, l, nx)| words(&[
            if nx { "RENAMENX" } else { "RENAME" },
            k,
            l
        ])),
        (key.clone(), getex_opt).prop_map(move |(k, o)| [words(&["GETEX", k]), split(o)].concat()),
        (key.clone(), lex.clone(), lex.clone(), any::<bool>()).prop_map(|(k, a, b, rev)| {
            let mut c = words(&["ZRANGE", k, a, b, "BYLEX"]);
            if rev {
                c.push("REV".into());
            }
            c
        }),
        (key.clone(), value.clone(), value.clone(), any::<bool>()).prop_map(|(k, v, w, left)| words(&[
            if left { "LPUSH" } else { "RPUSH" },
            k,
            v,
            w
        ])),
        (key.clone(), value.clone(), any::<bool>()).prop_map(|(k, v, left)| words(&[
            if left { "LPUSHX" } else { "RPUSHX" },
            k,
            v
        ])),
        (key.clone(), any::<bool>()).prop_map(|(k, left)| words(&[if left { "LPOP" } else { "RPOP" }, k])),
        (key.clone(), count.clone(), any::<bool>()).prop_map(|(k, n, left)| words(&[
            if left { "LPOP" } else { "RPOP" },
            k,
            n
        ])),
        key.clone().prop_map(|k| words(&["LLEN", k])),
        (key.clone(), range.clone()).prop_map(|(k, i)| words(&["LINDEX", k, i])),
        (key.clone(), range.clone(), range.clone()).prop_map(|(k, a, b)| words(&["LRANGE", k, a, b])),
        (key.clone(), range.clone(), value.clone()).prop_map(|(k, i, v)| words(&["LSET", k, i, v])),
        (key.clone(), range.clone(), range.clone()).prop_map(|(k, a, b)| words(&["LTRIM", k, a, b])),
        (key.clone(), key.clone(), end.clone(), end.clone()).prop_map(|(k, l, a, b)| words(&["LMOVE", k, l, a, b])),
        (key.clone(), key.clone()).prop_map(|(k, l)| words(&["RPOPLPUSH", k, l])),
        (key.clone(), script, value.clone()).prop_map(|(k, body, v)| words(&["EVAL", body, "1", k, v])),
        prop::sample::select(vec!["MULTI", "EXEC", "DISCARD", "UNWATCH", "PING"]).prop_map(|c| words(&[c])),
        key.clone().prop_map(|k| words(&["WATCH", k])),
        (key.clone(), set_member.clone(), set_member.clone()).prop_map(|(k, m, n)| words(&["SADD", k, m, n])),
        (key.clone(), set_member.clone()).prop_map(|(k, m)| words(&["SADD", k, m])),
        (key.clone(), set_member.clone(), set_member.clone()).prop_map(|(k, m, n)| words(&["SREM", k, m, n])),
        key.clone().prop_map(|k| words(&["SCARD", k])),
        key.clone().prop_map(|k| words(&["SMEMBERS", k])),
        (key.clone(), set_member.clone()).prop_map(|(k, m)| words(&["SISMEMBER", k, m])),
        (key.clone(), set_member.clone(), set_member.clone()).prop_map(|(k, m, n)| words(&["SMISMEMBER", k, m, n])),
        (
            prop::sample::select(vec!["SINTER", "SUNION", "SDIFF"]),
            key.clone(),
            key.clone()
        )
            .prop_map(|(c, k, l)| words(&[c, k, l])),
        (
            prop::sample::select(vec!["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]),
            key.clone(),
            key.clone(),
            key.clone()
        )
            .prop_map(|(c, d, k, l)| words(&[c, d, k, l])),
        (key.clone(), key.clone(), set_member.clone()).prop_map(|(k, l, m)| words(&["SMOVE", k, l, m])),
        (key.clone(), prop::sample::select(vec!["9", "0", "-1", "x"])).prop_map(|(k, n)| words(&["SPOP", k, n])),
        (key.clone(), count.clone()).prop_map(|(k, n)| words(&["SRANDMEMBER", k, n])),
        (key.clone(), any::<bool>()).prop_map(|(k, m)| {
            let mut c = words(&["SSCAN", k, "0", "COUNT", "100"]);
            if m {
                c.extend(words(&["MATCH", "[mn]*"]));
            }
            c
        }),
        (
            prop::sample::select(vec!["BLPOP", "BRPOP"]),
            key.clone(),
            key.clone(),
            prop::sample::select(vec!["0.01", "x", "-1"])
        )
            .prop_map(|(c, k, l, t)| words(&[c, k, l, t])),
        (key.clone(), key.clone(), end.clone()).prop_map(|(k, l, a)| words(&["BLMOVE", k, l, a, "RIGHT", "0.01"])),
        (key.clone(), key.clone()).prop_map(|(k, l)| words(&["BRPOPLPUSH", k, l, "0.01"])),
        (key.clone(), bound.clone(), bound.clone(), any::<bool>()).prop_map(|(k, a, b, remove)| words(&[
            if remove { "ZREMRANGEBYSCORE" } else { "ZCOUNT" },
            k,
            a,
            b
        ])),
        (key.clone(), lex.clone(), lex.clone(), any::<bool>()).prop_map(|(k, a, b, remove)| words(&[
            if remove { "ZREMRANGEBYLEX" } else { "ZLEXCOUNT" },
            k,
            a,
            b
        ])),
        (key.clone(), range.clone(), range.clone()).prop_map(|(k, a, b)| words(&["ZREMRANGEBYRANK", k, a, b])),
        (key.clone(), member.clone(), member.clone()).prop_map(|(k, m, n)| words(&["ZMSCORE", k, m, n])),
        (
            prop::sample::select(vec!["ZPOPMIN", "ZPOPMAX"]),
            key.clone(),
            prop::sample::select(vec!["", "0", "1", "3", "-1", "x"])
        )
            .prop_map(move |(c, k, n)| [words(&[c, k]), split(n)].concat()),
        (
            prop::sample::select(vec!["BZPOPMIN", "BZPOPMAX"]),
            key.clone(),
            key.clone()
        )
            .prop_map(|(c, k, l)| words(&[c, k, l, "0.01"])),
        (
            key.clone(),
            key.clone(),
            prop::sample::select(vec!["", "LIMIT 1", "LIMIT -1", "FOO 1"])
        )
            .prop_map(move |(k, l, o)| [words(&["SINTERCARD", "2", k, l]), split(o)].concat()),
        Just(words(&["SINTERCARD", "0", "x"])),
        Just(words(&["SINTERCARD", "3", "x"])),
        (
            key.clone(),
            key.clone(),
            end.clone(),
            prop::sample::select(vec!["", "COUNT 2", "COUNT 0", "COUNT x"])
        )
            .prop_map(move |(k, l, e, o)| [words(&["LMPOP", "2", k, l, e]), split(o)].concat()),
        (key.clone(), end.clone()).prop_map(|(k, e)| words(&["BLMPOP", "0.01", "1", k, e, "COUNT", "2"])),
        (
            key.clone(),
            prop::sample::select(vec![
                "",
                "NOMKSTREAM",
                "MAXLEN = 1",
                "MAXLEN 2",
                "MINID 2",
                "MAXLEN x",
                "LIMIT 1"
            ]),
            prop::sample::select(vec!["1-1", "2", "2-*", "3-5", "0-0", "x", "1"]),
            field.clone(),
            value.clone()
        )
            .prop_map(move |(k, o, id, f, v)| [words(&["XADD", k]), split(o), words(&[id, f, v])].concat()),
        (
            key.clone(),
            prop::sample::select(vec!["-", "1", "(1-1", "2-0", "x"]),
            prop::sample::select(vec!["+", "3", "(3-5", "2-0"]),
            prop::sample::select(vec!["", "COUNT 1", "COUNT 0", "COUNT x"]),
            any::<bool>()
        )
            .prop_map(move |(k, a, b, n, rev)| {
                let c = if rev {
                    words(&["XREVRANGE", k, b, a])
                } else {
                    words(&["XRANGE", k, a, b])
                };
                [c, split(n)].concat()
            }),
        key.clone().prop_map(|k| words(&["XLEN", k])),
        (key.clone(), prop::sample::select(vec!["1-1", "2-0 3-5", "x"])).prop_map(move |(k, ids)| [
            words(&["XDEL", k]),
            split(ids)
        ]
        .concat()),
        (
            key.clone(),
            prop::sample::select(vec!["MAXLEN 1", "MAXLEN = 0", "MINID 3", "MAXLEN", "FOO 1"])
        )
            .prop_map(move |(k, o)| [words(&["XTRIM", k]), split(o)].concat()),
        (
            key.clone(),
            key.clone(),
            prop::sample::select(vec!["", "COUNT 1", "BLOCK 10", "COUNT x"]),
            prop::sample::select(vec!["0 0", "1-1 $", "$ $", "0"])
        )
            .prop_map(move |(k, l, o, ids)| [
                words(&["XREAD"]),
                split(o),
                words(&["STREAMS", k, l]),
                split(ids)
            ]
            .concat()),
        (key.clone(), field.clone(), value.clone()).prop_map(|(k, f, v)| words(&["HSETNX", k, f, v])),
        (key.clone(), field.clone(), int.clone()).prop_map(|(k, f, n)| words(&["HINCRBY", k, f, n])),
        (key.clone(), field.clone(), float.clone()).prop_map(|(k, f, n)| words(&["HINCRBYFLOAT", k, f, n])),
        (prop::sample::select(vec!["HKEYS", "HVALS"]), key.clone()).prop_map(|(c, k)| words(&[c, k])),
        (key.clone(), field.clone()).prop_map(|(k, f)| words(&["HSTRLEN", k, f])),
        (key.clone(), prop::sample::select(vec!["", "MATCH [fg]", "COUNT 0"])).prop_map(move |(k, o)| [
            words(&["HSCAN", k, "0"]),
            split(o)
        ]
        .concat()),
        (
            key.clone(),
            prop::sample::select(vec!["0", "1", "-1", "2", "-2", "x"]),
            value.clone()
        )
            .prop_map(|(k, n, v)| words(&["LREM", k, n, v])),
        (key.clone(), value.clone(), value.clone(), value.clone(), value.clone())
            .prop_map(|(k, a, b, c, d)| words(&["RPUSH", k, a, b, c, d, a, b])),
        (
            prop::sample::select(vec!["SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE"]),
            key.clone()
        )
            .prop_map(|(c, k)| words(&[c, k])),
        (key.clone(), value.clone()).prop_map(|(k, v)| words(&["PUBLISH", k, v])),
        (
            key.clone(),
            prop::sample::select(vec!["BEFORE", "AFTER", "UP"]),
            value.clone(),
            value.clone()
        )
            .prop_map(|(k, w, p, v)| words(&["LINSERT", k, w, p, v])),
        (
            key.clone(),
            value.clone(),
            prop::sample::select(vec![
                "",
                "RANK 2",
                "RANK -1",
                "RANK 0",
                "COUNT 0",
                "COUNT 2 RANK -2",
                "MAXLEN 2 COUNT 0",
                "COUNT -1",
                "FOO"
            ])
        )
            .prop_map(move |(k, v, o)| [words(&["LPOS", k, v]), split(o)].concat()),
        Just(words(&["NOSUCHCOMMAND", "x"])),
        Just(words(&["GET"])),
        Just(words(&["ECHO", "hi"])),
    ]
}

#[test]
fn replies_are_redis_7s() {
    let Some(redis) = Redis::start() else { return };
    let (sluice, _dir) = sluice();
    let case = std::cell::Cell::new(0u64);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let sequences = (any::<bool>(), prop::collection::vec(command(), 1..40));
    let outcome = runner.run(&sequences, |(resp3, commands)| {
        case.set(case.get() + 1);
        let prefix = format!("case{}:", case.get());
        let mut conns = [Conn::connect(redis.addr), Conn::connect(sluice)];
        let hello = words(&["HELLO", if resp3 { "3" } else { "2" }]);
        for c in &mut conns {
            c.call(&hello);
        }
        for command in &commands {
            let args: Vec<String> = command.iter().map(|a| a.replacen('@', &prefix, 1)).collect();
            let [expected, got] = [0, 1].map(|i| normalized(&args[0], conns[i].call(&args)));
            if !(args[0] == "TTL" && within_a_second(&got, &expected)) {
                prop_assert_eq!(got, expected, "{:?} (resp3: {})", args, resp3);
            }
        }
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

/// COMMAND INFO says of each command what Redis 7 says: arity, flags, key
/// positions, ACL categories, and where its key specification begins its
/// search and how it finds the keys.
#[test]
fn command_info_is_redis_7s() {
    let Some(redis) = Redis::start() else { return };
    let (sluice, _dir) = sluice();
    let mut conns = [Conn::connect(redis.addr), Conn::connect(sluice)];
    let Reply::Array(names) = conns[1].call(&words(&["COMMAND", "LIST"])) else {
        panic!("COMMAND LIST is not a list")
    };
    let count = conns[1].call(&words(&["COMMAND", "COUNT"]));
    assert_eq!(count, Reply::Integer(names.len() as i64));
    for name in names {
        let Reply::Bulk(Some(name)) = name else {
            panic!("{name:?}")
        };
        let name = String::from_utf8(name).unwrap();
        if name == "range" {
            continue; // Sluice's own
        }
        let [expected, got] = [0, 1].map(|i| match conns[i].call(&words(&["COMMAND", "INFO", &name])) {
            Reply::Array(mut one) if one.len() == 1 => match one.remove(0) {
                Reply::Array(fields) => fields,
                other => panic!("{name}: {other:?}"),
            },
            other => panic!("{name}: {other:?}"),
        });
        assert_eq!(got[..7], expected[..7], "{name}");
        let search = |fields: &[Reply]| -> Vec<(Option<Reply>, Option<Reply>)> {
            let Reply::Array(specs) = &fields[8] else {
                panic!("{name}: key specs")
            };
            specs
                .iter()
                .map(|spec| (entry(spec, "begin_search"), entry(spec, "find_keys")))
                .collect()
        };
        assert_eq!(search(&got), search(&expected), "{name}: key specifications");
    }
}

/// The value at `key` of a map as RESP2 sends it (a flat list).
fn entry(map: &Reply, key: &str) -> Option<Reply> {
    let Reply::Array(flat) = map else { return None };
    flat.chunks(2)
        .find(|kv| kv[0] == Reply::Bulk(Some(key.into())))
        .map(|kv| kv[1].clone())
}
