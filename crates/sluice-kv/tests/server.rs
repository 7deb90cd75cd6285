//! `sluice serve`'s server over real sockets: commands, tenants in INFO,
//! bad input answered per client, and redis-cli and redis-benchmark
//! (Debian's redis-tools, installed by scripts/test.sh) running against it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;

use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options, Server, ServerOptions};

fn start(options: Options) -> (SocketAddr, tempfile::TempDir) {
    start_with(options, ServerOptions::default())
}

fn start_with(options: Options, server_options: ServerOptions) -> (SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Arc::new(Db::open(rt, dir.path(), options).unwrap());
    let server = Server::bind("127.0.0.1:0", db, server_options).unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    (addr, dir)
}

struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        Client {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// Sends a command as a RESP array and returns the reply in RESP.
    fn call(&mut self, args: &[&str]) -> String {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.send_raw(req.as_bytes());
        self.reply()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.reader.read_line(&mut l).unwrap();
        l
    }

    /// One whole reply, nested arrays included.
    fn reply(&mut self) -> String {
        let first = self.line();
        let n: i64 = first[1..].trim_end().parse().unwrap_or(-1);
        match first.as_bytes()[0] {
            b'$' if n >= 0 => {
                let mut body = vec![0; n as usize + 2];
                self.reader.read_exact(&mut body).unwrap();
                first + &String::from_utf8_lossy(&body)
            }
            b'*' if n >= 0 => (0..n).fold(first, |acc, _| acc + &self.reply()),
            b'%' if n >= 0 => (0..2 * n).fold(first, |acc, _| acc + &self.reply()),
            _ => first,
        }
    }
}

#[test]
fn commands_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    assert_eq!(c.call(&["SET", "a", "1"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", "a"]), "$1\r\n1\r\n");
    assert_eq!(c.call(&["GET", "missing"]), "$-1\r\n");
    assert_eq!(c.call(&["MSET", "b", "2", "c", "3"]), "+OK\r\n");
    assert_eq!(c.call(&["MGET", "a", "x", "c"]), "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n3\r\n");
    assert_eq!(c.call(&["EXISTS", "a", "b", "x"]), ":2\r\n");
    assert_eq!(
        c.call(&["TOUCH", "a", "x", "b"]),
        ":2\r\n",
        "keys that exist, as Redis counts them"
    );
    assert_eq!(
        c.call(&["RANGE", "b", ""]),
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n"
    );
    assert_eq!(c.call(&["RANGE", "a", "c", "1"]), "*2\r\n$1\r\na\r\n$1\r\n1\r\n");
    assert_eq!(c.call(&["DEL", "a", "x"]), ":1\r\n");
    assert_eq!(c.call(&["DEL", "b", "b"]), ":1\r\n", "a key named twice counts once");
    assert_eq!(c.call(&["GET", "a"]), "$-1\r\n");
    assert_eq!(c.call(&["GET"]), "-ERR wrong number of arguments for 'get' command\r\n");
    assert_eq!(
        c.call(&["NOPE"]),
        "-ERR unknown command 'NOPE', with args beginning with: \r\n"
    );
    assert_eq!(
        c.call(&["AUTH", "secret"]),
        "-ERR AUTH <password> called without any password configured for the default user. \
         Are you sure your configuration is correct?\r\n",
        "redis-py reads this text as an authentication error"
    );
    assert_eq!(c.call(&["AUTH", "alice", "secret"]), "+OK\r\n");
    c.call(&["SET", "k", "v"]);
    let info = c.call(&["INFO"]);
    assert!(info.contains("tenant_alice:ops="), "{info}");
    assert!(info.contains("flush:bytes="), "{info}");
    assert!(info.contains("level0:tables="), "{info}");
    for field in ["role:master\r\n", "loading:0\r\n", "used_memory:", "used_memory_human:"] {
        assert!(info.contains(field), "{field} in {info}");
    }
    assert_eq!(c.call(&["ROLE"]), "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    let time = c.call(&["TIME"]);
    let fields: Vec<&str> = time.split("\r\n").collect();
    assert_eq!(fields[0], "*2", "{time}");
    let secs: u64 = fields[2].parse().unwrap();
    let micros: u64 = fields[4].parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 1 && micros < 1_000_000, "{time}");
    assert_eq!(c.call(&["QUIT"]), "+OK\r\n");
}

#[test]
fn bad_input_gets_an_error_for_that_client_only() {
    let options = Options {
        max_value_bytes: 100,
        ..Options::default()
    };
    let (addr, _dir) = start(options);
    let mut good = Client::connect(addr);
    let mut bad = Client::connect(addr);
    assert_eq!(good.call(&["SET", "k", "before"]), "+OK\r\n");
    let big = "x".repeat(100);
    let refused = bad.call(&["SET", "k", &big]);
    assert!(
        refused.starts_with("-ERR value of 100 bytes is longer than the limit of 99 bytes"),
        "{refused}"
    );
    bad.send_raw(b"*3\r\n$3\r\nSET\r\n$2\r\n\xffk\r\n$1\r\nv\r\n");
    let refused = bad.reply();
    assert!(
        refused.contains("keys starting with byte 0xff are reserved"),
        "{refused}"
    );
    bad.send_raw(b"*1\r\n:oops\r\n");
    assert_eq!(bad.reply(), "-ERR Protocol error: expected '$', got ':'\r\n");
    assert_eq!(bad.line(), "", "the server closes a connection that broke the protocol");
    assert_eq!(good.call(&["GET", "k"]), "$6\r\nbefore\r\n");
    assert_eq!(good.call(&["SET", "k", "after"]), "+OK\r\n");
}

#[test]
fn hashes_and_sorted_sets_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    // YCSB's Redis client: HMSET per record, ZADD into an index, HGETALL
    // or HMGET to read, ZRANGEBYSCORE ... LIMIT to scan, DEL + ZREM.
    assert_eq!(c.call(&["HMSET", "user1", "f0", "a", "f1", "b"]), "+OK\r\n");
    assert_eq!(
        c.call(&["HSET", "user1", "f1", "B", "f2", "c"]),
        ":1\r\n",
        "one new field"
    );
    assert_eq!(
        c.call(&["HGETALL", "user1"]),
        "*6\r\n$2\r\nf0\r\n$1\r\na\r\n$2\r\nf1\r\n$1\r\nB\r\n$2\r\nf2\r\n$1\r\nc\r\n"
    );
    assert_eq!(c.call(&["HMGET", "user1", "f2", "nope"]), "*2\r\n$1\r\nc\r\n$-1\r\n");
    assert_eq!(c.call(&["HGET", "user1", "f0"]), "$1\r\na\r\n");
    assert_eq!(c.call(&["HLEN", "user1"]), ":3\r\n");
    assert_eq!(c.call(&["HDEL", "user1", "f0", "nope"]), ":1\r\n");
    assert_eq!(c.call(&["HEXISTS", "user1", "f0"]), ":0\r\n");
    for (score, member) in [("3", "c"), ("1", "a"), ("2.5", "b"), ("-1e3", "neg"), ("1", "a2")] {
        assert_eq!(c.call(&["ZADD", "_indices", score, member]), ":1\r\n");
    }
    assert_eq!(
        c.call(&["ZADD", "_indices", "4", "c"]),
        ":0\r\n",
        "a new score, not a new member"
    );
    assert_eq!(c.call(&["ZCARD", "_indices"]), ":5\r\n");
    assert_eq!(c.call(&["ZSCORE", "_indices", "b"]), "$3\r\n2.5\r\n");
    let scan = |c: &mut Client, args: &[&str]| {
        let mut full = vec!["ZRANGEBYSCORE", "_indices"];
        full.extend_from_slice(args);
        c.call(&full)
    };
    assert_eq!(
        scan(&mut c, &["1", "Infinity", "LIMIT", "0", "3"]),
        "*3\r\n$1\r\na\r\n$2\r\na2\r\n$1\r\nb\r\n",
        "Java's Infinity, as Jedis sends it; ties by member"
    );
    assert_eq!(
        scan(&mut c, &["(1", "+inf", "WITHSCORES"]),
        "*4\r\n$1\r\nb\r\n$3\r\n2.5\r\n$1\r\nc\r\n$1\r\n4\r\n"
    );
    assert_eq!(scan(&mut c, &["-inf", "(1"]), "*1\r\n$3\r\nneg\r\n");
    assert_eq!(scan(&mut c, &["-inf", "+inf", "LIMIT", "4", "10"]), "*1\r\n$1\r\nc\r\n");
    assert_eq!(
        c.call(&["ZSCAN", "_indices", "0", "MATCH", "a*"]),
        "*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$2\r\na2\r\n$1\r\n1\r\n",
        "one page, members with their scores in score order"
    );
    assert_eq!(c.call(&["ZSCAN", "missing", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
    assert!(c.call(&["ZSCAN", "_indices", "x"]).starts_with("-ERR invalid cursor"));
    assert_eq!(c.call(&["ZREM", "_indices", "a", "a", "zz"]), ":1\r\n");
    assert_eq!(c.call(&["TYPE", "_indices"]), "+zset\r\n");
    assert_eq!(c.call(&["TYPE", "user1"]), "+hash\r\n");
    // Wrong types are refused as Redis refuses them; MGET gives nil.
    let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    assert_eq!(c.call(&["GET", "user1"]), wrongtype);
    assert_eq!(c.call(&["HGETALL", "_indices"]), wrongtype);
    assert_eq!(c.call(&["ZADD", "user1", "1", "x"]), wrongtype);
    assert_eq!(c.call(&["MGET", "user1"]), "*1\r\n$-1\r\n");
    assert_eq!(
        c.call(&["ZADD", "z", "XX", "CH", "1", "x"]),
        ":0\r\n",
        "XX adds nothing"
    );
    assert!(c.call(&["ZADD", "z", "nan", "x"]).starts_with("-ERR"));
    assert_eq!(scan(&mut c, &["x", "1"]), "-ERR min or max is not a float\r\n");
    assert_eq!(scan(&mut c, &["0", "1", "LIMIT", "0"]), "-ERR syntax error\r\n");
    // DEL takes a sorted set's members with it: a new set at the key is empty.
    assert_eq!(c.call(&["DEL", "_indices", "user1"]), ":2\r\n");
    assert_eq!(c.call(&["ZADD", "_indices", "7", "fresh"]), ":1\r\n");
    assert_eq!(scan(&mut c, &["-inf", "+inf"]), "*1\r\n$5\r\nfresh\r\n");
    assert_eq!(c.call(&["SET", "s", "v"]), "+OK\r\n");
    assert_eq!(
        c.call(&["RANGE", "", ""]),
        "*2\r\n$1\r\ns\r\n$1\r\nv\r\n",
        "RANGE lists strings only, never internal keys"
    );
}

#[test]
fn concurrent_field_updates_to_one_hash_are_not_lost() {
    let (addr, _dir) = start(Options::default());
    let writers: Vec<_> = (0..8)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for i in 0..50 {
                    let field = format!("w{w}-{i}");
                    assert_eq!(c.call(&["HSET", "shared", &field, "x"]), ":1\r\n");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(Client::connect(addr).call(&["HLEN", "shared"]), ":400\r\n");
}

/// Counters answer as Redis 7 does, errors included (checked against
/// redis-server 7.0).
#[test]
fn counters_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    let not_integer = "-ERR value is not an integer or out of range\r\n";
    let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    assert_eq!(c.call(&["INCR", "n"]), ":1\r\n", "a missing key counts from 0");
    assert_eq!(c.call(&["INCRBY", "n", "41"]), ":42\r\n");
    assert_eq!(c.call(&["DECR", "n"]), ":41\r\n");
    assert_eq!(c.call(&["DECRBY", "n", "-9"]), ":50\r\n");
    assert_eq!(c.call(&["GET", "n"]), "$2\r\n50\r\n", "stored as text");
    assert_eq!(c.call(&["INCRBY", "n", "+1"]), not_integer);
    assert_eq!(c.call(&["INCRBY", "n", "1x"]), not_integer);
    assert_eq!(
        c.call(&["DECRBY", "n", "-9223372036854775808"]),
        "-ERR decrement would overflow\r\n"
    );
    for stored in ["01", "-0", " 1", "1.0", ""] {
        c.call(&["SET", "s", stored]);
        assert_eq!(c.call(&["INCR", "s"]), not_integer, "{stored:?}");
    }
    c.call(&["SET", "max", "9223372036854775807"]);
    assert_eq!(
        c.call(&["INCR", "max"]),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(c.call(&["GET", "max"]), "$19\r\n9223372036854775807\r\n");
    c.call(&["HSET", "h", "f", "v"]);
    assert_eq!(c.call(&["INCR", "h"]), wrongtype);
    assert_eq!(
        c.call(&["INCRBY", "h", "x"]),
        not_integer,
        "the increment is checked first"
    );
    assert_eq!(c.call(&["INCRBYFLOAT", "h", "1"]), wrongtype);
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "0.1"]), "$3\r\n0.1\r\n");
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "0.2"]), "$3\r\n0.3\r\n");
    c.call(&["SET", "f", "1000.1"]);
    assert_eq!(
        c.call(&["INCRBYFLOAT", "f", "0.1"]),
        "$22\r\n1000.19999999999999996\r\n",
        "long double, as Redis computes it"
    );
    assert_eq!(
        c.call(&["INCRBYFLOAT", "f", "abc"]),
        "-ERR value is not a valid float\r\n"
    );
    assert_eq!(
        c.call(&["INCRBYFLOAT", "f", "inf"]),
        "-ERR increment would produce NaN or Infinity\r\n"
    );
    c.call(&["SET", "f", "5"]);
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "0x10"]), "$2\r\n21\r\n");
    assert_eq!(c.call(&["INCR", "f"]), ":22\r\n");
    assert_eq!(
        c.call(&["INCR"]),
        "-ERR wrong number of arguments for 'incr' command\r\n"
    );
}

/// Many connections incrementing one key end at the exact total: each
/// read-modify-write holds the key's stripe, so no update is lost.
#[test]
fn concurrent_increments_of_one_key_are_not_lost() {
    let (addr, _dir) = start(Options::default());
    let (threads, per_thread) = (8, 200);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for i in 0..per_thread {
                    let reply = match (t + i) % 3 {
                        0 => c.call(&["INCR", "counter"]),
                        1 => c.call(&["INCRBY", "counter", "1"]),
                        _ => c.call(&["INCRBYFLOAT", "counter", "1"]),
                    };
                    assert!(reply.starts_with(':') || reply.starts_with('$'), "{reply}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let total = (threads * per_thread).to_string();
    assert_eq!(
        Client::connect(addr).call(&["GET", "counter"]),
        format!("${}\r\n{total}\r\n", total.len())
    );
}

/// SET's NX, XX and GET, and GETSET, SETNX, STRLEN, APPEND, GETDEL, with
/// the replies and errors of Redis 7.0.
#[test]
fn set_options_and_string_updates_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    let syntax = "-ERR syntax error\r\n";
    assert_eq!(c.call(&["SET", "k", "a", "XX"]), "$-1\r\n");
    assert_eq!(c.call(&["SET", "k", "a", "nx"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", "k", "b", "NX"]), "$-1\r\n");
    assert_eq!(
        c.call(&["SET", "k", "b", "NX", "GET"]),
        "$1\r\na\r\n",
        "old value, not set"
    );
    assert_eq!(c.call(&["SET", "k", "c", "XX", "GET"]), "$1\r\na\r\n");
    assert_eq!(c.call(&["SET", "new", "v", "GET"]), "$-1\r\n");
    assert_eq!(c.call(&["GET", "k"]), "$1\r\nc\r\n");
    assert_eq!(c.call(&["SET", "k", "v", "XX", "NX"]), syntax);
    assert_eq!(c.call(&["SET", "k", "v", "KEEPTTL", "EX", "5"]), syntax);
    assert_eq!(c.call(&["SET", "k", "v", "EX"]), syntax);
    assert_eq!(
        c.call(&["SET", "k", "v", "EX", "0"]),
        "-ERR invalid expire time in 'set' command\r\n"
    );
    assert_eq!(
        c.call(&["SET", "k", "v", "PX", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(c.call(&["SET", "k", "v", "KEEPTTL"]), "+OK\r\n");
    c.call(&["HSET", "h", "f", "v"]);
    assert_eq!(c.call(&["SET", "h", "v", "GET"]), wrongtype);
    assert_eq!(
        c.call(&["TYPE", "h"]),
        "+hash\r\n",
        "a refused SET ... GET sets nothing"
    );
    assert_eq!(c.call(&["GETSET", "k", "w"]), "$1\r\nv\r\n");
    assert_eq!(c.call(&["GETSET", "h", "w"]), wrongtype);
    assert_eq!(c.call(&["SETNX", "k", "x"]), ":0\r\n");
    assert_eq!(c.call(&["SETNX", "fresh", "x"]), ":1\r\n");
    assert_eq!(c.call(&["SETNX", "h", "x"]), ":0\r\n", "any type counts as existing");
    assert_eq!(c.call(&["STRLEN", "k"]), ":1\r\n");
    assert_eq!(c.call(&["STRLEN", "nope"]), ":0\r\n");
    assert_eq!(c.call(&["STRLEN", "h"]), wrongtype);
    assert_eq!(c.call(&["APPEND", "k", "xyz"]), ":4\r\n");
    assert_eq!(c.call(&["APPEND", "a", "1"]), ":1\r\n");
    assert_eq!(c.call(&["APPEND", "h", "1"]), wrongtype);
    assert_eq!(c.call(&["GET", "k"]), "$4\r\nwxyz\r\n");
    assert_eq!(c.call(&["GETDEL", "k"]), "$4\r\nwxyz\r\n");
    assert_eq!(c.call(&["GETDEL", "k"]), "$-1\r\n");
    assert_eq!(c.call(&["GETDEL", "h"]), wrongtype);
    assert_eq!(c.call(&["EXISTS", "k", "h"]), ":1\r\n");
    assert_eq!(
        c.call(&["GETSET", "k"]),
        "-ERR wrong number of arguments for 'getset' command\r\n"
    );
}

/// ZADD's flags and the modern ZRANGE, as Redis 7.0 answers them.
#[test]
fn zadd_flags_and_zrange_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]), ":3\r\n");
    assert_eq!(c.call(&["ZADD", "z", "NX", "5", "a", "6", "d"]), ":1\r\n");
    assert_eq!(
        c.call(&["ZADD", "z", "XX", "CH", "9", "a", "9", "b", "10", "f"]),
        ":2\r\n"
    );
    assert_eq!(c.call(&["ZADD", "z", "GT", "CH", "1", "a", "20", "b"]), ":1\r\n");
    assert_eq!(c.call(&["ZADD", "z", "LT", "CH", "1", "a", "30", "b"]), ":1\r\n");
    assert_eq!(
        c.call(&["ZADD", "z", "CH", "1", "g", "2", "g"]),
        ":2\r\n",
        "pairs apply in order"
    );
    assert_eq!(c.call(&["ZADD", "z", "INCR", "5", "a"]), "$1\r\n6\r\n");
    assert_eq!(c.call(&["ZADD", "z", "NX", "INCR", "5", "a"]), "$-1\r\n");
    assert_eq!(c.call(&["ZADD", "z", "XX", "INCR", "5", "nope"]), "$-1\r\n");
    assert_eq!(c.call(&["ZINCRBY", "z", "-1.5", "g"]), "$3\r\n0.5\r\n");
    assert_eq!(c.call(&["ZINCRBY", "z", "1.5", "g"]), "$1\r\n2\r\n");
    assert_eq!(
        c.call(&["ZINCRBY", "z", "x", "g"]),
        "-ERR value is not a valid float\r\n"
    );
    assert_eq!(c.call(&["ZADD", "z", "INCR", "inf", "a"]), "$3\r\ninf\r\n");
    assert_eq!(
        c.call(&["ZADD", "z", "INCR", "-inf", "a"]),
        "-ERR resulting score is not a number (NaN)\r\n"
    );
    assert_eq!(c.call(&["ZADD", "z", "NX", "5"]), "-ERR syntax error\r\n");
    assert_eq!(
        c.call(&["ZADD", "z", "NX"]),
        "-ERR wrong number of arguments for 'zadd' command\r\n"
    );
    assert_eq!(
        c.call(&["ZADD", "z", "GT", "LT", "1", "a"]),
        "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n"
    );
    assert_eq!(c.call(&["ZADD", "z", "0.1", "x"]), ":1\r\n");
    assert_eq!(c.call(&["ZSCORE", "z", "x"]), "$19\r\n0.10000000000000001\r\n");
    // Now x 0.1, g 2, c 3, d 6, b 20, a inf.
    let members = |reply: &str| -> Vec<String> {
        reply
            .lines()
            .filter(|l| !l.starts_with(['*', '$']))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        members(&c.call(&["ZRANGE", "z", "0", "-1"])),
        ["x", "g", "c", "d", "b", "a"]
    );
    assert_eq!(
        members(&c.call(&["ZRANGE", "z", "0", "1", "REV", "WITHSCORES"])),
        ["a", "inf", "b", "20"]
    );
    assert_eq!(members(&c.call(&["ZREVRANGE", "z", "-2", "-1"])), ["g", "x"]);
    assert_eq!(members(&c.call(&["ZRANGE", "z", "(1", "3", "BYSCORE"])), ["g", "c"]);
    assert_eq!(
        members(&c.call(&["ZRANGE", "z", "+inf", "-inf", "BYSCORE", "REV", "LIMIT", "1", "2"])),
        ["b", "d"]
    );
    assert_eq!(c.call(&["ZRANGE", "z", "5", "2"]), "*0\r\n");
    assert_eq!(
        c.call(&["ZRANGE", "z", "0", "1", "LIMIT", "0", "5"]),
        "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n"
    );
    assert_eq!(
        c.call(&["ZRANGE", "z", "0", "1", "REV", "REV"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        c.call(&["ZRANGEBYSCORE", "z", "0", "1", "BYSCORE"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(c.call(&["ZRANK", "z", "g"]), ":1\r\n");
    assert_eq!(c.call(&["ZREVRANK", "z", "g"]), ":4\r\n");
    assert_eq!(c.call(&["ZRANK", "z", "nope"]), "$-1\r\n");
    assert_eq!(
        c.call(&["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d"]),
        ":4\r\n"
    );
    assert_eq!(members(&c.call(&["ZRANGE", "lex", "[b", "(d", "BYLEX"])), ["b", "c"]);
    assert_eq!(members(&c.call(&["ZREVRANGEBYLEX", "lex", "+", "(b"])), ["d", "c"]);
    assert_eq!(
        c.call(&["ZRANGE", "lex", "-", "+", "BYLEX", "WITHSCORES"]),
        "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n"
    );
    // RESP3 pairs each member with its score, a double, byte for byte as
    // Redis 7 answers.
    assert!(c.call(&["HELLO", "3"]).starts_with("%"));
    assert_eq!(
        c.call(&["ZRANGE", "z", "0", "1", "WITHSCORES"]),
        "*2\r\n*2\r\n$1\r\nx\r\n,0.10000000000000001\r\n*2\r\n$1\r\ng\r\n,2\r\n"
    );
    assert_eq!(c.call(&["ZSCORE", "z", "x"]), ",0.10000000000000001\r\n");
}

/// A server, and its store for a test to look into.
fn start_with_db() -> (SocketAddr, Arc<Db>, tempfile::TempDir) {
    start_with_db_options(Options::default())
}

fn start_with_db_options(options: Options) -> (SocketAddr, Arc<Db>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Arc::new(Db::open(rt, dir.path(), options).unwrap());
    let server = Server::bind("127.0.0.1:0", db.clone(), ServerOptions::default()).unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    (addr, db, dir)
}

/// The keys of a SCAN reply: its cursor and its keys.
fn scan_page(reply: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = reply.split("\r\n").collect();
    assert_eq!(lines[0], "*2", "{reply}");
    let cursor = lines[2].to_string();
    let keys = lines[4..].iter().skip(1).step_by(2).map(|k| k.to_string()).collect();
    (cursor, keys)
}

/// KEYS and SCAN list every key once, of every type, and never the
/// internal entries of sorted sets; a SCAN cursor stays valid across
/// writes, deletes, flushes and compactions between its calls.
#[test]
fn keys_and_scan_list_user_keys_only_across_compactions() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    let mut expected = std::collections::BTreeSet::new();
    for i in 0..40 {
        c.call(&["SET", &format!("user:{i:02}"), "v"]);
        expected.insert(format!("user:{i:02}"));
    }
    for i in 0..3 {
        c.call(&["HSET", &format!("h{i}"), "f", "v"]);
        c.call(&["ZADD", &format!("z{i}"), "1", "a", "2", "b"]);
        expected.extend([format!("h{i}"), format!("z{i}")]);
    }
    let all = c.call(&["KEYS", "*"]);
    assert!(all.starts_with(&format!("*{}\r\n", expected.len())), "{all}");
    assert_eq!(
        c.call(&["KEYS", "user:[0-1]?"]).matches("user:").count(),
        20,
        "user:00 to user:19"
    );
    assert_eq!(c.call(&["KEYS", "z*"]), "*3\r\n$2\r\nz0\r\n$2\r\nz1\r\n$2\r\nz2\r\n");
    assert_eq!(c.call(&["KEYS", "nomatch*"]), "*0\r\n");
    // Iterate 7 keys a call; halfway, delete keys already returned, add
    // keys behind the cursor, and flush and compact the store.
    let (mut seen, mut cursor, mut calls) = (Vec::new(), "0".to_string(), 0);
    loop {
        let (next, keys) = scan_page(&c.call(&["SCAN", &cursor, "COUNT", "7"]));
        seen.extend(keys);
        calls += 1;
        if calls == 3 {
            c.call(&["DEL", "h0", "user:00"]);
            c.call(&["SET", "a-new-key-before-the-cursor", "v"]);
            db.flush().unwrap();
            db.compact().unwrap();
        }
        if next == "0" {
            break;
        }
        cursor = next;
    }
    let unique: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no key twice: {seen:?}");
    assert_eq!(unique, expected, "every key once, none added behind the cursor");
    assert!(calls >= expected.len() / 7, "{calls} calls");
    let (cursor, hashes) = scan_page(&c.call(&["SCAN", "0", "TYPE", "HASH", "COUNT", "100"]));
    assert_eq!(
        (cursor.as_str(), hashes),
        ("0", vec!["h1".to_string(), "h2".to_string()])
    );
    let (_, matched) = scan_page(&c.call(&["SCAN", "0", "MATCH", "user:3*", "COUNT", "1000"]));
    assert_eq!(matched.len(), 10);
    assert_eq!(
        c.call(&["SCAN", "0", "TYPE", "list"]).matches("$").count(),
        1,
        "cursor only"
    );
    assert_eq!(c.call(&["SCAN", "12345"]), "-ERR invalid cursor\r\n");
    assert_eq!(c.call(&["SCAN", "x"]), "-ERR invalid cursor\r\n");
    assert_eq!(c.call(&["SCAN", "0", "COUNT", "0"]), "-ERR syntax error\r\n");
    assert_eq!(c.call(&["SCAN", "0", "MATCH"]), "-ERR syntax error\r\n");
}

/// The key's TTL is `seconds`, or a second less on a slow run.
fn assert_ttl_near(c: &mut Client, key: &str, seconds: i64, what: &str) {
    let reply = c.call(&["TTL", key]);
    let ttl: i64 = reply[1..].trim_end().parse().unwrap();
    assert!((seconds - 1..=seconds).contains(&ttl), "{key}: {reply} {what}");
}

/// Expiry as Redis 7.0 answers it: TTLs set and read in seconds and
/// milliseconds, kept by APPEND and the counters and by SET KEEPTTL,
/// dropped by SET and PERSIST, and EXPIRE's options and errors.
#[test]
fn expiry_commands_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["SET", "k", "v", "EX", "100"]), "+OK\r\n");
    assert_ttl_near(&mut c, "k", 100, "");
    let pttl = c.call(&["PTTL", "k"]);
    let ms: i64 = pttl[1..].trim_end().parse().unwrap();
    assert!((99_000..=100_000).contains(&ms), "{pttl}");
    assert_eq!(c.call(&["SET", "k", "v2", "KEEPTTL"]), "+OK\r\n");
    assert_ttl_near(&mut c, "k", 100, "");
    assert_eq!(c.call(&["APPEND", "k", "x"]), ":3\r\n");
    assert_ttl_near(&mut c, "k", 100, "APPEND keeps the deadline");
    assert_eq!(c.call(&["SET", "k", "v3"]), "+OK\r\n");
    assert_eq!(c.call(&["TTL", "k"]), ":-1\r\n", "SET drops it");
    assert_eq!(c.call(&["TTL", "missing"]), ":-2\r\n");
    assert_eq!(c.call(&["SET", "n", "1", "EXAT", "99999999999"]), "+OK\r\n");
    assert_eq!(c.call(&["INCR", "n"]), ":2\r\n");
    assert_eq!(c.call(&["EXPIRETIME", "n"]), ":99999999999\r\n", "INCR keeps it");
    assert_eq!(c.call(&["PEXPIRETIME", "n"]), ":99999999999000\r\n");
    assert_eq!(c.call(&["SETEX", "s", "100", "v"]), "+OK\r\n");
    assert_ttl_near(&mut c, "s", 100, "");
    assert_eq!(
        c.call(&["SETEX", "s", "0", "v"]),
        "-ERR invalid expire time in 'setex' command\r\n"
    );
    assert_eq!(
        c.call(&["SET", "s", "v", "EX", "9223372036854775"]),
        "-ERR invalid expire time in 'set' command\r\n"
    );
    assert_eq!(c.call(&["SET", "p", "v"]), "+OK\r\n");
    assert_eq!(c.call(&["EXPIRE", "p", "100", "XX"]), ":0\r\n");
    assert_eq!(
        c.call(&["EXPIRE", "p", "100", "GT"]),
        ":0\r\n",
        "no deadline is forever"
    );
    assert_eq!(c.call(&["EXPIRE", "p", "100", "NX"]), ":1\r\n");
    assert_eq!(c.call(&["EXPIRE", "p", "50", "GT"]), ":0\r\n");
    assert_eq!(c.call(&["EXPIRE", "p", "50", "LT"]), ":1\r\n");
    assert_ttl_near(&mut c, "p", 50, "");
    assert_eq!(c.call(&["PERSIST", "p"]), ":1\r\n");
    assert_eq!(c.call(&["PERSIST", "p"]), ":0\r\n");
    assert_eq!(c.call(&["TTL", "p"]), ":-1\r\n");
    assert_eq!(c.call(&["EXPIRE", "missing", "100"]), ":0\r\n");
    assert_eq!(
        c.call(&["EXPIRE", "p", "100", "NX", "XX"]),
        "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n"
    );
    assert_eq!(
        c.call(&["EXPIRE", "p", "100", "GT", "LT"]),
        "-ERR GT and LT options at the same time are not compatible\r\n"
    );
    assert_eq!(
        c.call(&["EXPIRE", "p", "100", "Bogus"]),
        "-ERR Unsupported option Bogus\r\n"
    );
    assert_eq!(
        c.call(&["EXPIRE", "p", "9223372036854775807"]),
        "-ERR invalid expire time in 'expire' command\r\n"
    );
    assert_eq!(
        c.call(&["EXPIRE", "p", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    c.call(&["HSET", "h", "f", "v"]);
    assert_eq!(c.call(&["EXPIRE", "h", "100"]), ":1\r\n");
    assert_eq!(c.call(&["HSET", "h", "g", "w"]), ":1\r\n");
    assert_ttl_near(&mut c, "h", 100, "a hash keeps its deadline");
    c.call(&["ZADD", "z", "1", "a"]);
    assert_eq!(c.call(&["PEXPIRE", "z", "100000"]), ":1\r\n");
    assert_eq!(c.call(&["ZADD", "z", "2", "b"]), ":1\r\n");
    assert_ttl_near(&mut c, "z", 100, "so does a sorted set");
    assert_eq!(c.call(&["EXPIRE", "z", "-1"]), ":1\r\n", "a past deadline deletes");
    assert_eq!(c.call(&["TYPE", "z"]), "+none\r\n");
}

/// A key past its deadline is gone at once for every command that reads,
/// and a write finds it absent, as in Redis.
#[test]
fn expired_keys_are_invisible_on_every_read_path() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    c.call(&["SET", "keep", "v"]);
    c.call(&["SET", "s", "v", "PX", "500"]);
    c.call(&["HSET", "h", "f", "v"]);
    c.call(&["ZADD", "z", "1", "a"]);
    c.call(&["SET", "n", "41", "PX", "500"]);
    assert_eq!(c.call(&["PEXPIRE", "h", "500"]), ":1\r\n");
    assert_eq!(c.call(&["PEXPIRE", "z", "500"]), ":1\r\n");
    assert_eq!(c.call(&["EXISTS", "s", "h", "z", "n"]), ":4\r\n");
    std::thread::sleep(std::time::Duration::from_millis(600));
    for key in ["s", "h", "z", "n"] {
        assert_eq!(c.call(&["EXISTS", key]), ":0\r\n", "{key}");
        assert_eq!(c.call(&["TYPE", key]), "+none\r\n", "{key}");
        assert_eq!(c.call(&["TTL", key]), ":-2\r\n", "{key}");
        assert_eq!(c.call(&["EXPIRE", key, "100"]), ":0\r\n", "{key}");
        assert_eq!(c.call(&["PERSIST", key]), ":0\r\n", "{key}");
    }
    assert_eq!(c.call(&["GET", "s"]), "$-1\r\n");
    assert_eq!(c.call(&["STRLEN", "s"]), ":0\r\n");
    assert_eq!(c.call(&["MGET", "s", "keep"]), "*2\r\n$-1\r\n$1\r\nv\r\n");
    assert_eq!(c.call(&["HGETALL", "h"]), "*0\r\n");
    assert_eq!(c.call(&["HLEN", "h"]), ":0\r\n");
    assert_eq!(c.call(&["ZCARD", "z"]), ":0\r\n");
    assert_eq!(c.call(&["ZSCORE", "z", "a"]), "$-1\r\n");
    assert_eq!(c.call(&["ZRANGE", "z", "0", "-1"]), "*0\r\n");
    assert_eq!(c.call(&["KEYS", "*"]), "*1\r\n$4\r\nkeep\r\n");
    assert_eq!(c.call(&["SCAN", "0"]), "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nkeep\r\n");
    assert_eq!(c.call(&["RANGE", "", ""]), "*2\r\n$4\r\nkeep\r\n$1\r\nv\r\n");
    // Writers find the keys absent: counters start over, NX sets, a hash
    // and a sorted set start empty, and DEL counts nothing.
    assert_eq!(c.call(&["INCR", "n"]), ":1\r\n");
    assert_eq!(c.call(&["TTL", "n"]), ":-1\r\n");
    assert_eq!(c.call(&["SET", "s", "new", "NX"]), "+OK\r\n");
    assert_eq!(c.call(&["HSET", "h", "g", "w"]), ":1\r\n");
    assert_eq!(c.call(&["HGETALL", "h"]), "*2\r\n$1\r\ng\r\n$1\r\nw\r\n");
    assert_eq!(c.call(&["ZADD", "z", "2", "b"]), ":1\r\n");
    assert_eq!(c.call(&["ZRANGE", "z", "0", "-1"]), "*1\r\n$1\r\nb\r\n");
    c.call(&["SET", "gone", "v", "PX", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(10));
    assert_eq!(c.call(&["DEL", "gone"]), ":0\r\n");
}

/// Compaction gives back the space of expired strings and hashes, and an
/// expired value that shadowed an older one in a deeper level never lets
/// the older one through. Sorted sets are left to the next write.
#[test]
fn compaction_drops_expired_keys_without_bringing_older_values_back() {
    // Levels of one byte: every compaction into L1 is pushed on to L2, so
    // the expired value meets the old one only after a compaction where a
    // deeper level still holds it.
    let options = Options {
        drop_expired: true,
        background: false,
        level_base_bytes: 1,
        ..Options::default()
    };
    let (addr, db, _dir) = start_with_db_options(options);
    let mut c = Client::connect(addr);
    // An old value of "s", pushed down the levels: four tables in L0
    // start a compaction.
    let tables = |c: &mut Client, tag: &str| {
        for i in 0..4 {
            c.call(&["SET", &format!("{tag}{i}"), "x"]);
            db.flush().unwrap();
        }
    };
    c.call(&["SET", "s", "old"]);
    tables(&mut c, "a");
    db.compact().unwrap();
    assert_eq!(db.stats().levels[0].0, 0, "L0 compacted");
    c.call(&["SET", "keep", "v"]);
    c.call(&["SET", "s", "new", "PX", "1"]);
    c.call(&["HSET", "h", "f", "v"]);
    c.call(&["PEXPIRE", "h", "1"]);
    c.call(&["ZADD", "z", "1", "a"]);
    c.call(&["PEXPIRE", "z", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(10));
    tables(&mut c, "b");
    db.compact().unwrap();
    let raw: Vec<Vec<u8>> = db.scan(b"", None, 100).unwrap().into_iter().map(|(k, _)| k).collect();
    assert!(raw.contains(&b"keep".to_vec()), "a live key stays");
    assert!(
        !raw.contains(&b"s".to_vec()) && !raw.contains(&b"h".to_vec()),
        "expired entries gone"
    );
    assert!(raw.contains(&b"z".to_vec()), "a sorted set waits for its next write");
    assert_eq!(c.call(&["GET", "s"]), "$-1\r\n", "the older value stays shadowed");
    assert_eq!(c.call(&["ZADD", "z", "2", "b"]), ":1\r\n");
    assert_eq!(c.call(&["ZRANGE", "z", "0", "-1"]), "*1\r\n$1\r\nb\r\n");
}

/// Deleting a sorted set takes its own entries only: a set created after
/// it (a later version) keeps its members, whichever way the first goes.
#[test]
fn deleting_a_sorted_set_leaves_later_sets_alone() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    for (old, new) in [("o1", "n1"), ("o2", "n2"), ("o3", "n3")] {
        c.call(&["ZADD", old, "1", "a"]);
        c.call(&["ZADD", new, "1", "b", "2", "c"]);
    }
    assert_eq!(c.call(&["DEL", "o1"]), ":1\r\n");
    assert_eq!(c.call(&["ZREM", "o2", "a"]), ":1\r\n");
    assert_eq!(c.call(&["EXPIRE", "o3", "0"]), ":1\r\n");
    for new in ["n1", "n2", "n3"] {
        assert_eq!(
            c.call(&["ZRANGE", new, "0", "-1"]),
            "*2\r\n$1\r\nb\r\n$1\r\nc\r\n",
            "{new}"
        );
    }
}

/// DEL of an expired sorted set counts nothing but takes its member
/// entries out of the store, as DEL of a live one does.
#[test]
fn deleting_an_expired_sorted_set_frees_its_entries() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["ZADD", "z", "1", "a", "2", "b"]), ":2\r\n");
    let internal = || db.scan(&[0xff], None, usize::MAX).unwrap().len();
    assert_eq!(internal(), 4, "two entries per member");
    assert_eq!(c.call(&["PEXPIRE", "z", "1"]), ":1\r\n");
    std::thread::sleep(std::time::Duration::from_millis(10));
    assert_eq!(c.call(&["DEL", "z"]), ":0\r\n");
    assert_eq!(internal(), 0);
    assert_eq!(db.get(b"z").unwrap(), None);
}

/// A value written in place of a sorted set or a list takes the set's or
/// list's entries out of the store with it, whichever command writes it
/// and whether the set or list had expired; so does a server started on a
/// store that already holds some.
#[test]
fn a_value_written_over_a_set_or_list_takes_its_entries_with_it() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    let internal = || db.scan(&[0xff], None, usize::MAX).unwrap().len();
    let expire_now = |c: &mut Client, key: &str| {
        assert_eq!(c.call(&["PEXPIRE", key, "1"]), ":1\r\n");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    for (make, over) in [
        (vec!["ZADD", "k", "1", "a", "2", "b"], vec!["SET", "k", "v"]),
        (vec!["RPUSH", "k", "a", "b", "c"], vec!["SET", "k", "v", "KEEPTTL"]),
        (vec!["ZADD", "k", "1", "a"], vec!["MSET", "j", "w", "k", "v"]),
        (vec!["RPUSH", "k", "a"], vec!["SETEX", "k", "100", "v"]),
        (vec!["ZADD", "k", "1", "a"], vec!["SET", "k", "v", "XX"]),
        (vec!["SADD", "k", "a", "b"], vec!["SET", "k", "v"]),
        (vec!["SADD", "k", "a"], vec!["MSET", "k", "v"]),
    ] {
        assert!(c.call(&make).starts_with(':'), "{make:?}");
        assert!(internal() > 0);
        assert!(!c.call(&over).starts_with('-'), "{over:?}");
        assert_eq!(internal(), 0, "{make:?} then {over:?}");
        assert_eq!(c.call(&["DEL", "k"]), ":1\r\n");
    }
    // Over an expired set or list: a new one, a string, a hash, a list
    // moved in.
    c.call(&["ZADD", "k", "1", "a", "2", "b"]);
    expire_now(&mut c, "k");
    assert_eq!(c.call(&["ZADD", "k", "3", "c"]), ":1\r\n");
    assert_eq!(internal(), 2, "the new member's two entries alone");
    assert_eq!(c.call(&["DEL", "k"]), ":1\r\n");
    c.call(&["SADD", "k", "a", "b"]);
    expire_now(&mut c, "k");
    assert_eq!(c.call(&["SADD", "k", "c"]), ":1\r\n");
    assert_eq!(internal(), 1, "the new member's entry alone");
    assert_eq!(c.call(&["DEL", "k"]), ":1\r\n");
    c.call(&["RPUSH", "k", "a", "b"]);
    expire_now(&mut c, "k");
    assert_eq!(c.call(&["LPUSH", "k", "x"]), ":1\r\n");
    assert_eq!(internal(), 1);
    expire_now(&mut c, "k");
    assert_eq!(c.call(&["INCR", "k"]), ":1\r\n");
    assert_eq!(internal(), 0);
    c.call(&["ZADD", "h", "1", "a"]);
    expire_now(&mut c, "h");
    assert_eq!(c.call(&["HSET", "h", "f", "v"]), ":1\r\n");
    assert_eq!(internal(), 0);
    c.call(&["RPUSH", "src", "a"]);
    c.call(&["RPUSH", "dst", "b", "c"]);
    expire_now(&mut c, "dst");
    assert_eq!(c.call(&["LMOVE", "src", "dst", "LEFT", "LEFT"]), "$1\r\na\r\n");
    assert_eq!(internal(), 1);
    assert_eq!(c.call(&["LRANGE", "dst", "0", "-1"]), "*1\r\n$1\r\na\r\n");
    // Inside a transaction, members its own commands added go too.
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    c.call(&["ZADD", "t", "1", "a", "2", "b"]);
    c.call(&["SET", "t", "v"]);
    c.call(&["ZADD", "u", "1", "a"]);
    c.call(&["DEL", "u"]);
    assert_eq!(c.call(&["EXEC"]), "*4\r\n:2\r\n+OK\r\n:1\r\n:1\r\n");
    assert_eq!(internal(), 1, "dst's one element alone");
    // A second server on the same store knows from the start that it
    // holds a list.
    let server = Server::bind("127.0.0.1:0", db.clone(), ServerOptions::default()).unwrap();
    let second = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    let mut c = Client::connect(second);
    assert_eq!(c.call(&["SET", "dst", "v"]), "+OK\r\n");
    assert_eq!(internal(), 0);
}

/// SPOP and SRANDMEMBER pick among every member of a small set, evenly,
/// and from a random point of a large one; SSCAN walks a set whole while
/// it is written; a set's members leave the store with it (SPOP of the
/// last, SREM, SMOVE, a STORE over it, DEL).
#[test]
fn sets_sample_scan_and_free_their_members() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    let internal = || db.scan(&[0xff], None, usize::MAX).unwrap().len();
    let members = |reply: String| -> Vec<String> {
        reply
            .split("\r\n")
            .skip(1)
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    // Small: each of three members about a third of 3,000 draws.
    assert_eq!(c.call(&["SADD", "small", "a", "b", "c"]), ":3\r\n");
    let mut seen = std::collections::HashMap::new();
    for m in members(c.call(&["SRANDMEMBER", "small", "-3000"])) {
        *seen.entry(m).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.values().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    // Large (past the size read whole): distinct members of the set.
    let all: Vec<String> = (0..3000).map(|i| format!("m{i}")).collect();
    for chunk in all.chunks(500) {
        let mut args = vec!["SADD", "large"];
        args.extend(chunk.iter().map(String::as_str));
        assert_eq!(c.call(&args), ":500\r\n");
    }
    let some = members(c.call(&["SRANDMEMBER", "large", "10"]));
    let distinct: std::collections::HashSet<&String> = some.iter().collect();
    assert_eq!((some.len(), distinct.len()), (10, 10));
    assert!(some.iter().all(|m| all.contains(m)), "{some:?}");
    assert_eq!(members(c.call(&["SRANDMEMBER", "large", "-20"])).len(), 20);
    // SSCAN while every third member is removed: each member present
    // throughout comes back exactly once.
    let (mut cursor, mut walked) = ("0".to_string(), Vec::new());
    let mut removed = 0;
    loop {
        let reply = c.call(&["SSCAN", "large", &cursor, "COUNT", "100"]);
        let (next, page) = scan_page(&reply);
        walked.extend(page);
        if removed < 1000 {
            c.call(&["SREM", "large", &format!("m{}", 3 * removed)]);
            removed += 1;
        }
        if next == "0" {
            break;
        }
        cursor = next;
    }
    for i in (0..3000).filter(|i| i % 3 != 0 || i / 3 >= removed) {
        assert_eq!(walked.iter().filter(|m| **m == format!("m{i}")).count(), 1, "m{i}");
    }
    // SPOP takes every member once, and the last takes the key.
    let left: u64 = c.call(&["SCARD", "large"])[1..].trim().parse().unwrap();
    let mut popped = std::collections::HashSet::new();
    loop {
        let reply = c.call(&["SPOP", "large", "333"]);
        let page = members(reply);
        if page.is_empty() {
            break;
        }
        for m in page {
            assert!(popped.insert(m.clone()), "{m} popped twice");
        }
    }
    assert_eq!(popped.len() as u64, left);
    assert_eq!(c.call(&["EXISTS", "large"]), ":0\r\n");
    assert_eq!(internal(), 3, "small's three members alone");
    assert_eq!(c.call(&["SADD", "other", "c", "d"]), ":2\r\n");
    assert_eq!(c.call(&["SUNIONSTORE", "small", "small", "other"]), ":4\r\n");
    assert_eq!(internal(), 6, "the old version's members went");
    assert_eq!(c.call(&["SMOVE", "other", "small", "d"]), ":1\r\n");
    assert_eq!(c.call(&["SMOVE", "other", "small", "c"]), ":1\r\n");
    assert_eq!(c.call(&["EXISTS", "other"]), ":0\r\n");
    assert_eq!(internal(), 4);
    assert_eq!(c.call(&["TYPE", "small"]), "+set\r\n");
    assert_eq!(c.call(&["DEL", "small"]), ":1\r\n");
    assert_eq!(internal(), 0);
}

/// RENAME moves a sorted set's or list's header alone (its entries are
/// keyed by its version) with its expiry, and deletes the entries of a
/// set or list it writes over.
#[test]
fn rename_moves_the_header_and_takes_the_destinations_entries() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    let internal = || db.scan(&[0xff], None, usize::MAX).unwrap().len();
    c.call(&["ZADD", "z", "1", "a", "2", "b"]);
    c.call(&["RPUSH", "l", "x", "y", "z"]);
    c.call(&["EXPIRE", "z", "100"]);
    let before = internal();
    assert_eq!(c.call(&["RENAME", "z", "z2"]), "+OK\r\n");
    assert_eq!(internal(), before, "no entry moved");
    assert_eq!(c.call(&["ZRANGE", "z2", "0", "-1"]), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    assert!(c.call(&["TTL", "z2"]).starts_with(":"), "the expiry moved with it");
    assert_ne!(c.call(&["TTL", "z2"]), ":-1\r\n");
    assert_eq!(c.call(&["EXISTS", "z"]), ":0\r\n");
    // Over the list: its three elements go.
    assert_eq!(c.call(&["RENAMENX", "z2", "l"]), ":0\r\n");
    assert_eq!(c.call(&["RENAME", "z2", "l"]), "+OK\r\n");
    assert_eq!(internal(), before - 3);
    assert_eq!(c.call(&["TYPE", "l"]), "+zset\r\n");
    assert_eq!(c.call(&["RENAME", "missing", "x"]), "-ERR no such key\r\n");
    assert_eq!(c.call(&["RENAME", "l", "l"]), "+OK\r\n");
    assert_eq!(c.call(&["ZCARD", "l"]), ":2\r\n");
}

/// DBSIZE counts the live keys. FLUSHALL and FLUSHDB delete every key with every set's and list's
/// entries, abort a WATCH of a deleted key, flush inside MULTI with the
/// transaction's own writes, and refuse what Redis refuses.
#[test]
fn flushall_deletes_every_key_and_its_entries() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    let mut watcher = Client::connect(addr);
    let everything = || db.scan(&[], None, usize::MAX).unwrap().len();
    // More keys than the flush reads at a time.
    for chunk in 0..10 {
        let pairs: Vec<String> = (chunk * 500..(chunk + 1) * 500)
            .flat_map(|i| [format!("s{i}"), "v".to_string()])
            .collect();
        let mut mset = vec!["MSET"];
        mset.extend(pairs.iter().map(String::as_str));
        assert_eq!(c.call(&mset), "+OK\r\n");
    }
    c.call(&["HSET", "h", "f", "v"]);
    c.call(&["ZADD", "z", "1", "a", "2", "b"]);
    c.call(&["RPUSH", "l", "a", "b", "c"]);
    c.call(&["SET", "gone", "v", "PX", "1"]);
    assert!(everything() > 5004);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(c.call(&["DBSIZE"]), ":5003\r\n", "every live key, the expired one not");
    assert_eq!(watcher.call(&["WATCH", "s17"]), "+OK\r\n");
    assert_eq!(c.call(&["FLUSHALL"]), "+OK\r\n");
    assert_eq!(everything(), 0, "nothing is left, internal entries included");
    assert_eq!(c.call(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c.call(&["KEYS", "*"]), "*0\r\n");
    assert_eq!(watcher.call(&["MULTI"]), "+OK\r\n");
    watcher.call(&["SET", "s17", "again"]);
    assert_eq!(watcher.call(&["EXEC"]), "*-1\r\n", "the watched key was deleted");

    c.call(&["SET", "before", "v"]);
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    c.call(&["ZADD", "t", "1", "a"]);
    c.call(&["FLUSHDB", "async"]);
    c.call(&["SET", "after", "v"]);
    assert_eq!(c.call(&["EXEC"]), "*3\r\n:1\r\n+OK\r\n+OK\r\n");
    assert_eq!(c.call(&["KEYS", "*"]), "*1\r\n$5\r\nafter\r\n");
    assert_eq!(everything(), 1);

    assert_eq!(c.call(&["FLUSHALL", "SYNC"]), "+OK\r\n");
    assert_eq!(c.call(&["FLUSHALL", "now"]), "-ERR syntax error\r\n");
    assert_eq!(c.call(&["FLUSHDB", "ASYNC", "SYNC"]), "-ERR syntax error\r\n");
    assert_eq!(c.call(&["FLUSHALL"]), "+OK\r\n", "an empty store flushes too");
}

/// The expiry sweeper deletes values past their deadline that nobody
/// touches again, a set's or sorted set's members with them, and counts them in
/// INFO as Redis's active expiry does; its knobs are CONFIG's.
#[test]
fn the_sweeper_reclaims_expired_keys_nobody_touches() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    assert_eq!(
        c.call(&["CONFIG", "GET", "expiry-*"]),
        "*8\r\n$15\r\nexpiry-critical\r\n$2\r\nno\r\n$13\r\nexpiry-paused\r\n$2\r\nno\r\n\
         $17\r\nexpiry-rate-bytes\r\n$1\r\n0\r\n$16\r\nexpiry-rate-iops\r\n$1\r\n0\r\n"
    );
    for i in 0..50 {
        c.call(&["SET", &format!("s{i}"), "v", "PX", "1"]);
    }
    c.call(&["ZADD", "z", "1", "a", "2", "b"]);
    c.call(&["PEXPIRE", "z", "1"]);
    c.call(&["SADD", "set", "a", "b", "c"]);
    c.call(&["PEXPIRE", "set", "1"]);
    c.call(&["SET", "kept", "v"]);
    let expired = |c: &mut Client| -> u64 {
        let info = c.call(&["INFO", "stats"]);
        let line = info
            .lines()
            .find(|l| l.starts_with("expired_keys:"))
            .expect("expired_keys");
        line["expired_keys:".len()..].parse().unwrap()
    };
    // The sweeper's first walk starts a second after the server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while expired(&mut c) < 52 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(expired(&mut c), 52, "every expired value deleted, once");
    let stored: Vec<Vec<u8>> = db
        .scan(&[], None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(stored, vec![b"kept".to_vec()], "the sets' members went too");
    let info = c.call(&["INFO", "background"]);
    assert!(info.contains("expiry:") && info.contains("paused=false"), "{info}");
    assert_eq!(c.call(&["CONFIG", "SET", "expiry-paused", "yes"]), "+OK\r\n");
    assert!(c.call(&["INFO", "background"]).contains("paused=true"));
}

#[test]
fn a_connections_tenant_is_forgotten_when_it_closes() {
    let (addr, _dir) = start(Options::default());
    for _ in 0..20 {
        let mut c = Client::connect(addr);
        c.call(&["SET", "k", "v"]);
        c.call(&["QUIT"]);
    }
    let mut named = Client::connect(addr);
    named.call(&["AUTH", "alice", "pw"]);
    named.call(&["GET", "k"]);
    named.call(&["QUIT"]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let info = Client::connect(addr).call(&["INFO"]);
    let tenants: Vec<&str> = info.lines().filter(|l| l.starts_with("tenant_")).collect();
    assert_eq!(tenants.len(), 1, "only alice is left: {tenants:?}");
    assert!(tenants[0].starts_with("tenant_alice:ops=3,"), "{tenants:?}");
}

/// redis-tools must be there under CI (scripts/test.sh installs them);
/// elsewhere the test says what is missing and passes.
fn redis_tool(name: &str) -> Option<String> {
    let found = Command::new(name).arg("--version").output().is_ok();
    if !found && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{name} is missing under CI: scripts/test.sh installs redis-tools");
    }
    if !found {
        eprintln!("skipping: {name} not installed (apt-get install redis-tools)");
    }
    found.then(|| name.to_string())
}

#[test]
fn redis_cli_and_redis_benchmark_run_without_errors() {
    let (Some(cli), Some(bench)) = (redis_tool("redis-cli"), redis_tool("redis-benchmark")) else {
        return;
    };
    let (addr, _dir) = start(Options::default());
    let port = addr.port().to_string();
    let cli_run = |args: &[&str]| {
        let out = Command::new(&cli).args(["-p", &port]).args(args).output().unwrap();
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(cli_run(&["set", "greeting", "hello"]), "OK");
    assert_eq!(cli_run(&["get", "greeting"]), "hello");
    assert_eq!(cli_run(&["ping"]), "PONG");
    let out = Command::new(&bench)
        .args(["-p", &port, "-t", "get,set", "-c", "50", "-n", "5000", "-q"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redis-benchmark: {out:?}");
    for op in ["SET", "GET"] {
        assert!(
            text.split(['\r', '\n'])
                .any(|l| l.trim().starts_with(&format!("{op}: ")) && l.contains("requests per second")),
            "{op} missing from redis-benchmark's output: {text}"
        );
    }
    assert!(!text.contains("ERR"), "{text}");
}

/// `SLUICE.WITH` carries a request context: each wrapped command gets
/// exactly its own reply (pipelined too), its tenant is the one named, and
/// a malformed context is refused with the field named while the
/// connection goes on.
#[test]
fn wrapped_commands_answer_as_bare_ones_and_bad_contexts_are_named() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    assert_eq!(
        c.call(&["SLUICE.WITH", "10", "5", "router", "SET", "k", "v"]),
        "+OK\r\n"
    );
    assert_eq!(c.call(&["sluice.with", "11", "-", "-", "GET", "k"]), "$1\r\nv\r\n");
    let mut pipeline = String::new();
    for id in 12..15 {
        pipeline.push_str(&format!(
            "*6\r\n$11\r\nSLUICE.WITH\r\n${}\r\n{id}\r\n$1\r\n-\r\n$6\r\nrouter\r\n$3\r\nGET\r\n$1\r\nk\r\n",
            id.to_string().len()
        ));
    }
    c.send_raw(pipeline.as_bytes());
    for _ in 12..15 {
        assert_eq!(c.reply(), "$1\r\nv\r\n");
    }
    let info = c.call(&["INFO"]);
    assert!(info.contains("tenant_router:ops=4,"), "{info}");
    let err = c.call(&["SLUICE.WITH", "x", "-", "-", "GET", "k"]);
    assert!(err.starts_with("-ERR SLUICE.WITH: the request id"), "{err}");
    let err = c.call(&["SLUICE.WITH", "1", "-", "-"]);
    assert!(
        err.starts_with("-ERR wrong number of arguments for 'sluice.with' command"),
        "{err}"
    );
    assert_eq!(c.call(&["GET", "k"]), "$1\r\nv\r\n", "the connection goes on");
}

/// `HELLO` picks the protocol as Redis does: RESP3 replies (maps, `_` for
/// null) after `HELLO 3`, RESP2 again after `HELLO 2`; an unknown version
/// or option is refused with Redis's error, and the connection goes on.
#[test]
fn hello_switches_between_resp2_and_resp3() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["HSET", "h", "f", "v"]), ":1\r\n");
    let hello = c.call(&["HELLO", "3"]);
    assert!(hello.starts_with("%7\r\n$6\r\nserver\r\n$6\r\nsluice\r\n"), "{hello}");
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:"), "{hello}");
    assert!(hello.contains("$4\r\nmode\r\n$10\r\nstandalone\r\n"), "{hello}");
    assert_eq!(c.call(&["GET", "missing"]), "_\r\n");
    assert_eq!(c.call(&["HGETALL", "h"]), "%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
    assert_eq!(c.call(&["MGET", "missing", "h2"]), "*2\r\n_\r\n_\r\n");
    let hello = c.call(&["hello", "2", "SETNAME", "worker"]);
    assert!(hello.starts_with("*14\r\n") && hello.contains(":2\r\n"), "{hello}");
    assert_eq!(c.call(&["GET", "missing"]), "$-1\r\n");
    assert_eq!(c.call(&["HGETALL", "h"]), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
    assert_eq!(c.call(&["HELLO", "4"]), "-NOPROTO unsupported protocol version\r\n");
    assert_eq!(
        c.call(&["HELLO", "3", "BOGUS"]),
        "-ERR Syntax error in HELLO option 'BOGUS'\r\n"
    );
    assert_eq!(
        c.call(&["GET", "missing"]),
        "$-1\r\n",
        "a refused HELLO changes nothing"
    );
}

/// With a password set, HELLO authenticates with its AUTH option, or is
/// refused as Redis refuses it.
#[test]
fn hello_authenticates_with_its_auth_option() {
    let server_options = ServerOptions {
        password: Some("pw".into()),
        ..ServerOptions::default()
    };
    let (addr, _dir) = start_with(Options::default(), server_options);
    let mut c = Client::connect(addr);
    assert!(c.call(&["HELLO", "3"]).starts_with("-NOAUTH HELLO must be called"));
    assert!(c
        .call(&["HELLO", "3", "AUTH", "alice", "nope"])
        .starts_with("-WRONGPASS"));
    assert_eq!(c.call(&["GET", "k"]), "-NOAUTH Authentication required.\r\n");
    assert!(c.call(&["HELLO", "3", "AUTH", "alice", "pw"]).starts_with("%7\r\n"));
    assert_eq!(c.call(&["GET", "k"]), "_\r\n");
    assert!(
        c.call(&["INFO"]).contains("tenant_alice:"),
        "HELLO's user is the tenant"
    );
}

/// redis-py from PyPI with its default settings (it opens with `HELLO 3`)
/// and with `protocol=2`: what a Python user's first lines do. redis-py
/// must be there under CI (scripts/test.sh installs it).
#[test]
fn redis_py_works_with_its_defaults_and_with_resp2() {
    let has_redis_py = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_redis_py {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "redis-py is missing under CI: scripts/test.sh installs it"
        );
        eprintln!("skipping: redis-py not installed (python3 -m pip install redis)");
        return;
    }
    let (addr, _dir) = start(Options::default());
    let script = r#"
import sys, redis
port = int(sys.argv[1])
for kwargs in ({}, {"protocol": 2}):
    r = redis.Redis(port=port, **kwargs)
    assert r.ping() is True
    assert r.set("greeting", "hello") is True
    assert r.get("greeting") == b"hello"
    assert r.get("missing") is None
    r.hset("h", mapping={"a": "1", "b": "2"})
    assert r.hgetall("h") == {b"a": b"1", b"b": b"2"}, r.hgetall("h")
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.set(f"k{i}", i)
    p.mget([f"k{i}" for i in range(100)])
    replies = p.execute()
    assert replies[-1] == [str(i).encode() for i in range(100)]
    r.delete("cnt", "w")
    p = r.pipeline()  # MULTI/EXEC, redis-py's default
    p.set("t1", "a").incr("cnt").get("t1")
    assert p.execute() == [True, 1, b"a"]
    def bump(pipe):
        n = int(pipe.get("cnt"))
        pipe.multi()
        pipe.set("cnt", n + 10)
    r.transaction(bump, "cnt")
    assert r.get("cnt") == b"11"
    with r.pipeline() as pipe:
        pipe.watch("w")
        r.set("w", "theirs")
        pipe.multi()
        pipe.set("w", "mine")
        try:
            pipe.execute()
            raise AssertionError("EXEC ran after a write to a watched key")
        except redis.WatchError:
            pass
    assert r.get("w") == b"theirs"
    assert r.set("session", "s", ex=100) is True and r.ttl("session") == 100
    assert r.getex("session", persist=True) == b"s" and r.ttl("session") == -1
    r.delete("hits")
    assert r.incr("hits") == 1 and r.incrby("hits", 5) == 6
    r.mset({f"scan:{i}": i for i in range(50)})
    assert sorted(r.scan_iter("scan:*", count=7)) == sorted(f"scan:{i}".encode() for i in range(50))
    r.delete("jobs", "done")
    assert r.lpush("jobs", "a", "b") == 2 and r.rpush("jobs", "c") == 3
    assert r.lrange("jobs", 0, -1) == [b"b", b"a", b"c"]
    assert r.lmove("jobs", "done", "RIGHT", "LEFT") == b"c"
    assert r.rpop("jobs", 5) == [b"a", b"b"] and r.rpop("jobs") is None
    assert r.llen("done") == 1 and r.lindex("done", -1) == b"c"
    r.rpush("queue", "job")
    assert tuple(r.blpop(["empty", "queue"], timeout=1)) == (b"queue", b"job")
    assert r.brpop("queue", timeout=0.05) is None
    r.delete("tags", "more")
    assert r.sadd("tags", "a", "b", "c") == 3 and r.sadd("tags", "a") == 0
    assert r.smembers("tags") == {b"a", b"b", b"c"} and r.sismember("tags", "b")
    r.sadd("more", "c", "d")
    assert r.sinter("tags", "more") == {b"c"} and r.sunion("tags", "more") == {b"a", b"b", b"c", b"d"}
    assert sorted(r.sscan_iter("tags", count=1)) == [b"a", b"b", b"c"]
    assert r.spop("more", 2) is not None and r.scard("more") == 0
    r.delete("events")
    first = r.xadd("events", {"n": "1"})
    assert r.xadd("events", {"n": "2"}, maxlen=10) > first and r.xlen("events") == 2
    assert [fields for _, fields in r.xrevrange("events", "+", "-", count=1)] == [{b"n": b"2"}]
    [[stream, entries]] = r.xread({"events": first}, block=100)
    assert stream == b"events" and [f for _, f in entries] == [{b"n": b"2"}]
    assert not r.xread({"events": "$"}, block=50)
    r.delete("resource")
    lock = r.lock("resource", timeout=10)
    assert lock.acquire(blocking=False)
    assert r.lock("resource", timeout=10).acquire(blocking=False) is False, "held"
    assert lock.extend(5) and lock.owned()
    lock.release()
    assert r.exists("resource") == 0 and r.lock("resource").acquire(blocking=False)
    assert r.config_get("flush-*")["flush-paused"] in ("no", b"no")
    assert r.command()["get"]["first_key_pos"] == 1
    assert r.info("clients")["connected_clients"] >= 1
    named = redis.Redis(port=port, client_name="gold", **kwargs)
    assert named.client_getname() in ("gold", b"gold"), named.client_getname()
    assert isinstance(named.client_id(), int)
    named.close()
    r.close()
print("ok")
"#;
    let out = Command::new("python3")
        .args(["-c", script, &addr.port().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "redis-py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// MULTI, EXEC, DISCARD and their errors, with Redis 7's replies: queued
/// commands read the transaction's own writes; a command refused while
/// queueing discards the transaction, one that fails when run fails alone.
#[test]
fn transactions_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(c.call(&["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["MULTI"]), "-ERR MULTI calls can not be nested\r\n");
    for cmd in [
        &["SET", "a", "1"][..],
        &["INCR", "a"],
        &["GET", "a"],
        &["SET", "r:1", "x"],
        &["RANGE", "r:", "r;"],
    ] {
        assert_eq!(c.call(cmd), "+QUEUED\r\n", "{cmd:?}");
    }
    assert_eq!(
        c.call(&["EXEC"]),
        "*5\r\n+OK\r\n:2\r\n$1\r\n2\r\n+OK\r\n*2\r\n$3\r\nr:1\r\n$1\r\nx\r\n",
        "reads inside see the transaction's writes"
    );
    c.call(&["SET", "r:0", "old"]);
    c.call(&["MULTI"]);
    c.call(&["DEL", "r:0"]);
    c.call(&["SET", "r:2", "y"]);
    c.call(&["RANGE", "r:", "r;", "2"]);
    assert_eq!(
        c.call(&["EXEC"]),
        "*3\r\n:1\r\n+OK\r\n*4\r\n$3\r\nr:1\r\n$1\r\nx\r\n$3\r\nr:2\r\n$1\r\ny\r\n",
        "a scan inside merges the transaction's deletes and writes"
    );

    c.call(&["MULTI"]);
    c.call(&["SET", "a", "5"]);
    assert_eq!(c.call(&["DISCARD"]), "+OK\r\n");
    assert_eq!(
        c.call(&["GET", "a"]),
        "$1\r\n2\r\n",
        "discarded, and no longer queueing"
    );

    c.call(&["MULTI"]);
    assert_eq!(c.call(&["SET", "a", "6"]), "+QUEUED\r\n");
    assert_eq!(
        c.call(&["NOSUCH", "x"]),
        "-ERR unknown command 'NOSUCH', with args beginning with: 'x' \r\n"
    );
    assert_eq!(
        c.call(&["SET", "a"]),
        "-ERR wrong number of arguments for 'set' command\r\n"
    );
    assert_eq!(
        c.call(&["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(c.call(&["GET", "a"]), "$1\r\n2\r\n", "nothing of it ran");

    c.call(&["MULTI"]);
    c.call(&["SET", "s", "text"]);
    c.call(&["INCR", "s"]);
    c.call(&["SET", "t", "y"]);
    assert_eq!(
        c.call(&["EXEC"]),
        "*3\r\n+OK\r\n-ERR value is not an integer or out of range\r\n+OK\r\n",
        "a command failing when run fails alone"
    );
    assert_eq!(c.call(&["GET", "t"]), "$1\r\ny\r\n");
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["EXEC"]), "*0\r\n", "an empty transaction");
}

/// WATCH: a write by another client between WATCH and EXEC makes EXEC run
/// nothing; without one, or after UNWATCH, it runs.
#[test]
fn watch_aborts_exec_after_another_clients_write() {
    let (addr, _dir) = start(Options::default());
    let (mut c, mut other) = (Client::connect(addr), Client::connect(addr));
    assert_eq!(c.call(&["WATCH", "k", "j"]), "+OK\r\n");
    other.call(&["SET", "k", "theirs"]);
    c.call(&["MULTI"]);
    assert_eq!(c.call(&["WATCH", "k"]), "-ERR WATCH inside MULTI is not allowed\r\n");
    c.call(&["SET", "k", "mine"]);
    assert_eq!(c.call(&["EXEC"]), "*-1\r\n", "aborted: the null array");
    assert_eq!(c.call(&["GET", "k"]), "$6\r\ntheirs\r\n");

    c.call(&["WATCH", "k"]);
    c.call(&["MULTI"]);
    c.call(&["SET", "k", "mine"]);
    assert_eq!(c.call(&["EXEC"]), "*1\r\n+OK\r\n", "no write between");

    c.call(&["WATCH", "k"]);
    other.call(&["SET", "k", "again"]);
    assert_eq!(c.call(&["UNWATCH"]), "+OK\r\n");
    c.call(&["MULTI"]);
    c.call(&["SET", "k", "mine"]);
    assert_eq!(c.call(&["EXEC"]), "*1\r\n+OK\r\n", "unwatched");

    c.call(&["WATCH", "k"]);
    c.call(&["MULTI"]);
    c.call(&["SET", "k", "first"]);
    c.call(&["EXEC"]);
    c.call(&["MULTI"]);
    c.call(&["SET", "k", "second"]);
    assert_eq!(c.call(&["EXEC"]), "*1\r\n+OK\r\n", "EXEC forgets what was watched");
}

/// Concurrent transactions are isolated and all-or-nothing to readers:
/// every MULTI/EXEC moves two counters together, and no reader ever sees
/// them apart; optimistic increments under WATCH lose no update.
#[test]
fn transactions_are_atomic_to_other_clients() {
    let (addr, _dir) = start(Options::default());
    let (writers, per_writer) = (4, 100);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(addr);
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let reply = c.call(&["MGET", "x", "y"]);
                let mut lines = reply.split("\r\n").skip(1);
                let mut values = Vec::new();
                while let Some(header) = lines.next() {
                    match header {
                        "$-1" => values.push("nil"),
                        h if h.starts_with('$') => values.push(lines.next().unwrap()),
                        _ => {}
                    }
                }
                assert!(values.len() == 2 && values[0] == values[1], "torn: {reply:?}");
                reads += 1;
            }
            reads
        })
    };
    let workers: Vec<_> = (0..writers)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..per_writer {
                    c.call(&["MULTI"]);
                    c.call(&["INCR", "x"]);
                    c.call(&["INCR", "y"]);
                    assert!(c.call(&["EXEC"]).starts_with("*2\r\n"));
                    // An optimistic increment: retried until no one wrote between.
                    loop {
                        c.call(&["WATCH", "z"]);
                        let n: i64 = c.call(&["GET", "z"]).lines().nth(1).map_or(0, |v| v.parse().unwrap());
                        c.call(&["MULTI"]);
                        c.call(&["SET", "z", &(n + 1).to_string()]);
                        if c.call(&["EXEC"]) != "*-1\r\n" {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    let total = (writers * per_writer).to_string();
    let mut c = Client::connect(addr);
    for key in ["x", "y", "z"] {
        assert_eq!(
            c.call(&["GET", key]),
            format!("${}\r\n{total}\r\n", total.len()),
            "{key}"
        );
    }
}

/// CLIENT's subcommands for a connection's own names, with Redis 7's
/// replies; HELLO's SETNAME names it too.
#[test]
fn client_names_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let (mut c, mut other) = (Client::connect(addr), Client::connect(addr));
    let (id, other_id) = (c.call(&["CLIENT", "ID"]), other.call(&["CLIENT", "ID"]));
    assert!(
        id.starts_with(':') && other_id.starts_with(':') && id != other_id,
        "{id} {other_id}"
    );
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(c.call(&["CLIENT", "SETNAME", "gold"]), "+OK\r\n");
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), "$4\r\ngold\r\n");
    assert_eq!(
        other.call(&["CLIENT", "GETNAME"]),
        "$-1\r\n",
        "the name is the connection's"
    );
    assert_eq!(
        c.call(&["CLIENT", "SETNAME", "two words"]),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), "$4\r\ngold\r\n", "kept after a refusal");
    assert_eq!(c.call(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]), "+OK\r\n");
    assert_eq!(c.call(&["CLIENT", "SETINFO", "lib-ver", "5.0.1"]), "+OK\r\n");
    assert_eq!(
        c.call(&["CLIENT", "SETINFO", "color", "red"]),
        "-ERR Unrecognized option 'color'\r\n"
    );
    let info = c.call(&["CLIENT", "INFO"]);
    let n = id.trim_start_matches(':').trim_end();
    let peer = c.writer.local_addr().unwrap();
    assert!(
        info.contains(&format!(
            "id={n} addr={peer} laddr={addr} name=gold db=0 multi=-1 resp=2 lib-name=redis-py lib-ver=5.0.1"
        )),
        "{info}"
    );
    assert_eq!(c.call(&["CLIENT", "SETNAME", ""]), "+OK\r\n");
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), "$-1\r\n", "an empty name clears it");
    assert_eq!(
        c.call(&["CLIENT", "SETNAME"]),
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(
        c.call(&["CLIENT", "LIST"]),
        "-ERR unknown subcommand 'LIST'. Try CLIENT HELP.\r\n"
    );
    assert!(c.call(&["HELLO", "2", "SETNAME", "silver"]).starts_with('*'));
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), "$6\r\nsilver\r\n");
}

/// CONFIG turns the background tasks' knobs, as INFO then shows, with
/// Redis's replies and errors (checked against redis-server 7.0).
#[test]
fn config_sets_the_background_tasks_knobs() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    assert_eq!(
        c.call(&["CONFIG", "GET", "compaction-*"]),
        "*8\r\n$19\r\ncompaction-critical\r\n$2\r\nno\r\n$17\r\ncompaction-paused\r\n$2\r\nno\r\n\
         $21\r\ncompaction-rate-bytes\r\n$1\r\n0\r\n$20\r\ncompaction-rate-iops\r\n$1\r\n0\r\n"
    );
    assert_eq!(
        c.call(&[
            "CONFIG",
            "SET",
            "compaction-paused",
            "yes",
            "FLUSH-RATE-BYTES",
            "1048576"
        ]),
        "+OK\r\n"
    );
    let info = c.call(&["INFO"]);
    assert!(info.contains("compaction:") && info.contains("paused=true"), "{info}");
    assert!(info.contains("rate_bytes=1048576"), "{info}");
    assert_eq!(
        c.call(&["CONFIG", "GET", "flush-rate-bytes", "appendonly"]),
        "*4\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n$16\r\nflush-rate-bytes\r\n$7\r\n1048576\r\n"
    );
    assert_eq!(c.call(&["CONFIG", "GET", "nosuch*"]), "*0\r\n");

    let refusals = [
        (&["CONFIG", "SET", "foo", "1"][..], "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n"),
        (&["CONFIG", "SET", "save"], "-ERR wrong number of arguments for 'config|set' command\r\n"),
        (&["CONFIG", "GET"], "-ERR wrong number of arguments for 'config|get' command\r\n"),
        (&["CONFIG"], "-ERR wrong number of arguments for 'config' command\r\n"),
        (&["CONFIG", "bogus"], "-ERR unknown subcommand 'bogus'. Try CONFIG HELP.\r\n"),
        (
            &["CONFIG", "SET", "save", ""],
            "-ERR CONFIG SET failed (possibly related to argument 'save') - can't set immutable config\r\n",
        ),
        (
            &["CONFIG", "SET", "flush-paused", "maybe"],
            "-ERR CONFIG SET failed (possibly related to argument 'flush-paused') - argument must be 'yes' or 'no'\r\n",
        ),
        (
            &["CONFIG", "SET", "compaction-paused", "no", "flush-rate-iops", "-1"],
            "-ERR CONFIG SET failed (possibly related to argument 'flush-rate-iops') - argument couldn't be parsed into an integer\r\n",
        ),
        (
            &["CONFIG", "SET", "flush-paused", "no", "flush-paused", "yes"],
            "-ERR CONFIG SET failed (possibly related to argument 'flush-paused') - duplicate parameter\r\n",
        ),
    ];
    for (args, refusal) in refusals {
        assert_eq!(c.call(args), refusal, "{args:?}");
    }
    assert_eq!(
        c.call(&["CONFIG", "GET", "compaction-paused"]),
        "*2\r\n$17\r\ncompaction-paused\r\n$3\r\nyes\r\n",
        "a refused CONFIG SET sets none of its parameters"
    );
    c.call(&["HELLO", "3"]);
    assert_eq!(
        c.call(&["CONFIG", "GET", "databases"]),
        "%1\r\n$9\r\ndatabases\r\n$1\r\n1\r\n",
        "a map in RESP3"
    );
}

/// A watched key that expires before EXEC aborts the transaction, as in
/// Redis; one that outlives it, or had already expired when watched, does
/// not.
#[test]
fn a_watched_key_that_expires_aborts_exec() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    c.call(&["SET", "soon", "v", "PX", "30"]);
    c.call(&["SET", "later", "v", "EX", "100"]);
    c.call(&["SET", "gone", "v", "PX", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(c.call(&["WATCH", "later", "gone"]), "+OK\r\n");
    c.call(&["MULTI"]);
    c.call(&["GET", "later"]);
    assert_eq!(c.call(&["EXEC"]), "*1\r\n$1\r\nv\r\n", "no watched key changed");
    assert_eq!(c.call(&["WATCH", "soon", "later"]), "+OK\r\n");
    std::thread::sleep(std::time::Duration::from_millis(40));
    c.call(&["MULTI"]);
    c.call(&["GET", "later"]);
    assert_eq!(c.call(&["EXEC"]), "*-1\r\n", "soon expired while watched");
}

/// INFO gives Redis's sections that clients read, and Sluice's own; one
/// section when asked for it, none for a name it does not have.
#[test]
fn info_answers_by_section() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    let _other = Client::connect(addr);
    c.call(&["SET", "k", "v"]);
    let all = c.call(&["INFO"]);
    for section in [
        "# Server",
        "# Clients",
        "# Persistence",
        "# Stats",
        "# Tenants",
        "# Background",
        "# Store",
    ] {
        assert!(all.contains(section), "{section} in {all}");
    }
    assert!(
        all.contains("redis_version:7.0.0\r\n") && all.contains("aof_enabled:1\r\n"),
        "{all}"
    );
    let clients = c.call(&["INFO", "CLIENTS"]);
    assert!(clients.contains("# Clients\r\nconnected_clients:2\r\n"), "{clients}");
    assert!(!clients.contains("# Server"), "{clients}");
    let stats = c.call(&["INFO", "stats", "store"]);
    assert!(
        stats.contains("total_connections_received:2\r\n") && stats.contains("# Store"),
        "{stats}"
    );
    assert_eq!(c.call(&["INFO", "nosuch"]), "$0\r\n\r\n");
}

/// A list's elements are entries of their own: DEL and an emptying pop
/// take them out of the store with the list, and LMOVE moves one whole.
#[test]
fn lists_keep_their_elements_as_entries_and_give_them_back() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    let internal = || db.scan(&[0xff], None, usize::MAX).unwrap().len();
    assert_eq!(c.call(&["RPUSH", "l", "a", "b", "c"]), ":3\r\n");
    assert_eq!(c.call(&["LPUSH", "l", "z"]), ":4\r\n");
    assert_eq!(internal(), 4, "one entry per element");
    assert_eq!(
        c.call(&["LRANGE", "l", "0", "-1"]),
        "*4\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(c.call(&["LMOVE", "l", "m", "RIGHT", "LEFT"]), "$1\r\nc\r\n");
    assert_eq!(c.call(&["TYPE", "m"]), "+list\r\n");
    assert_eq!(internal(), 4, "moved, not copied");
    assert_eq!(c.call(&["LPOP", "m", "5"]), "*1\r\n$1\r\nc\r\n");
    assert_eq!(c.call(&["EXISTS", "m"]), ":0\r\n", "an emptied list is deleted");
    assert_eq!(c.call(&["DEL", "l"]), ":1\r\n");
    assert_eq!(internal(), 0);
    assert_eq!(c.call(&["SET", "s", "v"]), "+OK\r\n");
    assert_eq!(
        c.call(&["LPUSH", "s", "x"]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    // Inserting inside a list moves the shorter side, each way.
    c.call(&["RPUSH", "ins", "a", "b", "c", "d", "e"]);
    assert_eq!(c.call(&["LINSERT", "ins", "AFTER", "a", "x"]), ":6\r\n");
    assert_eq!(c.call(&["LINSERT", "ins", "BEFORE", "e", "y"]), ":7\r\n");
    assert_eq!(c.call(&["LREM", "ins", "0", "c"]), ":1\r\n");
    assert_eq!(
        c.call(&["LRANGE", "ins", "0", "-1"]),
        "*6\r\n$1\r\na\r\n$1\r\nx\r\n$1\r\nb\r\n$1\r\nd\r\n$1\r\ny\r\n$1\r\ne\r\n"
    );
    assert_eq!(internal(), 6, "one entry per element, none left behind");
    assert_eq!(c.call(&["LPOS", "ins", "y"]), ":4\r\n");
}

/// EVAL and its kin answer as Redis 7.0 does (replies checked against
/// redis-server 7.0.15), but for the line Redis adds to a script's errors.
#[test]
fn scripts_answer_as_redis_does() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    let cases: &[(&[&str], &str)] = &[
        (&["EVAL", "return 1", "x"], "-ERR value is not an integer or out of range\r\n"),
        (&["EVAL", "return 1", "-1"], "-ERR Number of keys can't be negative\r\n"),
        (&["EVAL", "return 1", "2", "a"], "-ERR Number of keys can't be greater than number of args\r\n"),
        (&["EVALSHA", "abc", "0"], "-NOSCRIPT No matching script. Please use EVAL.\r\n"),
        (&["EVAL", "return redis.call('incr', KEYS[1])", "1", "s"], ":1\r\n"),
        (&["SET", "str", "v"], "+OK\r\n"),
        (
            &["EVAL", "return redis.call('incr', KEYS[1])", "1", "str"],
            "-ERR value is not an integer or out of range script: 2bab3b661081db58bd2341920e0ba7cf5dc77b25\r\n",
        ),
        (
            &["EVAL", "return x(", "0"],
            "-ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'\r\n",
        ),
        (
            &["EVAL", "return redis.call('multi')", "0"],
            "-ERR This Redis command is not allowed from script script: c329a1a294be6bf95b44144f7502610661ae925a\r\n",
        ),
        (
            &["EVAL", "return redis.call('nosuch')", "0"],
            "-ERR Unknown Redis command called from script script: 206396248e12c6e742fd7296250433c8d7343b74\r\n",
        ),
        (
            &["EVAL", "return {1,2,{3,'x'},nil,5}", "0"],
            "*3\r\n:1\r\n:2\r\n*2\r\n:3\r\n$1\r\nx\r\n",
        ),
        (&["EVAL", "return {err='My Error'}", "0"], "-My Error\r\n"),
        (&["EVAL", "return {ok='fine'}", "0"], "+fine\r\n"),
        (&["EVAL", "return 3.99", "0"], ":3\r\n"),
        (&["EVAL", "return true", "0"], ":1\r\n"),
        (&["EVAL", "return false", "0"], "$-1\r\n"),
        (
            &["EVAL", "return redis.pcall('incr', 'str')", "0"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["SCRIPT", "LOAD", "return 1"], "$40\r\ne0e1f9fabfc9d4800c877a703b823ac0578ff8db\r\n"),
        (
            &["SCRIPT", "EXISTS", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "nope"],
            "*2\r\n:1\r\n:0\r\n",
        ),
        (&["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"], ":1\r\n"),
        (&["SCRIPT", "FLUSH"], "+OK\r\n"),
        (&["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"], "-NOSCRIPT No matching script. Please use EVAL.\r\n"),
        (&["SCRIPT", "BOGUS"], "-ERR unknown subcommand 'BOGUS'. Try SCRIPT HELP.\r\n"),
        (&["EVAL", "return redis.call('get', 'missing')", "0"], "$-1\r\n"),
        (&["EVAL", "return redis.call('set', 'n', 3.5)", "0"], "+OK\r\n"),
        (&["GET", "n"], "$3\r\n3.5\r\n"),
        (
            &["EVAL", "return redis.call('set', 'n', {})", "0"],
            "-ERR Lua redis lib command arguments must be strings or integers script: 09ff1340ecb4337d2430da87f084d606a8be3604\r\n",
        ),
        (
            &["EVAL_RO", "return redis.call('set', 'n', 1)", "0"],
            "-ERR Write commands are not allowed from read-only scripts. script: b2f0aa4dab03f57e525ce5de8b0c57131392d0fe\r\n",
        ),
        (&["EVAL", "return ARGV[2] .. KEYS[1]", "1", "k", "a", "b"], "$2\r\nbk\r\n"),
        (&["EVAL", "return cjson.encode({a = {1, 2}})", "0"], "$11\r\n{\"a\":[1,2]}\r\n"),
        (&["EVAL", "return cjson.decode(ARGV[1]).n + 1", "0", "{\"n\":41}"], ":42\r\n"),
        (&["EVAL", "return bit.tohex(bit.bor(bit.lshift(1, 8), 15))", "0"], "$8\r\n0000010f\r\n"),
        (
            &["EVAL", "return cmsgpack.unpack(cmsgpack.pack({delay = 5})).delay", "0"],
            ":5\r\n",
        ),
        (&["EVAL", "return struct.pack('>I2 s', 258, 'ab')", "0"], "$5\r\n\x01\x02ab\x00\r\n"),
        (&["EVAL", "return {struct.unpack('>h', ARGV[1])}", "0", "ab"], "*2\r\n:24930\r\n:3\r\n"),
        (
            &["EVAL", "return struct.pack('z', 1)", "0"],
            "-ERR bad argument #1 to 'pack' (invalid format option 'z') script: b1a49a62278d772f47cfca6a679bc33c0fa64430\r\n",
        ),
    ];
    for (command, expected) in cases {
        assert_eq!(&c.call(command), expected, "{command:?}");
    }
    // Globals are Redis 7's: read-only, so no script leaves state behind.
    let set_global = c.call(&["EVAL", "x = 5 return x", "0"]);
    assert!(
        set_global.contains("Attempt to modify a readonly table"),
        "{set_global}"
    );
    assert_eq!(c.call(&["EVAL", "local x = 5 return x", "0"]), ":5\r\n");
}

/// A script runs alone: read-modify-write scripts from several clients
/// lose no update, and EVAL inside MULTI runs inside the transaction.
#[test]
fn scripts_run_atomically() {
    let (addr, _dir) = start(Options::default());
    let bump = "local v = tonumber(redis.call('get', KEYS[1]) or '0'); redis.call('set', KEYS[1], v + 1); return v + 1";
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut c = Client::connect(addr);
                for _ in 0..50 {
                    assert!(c.call(&["EVAL", bump, "1", "counter"]).starts_with(':'));
                }
            });
        }
    });
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["GET", "counter"]), "$3\r\n200\r\n");
    c.call(&["MULTI"]);
    assert_eq!(c.call(&["EVAL", bump, "1", "counter"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "*1\r\n:201\r\n");
}

/// A shard told its slots (as `sluice route` tells it) refuses a script's
/// command on a key of another slot, naming the key, and writes nothing
/// for it; a key of its own slots goes through, and clearing the slots
/// makes every key its own again.
#[test]
fn a_shard_refuses_a_script_reaching_a_key_of_another_slot() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    // "foo" is in slot 12182, "bar" in 5061.
    assert_eq!(c.call(&["CONFIG", "SET", "shard-slots", "0-8191"]), "+OK\r\n");
    assert_eq!(
        c.call(&["CONFIG", "GET", "shard-slots"]),
        "*2\r\n$11\r\nshard-slots\r\n$6\r\n0-8191\r\n"
    );
    let write_undeclared = "redis.call('set', KEYS[1], 'v'); return redis.call('set', 'foo', 'v')";
    let refused = c.call(&["EVAL", write_undeclared, "1", "bar"]);
    assert!(
        refused.starts_with("-ERR Script attempted to access a non local key in a cluster node: 'foo' is in slot 12182, this shard serves slots 0-8191"),
        "{refused}"
    );
    assert_eq!(
        c.call(&["EXISTS", "foo"]),
        ":0\r\n",
        "nothing written for the refused key"
    );
    assert_eq!(
        c.call(&["GET", "bar"]),
        "$1\r\nv\r\n",
        "what the script wrote before is kept, as for any failure"
    );
    let pcall = c.call(&["EVAL", "return redis.pcall('mget', KEYS[1], 'foo')", "1", "bar"]);
    assert!(
        pcall.starts_with("-ERR Script attempted to access a non local key"),
        "{pcall}"
    );
    assert_eq!(c.call(&["EVAL", "return redis.call('get', 'bar')", "0"]), "$1\r\nv\r\n");
    for bad in ["16384", "9-2", "x"] {
        let reply = c.call(&["CONFIG", "SET", "shard-slots", bad]);
        assert!(
            reply.starts_with("-ERR CONFIG SET failed (possibly related to argument 'shard-slots')"),
            "{bad}: {reply}"
        );
    }
    assert_eq!(c.call(&["CONFIG", "SET", "shard-slots", ""]), "+OK\r\n");
    assert_eq!(c.call(&["EVAL", write_undeclared, "1", "bar"]), "+OK\r\n");
}

/// A script that never ends is stopped at the server's time limit, and
/// keeps what it wrote before, as a failed script does.
#[test]
fn a_runaway_script_is_stopped() {
    let server_options = ServerOptions {
        script_time_limit: std::time::Duration::from_millis(200),
        ..ServerOptions::default()
    };
    let (addr, _dir) = start_with(Options::default(), server_options);
    let mut c = Client::connect(addr);
    let reply = c.call(&["EVAL", "redis.call('set', 'before', '1'); while true do end", "0"]);
    assert!(reply.contains("time limit"), "{reply}");
    assert_eq!(c.call(&["GET", "before"]), "$1\r\n1\r\n");
    assert_eq!(c.call(&["SET", "after", "2"]), "+OK\r\n", "writers go on");
}

/// A command as RESP, for clients that send without waiting for a reply.
fn resp(args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    req
}

/// Blocked clients hold no worker: with two workers, 20 clients block in
/// BLPOP and others are still served; 20 pushes serve each blocked client
/// one element, and what a blocked client pipelined behind its BLPOP
/// runs after it. A timeout answers nil; a client that leaves while
/// blocked takes no element; inside MULTI a blocking pop does not wait.
#[test]
fn blocking_pops_wait_without_a_worker_and_each_element_goes_once() {
    let (addr, _dir) = start_with(
        Options::default(),
        ServerOptions {
            workers: 2,
            ..ServerOptions::default()
        },
    );
    let mut c = Client::connect(addr);
    let started = std::time::Instant::now();
    assert_eq!(c.call(&["BLPOP", "q", "0.1"]), "*-1\r\n");
    assert!(started.elapsed() >= std::time::Duration::from_millis(100));
    assert_eq!(
        c.call(&["BRPOPLPUSH", "q", "r", "0.05"]),
        "*-1\r\n",
        "a timeout is the null array"
    );
    // A client left blocked fails the test instead of hanging it.
    let bounded = || {
        let c = Client::connect(addr);
        c.writer
            .set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        c
    };
    let mut blocked: Vec<Client> = (0..20).map(|_| bounded()).collect();
    for (i, b) in blocked.iter_mut().enumerate() {
        let tail = if i % 2 == 0 { "q" } else { "other" };
        b.send_raw(format!("{}{}", resp(&["BLPOP", "other", tail, "0"]), resp(&["PING"])).as_bytes());
    }
    let all_blocked = |c: &mut Client| c.call(&["INFO", "clients"]).contains("blocked_clients:20");
    while !all_blocked(&mut c) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "not all blocked"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(c.call(&["PING"]), "+PONG\r\n", "served while 20 wait");
    // One leaves while blocked: nothing is popped for it.
    let mut gone = Client::connect(addr);
    gone.send_raw(resp(&["BLPOP", "other", "0"]).as_bytes());
    std::thread::sleep(std::time::Duration::from_millis(50));
    drop(gone);
    for i in 0..20 {
        assert!(c.call(&["RPUSH", "other", &format!("e{i}")]).starts_with(':'));
    }
    let mut got = Vec::new();
    for b in &mut blocked {
        let reply = b.reply();
        assert!(reply.starts_with("*2\r\n$5\r\nother\r\n"), "{reply}");
        got.push(reply.lines().last().unwrap().to_string());
        assert_eq!(b.reply(), "+PONG\r\n", "the pipelined PING after");
    }
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 20, "each element to one client");
    assert_eq!(c.call(&["LLEN", "other"]), ":0\r\n");
    assert!(c.call(&["INFO", "clients"]).contains("blocked_clients:0"));
    // BLMOVE wakes on a push to its source, from another client.
    let mut mover = bounded();
    mover.send_raw(resp(&["BLMOVE", "src", "dst", "LEFT", "RIGHT", "5"]).as_bytes());
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(c.call(&["LPUSH", "src", "job"]), ":1\r\n");
    assert_eq!(mover.reply(), "$3\r\njob\r\n");
    assert_eq!(c.call(&["LRANGE", "dst", "0", "-1"]), "*1\r\n$3\r\njob\r\n");
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["BLPOP", "empty", "0"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "*1\r\n*-1\r\n");
    // Woken to find a string where its list was, it waits on.
    let mut waiter = bounded();
    waiter.send_raw(resp(&["BLPOP", "turns", "0"]).as_bytes());
    while !c.call(&["INFO", "clients"]).contains("blocked_clients:1") {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    c.call(&["MULTI"]);
    c.call(&["LPUSH", "turns", "a"]);
    c.call(&["DEL", "turns"]);
    c.call(&["SET", "turns", "foo"]);
    assert_eq!(c.call(&["EXEC"]), "*3\r\n:1\r\n:1\r\n+OK\r\n");
    assert_eq!(c.call(&["DEL", "turns"]), ":1\r\n");
    assert_eq!(c.call(&["LPUSH", "turns", "b"]), ":1\r\n");
    assert_eq!(waiter.reply(), "*2\r\n$5\r\nturns\r\n$1\r\nb\r\n");
}

/// XREAD BLOCK with `$` waits for entries added after it blocked, and
/// another client's XADD wakes it; `*` IDs only grow; `~` trims to the
/// threshold; a stream's entries leave the store with it.
#[test]
fn streams_block_readers_and_free_their_entries() {
    let (addr, db, _dir) = start_with_db();
    let mut c = Client::connect(addr);
    let internal = || db.scan(&[0xff], None, usize::MAX).unwrap().len();
    let id = |reply: String| reply.lines().nth(1).unwrap().to_string();
    let first = id(c.call(&["XADD", "s", "*", "f", "1"]));
    let second = id(c.call(&["XADD", "s", "*", "f", "2"]));
    let parse = |id: &str| -> (u64, u64) {
        let (ms, seq) = id.split_once('-').unwrap();
        (ms.parse().unwrap(), seq.parse().unwrap())
    };
    assert!(parse(&second) > parse(&first), "{first} then {second}");
    let mut reader = Client::connect(addr);
    reader
        .writer
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    reader.send_raw(resp(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]).as_bytes());
    while !c.call(&["INFO", "clients"]).contains("blocked_clients:1") {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let third = id(c.call(&["XADD", "s", "*", "f", "3"]));
    let got = reader.reply();
    assert!(
        got.contains(&third) && !got.contains(&second),
        "only what came after: {got}"
    );
    assert_eq!(c.call(&["XREAD", "BLOCK", "20", "STREAMS", "s", "$"]), "*-1\r\n");
    for i in 0..20 {
        c.call(&["XADD", "s", "MAXLEN", "~", "5", "*", "f", &i.to_string()]);
    }
    assert_eq!(c.call(&["XLEN", "s"]), ":5\r\n", "~ trims to the threshold");
    assert_eq!(internal(), 5);
    assert_eq!(c.call(&["TYPE", "s"]), "+stream\r\n");
    assert_eq!(c.call(&["XTRIM", "s", "MAXLEN", "0"]), ":5\r\n");
    assert_eq!(c.call(&["EXISTS", "s"]), ":1\r\n", "an emptied stream stays");
    c.call(&["XADD", "s", "*", "f", "x"]);
    assert_eq!(c.call(&["DEL", "s"]), ":1\r\n");
    assert_eq!(internal(), 0);
}

/// RQ, the job queue from PyPI, unchanged against `sluice serve`: jobs
/// enqueued before a worker starts are run, and one enqueued while the
/// worker waits in its blocking pop is run at once. It exercises what a
/// job queue needs together: pipelines in MULTI, hashes with counters,
/// sets and sorted sets for its registries, BLMOVE and LREM for its
/// reliable queue, streams for results, pub/sub for the worker's control
/// channel. RQ must be there under CI (scripts/test.sh installs it).
/// The worker leaves by itself after the eleven jobs (`--max-jobs`): a
/// SIGTERM raises RQ's StopRequested wherever the worker is, and between
/// a pipeline's send and its read that hands redis-py's pool a connection
/// whose replies are still coming, so the worker's own teardown then
/// reads them ("Wrong number of response items"), against any server.
/// Leaving can take up to a minute, against any server too: the worker's
/// pub/sub thread waits 60 s for a message at a time, and when it reads
/// the reply to the worker's UNSUBSCRIBE before the worker tells it to
/// stop, it sleeps out those 60 s before it sees the request (redis-py 8
/// joins it without a timeout); hence the 90 s wait for the worker below.
#[test]
fn rq_runs_jobs_and_a_waiting_worker_wakes_for_a_new_one() {
    let has_rq = Command::new("python3")
        .args(["-c", "import rq"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_rq {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "RQ is missing under CI: scripts/test.sh installs it"
        );
        eprintln!("skipping: RQ not installed (python3 -m pip install rq)");
        return;
    }
    let (addr, _dir) = start(Options::default());
    let jobs = tempfile::tempdir().unwrap();
    std::fs::write(jobs.path().join("jobs.py"), "def add(a, b):\n    return a + b\n").unwrap();
    let script = r#"
import subprocess, sys, time
import redis
from rq import Queue
import jobs
port = int(sys.argv[1])
r = redis.Redis(port=port)
q = Queue("default", connection=r)
early = [q.enqueue(jobs.add, i, 1) for i in range(10)]
worker = subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--max-jobs", "11",
                           "--url", f"redis://127.0.0.1:{port}", "default"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
try:
    deadline = time.time() + 60
    while time.time() < deadline and any(j.get_status(refresh=True) != "finished" for j in early):
        time.sleep(0.1)
    assert [j.return_value() for j in early] == [i + 1 for i in range(10)], [j.get_status() for j in early]
    time.sleep(0.5)  # the worker is waiting for work now
    late = q.enqueue(jobs.add, 100, 1)
    started = time.time()
    while time.time() < started + 20 and late.get_status(refresh=True) != "finished":
        time.sleep(0.02)
    assert late.return_value() == 101, late.get_status()
    print(f"late job done in {time.time() - started:.2f} s")
finally:
    try:
        out = worker.communicate(timeout=90)[0].decode()
    except subprocess.TimeoutExpired:
        worker.terminate()
        out = worker.communicate(timeout=30)[0].decode()
assert worker.returncode == 0, out[-3000:]
assert "unknown command" not in out and "Traceback" not in out, out[-3000:]
"#;
    let out = Command::new("python3")
        .args(["-c", script, &addr.port().to_string()])
        .current_dir(jobs.path())
        .env("PYTHONPATH", jobs.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A message published by one client reaches every subscriber of its
/// channel and of the patterns that match it, in order, each woken
/// without a worker held between messages; a subscriber that leaves is
/// forgotten; in RESP2 a subscriber may only (un)subscribe and PING.
#[test]
fn published_messages_reach_subscribers_on_other_connections() {
    let (addr, _dir) = start(Options::default());
    let mut c = Client::connect(addr);
    let mut sub = Client::connect(addr);
    sub.writer
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    assert_eq!(
        sub.call(&["SUBSCRIBE", "news"]),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    assert_eq!(
        sub.call(&["PSUBSCRIBE", "n*"]),
        "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:2\r\n"
    );
    assert!(sub.call(&["GET", "k"]).starts_with("-ERR Can't execute 'get'"));
    assert_eq!(sub.call(&["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    for i in 0..50 {
        assert_eq!(c.call(&["PUBLISH", "news", &format!("m{i}")]), ":2\r\n");
    }
    for i in 0..50 {
        let m = format!("m{i}");
        assert_eq!(
            sub.reply(),
            format!("*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n${}\r\n{m}\r\n", m.len())
        );
        assert_eq!(
            sub.reply(),
            format!(
                "*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n${}\r\n{m}\r\n",
                m.len()
            )
        );
    }
    assert_eq!(
        c.call(&["PUBSUB", "NUMSUB", "news", "none"]),
        "*4\r\n$4\r\nnews\r\n:1\r\n$4\r\nnone\r\n:0\r\n"
    );
    drop(sub);
    let started = std::time::Instant::now();
    while c.call(&["PUBLISH", "news", "x"]) != ":0\r\n" {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the subscriber is not forgotten"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(c.call(&["PUBSUB", "NUMPAT"]), ":0\r\n");
}

/// With one worker serving at a time (`active_workers: 1`), no client
/// holds the others: a script that runs long loses its turn to the
/// watchdog (reads go on while it runs), a SET waiting for the script's
/// locks hands its turn on (before it blocks; the watchdog would take it
/// otherwise), and a PING sent after both is answered while both still
/// wait. Once the script is stopped at its time
/// limit, the SET goes through.
#[test]
fn a_long_or_blocked_request_does_not_hold_the_other_clients() {
    let limit = std::time::Duration::from_millis(1500);
    let (addr, _dir) = start_with(
        Options::default(),
        ServerOptions {
            workers: 4,
            active_workers: 1,
            script_time_limit: limit,
            ..ServerOptions::default()
        },
    );
    let mut script = Client::connect(addr);
    script.send_raw(resp(&["EVAL", "while true do end", "0"]).as_bytes());
    // The script has started once the commands counted outnumber this
    // client's INFOs (each counted as it starts).
    let mut reader = Client::connect(addr);
    let started = std::time::Instant::now();
    for infos in 1.. {
        let info = reader.call(&["INFO", "stats"]);
        let counted: u64 = info
            .split("total_commands_processed:")
            .nth(1)
            .and_then(|rest| rest.split("\r\n").next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        if counted > infos {
            break;
        }
        assert!(started.elapsed() < limit, "the script never started");
    }
    let mut writer = Client::connect(addr);
    writer.send_raw(resp(&["SET", "k", "v"]).as_bytes());
    let mut pinger = Client::connect(addr);
    pinger.writer.set_read_timeout(Some(limit / 2)).unwrap();
    assert_eq!(pinger.call(&["PING"]), "+PONG\r\n");
    writer.writer.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let waiting = writer.writer.peek(&mut byte);
    assert!(
        matches!(&waiting, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the SET is answered only once the script stops: {waiting:?}"
    );
    writer.writer.set_nonblocking(false).unwrap();
    assert!(script.reply().contains("time limit"));
    assert_eq!(writer.reply(), "+OK\r\n");
}
