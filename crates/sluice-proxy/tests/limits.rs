//! Bounds on clients before they log in, and on how many connect: a
//! message too long for the login, a login that never completes, and
//! clients beyond `max_client_conn` in either protocol. No database is
//! needed: the upstream is a socket that takes the proxy's connections and
//! never answers, so every client stays in its login.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_proxy::gate::GateConfig;
use sluice_proxy::pg::frame;
use sluice_proxy::{Protocol, ProxyConfig};
use support::pgwire::{last_error_before_close, PgConn, QueryError};
use support::proxy::ProxyHandle;
use support::respwire::RespConn;

/// The tests run one at a time: one of them measures the process's memory,
/// which the proxy of another would move.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An upstream that accepts every connection, reads what it is sent and
/// never answers.
fn silent_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the silent upstream");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut sink = [0u8; 4096];
                while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

fn proxy(protocol: Protocol, configure: impl FnOnce(&mut ProxyConfig)) -> ProxyHandle {
    let mut config = ProxyConfig::new("127.0.0.1:0", silent_upstream().to_string(), protocol);
    configure(&mut config);
    ProxyHandle::start_with(config, GateConfig::default())
}

fn expect_error(conn: &mut PgConn, sqlstate: &str, says: &str) -> String {
    match last_error_before_close(conn) {
        Some(QueryError::Server { sqlstate: got, message }) => {
            assert_eq!(got, sqlstate, "{message}");
            assert!(message.contains(says), "{message}");
            message
        }
        other => panic!("expected {sqlstate} ({says}), got {other:?}"),
    }
}

/// The process's resident memory (the proxy runs in it), KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
    line.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in kB")
}

/// Sends 4 MiB on `conn` from another thread (the proxy stops reading)
/// and returns whatever came back before the close (a reset after it is
/// no matter).
fn push_4_mib_and_read(mut conn: TcpStream) -> Vec<u8> {
    let mut writer = conn.try_clone().expect("cloning the client's socket");
    let pushing = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..64 {
            if writer.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    pushing.join().expect("the writer thread");
    answer
}

/// Logs in as far as the startup packet, then announces a message of
/// 2^30 - 1 bytes and sends 4 MiB of it (from another thread: the proxy
/// stops reading); returns the last error it got.
fn send_a_huge_message_before_login(addr: SocketAddr) -> String {
    let mut conn = TcpStream::connect(addr).expect("connecting to the proxy");
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut start = BytesMut::new();
    frame::write_startup(&mut start, &[("user", "alice")]);
    start.extend_from_slice(b"p");
    start.extend_from_slice(&((1u32 << 30) - 1).to_be_bytes());
    conn.write_all(&start).expect("sending the startup packet");
    let answer = push_4_mib_and_read(conn);
    let header = frame::parse_header(&answer).ok().flatten();
    assert_eq!(header.map(|h| h.tag), Some(b'E'), "answer {answer:?}");
    let body = &answer[5..header.unwrap().len];
    assert_eq!(frame::error_field(body, b'V'), Some("FATAL"));
    assert_eq!(frame::error_field(body, b'C'), Some("08P01"));
    let message = frame::error_field(body, b'M').unwrap_or_default().to_string();
    assert!(message.contains("message too long before login"), "{message}");
    message
}

#[test]
fn a_huge_message_before_login_is_refused_without_buffering_it() {
    let _one = one_at_a_time();
    let proxy = proxy(Protocol::Pg, |_| {});
    // The first session's allocations (worker arenas, buffers) are made once.
    send_a_huge_message_before_login(proxy.addr);
    let before = rss_kib();
    for _ in 0..4 {
        let message = send_a_huge_message_before_login(proxy.addr);
        assert!(message.contains("1073741824 bytes"), "{message}");
    }
    let grown = rss_kib().saturating_sub(before);
    eprintln!("4 clients announcing 1 GiB before login: the process grew by {grown} KiB");
    assert!(grown < 1024, "4 clients announcing 1 GiB grew the proxy by {grown} KiB");

    let mut conn = PgConn::raw(proxy.addr);
    let mut huge_startup = BytesMut::new();
    huge_startup.extend_from_slice(&((1u32 << 30) - 1).to_be_bytes());
    huge_startup.extend_from_slice(&(3u32 << 16).to_be_bytes());
    conn.send(&huge_startup);
    expect_error(&mut conn, "08P01", "invalid startup packet length");
}

#[test]
fn a_login_that_does_not_complete_in_time_is_closed() {
    let _one = one_at_a_time();
    let login_timeout = Duration::from_millis(200);
    let proxy = proxy(Protocol::Pg, |c| c.login_timeout_ms = login_timeout.as_millis() as u64);
    // Half a startup packet; then a whole one the (silent) server never
    // answers.
    let mut half = PgConn::raw(proxy.addr);
    let mut startup = BytesMut::new();
    frame::write_startup(&mut startup, &[("user", "alice")]);
    half.send(&startup[..6]);
    let mut unanswered = PgConn::raw(proxy.addr);
    unanswered.send_startup("alice");
    let started = Instant::now();
    for conn in [&mut half, &mut unanswered] {
        expect_error(conn, "08P01", "login_timeout_ms = 200");
    }
    let waited = started.elapsed();
    assert!(
        waited >= login_timeout - Duration::from_millis(20),
        "closed after {waited:?}"
    );
}

#[test]
fn clients_beyond_max_client_conn_are_refused_in_their_protocol() {
    let _one = one_at_a_time();
    let pg = proxy(Protocol::Pg, |c| {
        c.max_client_conn = Some(2);
        c.login_timeout_ms = 300;
    });
    let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(pg.addr).unwrap()).collect();
    let mut refused = PgConn::raw(pg.addr);
    refused.send_startup("alice");
    let message = expect_error(&mut refused, "53300", "sorry, too many clients already");
    assert!(message.contains("max_client_conn = 2"), "{message}");
    drop(held);
    // Once the held sessions are gone, a client is let in (and, the server
    // silent, closed by the login timeout instead).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut conn = PgConn::raw(pg.addr);
        conn.send_startup("alice");
        match last_error_before_close(&mut conn) {
            Some(QueryError::Server { sqlstate, .. }) if sqlstate == "08P01" => break,
            other => assert!(Instant::now() < deadline, "still refused: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let redis = proxy(Protocol::Redis, |c| c.max_client_conn = Some(1));
    let _held = RespConn::connect(redis.addr);
    let mut refused = RespConn::connect(redis.addr);
    refused.send(&["PING"]);
    assert_eq!(
        refused.reply().as_deref(),
        Some("-ERR max number of clients reached\r\n")
    );
    assert_eq!(refused.reply(), None, "closed after the refusal");
}

/// An upstream that asks for AUTH: every line it reads is answered NOAUTH.
fn upstream_asking_auth() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the upstream");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut chunk = [0u8; 4096];
                while let Ok(n) = conn.read(&mut chunk) {
                    let lines = chunk[..n].iter().filter(|&&b| b == b'\n').count();
                    let noauth = b"-NOAUTH Authentication required.\r\n".repeat(lines);
                    if n == 0 || conn.write_all(&noauth).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Announces a 512 MiB bulk before AUTH and sends 4 MiB of it; returns
/// what came back before the close.
fn send_a_huge_bulk_before_auth(addr: SocketAddr) -> String {
    let mut conn = TcpStream::connect(addr).expect("connecting to the proxy");
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    conn.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\n").unwrap();
    String::from_utf8_lossy(&push_4_mib_and_read(conn)).into_owned()
}

/// Where Redis asks for AUTH, a client that has not authenticated is held
/// to Redis's own bounds for it (10 arguments, 16 KiB bulks) and cannot
/// make the proxy hold its 512 MiB bulk.
#[test]
fn a_redis_client_before_auth_cannot_make_the_proxy_hold_a_huge_bulk() {
    let _one = one_at_a_time();
    for shared in [2, 0] {
        let mut config = ProxyConfig::new("127.0.0.1:0", upstream_asking_auth().to_string(), Protocol::Redis);
        config.shared_upstreams = shared;
        let proxy = ProxyHandle::start_with(config, GateConfig::default());
        let mut conn = RespConn::connect(proxy.addr);
        assert_eq!(conn.call(&["PING"]), "-NOAUTH Authentication required.\r\n");
        send_a_huge_bulk_before_auth(proxy.addr);
        let before = rss_kib();
        for _ in 0..4 {
            assert_eq!(
                send_a_huge_bulk_before_auth(proxy.addr),
                "-ERR Protocol error: unauthenticated bulk length\r\n"
            );
        }
        let grown = rss_kib().saturating_sub(before);
        eprintln!("4 Redis clients announcing 512 MiB before AUTH: the process grew by {grown} KiB");
        assert!(grown < 1024, "shared_upstreams = {shared}: grew by {grown} KiB");
        let eleven = format!("*11\r\n{}", "$1\r\nx\r\n".repeat(11));
        let mut conn = RespConn::connect(proxy.addr);
        conn.send_raw(eleven.as_bytes());
        assert_eq!(
            conn.reply().as_deref(),
            Some("-ERR Protocol error: unauthenticated multibulk length\r\n")
        );
        assert_eq!(conn.reply(), None, "closed after the error");
    }
}
