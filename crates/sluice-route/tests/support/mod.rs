//! What the router's integration tests share: a RESP client over a plain
//! socket, `sluice serve` shards and the router started from a
//! configuration, free ports.

// Each test file uses only part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options, Server, ServerOptions};
use sluice_resp::{encode_command, parse_reply, Limits, Reply};
use sluice_route::config::Config;
use sluice_route::Router;

/// A `sluice serve` on `addr` (port 0: any), serving from a thread.
pub fn start_shard(addr: &str) -> (SocketAddr, tempfile::TempDir) {
    start_shard_with(addr, Options::default())
}

/// [`start_shard`] with the store's `options`.
pub fn start_shard_with(addr: &str, options: Options) -> (SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(Runtime::new(RuntimeConfig::default()).unwrap(), dir.path(), options).unwrap());
    let server = Server::bind(addr, db, ServerOptions::default()).unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    (addr, dir)
}

/// The router from `toml`, serving from a thread of its own.
pub fn start_router_from(toml: &str) -> (SocketAddr, Arc<Router>) {
    sluice_route::spawn(Config::from_toml(toml).unwrap()).unwrap()
}

/// A port free now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

pub fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}

/// One connection, one command at a time.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next reply, or `None` once the connection is closed.
    pub fn reply(&mut self) -> Option<Reply> {
        loop {
            if let Some((reply, used)) = parse_reply(&self.buf, &Limits::default()).unwrap() {
                self.buf.drain(..used);
                return Some(reply);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    pub fn call(&mut self, args: &[&str]) -> Reply {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        self.send_raw(&out);
        self.reply().expect("a reply")
    }
}

/// One client asks the router for far more replies than the sockets between
/// them hold and reads none of them; another client, meanwhile, is served
/// on every shard. The first then reads all its replies, each whole.
pub fn a_slow_reader_stalls_no_other(router: SocketAddr) {
    let mut other = Client::connect(router);
    let big = "x".repeat(256 << 10);
    assert_eq!(other.call(&["SET", "{big}", &big]), Reply::ok());
    let mut hostile = Client::connect(router);
    let mut get = Vec::new();
    encode_command(&["GET", "{big}"], &mut get);
    // 100 MiB of replies; the requests themselves fit in a socket buffer.
    let asked = 400;
    hostile.send_raw(&get.repeat(asked));
    let keys: Vec<String> = (0..20).map(|i| format!("other{i}")).collect();
    for round in 0..20 {
        for k in &keys {
            assert_eq!(other.call(&["SET", k, &format!("{round}")]), Reply::ok());
        }
        let mut mget = vec!["MGET"];
        mget.extend(keys.iter().map(String::as_str));
        let expected = Reply::Array(keys.iter().map(|_| bulk(&format!("{round}"))).collect());
        assert_eq!(other.call(&mget), expected, "served beside a client that reads nothing");
    }
    for i in 0..asked {
        assert_eq!(hostile.reply(), Some(bulk(&big)), "the slow reader's reply {i}");
    }
}

/// Commands on keys under `prefix` spread over every shard, each key's in
/// an order that shows a reordering (SET, APPEND, then GET; INCR, INCRBY),
/// broken every 125 by commands that run on their own: a split MGET, a
/// PING, and refusals of every kind (arity, WRONGTYPE, CROSSSLOT, an
/// unknown command).
fn pipelined_commands(prefix: &str) -> Vec<Vec<String>> {
    let owned = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut commands = Vec::new();
    for i in 0..100 {
        let (k, n) = (format!("{prefix}:k{i}"), format!("{prefix}:n{i}"));
        commands.push(owned(&["SET", &k, &format!("v{i}")]));
        commands.push(owned(&["APPEND", &k, "-x"]));
        commands.push(owned(&["INCR", &n]));
        commands.push(owned(&["INCRBY", &n, "10"]));
        commands.push(owned(&["GET", &k]));
        if i % 25 == 24 {
            commands.push(owned(&["MGET", &k, &format!("{prefix}:k{}", i - 1), &n]));
            commands.push(owned(&["PING"]));
            commands.push(owned(&["GET"]));
            commands.push(owned(&["LPUSH", &k, "z"]));
            commands.push(owned(&["RENAME", "{a}x", "{b}y"]));
            commands.push(owned(&["NOSUCH", &k]));
        }
    }
    commands
}

/// A client's pipeline, sent in one write, gets the replies its commands
/// get one at a time, in order; and its commands reached the shards in
/// runs, far fewer sub-requests than commands.
pub fn a_pipeline_answers_as_one_command_at_a_time(router: SocketAddr, state: &Router) {
    fn args(c: &[String]) -> Vec<&str> {
        c.iter().map(String::as_str).collect()
    }
    let mut one = Client::connect(router);
    let expected: Vec<Reply> = pipelined_commands("one").iter().map(|c| one.call(&args(c))).collect();
    assert_eq!(expected[4], bulk("v0-x"), "{:?}", &expected[..5]);
    assert_eq!(expected[3], Reply::Integer(11));
    let at_shards = || -> u64 {
        let counts = state
            .shards()
            .into_iter()
            .map(|s| s.stats.sub_requests.load(std::sync::atomic::Ordering::Relaxed));
        counts.sum()
    };
    let before = at_shards();
    let mut piped = Client::connect(router);
    let commands = pipelined_commands("piped");
    let mut out = Vec::new();
    for c in &commands {
        encode_command(&args(c), &mut out);
    }
    piped.send_raw(&out);
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(piped.reply().as_ref(), Some(want), "reply {i} (to {:?})", commands[i]);
    }
    let sent = at_shards() - before;
    assert!(
        sent * 4 < commands.len() as u64,
        "{sent} sub-requests for {} commands",
        commands.len()
    );
}
