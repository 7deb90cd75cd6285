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
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Arc::new(Db::open(rt, dir.path(), options).unwrap());
    let server = Server::bind("127.0.0.1:0", db, ServerOptions::default()).unwrap();
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
        c.call(&["RANGE", "b", ""]),
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n"
    );
    assert_eq!(c.call(&["RANGE", "a", "c", "1"]), "*2\r\n$1\r\na\r\n$1\r\n1\r\n");
    assert_eq!(c.call(&["DEL", "a", "x"]), ":1\r\n");
    assert_eq!(c.call(&["GET", "a"]), "$-1\r\n");
    assert_eq!(c.call(&["GET"]), "-ERR wrong number of arguments for 'get' command\r\n");
    assert_eq!(c.call(&["NOPE"]), "-ERR unknown command 'nope'\r\n");
    assert_eq!(c.call(&["AUTH", "alice", "secret"]), "+OK\r\n");
    c.call(&["SET", "k", "v"]);
    let info = c.call(&["INFO"]);
    assert!(info.contains("tenant_alice:ops="), "{info}");
    assert!(info.contains("flush:bytes="), "{info}");
    assert!(info.contains("level0:tables="), "{info}");
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
    let big = "x".repeat(101);
    let refused = bad.call(&["SET", "k", &big]);
    assert!(refused.starts_with("-ERR value of 101 bytes"), "{refused}");
    bad.send_raw(b"*1\r\n:oops\r\n");
    assert_eq!(bad.reply(), "-ERR Protocol error: expected '$', got ':'\r\n");
    assert_eq!(bad.line(), "", "the server closes a connection that broke the protocol");
    assert_eq!(good.call(&["GET", "k"]), "$6\r\nbefore\r\n");
    assert_eq!(good.call(&["SET", "k", "after"]), "+OK\r\n");
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
