//! `sluice serve`'s server against hostile clients, over real sockets:
//! more connections than the process may have file descriptors or than
//! `max_clients` lets in, clients
//! that announce huge requests without authenticating, pipelines written
//! in full before any reply is read, and clients that do not read.
//!
//! Tests that limit or measure the server's process run it in a child
//! process (this test binary again, running `child_server`), so that the
//! limit and the memory are the server's alone.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options, Server, ServerOptions};

/// How the child server is set up: `nofile=N` (RLIMIT_NOFILE) and
/// `password=P`, comma-separated.
const CHILD_VAR: &str = "SLUICE_KV_HOSTILE_SERVER";

/// Long enough for a debug build on 2 busy cores; a deadlock hits it.
const DEADLINE: Duration = Duration::from_secs(120);

fn server(password: Option<String>) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Arc::new(Db::open(rt, dir.path(), Options::default()).unwrap());
    let options = ServerOptions {
        password,
        ..ServerOptions::default()
    };
    (Server::bind("127.0.0.1:0", db, options).unwrap(), dir)
}

fn start() -> (SocketAddr, tempfile::TempDir) {
    let (server, dir) = server(None);
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    (addr, dir)
}

#[test]
#[ignore = "the server process of the tests in this file"]
fn child_server() {
    let Ok(spec) = std::env::var(CHILD_VAR) else { return };
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let setting = |name: &str| {
        spec.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    if let Some(n) = setting("nofile") {
        let n: u64 = n.parse().unwrap();
        let lim = libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        };
        // SAFETY: a plain system call on this process.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    }
    let (server, _dir) = server(setting("password"));
    println!("listening on {}", server.local_addr().unwrap());
    server.run().unwrap();
}

/// The server in a child process, killed when dropped; its log collected.
struct ChildServer {
    process: std::process::Child,
    addr: SocketAddr,
    log: Option<std::thread::JoinHandle<String>>,
}

impl ChildServer {
    fn start(spec: &str) -> ChildServer {
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_server",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_VAR, spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = process.stderr.take().unwrap();
        let log = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut stdout = BufReader::new(process.stdout.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "the child server exited");
            // The harness's "test child_server ... " may start the line.
            if let Some((_, addr)) = line.trim().split_once("listening on ") {
                break addr.parse().unwrap();
            }
        };
        ChildServer {
            process,
            addr,
            log: Some(log),
        }
    }

    fn assert_alive(&mut self) {
        assert_eq!(self.process.try_wait().unwrap(), None, "the server exited");
    }

    /// A field of the server process's `/proc/PID/status`.
    fn status(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    }

    /// Resident memory of the server process, bytes.
    fn rss(&self) -> u64 {
        self.status("VmRSS") << 10
    }

    /// Stops the server; what it logged.
    fn stop(mut self) -> String {
        let _ = self.process.kill();
        let _ = self.process.wait();
        self.log.take().unwrap().join().unwrap()
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    /// A client whose reads fail after a while instead of hanging the test.
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn call(&mut self, args: &[&str]) -> String {
        self.writer.write_all(&command(args)).unwrap();
        self.line()
    }

    /// One reply line (a bulk's header and body for `$`); empty at EOF.
    fn line(&mut self) -> String {
        let mut l = String::new();
        if self.reader.read_line(&mut l).is_err() {
            return String::new();
        }
        if let Some(n) = l.strip_prefix('$').and_then(|n| n.trim_end().parse::<usize>().ok()) {
            let mut body = vec![0; n + 2];
            self.reader.read_exact(&mut body).unwrap();
            l.push_str(&String::from_utf8_lossy(&body));
        }
        l
    }
}

fn command(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    sluice_kv::resp::encode_command(&args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>(), &mut out);
    out
}

#[test]
fn accept_errors_back_off_and_the_server_serves_again() {
    let mut server = ChildServer::start("nofile=64");
    let started = Instant::now();
    let mut clients: Vec<Client> = (0..150).map(|_| Client::connect(server.addr)).collect();
    assert_eq!(
        clients[0].call(&["PING"]),
        "+PONG\r\n",
        "a client accepted before the limit"
    );
    server.assert_alive();
    drop(clients.drain(..));
    let mut c = Client::connect(server.addr);
    assert_eq!(c.call(&["PING"]), "+PONG\r\n", "served again once the clients left");
    assert_eq!(c.call(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", "k"]), "$1\r\nv\r\n");
    server.assert_alive();
    let seconds = started.elapsed().as_secs();
    let log = server.stop();
    let reports = log
        .lines()
        .filter(|l| l.contains("accepting a connection failed"))
        .count();
    assert!(
        log.contains("Too many open files"),
        "the server never ran out of descriptors: {log}"
    );
    assert!(
        (1..=seconds as usize + 1).contains(&reports),
        "{reports} reports in {seconds} s, more than one a second: {log}"
    );
}

#[test]
fn an_unauthenticated_client_cannot_make_the_server_hold_memory() {
    let mut server = ChildServer::start("password=secret");
    let [mut huge_bulk, mut many_args, mut pipeline] = [(); 3].map(|()| Client::connect(server.addr));
    for c in [&mut huge_bulk, &mut many_args, &mut pipeline] {
        assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    }
    let before = server.rss();

    huge_bulk
        .writer
        .write_all(b"*2\r\n$3\r\nSET\r\n$536870912\r\n")
        .unwrap();
    assert_eq!(huge_bulk.line(), "-ERR Protocol error: unauthenticated bulk length\r\n");
    // The bulk's bytes would be buffered by a server that kept reading;
    // this one has closed the connection.
    let _ = huge_bulk.writer.write_all(&vec![b'x'; 8 << 20]);
    assert_eq!(huge_bulk.line(), "", "the connection is closed");

    many_args.writer.write_all(b"*11\r\n").unwrap();
    assert_eq!(
        many_args.line(),
        "-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
    assert_eq!(many_args.line(), "", "the connection is closed");

    // A pipeline it never reads: the server stops reading it once its
    // bounds are reached, and the writes stop going through.
    pipeline
        .writer
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let ping = b"PING\r\n".repeat(64 << 10);
    let mut written = 0usize;
    while written < 256 << 20 {
        match pipeline.writer.write(&ping) {
            Ok(n) => written += n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            Err(e) => panic!("writing the pipeline: {e}"),
        }
    }
    assert!(
        written < 256 << 20,
        "the server read 256 MiB without replies being read"
    );

    let grown = server.rss().saturating_sub(before);
    assert!(grown <= 1 << 20, "the server grew by {} KiB", grown >> 10);
    server.assert_alive();
    let mut authed = Client::connect(server.addr);
    assert_eq!(authed.call(&["AUTH", "secret"]), "+OK\r\n");
    assert_eq!(authed.call(&["SET", "k", "v"]), "+OK\r\n");
}

#[test]
fn idle_clients_take_no_thread_and_little_memory() {
    let mut server = ChildServer::start("");
    let mut first = Client::connect(server.addr);
    assert_eq!(first.call(&["PING"]), "+PONG\r\n");
    let (threads, before) = (server.status("Threads"), server.rss());
    let mut idle: Vec<Client> = (0..500).map(|_| Client::connect(server.addr)).collect();
    for c in &mut idle {
        assert_eq!(c.call(&["SET", "k", "v"]), "+OK\r\n");
    }
    // Every worker may have run a request by now; none is started per client.
    let workers = 4 * std::thread::available_parallelism().unwrap().get() as u64;
    assert!(
        server.status("Threads") <= threads + workers,
        "{} threads with 500 clients, {threads} with one",
        server.status("Threads")
    );
    let each = server.rss().saturating_sub(before) / 500;
    assert!(each <= 32 << 10, "{} KiB per idle client", each >> 10);
    server.assert_alive();
}

/// Clients beyond `max_clients` are told so in RESP, as redis-server
/// tells them, and counted; the clients in are served meanwhile, and a
/// place one of them frees is taken again.
#[test]
fn clients_beyond_max_clients_are_refused_and_a_freed_place_is_taken_again() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Arc::new(Db::open(rt, dir.path(), Options::default()).unwrap());
    let options = ServerOptions {
        max_clients: 3,
        ..ServerOptions::default()
    };
    let server = Server::bind("127.0.0.1:0", db, options).unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    let mut clients: Vec<Client> = (0..3).map(|_| Client::connect(addr)).collect();
    for c in &mut clients {
        assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    }
    for _ in 0..5 {
        let mut refused = Client::connect(addr);
        assert_eq!(refused.line(), "-ERR max number of clients reached\r\n");
        assert_eq!(refused.line(), "", "closed once told");
    }
    assert_eq!(
        clients[0].call(&["SET", "k", "v"]),
        "+OK\r\n",
        "the clients in are served"
    );
    let info = clients[0].call(&["INFO", "clients"]);
    assert!(info.contains("connected_clients:3\r\nmaxclients:3\r\n"), "{info}");
    let info = clients[1].call(&["INFO", "stats"]);
    assert!(info.contains("rejected_connections:5\r\n"), "{info}");
    drop(clients.pop());
    // The server learns of the close when it next polls the connection.
    let started = Instant::now();
    while !clients[0]
        .call(&["INFO", "clients"])
        .contains("connected_clients:2\r\n")
    {
        assert!(started.elapsed() < DEADLINE, "the server never saw the client leave");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut again = Client::connect(addr);
    assert_eq!(
        again.call(&["GET", "k"]),
        "$1\r\nv\r\n",
        "the freed place is taken again"
    );
}

/// Runs `f` on a thread and fails the test if it does not finish in time.
fn within(what: &str, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match finished.recv_timeout(DEADLINE) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} did not finish in {DEADLINE:?}: blocked"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} failed (its panic is above)"),
    }
}

const VALUE: usize = 1024;

/// Stores a 1 KiB value at `key`; the reply to `GET key`.
fn store_value(addr: SocketAddr, key: &str) -> Vec<u8> {
    let value = "v".repeat(VALUE);
    assert_eq!(Client::connect(addr).call(&["SET", key, &value]), "+OK\r\n");
    format!("${VALUE}\r\n{value}\r\n").into_bytes()
}

/// Reads `n` replies, each `expected`.
fn read_replies(reader: &mut impl Read, n: usize, expected: &[u8]) {
    let mut reply = vec![0; expected.len()];
    for i in 0..n {
        reader.read_exact(&mut reply).unwrap();
        assert!(reply == expected, "reply {i}: {}", String::from_utf8_lossy(&reply));
    }
}

#[test]
fn a_pipeline_written_in_full_before_reading_flows() {
    const GETS: usize = 200_000;
    let (addr, _dir) = start();
    // A long key makes the pipeline 32 MB, more than the kernel's socket
    // buffers take (a few MB on loopback): a server that stops reading
    // while its replies wait blocks the client's writes for good.
    let key = "k".repeat(128);
    let expected = store_value(addr, &key);
    within("200,000 pipelined GETs", move || {
        let mut c = Client::connect(addr);
        c.writer.write_all(&command(&["GET", &key]).repeat(GETS)).unwrap();
        read_replies(&mut c.reader, GETS, &expected);
        assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    });
}

#[test]
fn a_client_that_does_not_read_does_not_slow_another() {
    const GETS: usize = 20_000;
    let (addr, _dir) = start();
    let expected = store_value(addr, "k");
    let mut slow = Client::connect(addr);
    // 20 MiB of replies: far past what the server and the sockets hold.
    slow.writer.write_all(&command(&["GET", "k"]).repeat(GETS)).unwrap();
    within("another client's 2,000 requests", move || {
        let mut other = Client::connect(addr);
        for i in 0..1000 {
            let key = format!("other-{i}");
            assert_eq!(other.call(&["SET", &key, "x"]), "+OK\r\n");
            assert_eq!(other.call(&["GET", &key]), "$1\r\nx\r\n");
        }
    });
    within("the slow client's replies", move || {
        read_replies(&mut slow.reader, GETS, &expected);
        assert_eq!(slow.call(&["PING"]), "+PONG\r\n");
    });
}
