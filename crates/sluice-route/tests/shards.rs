//! The router in front of `sluice serve` shards over real sockets: keys on
//! the shard their slot names, multi-key commands split and merged, range
//! scans merged, clear errors for what cannot be routed, a client that
//! reads none of its replies holding up no other, a shard that is
//! down named in the error while the others serve, and used again when it
//! is back; redis-cli, redis-benchmark and redis-py through it.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use sluice_resp::slot::slot;
use sluice_resp::{Limits, Reply};
use sluice_route::Router;
use support::{
    a_pipeline_answers_as_one_command_at_a_time, a_slow_reader_stalls_no_other, bulk, start_router_from, start_shard,
    under_ci, Client,
};

/// A router over `shards`, slots split evenly in order.
fn start_router(shards: &[SocketAddr], extra: &str) -> (SocketAddr, Arc<Router>) {
    let per = 16384 / shards.len();
    // Top-level settings before the tables, tables after them.
    let (top, tables) = if extra.starts_with('[') {
        ("", extra)
    } else {
        (extra, "")
    };
    let mut toml = format!("listen = \"127.0.0.1:0\"\n{top}");
    for (i, addr) in shards.iter().enumerate() {
        let hi = if i + 1 == shards.len() {
            16383
        } else {
            (i + 1) * per - 1
        };
        toml.push_str(&format!(
            "[[shard]]\nname = \"s{i}\"\naddr = \"{addr}\"\nslots = \"{}-{hi}\"\n",
            i * per
        ));
    }
    toml.push_str(tables);
    start_router_from(&toml)
}

fn error_text(reply: Reply) -> String {
    match reply {
        Reply::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_client_s_pipeline_goes_to_the_shards_in_runs_and_is_answered_in_order() {
    let shards: Vec<_> = (0..3).map(|_| start_shard("127.0.0.1:0")).collect();
    let addrs: Vec<SocketAddr> = shards.iter().map(|s| s.0).collect();
    let (router, state) = start_router(&addrs, "");
    a_pipeline_answers_as_one_command_at_a_time(router, &state);
}

#[test]
fn keys_land_on_their_slot_s_shard_and_multi_key_commands_merge() {
    let shards: Vec<_> = (0..3).map(|_| start_shard("127.0.0.1:0")).collect();
    let addrs: Vec<SocketAddr> = shards.iter().map(|s| s.0).collect();
    let (router, _) = start_router(&addrs, "");
    let mut c = Client::connect(router);
    let keys: Vec<String> = (0..30).map(|i| format!("key{i}")).collect();
    for k in &keys {
        assert_eq!(c.call(&["SET", k, &format!("v-{k}")]), Reply::ok());
    }
    // Each key is on exactly the shard its slot names, and only there.
    for k in &keys {
        let owner = (slot(k.as_bytes()) as usize) / (16384 / 3);
        for (i, addr) in addrs.iter().enumerate() {
            let found = Client::connect(*addr).call(&["GET", k]);
            let expected = if i == owner.min(2) {
                bulk(&format!("v-{k}"))
            } else {
                Reply::Bulk(None)
            };
            assert_eq!(found, expected, "{k} on shard {i}");
        }
    }
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    mget.push("missing");
    let Reply::Array(values) = c.call(&mget) else {
        panic!("MGET")
    };
    assert_eq!(values.len(), 31);
    for (k, v) in keys.iter().zip(&values) {
        assert_eq!(v, &bulk(&format!("v-{k}")));
    }
    assert_eq!(values[30], Reply::Bulk(None));
    assert_eq!(
        c.call(&["EXISTS", "key1", "key2", "missing", "key1"]),
        Reply::Integer(3)
    );
    assert_eq!(c.call(&["MSET", "a", "1", "b", "2", "c", "3"]), Reply::ok());
    assert_eq!(
        c.call(&["MGET", "c", "b", "a"]),
        Reply::Array(vec![bulk("3"), bulk("2"), bulk("1")])
    );
    // RANGE: every shard's part, merged in key order and cut to the count.
    assert_eq!(
        c.call(&["RANGE", "a", "", "4"]),
        Reply::Array(vec![
            bulk("a"),
            bulk("1"),
            bulk("b"),
            bulk("2"),
            bulk("c"),
            bulk("3"),
            bulk("key0"),
            bulk("v-key0")
        ])
    );
    let Reply::Array(all) = c.call(&["RANGE", "", ""]) else {
        panic!("RANGE")
    };
    assert_eq!(all.len(), 2 * 33, "every key once");
    assert_eq!(c.call(&["DEL", "a", "b", "c", "key0"]), Reply::Integer(4));
    assert_eq!(c.call(&["HSET", "{u}h", "f", "x"]), Reply::Integer(1));
    assert_eq!(c.call(&["HGET", "{u}h", "f"]), bulk("x"));
    // DBSIZE counts every shard's keys; FLUSHALL empties every shard, and
    // answers as one.
    let Reply::Array(keys) = c.call(&["KEYS", "*"]) else {
        panic!("KEYS")
    };
    assert_eq!(c.call(&["DBSIZE"]), Reply::Integer(keys.len() as i64));
    assert!(keys.len() > 20, "{keys:?}");
    assert_eq!(c.call(&["FLUSHALL"]), Reply::Simple("OK".into()));
    assert_eq!(c.call(&["KEYS", "*"]), Reply::Array(Vec::new()));
    assert_eq!(c.call(&["DBSIZE"]), Reply::Integer(0));
    assert!(error_text(c.call(&["FLUSHDB", "LATER"])).contains("syntax error"));
}

#[test]
fn what_cannot_be_routed_gets_an_error_naming_it() {
    let (shard, _dir) = start_shard("127.0.0.1:0");
    let (other, _dir2) = start_shard("127.0.0.1:0");
    let (router, _) = start_router(&[shard, other], "");
    let mut c = Client::connect(router);
    assert!(error_text(c.call(&["FROBNICATE", "x"])).contains("cannot route 'frobnicate'"));
    assert!(error_text(c.call(&["RANDOMKEY"])).contains("whole key space"));
    assert!(error_text(c.call(&["BLMPOP", "1", "1", "k", "LEFT"])).contains("blocking commands are not supported"));
    assert!(error_text(c.call(&["MONITOR"])).contains("monitor each shard"));
    assert!(error_text(c.call(&["GET"])).contains("wrong number of arguments for 'get'"));
    assert!(error_text(c.call(&["MSET", "a", "1", "b"])).contains("wrong number of arguments for 'mset'"));
    // "foo" and "bar" are on different shards of two.
    assert_ne!(slot(b"foo") / 8192, slot(b"bar") / 8192);
    assert!(error_text(c.call(&["EVAL", "return 1", "2", "foo", "bar"])).starts_with("CROSSSLOT"));
    // A script goes to the shard of the keys it declares; one that reaches
    // a key of the other shard is refused there, which knows its slots
    // from the router, and writes nothing a GET through the router would
    // not find.
    let undeclared = error_text(c.call(&["EVAL", "return redis.call('set', 'foo', 'x')", "1", "bar"]));
    assert!(
        undeclared.contains("non local key in a cluster node: 'foo' is in slot 12182, this shard serves slots 0-8191"),
        "{undeclared}"
    );
    assert_eq!(Client::connect(shard).call(&["EXISTS", "foo"]), Reply::Integer(0));
    assert_eq!(
        c.call(&["EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "foo"]),
        Reply::ok()
    );
    assert_eq!(c.call(&["GET", "foo"]), bulk("x"));
    assert_eq!(
        Client::connect(other).call(&["CONFIG", "GET", "shard-slots"]),
        Reply::Array(vec![bulk("shard-slots"), bulk("8192-16383")])
    );
    assert!(error_text(c.call(&["LMOVE", "foo", "bar", "LEFT", "LEFT"])).starts_with("CROSSSLOT"));
    assert!(error_text(c.call(&["MSETNX", "foo", "1", "bar", "2"])).starts_with("CROSSSLOT"));
    assert_eq!(c.call(&["MSETNX", "{m}a", "1", "{m}b", "2"]), Reply::Integer(1));
    assert_eq!(c.call(&["MSETNX", "{m}b", "3", "{m}c", "4"]), Reply::Integer(0));
    assert!(error_text(c.call(&["MSETNX", "{m}a", "1", "{m}b"])).contains("wrong number of arguments"));
    assert!(error_text(c.call(&["RPOPLPUSH", "foo"])).contains("wrong number of arguments"));
    assert!(error_text(c.call(&["SUNIONSTORE", "foo", "bar"])).starts_with("CROSSSLOT"));
    assert_eq!(c.call(&["SADD", "{s}a", "x", "y"]), Reply::Integer(2));
    assert_eq!(c.call(&["SADD", "{s}b", "y"]), Reply::Integer(1));
    assert_eq!(c.call(&["SINTER", "{s}a", "{s}b"]), Reply::Array(vec![bulk("y")]));
    assert_eq!(c.call(&["SDIFFSTORE", "{s}c", "{s}a", "{s}b"]), Reply::Integer(1));
    assert!(error_text(c.call(&["SINTER"])).contains("wrong number of arguments"));
    // Two keys of one slot go to its shard.
    assert_eq!(c.call(&["RPUSH", "{q}in", "job"]), Reply::Integer(1));
    assert_eq!(c.call(&["LMOVE", "{q}in", "{q}out", "LEFT", "RIGHT"]), bulk("job"));
    assert_eq!(
        c.call(&["LRANGE", "{q}out", "0", "-1"]),
        Reply::Array(vec![bulk("job")])
    );
    assert!(error_text(c.call(&["PFCOUNT", "foo", "bar"])).contains("cannot be merged"));
    assert!(error_text(c.call(&["RANGE", "a", "", "-1"])).contains("not an integer"));
    // The router's own answers have Redis's shapes, or say what it lacks.
    assert!(error_text(c.call(&["CONFIG", "SET", "maxmemory", "1"])).contains("CONFIG SET is not supported"));
    assert!(error_text(c.call(&["COMMAND", "COUNT"])).contains("COMMAND COUNT is not supported"));
    assert_eq!(c.call(&["CONFIG", "GET", "maxmemory"]), Reply::Array(Vec::new()));
    assert_eq!(c.call(&["INFO", "keyspace"]), bulk(""));
    assert_eq!(
        c.call(&["ROLE"]),
        Reply::Array(vec![bulk("master"), Reply::Integer(0), Reply::Array(Vec::new())])
    );
    assert!(error_text(c.call(&["SELECT", "x"])).contains("not an integer"));
    assert!(error_text(c.call(&["SELECT", "1"])).contains("not allowed in cluster mode"));
    assert!(error_text(c.call(&["CLIENT", "SETNAME", "bad name"])).contains("cannot contain spaces"));
    assert_eq!(c.call(&["CLIENT", "SETNAME", "named"]), Reply::ok());
    let mut resp3 = Client::connect(router);
    assert!(matches!(resp3.call(&["HELLO", "3"]), Reply::Map(_)));
    assert_eq!(
        resp3.call(&["CONFIG", "GET", "maxmemory"]),
        Reply::Map(Vec::new()),
        "a map, as Redis 7's"
    );
    let Reply::Bulk(Some(me)) = c.call(&["CLIENT", "INFO"]) else {
        panic!("CLIENT INFO")
    };
    assert!(String::from_utf8(me).unwrap().contains(" name=named "));
    let Reply::Bulk(Some(router_info)) = c.call(&["INFO", "router"]) else {
        panic!("INFO router")
    };
    let router_info = String::from_utf8(router_info).unwrap();
    assert!(
        router_info.starts_with("# Router") && router_info.contains("requests:"),
        "{router_info}"
    );
    assert_eq!(c.call(&["PING"]), Reply::Simple("PONG".into()));
    // A malformed request is answered and closes only its own connection.
    let mut bad = Client::connect(router);
    bad.send_raw(b"*1\r\n$x\r\n");
    assert!(error_text(bad.reply().unwrap()).contains("Protocol error: invalid bulk length"));
    assert_eq!(bad.reply(), None, "closed");
    assert_eq!(c.call(&["SET", "still", "here"]), Reply::ok());
}

#[test]
fn a_client_that_never_reads_its_replies_stalls_no_other() {
    let shards: Vec<_> = (0..2).map(|_| start_shard("127.0.0.1:0")).collect();
    let addrs: Vec<SocketAddr> = shards.iter().map(|s| s.0).collect();
    let (router, _) = start_router(&addrs, "");
    a_slow_reader_stalls_no_other(router);
}

#[test]
fn a_client_over_max_clients_is_told_so_and_a_place_that_frees_is_used_again() {
    let shard = start_shard("127.0.0.1:0");
    let (router, state) = start_router(&[shard.0], "max_clients = 2\n");
    let mut first = Client::connect(router);
    let mut second = Client::connect(router);
    for c in [&mut first, &mut second] {
        assert_eq!(c.call(&["PING"]), Reply::Simple("PONG".into()));
    }
    let mut third = Client::connect(router);
    assert_eq!(
        third.reply(),
        Some(Reply::Error("ERR max number of clients reached".into()))
    );
    assert_eq!(third.reply(), None, "and closed");
    assert_eq!(state.clients.refused.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(second.call(&["SET", "k", "v"]), Reply::ok(), "the others are served");
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while state.clients.connected.load(std::sync::atomic::Ordering::Relaxed) > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the client that left is still counted"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut fourth = Client::connect(router);
    assert_eq!(fourth.call(&["GET", "k"]), bulk("v"));
}

#[test]
fn watching_clients_are_bounded_a_shard_at_a_time() {
    let shard = start_shard("127.0.0.1:0");
    let (router, _) = start_router(&[shard.0], "[pool]\nmax_watching = 2\n");
    let mut watchers: Vec<Client> = (0..2).map(|_| Client::connect(router)).collect();
    for (i, c) in watchers.iter_mut().enumerate() {
        assert_eq!(c.call(&["WATCH", &format!("w{i}")]), Reply::ok());
    }
    let mut third = Client::connect(router);
    let refused = error_text(third.call(&["WATCH", "w3"]));
    assert!(refused.contains("max_watching"), "{refused}");
    assert_eq!(
        third.call(&["SET", "w3", "v"]),
        Reply::ok(),
        "the refused client is served"
    );
    let first = &mut watchers[0];
    assert_eq!(first.call(&["MULTI"]), Reply::ok());
    assert_eq!(first.call(&["SET", "w0", "x"]), Reply::Simple("QUEUED".into()));
    assert_eq!(first.call(&["EXEC"]), Reply::Array(vec![Reply::ok()]));
    assert_eq!(third.call(&["WATCH", "w3"]), Reply::ok(), "a place freed by EXEC");
}

/// Behind a shard that accepts and never answers, with one place in its
/// pool, requests fail within twice the reply timeout, however many queue:
/// the one at the shard when it times out, those behind it when their wait
/// for a place does.
#[test]
fn requests_queued_behind_a_hung_shard_fail_within_twice_the_timeout() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    let (router, state) = start_router(&[silent_addr], "[pool]\nsize = 1\nreply_timeout_ms = 1000\n");
    let waiting: Vec<_> = (0..6)
        .map(|i| {
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let e = error_text(Client::connect(router).call(&["GET", &format!("k{i}")]));
                (e, started.elapsed())
            })
        })
        .collect();
    let failed: Vec<_> = waiting.into_iter().map(|t| t.join().unwrap()).collect();
    for (e, took) in &failed {
        // One timeout at the shard, one for the place: 2 s, with room for
        // a slow machine; one turn of the pool each would take 6 s.
        assert!(*took < Duration::from_secs(4), "{e} after {took:?}");
    }
    assert!(failed.iter().any(|(e, _)| e.contains("may still run")), "{failed:?}");
    assert!(failed.iter().any(|(e, _)| e.contains("places free")), "{failed:?}");
    assert_eq!(
        state.shards()[0]
            .stats
            .in_flight
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn a_shard_that_is_down_is_named_and_used_again_when_it_is_back() {
    let (up, _dir) = start_shard("127.0.0.1:0");
    // A port with nothing behind it, for now.
    let down = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (router, stats) = start_router(&[up, down], "[pool]\nconnect_timeout_ms = 500\n");
    let mut c = Client::connect(router);
    let (on_up, on_down) = if slot(b"foo") < 8192 {
        ("foo", "bar")
    } else {
        ("bar", "foo")
    };
    assert_eq!(c.call(&["SET", on_up, "1"]), Reply::ok());
    let e = error_text(c.call(&["SET", on_down, "1"]));
    assert!(e.contains(&format!("shard s1 ({down}) is unavailable")), "{e}");
    let e = error_text(c.call(&["MGET", on_up, on_down]));
    assert!(e.contains("shard s1"), "{e}");
    assert_eq!(c.call(&["GET", on_up]), bulk("1"), "the other shard serves");
    let (_back, _dir2) = start_shard(&down.to_string());
    assert_eq!(c.call(&["SET", on_down, "2"]), Reply::ok());
    assert_eq!(
        c.call(&["MGET", on_up, on_down]),
        Reply::Array(vec![bulk("1"), bulk("2")])
    );
    for shard in stats.shards() {
        assert_eq!(
            shard.stats.in_flight.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "{}",
            shard.name
        );
    }
}

/// redis-cli, redis-benchmark (GET, SET, MGET) and redis-py through the
/// router, with no errors.
#[test]
fn redis_clients_work_through_the_router() {
    let shards: Vec<_> = (0..2).map(|_| start_shard("127.0.0.1:0")).collect();
    let (router, stats) = start_router(&[shards[0].0, shards[1].0], "");
    let port = router.port().to_string();
    let cli = Command::new("redis-cli")
        .args(["-p", &port, "SET", "greeting", "hello"])
        .output();
    let Ok(cli) = cli else {
        assert!(
            !under_ci(),
            "redis-cli is missing under CI: scripts/test.sh installs it"
        );
        return;
    };
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "OK");
    // redis-benchmark has no MGET test of its own: MGET runs as a command
    // given on its command line, over keys of both shards.
    let mget: Vec<String> = (0..10).map(|i| format!("key:{i}")).collect();
    for args in [
        vec!["-t", "get,set,mset"],
        [vec!["MGET"], mget.iter().map(String::as_str).collect()].concat(),
    ] {
        let bench = Command::new("redis-benchmark")
            .args(["-p", &port, "-n", "2000", "-c", "8", "-q"])
            .args(&args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&bench.stdout).to_string() + &String::from_utf8_lossy(&bench.stderr);
        assert!(bench.status.success() && text.contains("requests per second"), "{text}");
        assert!(!text.to_lowercase().contains("error"), "{text}");
    }
    assert_eq!(stats.stats.failed.load(std::sync::atomic::Ordering::Relaxed), 0);
    let has_redis_py = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_redis_py {
        assert!(!under_ci(), "redis-py is missing under CI: scripts/test.sh installs it");
        return;
    }
    let script = r#"
import sys, redis
port = int(sys.argv[1])
for kwargs in ({}, {"protocol": 2}):
    r = redis.Redis(port=port, **kwargs)
    assert r.ping() is True
    assert r.set("greeting", "hello") is True
    assert r.get("greeting") == b"hello"
    r.hset("h", mapping={"a": "1", "b": "2"})
    assert r.hgetall("h") == {b"a": b"1", b"b": b"2"}, r.hgetall("h")
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.set(f"k{i}", i)
    p.mget([f"k{i}" for i in range(100)])
    replies = p.execute()
    assert replies[-1] == [str(i).encode() for i in range(100)]
    assert r.delete(*[f"k{i}" for i in range(100)]) == 100
    r.sadd("s", "x", "y")
    assert r.smembers("s") == {b"x", b"y"}, r.smembers("s")
    assert r.sunion("s", "{s}none") == {b"x", b"y"}
    r.delete("s")
    r.zadd("z", {"a": 1.5, "b": 2})
    assert r.zscore("z", "a") == 1.5
    assert [(m, s) for m, s in r.zrange("z", 0, -1, withscores=True)] == [(b"a", 1.5), (b"b", 2.0)]
    assert r.zincrby("z", 1, "a") == 2.5
    r.delete("z")
    # ZPOPMIN/ZPOPMAX with a count answer pairs in RESP3 and a flat list in
    # RESP2; redis-py reads each as its protocol gives it, alone and in a
    # transaction's replies.
    r.zadd("z", {"a": 1, "b": 2.5, "c": 3})
    assert r.zpopmax("z", 2) == [(b"c", 3.0), (b"b", 2.5)], r.zpopmax("z", 2)
    assert r.zpopmin("z") == [(b"a", 1.0)]
    p = r.pipeline()
    p.zadd("z", {"a": 1, "b": 2.5})
    p.zpopmin("z", 2)
    assert p.execute() == [2, [(b"a", 1.0), (b"b", 2.5)]]
    # Optimistic locking: transaction() watches, retries on WatchError.
    r.set("{acct}:balance", 10)
    def withdraw(pipe):
        balance = int(pipe.get("{acct}:balance"))
        pipe.multi()
        pipe.set("{acct}:balance", balance - 3)
    r.transaction(withdraw, "{acct}:balance")
    assert r.get("{acct}:balance") == b"7"
    with r.pipeline() as pipe:
        pipe.watch("{acct}:balance")
        redis.Redis(port=port, **kwargs).set("{acct}:balance", 100)
        pipe.multi()
        pipe.set("{acct}:balance", 0)
        try:
            pipe.execute()
            raise AssertionError("a write by another client must abort EXEC")
        except redis.WatchError:
            pass
    assert r.get("{acct}:balance") == b"100"
    r.close()
print("ok")
"#;
    let out = Command::new("python3").args(["-c", script, &port]).output().unwrap();
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "redis-py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A stand-in for a `sluice serve` shard that hands every command it
/// receives to `seen` and answers `+OK`, or one value a key to MGET; the
/// greeting of each new connection (`CONFIG SET shard-slots`) it answers
/// with `greeted` and keeps to itself.
fn recording_shard(seen: std::sync::mpsc::Sender<Vec<Vec<u8>>>) -> SocketAddr {
    greeted_shard(seen, Reply::ok())
}

fn greeted_shard(seen: std::sync::mpsc::Sender<Vec<Vec<u8>>>, greeted: Reply) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let (seen, greeted) = (seen.clone(), greeted.clone());
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Ok(Some((args, used))) = sluice_resp::parse(&buf, &Limits::default()) {
                        buf.drain(..used);
                        let mut reply = Vec::new();
                        if args[0] == b"CONFIG" {
                            greeted.encode(&mut reply);
                            if stream.write_all(&reply).is_err() {
                                return;
                            }
                            continue;
                        }
                        if args.get(4).is_some_and(|a| a == b"MGET") {
                            Reply::Array(args[5..].iter().map(|_| bulk("v")).collect()).encode(&mut reply);
                        } else {
                            Reply::ok().encode(&mut reply);
                        }
                        let _ = seen.send(args);
                        if stream.write_all(&reply).is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// A shard that refuses its slots (a `sluice serve` without
/// `shard-slots`) still serves: the refusal is the greeting's, not the
/// reply to the command written after it.
#[test]
fn a_shard_that_refuses_its_slots_still_answers_its_commands() {
    let (tx, rx) = std::sync::mpsc::channel();
    let refused = Reply::Error("ERR Unknown option or number of arguments for CONFIG SET - 'shard-slots'".into());
    let (router, _) = start_router(&[greeted_shard(tx, refused)], "");
    let mut c = Client::connect(router);
    for key in ["a", "b"] {
        assert_eq!(c.call(&["SET", key, "1"]), Reply::ok());
        let args = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(args[4..], [b"SET".to_vec(), key.as_bytes().to_vec(), b"1".to_vec()]);
    }
}

/// A shard at its client limit answers the first thing it reads with the
/// refusal and closes; the client's error names that, not only the close.
#[test]
fn a_shard_at_its_client_limit_is_named_with_its_reason() {
    let full = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = full.local_addr().unwrap();
    std::thread::spawn(move || {
        // As `sluice serve` refuses: the line, its write side shut, what the
        // client sends read until it closes.
        for mut stream in full.incoming().flatten() {
            let _ = stream.write_all(sluice_resp::MAX_CLIENTS_REACHED);
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = std::io::copy(&mut stream, &mut std::io::sink());
        }
    });
    let (router, _) = start_router(&[addr], "");
    let e = error_text(Client::connect(router).call(&["GET", "k"]));
    assert!(e.contains("s0") && e.contains("max number of clients reached"), "{e}");
}

/// What `sluice serve` shards receive: each command inside
/// `SLUICE.WITH <id> <budget> - ...`, the ids in the order the requests
/// arrived at the router, the parts of one request under one id, and the
/// budget what is left of the configured one.
#[test]
fn every_part_carries_its_request_s_id_and_budget() {
    let (tx, rx) = std::sync::mpsc::channel();
    let shards = [recording_shard(tx.clone()), recording_shard(tx)];
    let (router, _) = start_router(&shards, "[pool]\nbudget_ms = 50.0\n");
    let mut c = Client::connect(router);
    let recv = || rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let mut last_id = None;
    for key in ["a", "b", "c"] {
        assert_eq!(c.call(&["SET", key, "1"]), Reply::ok());
        let args = recv();
        assert_eq!(args[0], b"SLUICE.WITH");
        let id: u64 = String::from_utf8_lossy(&args[1]).parse().unwrap();
        assert!(
            last_id.is_none_or(|last| id > last),
            "ids in arrival order: {last_id:?} then {id}"
        );
        last_id = Some(id);
        let budget: f64 = String::from_utf8_lossy(&args[2]).parse().unwrap();
        assert!(budget > 0.0 && budget <= 50.0, "{budget}");
        assert_eq!(args[3], b"-");
        assert_eq!(args[4..], [b"SET".to_vec(), key.as_bytes().to_vec(), b"1".to_vec()]);
    }
    // "foo" and "bar" are on different shards of two: one MGET, two parts,
    // one id, later than every SET's.
    assert_ne!(slot(b"foo") / 8192, slot(b"bar") / 8192);
    assert_eq!(
        c.call(&["MGET", "foo", "bar"]),
        Reply::Array(vec![bulk("v"), bulk("v")])
    );
    let parts = [recv(), recv()];
    assert_eq!(parts[0][1], parts[1][1], "the parts of one request share its id");
    let id: u64 = String::from_utf8_lossy(&parts[0][1]).parse().unwrap();
    assert!(id > last_id.unwrap());
}

/// A client that names itself after a configured tenant has the tenant's
/// budget and name sent with its parts; one that sends its own budget
/// (`SLUICE.WITH - <ms> - ...`) tightens it but cannot loosen it; others
/// get the pool's budget, and malformed contexts an error naming the field.
#[test]
fn a_tenant_s_budget_and_a_client_s_own_reach_the_shards() {
    let (tx, rx) = std::sync::mpsc::channel();
    let shards = [recording_shard(tx)];
    let (router, _) = start_router(
        &shards,
        "[pool]\nbudget_ms = 500.0\n[[tenant]]\nname = \"gold\"\nbudget_ms = 20.0\n",
    );
    let recv = || rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let budget_and_tenant = |args: &[Vec<u8>]| {
        let budget: f64 = String::from_utf8_lossy(&args[2]).parse().unwrap();
        (budget, String::from_utf8_lossy(&args[3]).into_owned())
    };

    let mut anonymous = Client::connect(router);
    assert_eq!(anonymous.call(&["SET", "k", "1"]), Reply::ok());
    let (budget, tenant) = budget_and_tenant(&recv());
    assert!(budget > 400.0 && budget <= 500.0 && tenant == "-", "{budget} {tenant}");

    let mut gold = Client::connect(router);
    assert_eq!(gold.call(&["CLIENT", "SETNAME", "gold"]), Reply::ok());
    assert_eq!(gold.call(&["SET", "k", "1"]), Reply::ok());
    let (budget, tenant) = budget_and_tenant(&recv());
    assert!(budget > 10.0 && budget <= 20.0 && tenant == "gold", "{budget} {tenant}");

    assert_eq!(gold.call(&["SLUICE.WITH", "-", "5", "-", "SET", "k", "1"]), Reply::ok());
    let sent = recv();
    let (budget, tenant) = budget_and_tenant(&sent);
    assert!(budget <= 5.0 && tenant == "gold", "tightened: {budget} {tenant}");
    assert_eq!(sent[4..], [b"SET".to_vec(), b"k".to_vec(), b"1".to_vec()]);
    assert_eq!(gold.call(&["SLUICE.WITH", "99", "900", "-", "GET", "k"]), Reply::ok());
    let sent = recv();
    let (budget, _) = budget_and_tenant(&sent);
    assert!(budget <= 20.0, "not loosened: {budget}");
    assert_ne!(sent[1], b"99", "the router gives ids in its own arrival order");

    let e = error_text(gold.call(&["SLUICE.WITH", "-", "-5", "-", "GET", "k"]));
    assert!(e.starts_with("ERR SLUICE.WITH: the budget"), "{e}");
    let e = error_text(gold.call(&["SLUICE.WITH", "-", "5", "-", "PING"]));
    assert!(e.contains("'ping' concerns the connection alone"), "{e}");
    assert_eq!(
        gold.call(&["PING"]),
        Reply::Simple("PONG".into()),
        "the connection is fine"
    );
}

/// Requests framed where they lie in the read buffer: an array sent a
/// byte at a time, a pipeline whose last request is cut in two, and inline
/// commands whose quotes and escapes are resolved before they are routed.
#[test]
fn requests_are_routed_whole_however_they_arrive() {
    let shards: Vec<_> = (0..2).map(|_| start_shard("127.0.0.1:0")).collect();
    let addrs: Vec<SocketAddr> = shards.iter().map(|s| s.0).collect();
    let (router, _) = start_router(&addrs, "");
    let mut c = Client::connect(router);
    for byte in b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$5\r\nslow!\r\n" {
        c.send_raw(&[*byte]);
    }
    assert_eq!(c.reply(), Some(Reply::ok()));
    c.send_raw(b"SET b \"two words\"\r\nSET c 'it\\'s'\r\nMGET a b c\r\n*2\r\n$3\r\nGET\r\n$1\r");
    assert_eq!(c.reply(), Some(Reply::ok()));
    assert_eq!(c.reply(), Some(Reply::ok()));
    assert_eq!(
        c.reply(),
        Some(Reply::Array(vec![bulk("slow!"), bulk("two words"), bulk("it's")]))
    );
    c.send_raw(b"\nb\r\n");
    assert_eq!(c.reply(), Some(bulk("two words")));
    c.send_raw(b"SET d \"a\\x41\\n\"\r\n");
    assert_eq!(c.reply(), Some(Reply::ok()));
    assert_eq!(c.call(&["GET", "d"]), Reply::Bulk(Some(b"aA\n".to_vec())));
    assert_eq!(
        shards.len(),
        [slot(b"a"), slot(b"b"), slot(b"c")]
            .iter()
            .map(|s| s / 8192)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        "the MGET spans both shards"
    );
}

/// A request whose arguments are each within `max_request_mb` but whose
/// whole is not is refused with an error and its connection closed,
/// before the router buffers more of it; other clients are served.
#[test]
fn a_request_larger_than_the_limit_as_a_whole_is_refused() {
    let (shard, _dir) = start_shard("127.0.0.1:0");
    let (router, _) = start_router(&[shard], "max_request_mb = 1\n");
    let mut big = Client::connect(router);
    big.send_raw(b"*5\r\n$4\r\nMSET\r\n");
    let piece = vec![b'x'; 900 << 10];
    let mut refused = None;
    for _ in 0..4 {
        let mut arg = format!("${}\r\n", piece.len()).into_bytes();
        arg.extend_from_slice(&piece);
        arg.extend_from_slice(b"\r\n");
        if big.stream.write_all(&arg).is_err() {
            break;
        }
        big.stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        if let Some(reply) = big.reply() {
            refused = Some(reply);
            break;
        }
    }
    let Some(Reply::Error(e)) = refused else {
        panic!("no refusal: {refused:?}")
    };
    assert!(e.contains("request larger than 1 MiB"), "{e}");
    let mut other = Client::connect(router);
    assert_eq!(other.call(&["SET", "small", "ok"]), Reply::ok());
}

/// A transaction goes to its shard as one request at EXEC, so it is
/// bounded as a request is: the command that takes it past
/// `max_request_mb` is refused, the transaction is dropped then and
/// there, and EXEC aborts it.
#[test]
fn a_transaction_larger_than_the_request_limit_is_refused_and_not_kept() {
    let (shard, _dir) = start_shard("127.0.0.1:0");
    let (router, _) = start_router(&[shard], "max_request_mb = 1\n");
    let mut c = Client::connect(router);
    let value = "x".repeat(400 << 10);
    let queued = Reply::Simple("QUEUED".into());
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["SET", "{t}a", &value]), queued);
    assert_eq!(c.call(&["SET", "{t}b", &value]), queued);
    let e = error_text(c.call(&["SET", "{t}c", &value]));
    assert!(e.contains("transaction larger than 1 MiB (max_request_mb)"), "{e}");
    assert_eq!(
        c.call(&["SET", "{t}d", "small"]),
        queued,
        "queued, as Redis goes on after a refusal"
    );
    assert!(error_text(c.call(&["EXEC"])).starts_with("EXECABORT"));
    assert_eq!(
        c.call(&["EXISTS", "{t}a", "{t}d"]),
        Reply::Integer(0),
        "nothing of it ran"
    );
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["SET", "{t}a", &value]), queued);
    assert_eq!(
        c.call(&["EXEC"]),
        Reply::Array(vec![Reply::ok()]),
        "the next transaction runs"
    );
}

/// A transaction whose keys share a slot runs on their shard, atomically;
/// one that spans shards is refused as Redis Cluster refuses it, command by
/// command, and EXEC then aborts.
#[test]
fn transactions_on_one_slot_run_on_its_shard_and_others_are_refused() {
    let (shard, _dir) = start_shard("127.0.0.1:0");
    let (other, _dir2) = start_shard("127.0.0.1:0");
    let (router, _) = start_router(&[shard, other], "");
    let mut c = Client::connect(router);
    // TIME is the router's: seconds and microseconds, as Redis answers it.
    let Reply::Array(time) = c.call(&["TIME"]) else {
        panic!("TIME")
    };
    let number = |r: &Reply| match r {
        Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).parse::<u64>().unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(time.len() == 2 && number(&time[0]) > 1_700_000_000 && number(&time[1]) < 1_000_000);
    assert!(error_text(c.call(&["EXEC"])).contains("EXEC without MULTI"));
    assert!(error_text(c.call(&["DISCARD"])).contains("DISCARD without MULTI"));
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert!(error_text(c.call(&["MULTI"])).contains("can not be nested"));
    let queued = Reply::Simple("QUEUED".into());
    assert_eq!(c.call(&["SET", "{user:1}:name", "ada"]), queued);
    assert_eq!(c.call(&["INCR", "{user:1}:visits"]), queued);
    assert_eq!(c.call(&["MGET", "{user:1}:name", "{user:1}:visits"]), queued);
    assert_eq!(c.call(&["PING"]), queued);
    assert_eq!(
        c.call(&["EXEC"]),
        Reply::Array(vec![
            Reply::ok(),
            Reply::Integer(1),
            Reply::Array(vec![bulk("ada"), bulk("1")]),
            Reply::Simple("PONG".into()),
        ])
    );
    // The shard the slot names holds them; the other has nothing.
    let owner = if slot(b"{user:1}") < 8192 { shard } else { other };
    let mut direct = Client::connect(owner);
    assert_eq!(direct.call(&["GET", "{user:1}:visits"]), bulk("1"));

    assert_ne!(slot(b"foo") / 8192, slot(b"bar") / 8192);
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["SET", "foo", "1"]), queued);
    assert!(error_text(c.call(&["SET", "bar", "1"])).starts_with("CROSSSLOT"));
    assert!(error_text(c.call(&["RANGE", "a", "z"])).contains("spans every shard"));
    assert_eq!(
        error_text(c.call(&["EVAL", "return 1", "x"])),
        "ERR value is not an integer or out of range"
    );
    assert!(error_text(c.call(&["EXEC"])).starts_with("EXECABORT"));
    assert_eq!(c.call(&["GET", "foo"]), Reply::Bulk(None), "nothing of it ran");

    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["SET", "foo", "2"]), queued);
    assert_eq!(c.call(&["DISCARD"]), Reply::ok());
    assert_eq!(c.call(&["EXEC"]), Reply::error("EXEC without MULTI"));
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["EXEC"]), Reply::Array(Vec::new()));

    // A script is loaded on every shard, so EVALSHA runs wherever its keys
    // lead; EXISTS says 1 only where every shard has it.
    let Reply::Bulk(Some(sha)) = c.call(&["SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"]) else {
        panic!("SCRIPT LOAD")
    };
    let sha = String::from_utf8(sha).unwrap();
    for key in ["foo", "bar"] {
        assert_eq!(c.call(&["SET", key, key]), Reply::ok());
        assert_eq!(c.call(&["EVALSHA", &sha, "1", key]), bulk(key), "on {key}'s shard");
    }
    let mut only_one = Client::connect(shard);
    let Reply::Bulk(Some(lone)) = only_one.call(&["SCRIPT", "LOAD", "return 7"]) else {
        panic!("SCRIPT LOAD on one shard")
    };
    let lone = String::from_utf8(lone).unwrap();
    assert_eq!(
        c.call(&["SCRIPT", "EXISTS", &sha, &lone]),
        Reply::Array(vec![Reply::Integer(1), Reply::Integer(0)])
    );
    assert_eq!(c.call(&["SCRIPT", "FLUSH"]), Reply::ok());
    assert_eq!(
        c.call(&["SCRIPT", "EXISTS", &sha]),
        Reply::Array(vec![Reply::Integer(0)])
    );
    // Commands that count their keys go to the keys' shard.
    assert_eq!(c.call(&["RPUSH", "{l}a", "1", "2"]), Reply::Integer(2));
    assert_eq!(
        c.call(&["LMPOP", "2", "{l}b", "{l}a", "LEFT"]),
        Reply::Array(vec![bulk("{l}a"), Reply::Array(vec![bulk("1")])])
    );
    assert!(error_text(c.call(&["LMPOP", "2", "foo", "bar", "LEFT"])).starts_with("CROSSSLOT"));
}

/// WATCH runs on a connection reserved for the client on its keys' shard,
/// which the transaction then runs on: a write by another client between
/// WATCH and EXEC aborts it, as on the shard directly; keys of another
/// shard are refused; the reserved connections go back to the pool.
#[test]
fn watch_aborts_exec_after_another_clients_write_on_the_shard() {
    let (shard, _dir) = start_shard("127.0.0.1:0");
    let (other, _dir2) = start_shard("127.0.0.1:0");
    let (router, _) = start_router(&[shard, other], "");
    let (mut c, mut d) = (Client::connect(router), Client::connect(router));
    let queued = Reply::Simple("QUEUED".into());
    assert_eq!(c.call(&["SET", "{u}k", "1"]), Reply::ok());

    assert_eq!(c.call(&["WATCH", "{u}k", "{u}other"]), Reply::ok());
    assert_eq!(d.call(&["SET", "{u}k", "2"]), Reply::ok());
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["SET", "{u}k", "3"]), queued);
    assert_eq!(c.call(&["EXEC"]), Reply::NullArray, "aborted");
    assert_eq!(c.call(&["GET", "{u}k"]), bulk("2"));

    assert_eq!(c.call(&["WATCH", "{u}k"]), Reply::ok());
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["INCR", "{u}k"]), queued);
    assert_eq!(
        c.call(&["EXEC"]),
        Reply::Array(vec![Reply::Integer(3)]),
        "nothing changed"
    );

    // An empty transaction still answers whether a watched key changed.
    assert_eq!(c.call(&["WATCH", "{u}k"]), Reply::ok());
    d.call(&["SET", "{u}k", "9"]);
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["EXEC"]), Reply::NullArray);

    // UNWATCH and DISCARD end the watch.
    assert_eq!(c.call(&["WATCH", "{u}k"]), Reply::ok());
    assert_eq!(c.call(&["UNWATCH"]), Reply::ok());
    d.call(&["SET", "{u}k", "10"]);
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["GET", "{u}k"]), queued);
    assert_eq!(c.call(&["EXEC"]), Reply::Array(vec![bulk("10")]));
    assert_eq!(c.call(&["WATCH", "{u}k"]), Reply::ok());
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["DISCARD"]), Reply::ok());
    d.call(&["SET", "{u}k", "11"]);
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert_eq!(c.call(&["EXEC"]), Reply::Array(Vec::new()));

    // As Redis 7: WATCH inside MULTI is refused and the transaction goes on.
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert!(error_text(c.call(&["WATCH", "{u}k"])).contains("WATCH inside MULTI is not allowed"));
    assert_eq!(c.call(&["UNWATCH"]), queued, "queued, as Redis queues it");
    assert_eq!(c.call(&["GET", "{u}k"]), queued);
    assert_eq!(c.call(&["EXEC"]), Reply::Array(vec![Reply::ok(), bulk("11")]));

    // "foo" and "bar" are on different shards of two.
    assert_ne!(slot(b"foo") / 8192, slot(b"bar") / 8192);
    assert!(error_text(c.call(&["WATCH", "foo", "bar"])).starts_with("CROSSSLOT"));
    assert_eq!(c.call(&["WATCH", "foo"]), Reply::ok());
    assert!(error_text(c.call(&["WATCH", "bar"])).starts_with("CROSSSLOT"));
    assert_eq!(c.call(&["MULTI"]), Reply::ok());
    assert!(error_text(c.call(&["SET", "bar", "1"])).starts_with("CROSSSLOT"));
    assert!(error_text(c.call(&["EXEC"])).starts_with("EXECABORT"));
    assert!(error_text(c.call(&["WATCH"])).contains("wrong number of arguments for 'watch'"));

    // Many watches, one after another: the shard's connections stay few.
    for i in 0..50 {
        assert_eq!(c.call(&["WATCH", "{u}k"]), Reply::ok());
        c.call(&["MULTI"]);
        c.call(&["SET", "{u}k", &i.to_string()]);
        assert_eq!(c.call(&["EXEC"]), Reply::Array(vec![Reply::ok()]));
    }
    let owner = if slot(b"{u}") < 8192 { shard } else { other };
    let Reply::Bulk(Some(info)) = Client::connect(owner).call(&["INFO", "clients"]) else {
        panic!("INFO")
    };
    let info = String::from_utf8(info).unwrap();
    let connected: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(connected <= 4, "reserved connections are given back: {info}");
}

/// KEYS asks every shard; SCAN walks the shards one after another, with a
/// cursor of the router's, and sees every key once.
#[test]
fn keys_and_scan_see_every_shard() {
    let (shard, _dir) = start_shard("127.0.0.1:0");
    let (other, _dir2) = start_shard("127.0.0.1:0");
    let (router, _) = start_router(&[shard, other], "");
    let mut c = Client::connect(router);
    let mut expected: Vec<String> = (0..200).map(|i| format!("key:{i}")).collect();
    for k in &expected {
        assert_eq!(c.call(&["SET", k, "v"]), Reply::ok());
    }
    c.call(&["SET", "other", "v"]);
    let on_first = expected.iter().filter(|k| slot(k.as_bytes()) < 8192).count();
    assert!(on_first > 50 && on_first < 150, "both shards hold keys: {on_first}");
    let texts = |r: Reply| match r {
        Reply::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let mut keys = texts(c.call(&["KEYS", "key:*"]));
    keys.sort();
    expected.sort();
    assert_eq!(keys, expected);

    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let Reply::Array(mut reply) = c.call(&["SCAN", &cursor, "MATCH", "key:*", "COUNT", "7"]) else {
            panic!("SCAN")
        };
        let batch = texts(reply.pop().unwrap());
        seen.extend(batch);
        let Some(Reply::Bulk(Some(next))) = reply.pop() else {
            panic!("cursor")
        };
        cursor = String::from_utf8(next).unwrap();
        calls += 1;
        if cursor == "0" {
            break;
        }
    }
    seen.sort();
    assert_eq!(seen, expected, "every key once");
    assert!(calls > 200 / 7, "{calls} calls of COUNT 7");
    assert_eq!(
        c.call(&["SCAN", "12345"]),
        Reply::error("invalid cursor"),
        "a cursor the router never gave"
    );
}
