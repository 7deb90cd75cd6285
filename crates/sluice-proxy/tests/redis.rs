//! The proxy in front of a real Redis 7: redis-cli and
//! redis-benchmark through it, transactions, pipelines, AUTH tenants, RESP3
//! after HELLO 3, blocking commands and pub/sub outside admission, refusals.

mod support;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_proxy::gate::GateConfig;
use sluice_proxy::{Protocol, ProxyConfig, TenantKey};
use support::proxy::{gate, ProxyHandle};
use support::respwire::RespConn;
use support::servers::RedisServer;

fn proxy(server: &RedisServer, key: TenantKey, gate: GateConfig) -> ProxyHandle {
    ProxyHandle::start(Protocol::Redis, &server.addr(), key, gate)
}

fn redis_cli(proxy: &ProxyHandle, args: &[&str], stdin: &str) -> (String, String) {
    let mut command = Command::new("redis-cli");
    command
        .args(["-h", "127.0.0.1", "-p", &proxy.addr.port().to_string()])
        .args(args);
    let out = support::run_with_stdin(command, stdin);
    assert!(
        out.status.success(),
        "redis-cli {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn commands_transactions_and_pipelines_are_answered_in_order() {
    let Some(server) = RedisServer::start() else { return };
    support::require("redis-cli").expect("redis-cli comes with redis-server here");
    let proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let (out, _) = redis_cli(&proxy, &[], "SET greeting hello\nGET greeting\n");
    assert_eq!(out, "OK\nhello\n");

    let mut conn = RespConn::connect(proxy.addr);
    conn.send_raw(b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nn\r\n$2\r\n10\r\n*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n*1\r\n$4\r\nEXEC\r\n");
    let replies: Vec<String> = (0..4).map(|_| conn.reply().expect("a reply")).collect();
    assert_eq!(
        replies,
        ["+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n+OK\r\n:11\r\n"]
    );

    // 500 pipelined commands in one write, answered in order.
    let pipeline = "INCR counter\r\n".repeat(500);
    conn.send_raw(pipeline.as_bytes());
    for i in 1..=500 {
        assert_eq!(conn.reply().expect("a reply"), format!(":{i}\r\n"));
    }
    let stats = proxy.tenant("default").expect("stats of tenant default");
    // 2 redis-cli commands (and its COMMAND DOCS probe, if any), 1
    // transaction, 500 pipelined commands.
    assert!(stats.requests >= 503, "requests counted: {}", stats.requests);
    assert_eq!(stats.errors, 0);
    let gate = proxy.gate_tenant("default").expect("the gate knows tenant default");
    assert_eq!(
        gate.completed, stats.requests,
        "every answered request's latency is recorded"
    );

    let mass = (0..1000).map(|i| format!("SET key:{i} {i}\r\n")).collect::<String>();
    let (out, _) = redis_cli(&proxy, &["--pipe"], &mass);
    assert!(out.contains("errors: 0, replies: 1000"), "redis-cli --pipe said: {out}");
}

#[test]
fn auth_names_the_tenant_once_the_server_accepts_it() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let mut conn = RespConn::connect(proxy.addr);
    assert!(conn.call(&["AUTH", "alice", "wrong"]).starts_with("-WRONGPASS"));
    assert_eq!(conn.call(&["SET", "k", "v"]), "+OK\r\n");
    assert!(
        proxy.tenant("alice").is_none_or(|t| t.requests == 0),
        "a refused AUTH must not name the tenant"
    );
    assert_eq!(conn.call(&["AUTH", "alice", "secret"]), "+OK\r\n");
    assert_eq!(conn.call(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(conn.call(&["ACL", "WHOAMI"]), "$5\r\nalice\r\n");
    let alice = proxy.tenant("alice").expect("stats of tenant alice");
    assert_eq!(alice.requests, 2, "GET and ACL WHOAMI ran as alice");

    let (out, _) = redis_cli(
        &proxy,
        &["--user", "alice", "--pass", "secret", "--no-auth-warning"],
        "ACL WHOAMI\n",
    );
    assert_eq!(out, "alice\n");
}

#[test]
fn hello_3_replies_are_relayed_as_resp3() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::ClientName, GateConfig::default());
    let mut conn = RespConn::connect(proxy.addr);
    let hello = conn.call(&["HELLO", "3", "SETNAME", "web"]);
    assert!(hello.starts_with("%7\r\n"), "HELLO 3 answers with a map: {hello}");
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n"), "{hello}");
    conn.call(&["HSET", "h", "f", "v"]);
    assert_eq!(conn.call(&["HGETALL", "h"]), "%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
    conn.call(&["ZADD", "z", "1.5", "m"]);
    assert_eq!(conn.call(&["ZSCORE", "z", "m"]), ",1.5\r\n");
    assert_eq!(conn.call(&["GET", "missing"]), "_\r\n");
    assert_eq!(conn.call(&["SISMEMBER", "s", "x"]), ":0\r\n");
    let web = proxy.tenant("web").expect("HELLO SETNAME named the tenant `web`");
    assert_eq!(web.requests, 6, "the six commands after HELLO ran as `web`");
}

#[test]
fn blocking_commands_do_not_hold_a_slot() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::Connection, gate(1, 4, 500));
    let mut blocked = RespConn::connect(proxy.addr);
    blocked.send(&["BLPOP", "jobs", "0"]);
    let mut stream_reader = RespConn::connect(proxy.addr);
    stream_reader.send(&["XREAD", "BLOCK", "0", "STREAMS", "events", "$"]);
    std::thread::sleep(Duration::from_millis(200));
    let mut other = RespConn::connect(proxy.addr);
    let start = Instant::now();
    for i in 0..20 {
        assert_eq!(
            other.call(&["SET", "k", &i.to_string()]),
            "+OK\r\n",
            "with P=1 and two blocked clients"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    assert!(
        !blocked.replies_within(Duration::from_millis(100)),
        "BLPOP must still be blocked"
    );
    assert_eq!(other.call(&["RPUSH", "jobs", "j1"]), ":1\r\n");
    assert_eq!(
        blocked.reply().expect("BLPOP's reply"),
        "*2\r\n$4\r\njobs\r\n$2\r\nj1\r\n"
    );
    assert_eq!(
        blocked.call(&["GET", "k"]),
        "$2\r\n19\r\n",
        "the connection serves commands again"
    );
    let passthrough: u64 = proxy.stats.snapshot().iter().map(|t| t.passthrough).sum();
    assert_eq!(passthrough, 2, "BLPOP and XREAD BLOCK passed outside admission");
}

#[test]
fn subscribe_turns_the_connection_into_a_stream() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::User, gate(1, 4, 500));
    let mut subscriber = RespConn::connect(proxy.addr);
    assert_eq!(
        subscriber.call(&["SUBSCRIBE", "news", "sport"]),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    assert_eq!(
        subscriber.reply().expect("second subscription"),
        "*3\r\n$9\r\nsubscribe\r\n$5\r\nsport\r\n:2\r\n"
    );
    let mut publisher = RespConn::connect(proxy.addr);
    assert_eq!(publisher.call(&["PUBLISH", "news", "hello"]), ":1\r\n");
    assert_eq!(
        subscriber.reply().expect("a message"),
        "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n"
    );
    assert_eq!(publisher.call(&["PUBLISH", "sport", "goal"]), ":1\r\n");
    assert_eq!(
        subscriber.reply().expect("a message"),
        "*3\r\n$7\r\nmessage\r\n$5\r\nsport\r\n$4\r\ngoal\r\n"
    );
}

#[test]
fn a_refused_command_gets_an_error_and_others_go_on() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::Connection, gate(1, 1, 300));
    let holder = proxy.hold_slot("holder");
    let mut refused = RespConn::connect(proxy.addr);
    let err = refused.call(&["GET", "k"]);
    assert!(err.starts_with("-ERR sluice: "), "refusal relayed as -ERR: {err}");

    // A transaction takes no slot until its EXEC; a refused EXEC discards
    // it, so nothing in it runs, and the connection is out of MULTI.
    assert_eq!(refused.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(refused.call(&["SET", "k", "from-refused-tx"]), "+QUEUED\r\n");
    let err = refused.call(&["EXEC"]);
    assert!(err.starts_with("-ERR sluice: "), "refused EXEC: {err}");

    drop(holder);
    assert_eq!(
        refused.call(&["GET", "k"]),
        "$-1\r\n",
        "served once the slot is free, and the transaction never ran"
    );
    assert_eq!(refused.call(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    let refusals: u64 = proxy.stats.snapshot().iter().map(|t| t.refused).sum();
    assert_eq!(refusals, 2, "GET and EXEC were refused by the gate");
}

#[test]
fn malformed_input_closes_only_that_client() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let mut good = RespConn::connect(proxy.addr);
    assert_eq!(good.call(&["SET", "k", "v"]), "+OK\r\n");
    let mut bad = RespConn::connect(proxy.addr);
    bad.send_raw(b"PING\r\n*1\r\n$x\r\n");
    assert_eq!(
        bad.reply().as_deref(),
        Some("+PONG\r\n"),
        "commands before the bad one are answered"
    );
    assert_eq!(
        bad.reply().as_deref(),
        Some("-ERR Protocol error: invalid bulk length 'x'\r\n")
    );
    assert_eq!(bad.reply(), None, "the connection is closed after the error");
    let mut huge = RespConn::connect(proxy.addr);
    huge.send_raw(b"*1\r\n$999999999999\r\n");
    assert!(huge
        .reply()
        .is_some_and(|r| r.contains("invalid bulk length 999999999999 (the limit is")));
    assert_eq!(good.call(&["GET", "k"]), "$1\r\nv\r\n");
}

#[test]
fn shutdown_lets_an_open_transaction_finish() {
    let Some(server) = RedisServer::start() else { return };
    let mut proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let mut conn = RespConn::connect(proxy.addr);
    assert_eq!(conn.call(&["MULTI"]), "+OK\r\n");
    let addr = proxy.addr;
    let stopper = std::thread::spawn(move || proxy.shutdown());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "no new connections once shutting down"
    );
    assert_eq!(conn.call(&["SET", "k", "v"]), "+QUEUED\r\n");
    assert_eq!(conn.call(&["EXEC"]), "*1\r\n+OK\r\n");
    assert_eq!(conn.reply(), None, "closed once the transaction is done");
    assert!(stopper.join().expect("shutdown thread"), "the proxy shut down cleanly");
}

#[test]
fn redis_benchmark_through_the_proxy_has_no_errors() {
    let Some(server) = RedisServer::start() else { return };
    let Some(benchmark) = support::require("redis-benchmark") else {
        return;
    };
    let proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let out = Command::new(benchmark)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &proxy.addr.port().to_string(),
            "-t",
            "get,set",
            "-c",
            "50",
            "-n",
            "20000",
            "-q",
        ])
        .output()
        .expect("running redis-benchmark");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "redis-benchmark failed: {stdout}{stderr}");
    assert!(stdout.contains("SET: ") && stdout.contains("GET: "), "{stdout}");
    assert!(!stderr.to_lowercase().contains("error"), "{stderr}");
    let stats = proxy.tenant("default").expect("stats of tenant default");
    assert!(stats.requests >= 40_000, "requests counted: {}", stats.requests);
    assert_eq!(stats.errors, 0);
}

#[test]
fn a_dead_upstream_gives_its_clients_a_clear_error() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let mut blocked = RespConn::connect(proxy.addr);
    blocked.send(&["BLPOP", "jobs", "0"]);
    std::thread::sleep(Duration::from_millis(200));
    drop(server);
    assert_eq!(
        blocked.reply().as_deref(),
        Some("-ERR sluice: the upstream server closed the connection\r\n")
    );
    assert_eq!(blocked.reply(), None);
    // A client in the default state dials nothing until it sends a command
    // (it would use a shared connection); one that needs its own is told at
    // once.
    for first in [&["PING"][..], &["SELECT", "1"][..]] {
        let mut late = RespConn::connect(proxy.addr);
        let err = late.call(first);
        assert!(
            err.starts_with("-ERR sluice: cannot reach the upstream server 127.0.0.1:"),
            "{first:?}: {err}"
        );
    }
}

#[test]
fn default_state_clients_share_upstream_connections_until_they_need_their_own() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::Connection, GateConfig::default());
    let mut clients: Vec<RespConn> = (0..10).map(|_| RespConn::connect(proxy.addr)).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.call(&["SET", &format!("k{i}"), "v"]), "+OK\r\n");
    }
    let mut direct = RespConn::connect(server.addr().parse().unwrap());
    let list = direct.call(&["CLIENT", "LIST"]);
    let upstream_connections = list.lines().filter(|l| l.contains("addr=")).count() - 1;
    assert!(
        upstream_connections <= 2,
        "10 clients, 2 shared lanes, yet the server sees {upstream_connections}: {list}"
    );

    // A stateful command in a pipeline: earlier commands answered on the
    // shared lane, the rest on the client's own connection, in order.
    let c = &mut clients[0];
    c.send_raw(b"GET k0\r\nSELECT 1\r\nGET k0\r\nSET k0 db1\r\n");
    let replies: Vec<String> = (0..4).map(|_| c.reply().unwrap()).collect();
    assert_eq!(replies, ["$1\r\nv\r\n", "+OK\r\n", "$-1\r\n", "+OK\r\n"]);
    assert_eq!(c.call(&["GET", "k0"]), "$3\r\ndb1\r\n", "still in database 1");
    assert_eq!(
        clients[1].call(&["GET", "k0"]),
        "$1\r\nv\r\n",
        "others stay in database 0"
    );
}

/// Clients reach the proxy through its Unix socket file (a raw one, then
/// redis-cli -s), on a shared lane and, after MULTI, on a connection of
/// their own, both to Redis's Unix socket; a client is named by its OS
/// user id.
#[test]
fn clients_on_the_unix_socket_share_lanes_and_get_their_own() {
    let Some(server) = RedisServer::start() else { return };
    support::require("redis-cli").expect("redis-cli comes with redis-server here");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sluice.sock");
    let mut config = ProxyConfig::new("127.0.0.1:0", server.socket_path(), Protocol::Redis);
    config.listen_unix = Some(socket.clone());
    config.tenant_key = TenantKey::ClientAddress;
    let proxy = ProxyHandle::start_with(config, GateConfig::default());
    // A plain SET goes over a shared lane, which stays open.
    let mut shared = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    shared.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n").unwrap();
    let mut reply = [0; 5];
    shared.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+OK\r\n");
    let mut direct = Command::new("redis-cli");
    direct.args(["-p", &server.port.to_string(), "CLIENT", "LIST"]);
    let clients = String::from_utf8_lossy(&support::run_with_stdin(direct, "").stdout).into_owned();
    let on_socket = format!("laddr={}", server.socket_path());
    assert!(clients.contains(&on_socket), "no client on {on_socket}:\n{clients}");
    // MULTI gives redis-cli's connection an upstream of its own.
    let mut command = Command::new("redis-cli");
    command.arg("-s").arg(&socket);
    let out = support::run_with_stdin(command, "GET k\nMULTI\nINCR n\nEXEC\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v\nOK\nQUEUED\n1\n");
    let tenant = format!("unix:{}", unsafe { libc::getuid() });
    let served = proxy.tenant(&tenant).map_or(0, |t| t.requests);
    assert!(served >= 3, "tenant {tenant}: {served} requests");
}

#[test]
fn tenants_named_by_connection_are_forgotten_when_it_closes() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::Connection, GateConfig::default());
    for _ in 0..200 {
        let mut c = RespConn::connect(proxy.addr);
        assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    }
    let mut kept = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        kept = proxy.gate.snapshot().tenants.len() + proxy.stats.snapshot().len();
        if kept == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(kept, 0, "200 closed connections should leave no tenant behind");
}

#[test]
fn a_client_on_a_shared_lane_is_served_again_when_the_upstream_returns() {
    let Some(server) = RedisServer::start() else { return };
    let port = server.port;
    let proxy = proxy(&server, TenantKey::Connection, GateConfig::default());
    let mut client = RespConn::connect(proxy.addr);
    assert_eq!(client.call(&["SET", "k", "v"]), "+OK\r\n");
    drop(server);
    let err = client.call(&["GET", "k"]);
    assert!(
        err.starts_with("-ERR sluice: "),
        "a clear error while Redis is down: {err}"
    );
    let _back = RedisServer::start_on(port).expect("Redis restarts on its port");
    assert_eq!(
        client.call(&["GET", "k"]),
        "$-1\r\n",
        "the same client connection is served by the new server"
    );
}

#[test]
fn clients_that_vanish_mid_request_give_back_every_slot() {
    let Some(server) = RedisServer::start() else { return };
    let proxy = proxy(&server, TenantKey::Connection, gate(1, 10_000, 10_000));
    let holder = proxy.hold_slot("holder");
    let value = "x".repeat(1024);
    // Half the clients start with SELECT, which gives them their own
    // upstream connection: both the shared lanes and the dedicated path
    // lose clients whose requests wait at the gate.
    let clients: Vec<RespConn> = (0..20)
        .map(|c| {
            let mut conn = RespConn::connect(proxy.addr);
            if c % 2 == 0 {
                conn.send(&["SELECT", "1"]);
            }
            for i in 0..20 {
                conn.send(&["SET", &format!("k{i}"), &value]);
            }
            conn
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.gate.snapshot().queued < 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(proxy.gate.snapshot().queued >= 20, "every client has a request waiting");
    drop(clients);
    std::thread::sleep(Duration::from_millis(200));
    drop(holder);
    let mut gate = proxy.gate.snapshot();
    while (gate.in_flight, gate.queued) != (0, 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        gate = proxy.gate.snapshot();
    }
    assert_eq!(
        (gate.in_flight, gate.queued),
        (0, 0),
        "slots held after the clients left"
    );
    let mut after = RespConn::connect(proxy.addr);
    assert_eq!(after.call(&["PING"]), "+PONG\r\n", "the gate still lets requests in");
}
