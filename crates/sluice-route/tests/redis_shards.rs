//! The router in front of two stock Redis servers (`kind = "redis"`), each
//! reached through one pipelined connection: many clients' commands share
//! it and each gets its own reply, a client that reads none of its replies
//! holding up no other; a Redis that goes away fails the
//! requests that touch it with an error naming it, and is used again once
//! it is back.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_resp::slot::slot;
use sluice_resp::Reply;
use sluice_route::Router;
use support::{
    a_pipeline_answers_as_one_command_at_a_time, a_slow_reader_stalls_no_other, bulk, free_port, start_router_from,
    under_ci, Client,
};

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis(port: u16) -> Option<Redis> {
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
        ])
        .stdout(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        assert!(
            !under_ci(),
            "redis-server is missing under CI: scripts/test.sh installs it"
        );
        eprintln!("skipping: redis-server not installed");
        return None;
    };
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "redis on {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Redis(child))
}

fn start_router(ports: [u16; 2]) -> (SocketAddr, Arc<Router>) {
    start_router_with(ports, 30_000)
}

fn start_router_with(ports: [u16; 2], reply_timeout_ms: u64) -> (SocketAddr, Arc<Router>) {
    start_router_from(&format!(
        "listen = \"127.0.0.1:0\"\n[pool]\nconnect_timeout_ms = 500\nreply_timeout_ms = {reply_timeout_ms}\n\
         [[shard]]\nname = \"a\"\naddr = \"127.0.0.1:{}\"\nslots = \"0-8191\"\nkind = \"redis\"\n\
         [[shard]]\nname = \"b\"\naddr = \"127.0.0.1:{}\"\nslots = \"8192-16383\"\nkind = \"redis\"\n",
        ports[0], ports[1],
    ))
}

#[test]
fn clients_share_a_pipeline_and_each_gets_its_own_replies() {
    let ports = [free_port(), free_port()];
    let Some(_a) = start_redis(ports[0]) else { return };
    let Some(_b) = start_redis(ports[1]) else { return };
    let (router, _) = start_router(ports);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(router);
                for i in 0..300 {
                    let (k, v) = (format!("t{t}:k{i}"), format!("v{t}-{i}"));
                    assert_eq!(c.call(&["SET", &k, &v]), Reply::ok());
                    assert_eq!(c.call(&["GET", &k]), bulk(&v));
                    assert_eq!(c.call(&["INCR", &format!("t{t}:n")]), Reply::Integer(i + 1));
                }
                let keys: Vec<String> = (0..50).map(|i| format!("t{t}:k{i}")).collect();
                let mut mget = vec!["MGET"];
                mget.extend(keys.iter().map(String::as_str));
                let expected: Vec<Reply> = (0..50).map(|i| bulk(&format!("v{t}-{i}"))).collect();
                assert_eq!(c.call(&mget), Reply::Array(expected));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_client_s_pipeline_goes_to_the_shards_in_runs_and_is_answered_in_order() {
    let ports = [free_port(), free_port()];
    let Some(_a) = start_redis(ports[0]) else { return };
    let Some(_b) = start_redis(ports[1]) else { return };
    let (router, state) = start_router(ports);
    a_pipeline_answers_as_one_command_at_a_time(router, &state);
}

#[test]
fn a_client_that_never_reads_its_replies_stalls_no_other_on_the_shared_pipelines() {
    let ports = [free_port(), free_port()];
    let Some(_a) = start_redis(ports[0]) else { return };
    let Some(_b) = start_redis(ports[1]) else { return };
    let (router, _) = start_router(ports);
    a_slow_reader_stalls_no_other(router);
}

#[test]
fn a_redis_that_goes_away_is_named_and_used_again_when_back() {
    let ports = [free_port(), free_port()];
    let Some(_a) = start_redis(ports[0]) else { return };
    let Some(b) = start_redis(ports[1]) else { return };
    let (router, state) = start_router(ports);
    let (on_a, on_b) = if slot(b"foo") < 8192 {
        ("foo", "bar")
    } else {
        ("bar", "foo")
    };
    assert!(slot(on_b.as_bytes()) >= 8192);
    let mut c = Client::connect(router);
    assert_eq!(c.call(&["SET", on_b, "1"]), Reply::ok());
    drop(b);
    let Reply::Error(e) = c.call(&["GET", on_b]) else {
        panic!("an error")
    };
    assert!(e.contains(&format!("shard b (127.0.0.1:{})", ports[1])), "{e}");
    assert_eq!(c.call(&["SET", on_a, "2"]), Reply::ok(), "the other shard serves");
    let _b = start_redis(ports[1]).unwrap();
    assert_eq!(c.call(&["SET", on_b, "3"]), Reply::ok());
    assert_eq!(c.call(&["MGET", on_a, on_b]), Reply::Array(vec![bulk("2"), bulk("3")]));
    for shard in state.shards() {
        assert_eq!(shard.stats.in_flight.load(Ordering::Relaxed), 0, "{}", shard.name);
    }
}

/// A shard that accepts and reads but never answers: each request touching
/// it fails after the reply timeout with an error naming it, the other
/// shard serves meanwhile, and nothing stays in flight.
#[test]
fn a_shard_that_never_answers_times_out_by_name() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    let port = free_port();
    let Some(_a) = start_redis(port) else { return };
    let (router, state) = start_router_with([port, silent_port], 300);
    let (on_a, on_silent) = if slot(b"foo") < 8192 {
        ("foo", "bar")
    } else {
        ("bar", "foo")
    };
    let mut c = Client::connect(router);
    let started = Instant::now();
    let Reply::Error(e) = c.call(&["GET", on_silent]) else {
        panic!("an error")
    };
    assert!(
        e.contains(&format!(
            "shard b (127.0.0.1:{silent_port}) did not answer within 300 ms"
        )),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(c.call(&["SET", on_a, "1"]), Reply::ok());
    for shard in state.shards() {
        assert_eq!(shard.stats.in_flight.load(Ordering::Relaxed), 0, "{}", shard.name);
    }
}

/// A transaction reaches a Redis shard whole on the pipelined connection
/// the other clients share: no other client's command lands inside it.
#[test]
fn a_transaction_runs_whole_on_a_shared_pipeline() {
    let ports = [free_port(), free_port()];
    let Some(_a) = start_redis(ports[0]) else { return };
    let Some(_b) = start_redis(ports[1]) else { return };
    let (router, _) = start_router(ports);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(router);
                let (a, b) = (format!("{{t{t}}}:a"), format!("{{t{t}}}:b"));
                for i in 1..=100 {
                    assert_eq!(c.call(&["MULTI"]), Reply::ok());
                    c.call(&["INCR", &a]);
                    c.call(&["INCR", &b]);
                    assert_eq!(
                        c.call(&["EXEC"]),
                        Reply::Array(vec![Reply::Integer(i), Reply::Integer(i)])
                    );
                    // Plain commands of the same client between its transactions.
                    assert_eq!(c.call(&["GET", &a]), bulk(&i.to_string()));
                }
                assert_eq!(c.call(&["MULTI"]), Reply::ok());
                c.call(&["SET", &a, "x"]);
                c.call(&["INCR", &a]);
                let Reply::Array(replies) = c.call(&["EXEC"]) else {
                    panic!("EXEC")
                };
                assert_eq!(replies[0], Reply::ok());
                assert!(matches!(&replies[1], Reply::Error(e) if e.contains("not an integer")));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// WATCH in front of stock Redis: each watching client gets a connection
/// of its own to the shard, while the other clients' commands go on over
/// the shared pipeline; concurrent read-modify-write increments through
/// WATCH/MULTI/EXEC, retried on abort, lose none.
#[test]
fn watched_increments_lose_no_update() {
    let ports = [free_port(), free_port()];
    let Some(_a) = start_redis(ports[0]) else { return };
    let Some(_b) = start_redis(ports[1]) else { return };
    let (router, _) = start_router(ports);
    let (clients, rounds) = (4, 25);
    let aborted = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| {
                let mut c = Client::connect(router);
                for _ in 0..rounds {
                    loop {
                        assert_eq!(c.call(&["WATCH", "{n}counter"]), Reply::ok());
                        let now = match c.call(&["GET", "{n}counter"]) {
                            Reply::Bulk(Some(v)) => String::from_utf8(v).unwrap().parse::<i64>().unwrap(),
                            _ => 0,
                        };
                        assert_eq!(c.call(&["MULTI"]), Reply::ok());
                        c.call(&["SET", "{n}counter", &(now + 1).to_string()]);
                        match c.call(&["EXEC"]) {
                            Reply::Array(r) => {
                                assert_eq!(r, vec![Reply::ok()]);
                                break;
                            }
                            Reply::NullArray => {
                                aborted.fetch_add(1, Ordering::Relaxed);
                            }
                            other => panic!("EXEC: {other:?}"),
                        }
                    }
                }
            });
        }
    });
    let mut c = Client::connect(router);
    assert_eq!(c.call(&["GET", "{n}counter"]), bulk(&(clients * rounds).to_string()));
    let connected = |port: u16| {
        let mut direct = Client::connect(SocketAddr::from(([127, 0, 0, 1], port)));
        let Reply::Bulk(Some(info)) = direct.call(&["INFO", "clients"]) else {
            panic!("INFO")
        };
        let info = String::from_utf8(info).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .unwrap()
            .parse::<usize>()
            .unwrap()
    };
    // The pipeline, the pool of reserved connections (at most 4 here) and
    // this test's own.
    let most = ports.iter().map(|&p| connected(p)).max().unwrap();
    assert!(most <= 1 + clients + 1, "{most} connections to one shard");
    eprintln!("aborted and retried: {}", aborted.load(Ordering::Relaxed));
}
