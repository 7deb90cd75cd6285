//! Failures around the proxy in front of a real PostgreSQL 15: the server
//! killed under its clients (every client inside
//! a request is told with 08006) and started again,
//! clients that vanish at any point of a request, and a client that cancels
//! a request still waiting at the gate; and, against a stand-in server, a
//! server that refuses the settings the proxy sets for a client under
//! transaction pooling, and a server slow to take a cancel sent as its
//! query ended. Either way every slot comes back to the gate and
//! the proxy goes on serving.

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_proxy::gate::GateConfig;
use sluice_proxy::pg::frame;
use sluice_proxy::{PoolMode, Protocol, ProxyConfig, TenantKey};
use support::pgwire::{last_error_before_close, server_error, PgConn, QueryError};
use support::proxy::{gate, ProxyHandle};
use support::servers::PgServer;

/// What the stand-in servers below take for a password.
const ANY_PASSWORD: &str = "any";

fn session_proxy(server: &PgServer, gate: GateConfig) -> ProxyHandle {
    ProxyHandle::start(Protocol::Pg, &server.addr(), TenantKey::Connection, gate)
}

fn pooled_proxy(server: &PgServer, gate: GateConfig) -> ProxyHandle {
    let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
    config.pool = PoolMode::Transaction;
    ProxyHandle::start_with(config, gate)
}

/// Waits up to 10 s for the gate's (requests inside, requests queued) to
/// satisfy `done`, and returns them as they are then.
fn gate_until(proxy: &ProxyHandle, done: impl Fn((usize, usize)) -> bool) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let gate = proxy.gate.snapshot();
        let now = (gate.in_flight, gate.queued);
        if done(now) || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gate_settles(proxy: &ProxyHandle, in_flight: usize, queued: usize) -> (usize, usize) {
    gate_until(proxy, |now| now == (in_flight, queued))
}

/// Waits up to 10 s for the gate to have `parked` requests parked.
fn parked_settles(proxy: &ProxyHandle, parked: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.gate.parked() != parked && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.gate.parked()
}

#[test]
fn a_killed_server_gives_each_client_a_clear_error_and_is_served_again_once_back() {
    let Some(mut server) = PgServer::start() else { return };
    let session = session_proxy(&server, GateConfig::default());
    let pooled = pooled_proxy(&server, GateConfig::default());
    let mut idle = PgConn::connect(pooled.addr, "postgres");
    assert_eq!(idle.query("SELECT 1"), Ok(vec!["1".to_string()]));
    // Inside a request on each proxy: a query running, one with more
    // queries behind it that its backend has not read (killed, the backend
    // resets the connection rather than closing it), and a transaction
    // waiting on its client (its slot parked).
    let mut busy = Vec::new();
    for proxy in [&session, &pooled] {
        let mut running = PgConn::connect(proxy.addr, "postgres");
        running.send_query("SELECT pg_sleep(60)");
        let mut queued_behind = PgConn::connect(proxy.addr, "postgres");
        queued_behind.send_query("SELECT pg_sleep(60)");
        for _ in 0..64 {
            queued_behind.send_query(&format!("SELECT '{}'", "x".repeat(1024)));
        }
        let mut idle_in_block = PgConn::connect(proxy.addr, "postgres");
        assert_eq!(idle_in_block.query("BEGIN"), Ok(vec![]));
        busy.extend([running, queued_behind, idle_in_block]);
    }
    for proxy in [&session, &pooled] {
        assert_eq!(gate_settles(proxy, 2, 0), (2, 0), "the sleeping queries are inside");
        assert_eq!(parked_settles(proxy, 1), 1, "the idle transaction is parked");
    }

    server.kill();
    for (i, conn) in busy.iter_mut().enumerate() {
        match last_error_before_close(conn) {
            Some(QueryError::Server { sqlstate, message }) if sqlstate == "08006" => {
                assert!(
                    message.starts_with("sluice: the upstream server"),
                    "client {i}: {message}"
                );
            }
            // A backend that noticed its postmaster die before it was
            // killed too says so itself, and the proxy adds nothing.
            Some(QueryError::Server { sqlstate, message }) if sqlstate == "57P01" => {
                assert!(message.contains("unexpected postmaster exit"), "client {i}: {message}");
            }
            other => panic!("client {i} inside a request got {other:?}, not 08006"),
        }
    }
    for proxy in [&session, &pooled] {
        assert_eq!(
            gate_settles(proxy, 0, 0),
            (0, 0),
            "the killed requests' slots came back"
        );
        assert_eq!(parked_settles(proxy, 0), 0, "and the parked one's");
    }
    let mut login = PgConn::raw(session.addr);
    login.send_startup("postgres");
    match last_error_before_close(&mut login) {
        Some(QueryError::Server { sqlstate, message }) => {
            assert_eq!(sqlstate, "08006");
            assert!(
                message.starts_with("sluice: cannot reach the upstream server"),
                "{message}"
            );
        }
        other => panic!("a login while the server is down got {other:?}"),
    }
    match idle.query("SELECT 1") {
        Err(QueryError::Server { sqlstate, message }) => {
            assert_eq!(sqlstate, "08006");
            assert!(message.contains("cannot open a server connection"), "{message}");
        }
        other => panic!("a pooled request while the server is down got {other:?}"),
    }

    server.start_again();
    assert_eq!(
        idle.query("SELECT 2"),
        Ok(vec!["2".to_string()]),
        "the pooled client's session went on"
    );
    let mut fresh = PgConn::connect(session.addr, "postgres");
    assert_eq!(fresh.query("SELECT 3"), Ok(vec!["3".to_string()]));
    for proxy in [&session, &pooled] {
        assert_eq!(gate_settles(proxy, 0, 0), (0, 0));
    }
}

/// What one client sends before it vanishes.
#[derive(Clone, Copy, Debug)]
enum Vanish {
    /// Half a Query message: the proxy has not seen a request yet.
    MidMessage,
    /// A query inside the database or queued at the gate.
    MidQuery,
    /// An open transaction block, then a query inside it.
    MidBlock,
    /// An extended-protocol batch without its Sync.
    BeforeSync,
}

impl Vanish {
    const ALL: [Vanish; 4] = [
        Vanish::MidMessage,
        Vanish::MidQuery,
        Vanish::MidBlock,
        Vanish::BeforeSync,
    ];

    fn send(self, conn: &mut PgConn) {
        match self {
            Vanish::MidMessage => conn.send(b"Q\0\0\0\x40SELECT pg_sl"),
            Vanish::MidQuery => conn.send_query("SELECT pg_sleep(0.2)"),
            Vanish::MidBlock => {
                conn.send_query("BEGIN");
                conn.send_query("SELECT pg_sleep(0.2)");
            }
            Vanish::BeforeSync => {
                let mut out = BytesMut::new();
                frame::write_message(&mut out, b'P', b"\0SELECT pg_sleep(0.2)\0\0\0");
                frame::write_message(&mut out, b'B', b"\0\0\0\0\0\0\0\0");
                frame::write_message(&mut out, b'E', b"\0\0\0\0\0");
                conn.send(&out);
            }
        }
    }
}

#[test]
fn clients_that_vanish_at_random_points_give_back_every_slot() {
    let Some(server) = PgServer::start() else { return };
    let mut rng = StdRng::seed_from_u64(5);
    for proxy in [
        session_proxy(&server, gate(2, 10_000, 30_000)),
        pooled_proxy(&server, gate(2, 10_000, 30_000)),
    ] {
        let mut survivor = PgConn::connect(proxy.addr, "postgres");
        for round in 0..3 {
            let mut clients: Vec<PgConn> = (0..12).map(|_| PgConn::connect(proxy.addr, "postgres")).collect();
            for conn in &mut clients {
                Vanish::ALL[rng.gen_range(0..Vanish::ALL.len())].send(conn);
            }
            let (inside, queued) = gate_until(&proxy, |(inside, queued)| inside == 2 && queued > 0);
            assert!(
                inside == 2 && queued > 0,
                "round {round}: {inside} inside, {queued} queued"
            );
            // Each vanishes at its own moment: before its request is let
            // in, while it is inside, or after its answer.
            while !clients.is_empty() {
                std::thread::sleep(Duration::from_millis(rng.gen_range(0..60)));
                clients.swap_remove(rng.gen_range(0..clients.len()));
            }
            assert_eq!(
                gate_settles(&proxy, 0, 0),
                (0, 0),
                "round {round}: slots or queue places held after every client left"
            );
            assert_eq!(
                survivor.query("SELECT 1"),
                Ok(vec!["1".to_string()]),
                "round {round}: a client that stayed is served"
            );
        }
    }
}

/// A cancel of a request still waiting at the gate ends its wait with
/// PostgreSQL's answer to a cancelled query (57014), by the simple and the
/// extended protocol, in both pooling modes; the request never runs, the
/// one holding the slot runs on, and the client is served after.
#[test]
fn a_cancel_stops_a_request_waiting_at_the_gate() {
    let Some(server) = PgServer::start() else { return };
    let mut extended = BytesMut::new();
    frame::write_message(&mut extended, b'P', b"\0SELECT 'ran'\0\0\0");
    frame::write_message(&mut extended, b'B', b"\0\0\0\0\0\0\0\0");
    frame::write_message(&mut extended, b'E', b"\0\0\0\0\0");
    frame::write_message(&mut extended, b'S', b"");
    let mut simple = BytesMut::new();
    frame::write_message(&mut simple, b'Q', b"SELECT 'ran'\0");
    for pooled in [false, true] {
        let config = gate(1, 64, 30_000);
        let proxy = if pooled {
            pooled_proxy(&server, config)
        } else {
            session_proxy(&server, config)
        };
        for request in [&simple, &extended] {
            let mut holder = PgConn::connect(proxy.addr, "postgres");
            holder.send_query("SELECT pg_sleep(30)");
            assert_eq!(gate_settles(&proxy, 1, 0), (1, 0), "the holder is inside");
            let mut waiter = PgConn::connect(proxy.addr, "postgres");
            waiter.send(request);
            assert_eq!(gate_settles(&proxy, 1, 1), (1, 1), "the waiter waits");
            let cancel = |conn: &PgConn| PgConn::raw(proxy.addr).send(&conn.key.expect("a key").cancel_request());
            cancel(&waiter);
            let (answer, status) = waiter.finish();
            let Err(QueryError::Server { sqlstate, message }) = answer else {
                panic!("pooled {pooled}: the waiting request was not cancelled: {answer:?}")
            };
            assert_eq!((sqlstate.as_str(), status), ("57014", b'I'), "{message}");
            assert_eq!(gate_settles(&proxy, 1, 0), (1, 0), "the holder runs on");
            cancel(&holder);
            assert!(matches!(holder.finish().0, Err(QueryError::Server { sqlstate, .. }) if sqlstate == "57014"));
            assert_eq!(waiter.query("SELECT 'after'"), Ok(vec!["after".to_string()]));
        }
    }
}

/// A stand-in for PostgreSQL: the `n`-th connection logs in at once and is
/// told `TimeZone` `Zone{n}`; a Query is answered with CommandComplete and
/// ReadyForQuery, but one that sets `Zone0` fails as a cancelled one does.
fn stand_in_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the stand-in");
    let addr = listener.local_addr().expect("its address").to_string();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || stand_in_session(conn, n));
        }
    });
    addr
}

fn stand_in_session(mut conn: TcpStream, n: usize) -> Option<()> {
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).ok()?;
    let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    conn.read_exact(&mut startup).ok()?;
    let zone = format!("TimeZone\0Zone{n}\0");
    ask_password(&mut conn)?;
    log_in(&mut conn, Some(&zone), &[0, 0, 0, 1, 0, 0, 0, 2])?;
    loop {
        let (tag, body) = read_message(&mut conn)?;
        let mut out = BytesMut::new();
        match tag {
            b'Q' if body.windows(5).any(|w| w == b"Zone0") => {
                frame::write_error(&mut out, "ERROR", "57014", "canceling statement due to user request");
            }
            b'Q' => frame::write_message(&mut out, b'C', b"SELECT 0\0"),
            b'X' => return Some(()),
            _ => continue,
        }
        frame::write_ready_for_query(&mut out, b'I');
        conn.write_all(&out).ok()?;
    }
}

/// A stand-in asks a login for a password and takes any: the proxy relays
/// such a login every time (see `Pool::welcome`), so that each brings a
/// backend of its own into the pool.
fn ask_password(conn: &mut TcpStream) -> Option<()> {
    let mut out = BytesMut::new();
    frame::write_message(&mut out, b'R', &3u32.to_be_bytes());
    conn.write_all(&out).ok()?;
    read_message(conn).filter(|(tag, _)| *tag == b'p').map(drop)
}

/// A stand-in's answer to a login: AuthenticationOk, the ParameterStatus
/// `status` if any, BackendKeyData `key`, ReadyForQuery.
fn log_in(conn: &mut TcpStream, status: Option<&str>, key: &[u8]) -> Option<()> {
    let mut out = BytesMut::new();
    frame::write_message(&mut out, b'R', &0u32.to_be_bytes());
    if let Some(status) = status {
        frame::write_message(&mut out, b'S', status.as_bytes());
    }
    frame::write_message(&mut out, b'K', key);
    frame::write_ready_for_query(&mut out, b'I');
    conn.write_all(&out).ok()
}

/// The next message a stand-in is sent: its tag and body.
fn read_message(conn: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut header = [0u8; 5];
    conn.read_exact(&mut header).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize - 4];
    conn.read_exact(&mut body).ok()?;
    Some((header[0], body))
}

/// Under transaction pooling, a request whose backend cannot be given its
/// client's reported settings (a cancel meant for the client's statement
/// reached the proxy's own Query first) ends its session with a FATAL
/// error naming why, rather than show results its statements got under
/// another client's settings; its slot comes back and others are served.
#[test]
fn a_session_whose_settings_cannot_be_set_ends_with_a_clear_error() {
    let mut config = ProxyConfig::new("127.0.0.1:0", stand_in_server(), Protocol::Pg);
    config.pool = PoolMode::Transaction;
    let proxy = ProxyHandle::start_with(config, gate(1, 64, 30_000));
    // Each login brings a backend to the pool: a's told Zone0, b's Zone1.
    let mut a = PgConn::login(proxy.addr, "postgres", Some(ANY_PASSWORD));
    let mut b = PgConn::login(proxy.addr, "postgres", Some(ANY_PASSWORD));
    // The backend given back last, b's, is leased first: it has Zone1.
    a.send_query("SELECT 1");
    let mut told = Vec::new();
    while let Some(message) = a.read_message() {
        told.push(message);
    }
    let tags: Vec<u8> = told.iter().map(|(tag, _)| *tag).collect();
    assert_eq!(tags, b"E", "a is told the error alone, then closed");
    let QueryError::Server { sqlstate, message } = server_error(&told[0].1) else {
        unreachable!("an ErrorResponse")
    };
    assert_eq!(sqlstate, "57014", "{message}");
    assert!(
        message.contains("could not be set on a pooled server connection") && message.contains("canceling statement"),
        "{message}"
    );
    assert_eq!(gate_settles(&proxy, 0, 0), (0, 0), "a's slot came back");
    assert_eq!(b.query("SELECT 1"), Ok(vec![]), "b is served, its own zone set");
}

/// A stand-in for PostgreSQL that takes cancels as slowly as a loaded
/// server may: each connection logs in with its own key; a Query
/// `SELECT <ms>` runs for that many milliseconds unless cancelled; a
/// CancelRequest reaches its backend 600 ms after it arrived (cancelling
/// the query running then, if any, as a signal would) and only then is its
/// connection closed, as PostgreSQL closes it once it has signalled.
fn slow_cancel_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the stand-in");
    let addr = listener.local_addr().expect("its address").to_string();
    let backends: Arc<Mutex<HashMap<u32, Arc<SlowCancelBackend>>>> = Arc::default();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { return };
            let backends = Arc::clone(&backends);
            std::thread::spawn(move || slow_cancel_connection(conn, n as u32 + 1, &backends));
        }
    });
    addr
}

#[derive(Default)]
struct SlowCancelBackend {
    running: AtomicBool,
    cancelled: AtomicBool,
}

fn slow_cancel_connection(
    mut conn: TcpStream,
    pid: u32,
    backends: &Mutex<HashMap<u32, Arc<SlowCancelBackend>>>,
) -> Option<()> {
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).ok()?;
    let mut first = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    conn.read_exact(&mut first).ok()?;
    if first[..4] == 80_877_102u32.to_be_bytes() {
        let target = u32::from_be_bytes(first[4..8].try_into().ok()?);
        std::thread::sleep(Duration::from_millis(600));
        if let Some(backend) = backends.lock().unwrap().get(&target) {
            if backend.running.load(Ordering::SeqCst) {
                backend.cancelled.store(true, Ordering::SeqCst);
            }
        }
        return None;
    }
    let backend = Arc::new(SlowCancelBackend::default());
    backends.lock().unwrap().insert(pid, Arc::clone(&backend));
    ask_password(&mut conn)?;
    log_in(&mut conn, None, &[pid.to_be_bytes(), 7u32.to_be_bytes()].concat())?;
    loop {
        let (tag, body) = read_message(&mut conn)?;
        match tag {
            b'Q' => {
                let text = String::from_utf8_lossy(&body);
                let ms: u64 = text
                    .trim_end_matches('\0')
                    .trim_start_matches("SELECT ")
                    .parse()
                    .unwrap_or(0);
                backend.running.store(true, Ordering::SeqCst);
                let end = Instant::now() + Duration::from_millis(ms);
                let mut out = BytesMut::new();
                loop {
                    if backend.cancelled.swap(false, Ordering::SeqCst) {
                        frame::write_error(&mut out, "ERROR", "57014", "canceling statement due to user request");
                        break;
                    }
                    if Instant::now() >= end {
                        frame::write_message(&mut out, b'C', b"SELECT 1\0");
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                backend.running.store(false, Ordering::SeqCst);
                frame::write_ready_for_query(&mut out, b'I');
                conn.write_all(&out).ok()?;
            }
            b'X' => return Some(()),
            _ => {}
        }
    }
}

/// Under transaction pooling, a cancel sent as its query ends reaches the
/// backend only after the backend went back to the pool. The next client
/// to lease that backend must not have its query cancelled: it is given
/// another backend if there is one, and otherwise waits until the server
/// has taken the cancel, however short the login timeout the cancel's own
/// connection is under.
#[test]
fn a_cancel_arriving_after_its_query_ended_cancels_no_one_elses() {
    let server = slow_cancel_server();
    let pooled = |login_timeout_ms| {
        let mut config = ProxyConfig::new("127.0.0.1:0", server.clone(), Protocol::Pg);
        config.pool = PoolMode::Transaction;
        config.login_timeout_ms = login_timeout_ms;
        ProxyHandle::start_with(config, gate(4, 64, 30_000))
    };
    // Cancels `conn`'s query 50 ms into its 400 ms; it ends, not cancelled,
    // before the cancel lands.
    let cancel_as_it_ends = |proxy: &ProxyHandle, conn: &mut PgConn| {
        conn.send_query("SELECT 400");
        std::thread::sleep(Duration::from_millis(50));
        PgConn::raw(proxy.addr).send(&conn.key.expect("a key").cancel_request());
        assert_eq!(
            conn.finish(),
            (Ok(vec![]), b'I'),
            "the query ended before its cancel landed"
        );
    };

    // Two backends in the pool, one with a cancel on its way: the other
    // client's query goes to the other one, although the cancel's
    // connection outlived its login timeout (200 ms) before the server
    // took the cancel.
    let proxy = pooled(200);
    let mut a = PgConn::login(proxy.addr, "postgres", Some(ANY_PASSWORD));
    let mut b = PgConn::login(proxy.addr, "postgres", Some(ANY_PASSWORD));
    cancel_as_it_ends(&proxy, &mut a);
    assert_eq!(b.query("SELECT 800"), Ok(vec![]), "b's query ran to its end");

    // One backend: the next query waits for the cancel to be taken.
    let proxy = pooled(60_000);
    let mut a = PgConn::login(proxy.addr, "postgres", Some(ANY_PASSWORD));
    cancel_as_it_ends(&proxy, &mut a);
    let asked = Instant::now();
    assert_eq!(a.query("SELECT 800"), Ok(vec![]), "the next query ran to its end");
    assert!(asked.elapsed() >= Duration::from_millis(800), "it ran its 800 ms");
    assert_eq!(gate_settles(&proxy, 0, 0), (0, 0));
}
