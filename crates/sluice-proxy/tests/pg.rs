//! The proxy in front of a real PostgreSQL 15: psql
//! and pgbench through it, SCRAM authentication relayed, CancelRequest
//! forwarded, malformed bytes confined to their client, refusals answered
//! with a SQLSTATE while the session goes on; transaction pooling.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_proxy::gate::GateConfig;
use sluice_proxy::pg::frame;
use sluice_proxy::{PoolMode, Protocol, ProxyConfig, TenantKey};
use support::pgwire::{execute, prepare, server_error, PgConn, QueryError};
use support::proxy::{gate, ProxyHandle};
use support::psql::{psql, text};
use support::servers::{PgServer, PG_CLEARTEXT_USER, PG_MD5_USER, PG_PASSWORD, PG_USER};

fn proxy(server: &PgServer, key: TenantKey, gate: GateConfig) -> ProxyHandle {
    ProxyHandle::start(Protocol::Pg, &server.addr(), key, gate)
}

#[test]
fn psql_runs_statements_transactions_and_copy() {
    let Some(server) = PgServer::start() else { return };
    for (table, proxy) in [
        ("session", proxy(&server, TenantKey::User, GateConfig::default())),
        ("pooled", pooled(&server, 60, GateConfig::default())),
    ] {
        let script = format!(
            "\
CREATE TABLE {table} (id int PRIMARY KEY, name text);
BEGIN;
INSERT INTO {table} VALUES (1, 'one');
INSERT INTO {table} VALUES (2, 'two');
COMMIT;
BEGIN;
INSERT INTO {table} VALUES (3, 'rolled back');
ROLLBACK;
COPY {table} FROM STDIN;
3\tthree
4\tfour
\\.
SELECT count(*) FROM {table};
COPY (SELECT id, name FROM {table} ORDER BY id) TO STDOUT;
"
        );
        let out = psql(&proxy, "postgres", None, &script);
        assert!(out.status.success(), "{table}: psql failed: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "4\n1\tone\n2\ttwo\n3\tthree\n4\tfour\n", "{table}");
        let stats = proxy.tenant("postgres").expect("stats of tenant postgres");
        // CREATE, two transaction blocks (one request each), COPY FROM,
        // SELECT, COPY TO.
        assert_eq!(stats.requests, 6, "{table}");
        assert_eq!(stats.errors, 0, "{table}");
    }
}

#[test]
fn scram_authentication_is_relayed() {
    let Some(server) = PgServer::start() else { return };
    let proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let out = psql(&proxy, PG_USER, Some(PG_PASSWORD), "SELECT current_user;\n");
    assert!(
        out.status.success(),
        "psql with the right password failed: {}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "alice\n");
    assert_eq!(proxy.tenant(PG_USER).map(|t| t.requests), Some(1));

    let out = psql(&proxy, PG_USER, Some("not-the-password"), "SELECT 1;\n");
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("password authentication failed for user \"alice\""),
        "the server's own error: {stderr}"
    );
    let method =
        server.psql("SELECT count(*) FROM pg_authid WHERE rolname = 'alice' AND rolpassword LIKE 'SCRAM-SHA-256$%'");
    assert_eq!(text(&method.stdout).trim(), "1", "alice's password is a SCRAM verifier");
}

fn pgbench(proxy: &ProxyHandle, args: &[&str]) -> String {
    let out = Command::new("pgbench")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &proxy.addr.port().to_string(),
            "-U",
            "postgres",
        ])
        .args(args)
        .arg("postgres")
        .output()
        .expect("running pgbench");
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "pgbench {args:?} failed:\n{all}");
    all
}

fn transactions(report: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with("number of transactions actually processed:"))
        .unwrap_or_else(|| panic!("no transaction count in:\n{report}"));
    line.split(':')
        .nth(1)
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .expect("a count")
}

#[test]
fn pgbench_simple_and_prepared_have_no_failures() {
    let Some(server) = PgServer::start() else { return };
    if support::require("pgbench").is_none() {
        return;
    }
    let proxy = proxy(&server, TenantKey::Connection, gate(4, 64, 10_000));
    pgbench(&proxy, &["-i", "-s", "1", "-q"]);
    for mode in ["simple", "prepared", "extended"] {
        // One pgbench thread per client here; fewer threads than clients
        // (a prepare blocking the thread of clients idle mid-transaction)
        // are pg_isolation.rs's case.
        let report = pgbench(&proxy, &["-c", "6", "-j", "6", "-T", "2", "-M", mode]);
        assert!(
            report.contains("number of failed transactions: 0 (0.000%)"),
            "{mode}:\n{report}"
        );
        assert!(transactions(&report) > 20, "{mode}:\n{report}");
    }
    let refused: u64 = proxy.stats.snapshot().iter().map(|t| t.refused).sum();
    assert_eq!(refused, 0);
}

#[test]
fn cancel_request_through_the_proxy_stops_a_query() {
    let Some(server) = PgServer::start() else { return };
    cancel_stops_a_query(&proxy(&server, TenantKey::User, GateConfig::default()));
}

/// A CancelRequest sent to `proxy` stops a client's pg_sleep at once.
fn cancel_stops_a_query(proxy: &ProxyHandle) {
    let mut sleeper = PgConn::connect(proxy.addr, "postgres");
    let key = sleeper.key.expect("the server's BackendKeyData was relayed");
    sleeper.send_query("SELECT pg_sleep(10)");
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let mut canceller = PgConn::raw(proxy.addr);
    canceller.send(&key.cancel_request());
    assert_eq!(
        canceller.read_message(),
        None,
        "a cancel connection is closed without an answer"
    );
    let (result, status) = sleeper.finish();
    let Err(QueryError::Server { sqlstate, message }) = result else {
        panic!("pg_sleep was not cancelled: {result:?}")
    };
    assert_eq!((sqlstate.as_str(), status), ("57014", b'I'), "{message}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "cancelled after {:?}",
        start.elapsed()
    );
    assert_eq!(sleeper.query("SELECT 'still here'"), Ok(vec!["still here".to_string()]));
}

/// With the server's Unix socket as the upstream, sessions and pooled
/// requests reach it there (its backends show no client address), and a
/// cancel reaches the backend through it too.
#[test]
fn a_unix_socket_upstream_serves_sessions_pools_and_cancels() {
    let Some(server) = PgServer::start() else { return };
    let socket = server.socket_path();
    let client_addr = "SELECT coalesce(client_addr::text, 'local') FROM pg_stat_activity WHERE pid = pg_backend_pid()";
    for pool in [PoolMode::Session, PoolMode::Transaction] {
        let mut config = ProxyConfig::new("127.0.0.1:0", socket.clone(), Protocol::Pg);
        config.pool = pool;
        let proxy = ProxyHandle::start_with(config, GateConfig::default());
        let mut conn = PgConn::connect(proxy.addr, "postgres");
        assert_eq!(conn.query(client_addr), Ok(vec!["local".to_string()]), "{pool:?}");
        cancel_stops_a_query(&proxy);
    }
}

/// psql and pgbench reach the proxy through its Unix socket file while
/// its TCP port serves too; over the socket a client's address is its OS
/// user id, and the file goes when the proxy stops.
#[test]
fn clients_on_the_unix_socket_are_served_and_named_by_their_user() {
    let Some(server) = PgServer::start() else { return };
    if support::require("pgbench").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(".s.PGSQL.5999");
    let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
    config.listen_unix = Some(socket.clone());
    config.tenant_key = TenantKey::ClientAddress;
    let mut proxy = ProxyHandle::start_with(config, GateConfig::default());
    let host = dir.path().to_str().unwrap();
    let local = ["-h", host, "-p", "5999", "-U", "postgres"];
    let out = Command::new("psql")
        .args(local)
        .args(["-X", "-A", "-t", "-c", "SELECT 6 * 7", "postgres"])
        .output()
        .expect("running psql");
    assert_eq!(text(&out.stdout), "42\n", "{}", text(&out.stderr));
    let mut tcp = PgConn::connect(proxy.addr, "postgres");
    assert_eq!(tcp.query("SELECT 1"), Ok(vec!["1".to_string()]));

    let bench = |args: &[&str]| {
        let out = Command::new("pgbench").args(local).args(args).arg("postgres").output();
        let out = out.expect("running pgbench");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "pgbench {args:?} failed:\n{all}");
        all
    };
    bench(&["-i", "-s", "1", "-q"]);
    let report = bench(&["-c", "4", "-j", "4", "-T", "2"]);
    assert!(report.contains("number of failed transactions: 0 (0.000%)"), "{report}");
    let tenant = format!("unix:{}", unsafe { libc::getuid() });
    let served = proxy.tenant(&tenant).map_or(0, |t| t.requests);
    assert!(served > transactions(&report), "tenant {tenant}: {served} requests");
    assert_eq!(proxy.tenant("127.0.0.1").map(|t| t.requests), Some(1));
    drop(tcp);
    assert!(proxy.shutdown());
    assert!(!socket.exists(), "the socket file is removed at shutdown");
}

/// Reads the proxy's answer to a malformed client: one ErrorResponse, then
/// the connection closes.
fn expect_protocol_violation(conn: &mut PgConn, what: &str) -> String {
    let (tag, body) = conn
        .read_message()
        .unwrap_or_else(|| panic!("{what}: closed without an error"));
    assert_eq!(tag, b'E', "{what}");
    let QueryError::Server { sqlstate, message } = server_error(&body) else {
        unreachable!()
    };
    assert_eq!(sqlstate, "08P01", "{what}: {message}");
    assert_eq!(
        conn.read_message(),
        None,
        "{what}: the connection is closed after the error"
    );
    message
}

#[test]
fn malformed_lengths_close_only_that_client() {
    let Some(server) = PgServer::start() else { return };
    let proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let mut good = PgConn::connect(proxy.addr, "postgres");
    good.query("BEGIN").expect("BEGIN");
    good.query("CREATE TABLE t (x int)").expect("CREATE TABLE");

    let mut short = PgConn::raw(proxy.addr);
    short.send(&[0, 0, 0, 3, 0, 0]);
    let message = expect_protocol_violation(&mut short, "startup length 3");
    assert!(message.contains("invalid startup packet length 3"), "{message}");

    let mut oversize = PgConn::connect(proxy.addr, "postgres");
    oversize.send(b"Q\x7f\xff\xff\xffSELECT");
    let message = expect_protocol_violation(&mut oversize, "Query of 2 GiB");
    assert!(message.contains("exceeds the limit"), "{message}");

    let mut negative = PgConn::connect(proxy.addr, "postgres");
    negative.send(b"P\xff\xff\xff\xf0");
    let message = expect_protocol_violation(&mut negative, "negative length");
    assert!(message.contains("invalid length -16 in message 'P'"), "{message}");

    assert_eq!(good.query("INSERT INTO t VALUES (7)"), Ok(vec![]));
    good.query("COMMIT").expect("COMMIT");
    assert_eq!(good.query("SELECT x FROM t"), Ok(vec!["7".to_string()]));
}

/// `max_message_bytes` bounds a message after login, in either pooling
/// mode: a larger one closes that client with an error naming the bound.
#[test]
fn a_message_beyond_max_message_bytes_closes_only_that_client() {
    let Some(server) = PgServer::start() else { return };
    for pool in [PoolMode::Session, PoolMode::Transaction] {
        let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
        config.pool = pool;
        config.max_message_bytes = 1024;
        let proxy = ProxyHandle::start_with(config, GateConfig::default());
        let mut fits = PgConn::connect(proxy.addr, "postgres");
        let padded = |n: usize| format!("SELECT '{}'", "x".repeat(n));
        assert!(fits.query(&padded(900)).is_ok(), "{pool:?}");
        let mut big = PgConn::connect(proxy.addr, "postgres");
        big.send_query(&padded(1100));
        let message = expect_protocol_violation(&mut big, "a Query beyond max_message_bytes");
        assert!(
            message.contains("exceeds max_message_bytes = 1024"),
            "{pool:?}: {message}"
        );
        assert_eq!(fits.query("SELECT 1"), Ok(vec!["1".to_string()]), "{pool:?}");
    }
}

/// Parse, Bind, Execute, Sync for `sql` (no parameters).
fn extended(sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frame::write_message(&mut out, b'P', format!("\0{sql}\0\0\0").as_bytes());
    frame::write_message(&mut out, b'B', b"\0\0\0\0\0\0\0\0");
    frame::write_message(&mut out, b'E', b"\0\0\0\0\0");
    frame::write_message(&mut out, b'S', b"");
    out
}

#[test]
fn a_refused_request_gets_a_sqlstate_and_the_session_goes_on() {
    let Some(server) = PgServer::start() else { return };
    // The open block keeps its slot while its client thinks: it is not
    // released within the test.
    let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
    config.tenant_key = TenantKey::Connection;
    config.idle_in_transaction_release_ms = 60_000;
    let proxy = ProxyHandle::start_with(config, gate(1, 1, 300));
    let mut holder = PgConn::connect(proxy.addr, "postgres");
    let mut other = PgConn::connect(proxy.addr, "postgres");
    holder.query("BEGIN").expect("BEGIN");
    holder
        .query("CREATE TABLE t (x int)")
        .expect("inside the block, never held back");

    let refusal_codes = ["53300", "57014"];
    match other.query("SELECT 1") {
        Err(QueryError::Server { sqlstate, message }) => {
            assert!(refusal_codes.contains(&sqlstate.as_str()), "{sqlstate}: {message}");
            assert!(message.starts_with("sluice: "), "{message}");
        }
        answer => panic!("expected a refusal while the slot is held: {answer:?}"),
    }
    // An extended-protocol batch is refused as a whole, answered at its Sync.
    other.send(&extended("SELECT 2"));
    let (tag, body) = other.read_message().expect("an ErrorResponse");
    assert_eq!(tag, b'E');
    assert!(
        matches!(server_error(&body), QueryError::Server { sqlstate, .. } if refusal_codes.contains(&sqlstate.as_str()))
    );
    assert_eq!(other.read_message(), Some((b'Z', vec![b'I'])));

    holder.query("INSERT INTO t VALUES (1)").expect("INSERT");
    holder.query("COMMIT").expect("COMMIT");
    assert_eq!(other.query("SELECT count(*) FROM t"), Ok(vec!["1".to_string()]));
    other.send(&extended("SELECT 3"));
    let answer: Vec<u8> = std::iter::from_fn(|| other.read_message())
        .map(|(tag, _)| tag)
        .take_while(|&t| t != b'Z')
        .collect();
    assert_eq!(answer, b"12DC", "ParseComplete, BindComplete, DataRow, CommandComplete");
    let refused: u64 = proxy.stats.snapshot().iter().map(|t| t.refused).sum();
    assert_eq!(refused, 2);
}

#[test]
fn shutdown_waits_for_the_open_transaction() {
    let Some(server) = PgServer::start() else { return };
    let mut proxy = proxy(&server, TenantKey::User, GateConfig::default());
    let mut conn = PgConn::connect(proxy.addr, "postgres");
    let mut idle = PgConn::connect(proxy.addr, "postgres");
    conn.query("BEGIN").expect("BEGIN");
    let stopper = std::thread::spawn(move || proxy.shutdown());
    let (tag, body) = idle.read_message().expect("an idle session is told why it closes");
    assert_eq!(tag, b'E');
    assert!(matches!(server_error(&body), QueryError::Server { sqlstate, .. } if sqlstate == "57P01"));
    assert_eq!(conn.query("SELECT 'in flight'"), Ok(vec!["in flight".to_string()]));
    conn.send_query("COMMIT");
    assert_eq!(conn.finish(), (Ok(vec![]), b'I'));
    let (tag, _) = conn.read_message().expect("then the shutdown notice");
    assert_eq!(tag, b'E');
    assert_eq!(conn.read_message(), None);
    assert!(stopper.join().expect("shutdown thread"));
}

/// A proxy with transaction pooling (`pool = "transaction"`).
fn pooled(server: &PgServer, idle_timeout_secs: u64, gate: GateConfig) -> ProxyHandle {
    ProxyHandle::start_with(pool_config(server, idle_timeout_secs), gate)
}

fn pool_config(server: &PgServer, idle_timeout_secs: u64) -> ProxyConfig {
    let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
    config.pool = PoolMode::Transaction;
    config.server_idle_timeout_secs = idle_timeout_secs;
    // One worker: with more, a worker leases the backends it watches first
    // (`Pool::lease`), and which worker a client lands on is not the test's.
    config.threads = 1;
    config
}

fn backend_pid(conn: &mut PgConn) -> String {
    conn.query("SELECT pg_backend_pid()").expect("a pid").remove(0)
}

/// Client backends on the server, not counting the one asking.
fn client_backends(server: &PgServer) -> usize {
    let out = server.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    );
    text(&out.stdout).trim().parse().expect("a count")
}

/// Client backends on the server once they number `want`, or after 10 s:
/// closed backends leave pg_stat_activity only when their process exits.
fn client_backends_once_settled(server: &PgServer, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = client_backends(server);
        if left == want || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn transaction_pooling_shares_backends_between_requests_never_within_a_block() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let mut a = PgConn::connect(proxy.addr, "postgres");
    let mut b = PgConn::connect(proxy.addr, "postgres");
    let last_used = backend_pid(&mut a);
    assert_eq!(
        backend_pid(&mut b),
        last_used,
        "the most recently used backend is leased first"
    );

    assert_eq!(a.query("BEGIN"), Ok(vec![]));
    let in_block = backend_pid(&mut a);
    assert_ne!(backend_pid(&mut b), in_block, "a's open transaction keeps its backend");
    assert_eq!(a.query("SELECT 1"), Ok(vec!["1".to_string()]));
    assert_eq!(backend_pid(&mut a), in_block);
    assert_eq!(a.query("COMMIT"), Ok(vec![]));

    // The client's key is the proxy's; a cancel reaches the backend that
    // runs the client's query at that moment.
    let key = a.key.expect("a BackendKeyData");
    let pids = [last_used, in_block];
    assert!(!pids.contains(&key.pid.to_string()), "key {key:?} is a backend's own");
    a.send_query("SELECT pg_sleep(10)");
    std::thread::sleep(Duration::from_millis(300));
    PgConn::raw(proxy.addr).send(&key.cancel_request());
    let (result, status) = a.finish();
    assert!(
        matches!(&result, Err(QueryError::Server { sqlstate, .. }) if sqlstate == "57014"),
        "not cancelled: {result:?}"
    );
    assert_eq!(status, b'I');
}

#[test]
fn a_pooled_client_gone_mid_transaction_takes_its_backend_with_it() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let mut a = PgConn::connect(proxy.addr, "postgres");
    assert_eq!(a.query("BEGIN"), Ok(vec![]));
    let abandoned = backend_pid(&mut a);
    drop(a);
    let gone = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {abandoned}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while text(&server.psql(&gone).stdout).trim() != "0" {
        assert!(
            Instant::now() < deadline,
            "backend {abandoned} outlived its client's transaction"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut b = PgConn::connect(proxy.addr, "postgres");
    assert_ne!(backend_pid(&mut b), abandoned);
    assert_eq!(
        b.query("SELECT now() = statement_timestamp()"),
        Ok(vec!["t".to_string()]),
        "b's statement runs in a transaction of its own"
    );
}

#[test]
fn a_pooled_backend_the_server_closed_is_never_leased() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let mut a = PgConn::connect(proxy.addr, "postgres");
    let idle = backend_pid(&mut a);
    // As an administrator's pg_terminate_backend or a server restart does
    // to every idle backend in the pool.
    let killed = server.psql(&format!("SELECT pg_terminate_backend({idle})"));
    assert_eq!(text(&killed.stdout).trim(), "t", "{}", text(&killed.stderr));
    let gone = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {idle}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while text(&server.psql(&gone).stdout).trim() != "0" {
        assert!(Instant::now() < deadline, "backend {idle} did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_ne!(backend_pid(&mut a), idle, "a got a live backend, opened for it");
}

#[test]
fn a_burst_of_logins_leaves_no_more_idle_backends_than_p() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, gate(2, 64, 10_000));
    // Each login finds no idle backend, those before it held in open
    // transactions, and so brings one of its own into the pool.
    let mut clients = Vec::new();
    for _ in 0..6 {
        let mut c = PgConn::connect(proxy.addr, "postgres");
        assert_eq!(c.query("BEGIN"), Ok(vec![]));
        clients.push(c);
    }
    for c in &mut clients {
        assert_eq!(c.query("COMMIT"), Ok(vec![]));
    }
    let left = client_backends_once_settled(&server, 2);
    assert_eq!(left, 2, "{left} backends, long before the 60 s idle timeout; P is 2");
    assert_eq!(proxy.stats.pool_idle(), 2);
}

/// The messages a raw login of `user` is answered with, up to its
/// ReadyForQuery; `None` if it ends otherwise.
fn login_answers(proxy: &ProxyHandle, user: &str) -> Option<Vec<(u8, Vec<u8>)>> {
    let mut conn = PgConn::raw(proxy.addr);
    conn.send_startup(user);
    let mut answers = Vec::new();
    loop {
        let (tag, body) = conn.read_message()?;
        answers.push((tag, body));
        match tag {
            b'Z' => return Some(answers),
            b'R' if answers.len() == 1 && answers[0].1[..4] != [0; 4] => return None,
            _ => {}
        }
    }
}

/// Under transaction pooling a login the server let in without a password
/// is answered from the pool while it holds an idle backend of that login:
/// the server starts no process for it. The client is told what the
/// server told the first login, and a cancel reaches its query.
#[test]
fn logins_the_server_let_in_without_a_password_are_answered_from_the_pool() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let first = login_answers(&proxy, "postgres").expect("the first login");
    let pid = |conn: &mut PgConn| conn.query("SELECT pg_backend_pid()").expect("a pid");
    let mut pids = std::collections::HashSet::new();
    for _ in 0..20 {
        let mut client = PgConn::connect(proxy.addr, "postgres");
        pids.insert(pid(&mut client));
    }
    assert_eq!(pids.len(), 1, "twenty logins, one backend: {pids:?}");
    let later = login_answers(&proxy, "postgres").expect("a later login");
    // All but the key, which is the proxy's making for each client.
    let without_key = |answers: &[(u8, Vec<u8>)]| -> Vec<(u8, Vec<u8>)> {
        answers.iter().filter(|(tag, _)| *tag != b'K').cloned().collect()
    };
    assert_eq!(without_key(&later), without_key(&first), "told as the first login was");
    assert_eq!(later.iter().filter(|(tag, _)| *tag == b'K').count(), 1);
    cancel_stops_a_query(&proxy);
}

/// The value of `setting` that login `answers` were told.
fn reported(answers: &[(u8, Vec<u8>)], setting: &str) -> Option<String> {
    answers.iter().filter(|(tag, _)| *tag == b'S').find_map(|(_, body)| {
        let mut fields = body.split(|&b| b == 0);
        let value = (fields.next()? == setting.as_bytes()).then(|| fields.next())??;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// What the server reports at login reaches logins answered from the pool
/// as soon as the pool sees it change. A standby promoted while the pool
/// holds its backends tells the next login `in_hot_standby` off once a
/// pooled backend reported it, as the server tells one of its own (a
/// driver that wants a primary, libpq's `target_session_attrs`, decides by
/// it), and a default set by `ALTER ROLE` reaches logins once the pool logs
/// a backend in. P is pinned above the backends in use, so that a login
/// relayed to the server would leave one more in the pool.
#[test]
fn what_the_server_reports_at_login_reaches_logins_answered_from_the_pool() {
    let Some(mut server) = PgServer::start() else { return };
    server.restart_as_standby();
    let proxy = pooled(&server, 60, gate(8, 100, 3_000));
    let answered_from_the_pool = |what: &str| {
        let before = client_backends(&server);
        let answers = login_answers(&proxy, "postgres").unwrap_or_else(|| panic!("{what}"));
        assert_eq!(client_backends(&server), before, "{what}: no backend of its own");
        answers
    };
    let first = login_answers(&proxy, "postgres").expect("the first login");
    assert_eq!(reported(&first, "in_hot_standby").as_deref(), Some("on"));
    let mut client = PgConn::connect(proxy.addr, "postgres");
    assert_eq!(client.query("SELECT pg_is_in_recovery()"), Ok(vec!["t".to_string()]));

    let promoted = server.psql("SELECT pg_promote()");
    assert_eq!(text(&promoted.stdout).trim(), "t", "{}", text(&promoted.stderr));
    // The pooled backend reports the change with this query's answer.
    assert_eq!(client.query("SELECT pg_is_in_recovery()"), Ok(vec!["f".to_string()]));
    let later = answered_from_the_pool("a login after the promotion");
    assert_eq!(reported(&later, "in_hot_standby").as_deref(), Some("off"));
    assert_eq!(reported(&later, "DateStyle").as_deref(), Some("ISO, MDY"));

    let altered = server.psql(
        "ALTER ROLE postgres SET DateStyle = 'SQL, DMY'; \
         SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity \
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    );
    assert!(altered.status.success(), "{}", text(&altered.stderr));
    // The client keeps the DateStyle it was told, on a backend the pool
    // logs in for it.
    assert_eq!(client.query("SHOW DateStyle"), Ok(vec!["ISO, MDY".to_string()]));
    let after = answered_from_the_pool("a login after ALTER ROLE");
    assert_eq!(reported(&after, "DateStyle").as_deref(), Some("SQL, DMY"));
    assert_eq!(reported(&after, "in_hot_standby").as_deref(), Some("off"));
}

/// A login the server asked for a password is answered from the pool too,
/// once the proxy can judge the password as the server did: it asks the
/// login itself (SCRAM-SHA-256, md5 or cleartext, as the server asked),
/// and twenty logins of each user run on one backend. A wrong password is
/// refused as the server refuses it, and sends the next login to the
/// server, which may have changed the password. Where the auth_file's
/// password is not the one the server took, the proxy can judge nothing:
/// every login is the server's, on a backend of its own.
#[test]
fn logins_asked_a_password_are_answered_from_the_pool_once_the_proxy_can_judge_it() {
    let Some(server) = PgServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let users = [PG_USER, PG_MD5_USER, PG_CLEARTEXT_USER];
    let proxy_with = |password: &str| {
        let file = dir.path().join(format!("users-{password}.txt"));
        let lines: String = users
            .iter()
            .map(|user| format!("\"{user}\" \"{password}\"\n"))
            .collect();
        std::fs::write(&file, lines).unwrap();
        let mut config = pool_config(&server, 60);
        config.auth_file = Some(file);
        ProxyHandle::start_with(config, GateConfig::default())
    };
    let pids_of_logins = |proxy: &ProxyHandle, user: &str, n: usize| {
        let mut pids = std::collections::HashSet::new();
        for _ in 0..n {
            let mut client = PgConn::login(proxy.addr, user, Some(PG_PASSWORD));
            assert_eq!(client.query("SELECT current_user"), Ok(vec![user.to_string()]));
            pids.insert(backend_pid(&mut client));
        }
        pids.len()
    };
    let refused = |proxy: &ProxyHandle, user: &str, password: &str| {
        let expected = QueryError::Server {
            sqlstate: "28P01".into(),
            message: format!("password authentication failed for user \"{user}\""),
        };
        let got = PgConn::try_login(proxy.addr, user, Some(password)).err();
        assert_eq!(got, Some(expected), "{user} with {password}");
    };
    let proxy = proxy_with(PG_PASSWORD);
    for user in users {
        assert_eq!(
            pids_of_logins(&proxy, user, 20),
            1,
            "{user}: twenty logins, one backend"
        );
    }
    assert_eq!(client_backends(&server), 3, "one backend for each user");

    // An answer the proxy cannot read is named.
    let mut garbled = PgConn::raw(proxy.addr);
    garbled.send_startup(PG_USER);
    let asked = garbled.read_message().expect("a password request");
    assert_eq!(
        (asked.0, &asked.1[..4]),
        (b'R', &10u32.to_be_bytes()[..]),
        "SASL is asked"
    );
    let mut answer = BytesMut::new();
    frame::write_message(&mut answer, b'p', b"SCRAM-SHA-256\0\0\0\0\x03n,,");
    garbled.send(&answer);
    let Some((b'E', body)) = garbled.read_message() else {
        panic!("a garbled answer is refused")
    };
    let QueryError::Server { sqlstate, message } = server_error(&body) else {
        unreachable!("an ErrorResponse")
    };
    assert_eq!(sqlstate, "08P01", "{message}");
    assert!(message.contains("names no user"), "{message}");

    for user in users {
        refused(&proxy, user, "not-the-password");
    }
    // Each refusal sent the next login to the server: a backend of its own.
    assert_eq!(pids_of_logins(&proxy, PG_MD5_USER, 1), 1);
    assert_eq!(client_backends(&server), 4, "carol's login was the server's");

    // alice's password changes on the server: her first login with the new
    // one is judged by the old, and refused; the next is the server's.
    // A login of hers relayed first: the proxy judges her password again.
    PgConn::login(proxy.addr, PG_USER, Some(PG_PASSWORD));
    let changed = server.psql("ALTER ROLE alice PASSWORD 'changed'");
    assert!(changed.status.success(), "{}", text(&changed.stderr));
    refused(&proxy, PG_USER, "changed");
    let mut alice = PgConn::login(proxy.addr, PG_USER, Some("changed"));
    assert_eq!(alice.query("SELECT current_user"), Ok(vec![PG_USER.to_string()]));
    // The auth_file's password is not the server's any more: nothing the
    // proxy can judge by, so the old password is the server's to refuse.
    refused(&proxy, PG_USER, PG_PASSWORD);

    let stale = proxy_with("an-old-password");
    for user in [PG_MD5_USER, PG_CLEARTEXT_USER] {
        assert_eq!(pids_of_logins(&stale, user, 3), 3, "{user}'s logins stay the server's");
    }
}

/// Clients still logging in hold no request, so a drain tells them at once
/// (57P01) instead of waiting out `login_timeout_ms`: one that has sent an
/// SSLRequest and nothing more, one at the proxy's own password request,
/// and one at the server's (a user the `auth_file` does not name, whose
/// logins are relayed).
#[test]
fn a_drain_ends_the_logins_in_progress_at_once() {
    let Some(server) = PgServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.txt");
    std::fs::write(&file, format!("\"{PG_MD5_USER}\" \"{PG_PASSWORD}\"\n")).unwrap();
    let mut config = pool_config(&server, 60);
    config.auth_file = Some(file);
    config.login_timeout_ms = 600_000;
    let mut proxy = ProxyHandle::start_with(config, GateConfig::default());
    // A login the server let in: the proxy judges the next ones.
    PgConn::login(proxy.addr, PG_MD5_USER, Some(PG_PASSWORD));
    let mut asked = PgConn::raw(proxy.addr);
    asked.send_startup(PG_MD5_USER);
    let (tag, body) = asked.read_message().expect("the proxy's password request");
    assert_eq!((tag, &body[..4]), (b'R', &5u32.to_be_bytes()[..]), "md5 is asked");
    let mut relayed = PgConn::raw(proxy.addr);
    relayed.send_startup(PG_USER);
    let (tag, body) = relayed.read_message().expect("the server's password request");
    assert_eq!((tag, &body[..4]), (b'R', &10u32.to_be_bytes()[..]), "SASL is asked");
    let mut silent = PgConn::raw(proxy.addr);
    silent.send(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
    assert_eq!(silent.read_byte(), Some(b'N'), "no TLS configured");

    assert!(proxy.shutdown());
    for (who, client) in [
        ("asked", &mut asked),
        ("relayed", &mut relayed),
        ("silent", &mut silent),
    ] {
        let Some((b'E', body)) = client.read_message() else {
            panic!("{who}: an ErrorResponse before the close")
        };
        let QueryError::Server { sqlstate, message } = server_error(&body) else {
            unreachable!("an ErrorResponse")
        };
        assert_eq!(
            (sqlstate.as_str(), message.as_str()),
            ("57P01", "sluice: the proxy is shutting down"),
            "{who}"
        );
        assert_eq!(client.read_message(), None, "{who}: closed");
    }
}

/// An auth_file line may be the SCRAM secret `pg_authid` holds instead of
/// the password. It judges logins as the password does; once a client of
/// the user has logged in, the pool opens backends with the ClientKey that
/// client's proof revealed, so no password need be written down.
#[test]
fn a_scram_secret_in_the_auth_file_judges_logins_and_opens_backends() {
    let Some(server) = PgServer::start() else { return };
    let secret = server.psql("SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'");
    let secret = text(&secret.stdout).trim().to_string();
    assert!(secret.starts_with("SCRAM-SHA-256$"), "{secret}");
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    std::fs::write(&users, format!("\"{PG_USER}\" \"{secret}\"\n")).unwrap();
    let mut config = pool_config(&server, 60);
    config.auth_file = Some(users);
    let proxy = ProxyHandle::start_with(config, gate(4, 64, 10_000));
    // The first login is the server's; the secret judges the others.
    let mut clients: Vec<PgConn> = (0..3)
        .map(|_| PgConn::login(proxy.addr, PG_USER, Some(PG_PASSWORD)))
        .collect();
    assert_eq!(client_backends(&server), 1, "one login went to the server");
    let refused = PgConn::try_login(proxy.addr, PG_USER, Some("not-the-password")).err();
    assert!(
        matches!(&refused, Some(QueryError::Server { sqlstate, .. }) if sqlstate == "28P01"),
        "{refused:?}"
    );
    // Three transactions at once need three backends: the pool opens two.
    let mut pids = std::collections::HashSet::new();
    for client in &mut clients {
        client.query("BEGIN").expect("BEGIN");
        pids.insert(backend_pid(client));
    }
    assert_eq!(pids.len(), 3, "backends opened with the key: {pids:?}");
    for client in &mut clients {
        client.query("COMMIT").expect("COMMIT");
        assert_eq!(client.query("SELECT current_user"), Ok(vec![PG_USER.to_string()]));
    }
}

#[test]
fn backends_the_pool_could_not_open_again_are_kept_past_p() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, gate(2, 64, 10_000));
    // bob logs in with a password, and there is no auth_file to repeat it
    // or to judge it by: each login is the server's.
    let mut clients: Vec<PgConn> = (0..4)
        .map(|_| PgConn::login(proxy.addr, PG_CLEARTEXT_USER, Some(PG_PASSWORD)))
        .collect();
    for c in &mut clients {
        for _ in 0..3 {
            assert_eq!(c.query("SELECT 1"), Ok(vec!["1".to_string()]));
        }
    }
    assert_eq!(proxy.stats.pool_idle(), 4, "the pool grows only by logins here");
}

#[test]
fn pgbench_through_transaction_pooling_leaves_a_few_warm_backends() {
    let Some(server) = PgServer::start() else { return };
    if support::require("pgbench").is_none() {
        return;
    }
    let proxy = pooled(&server, 1, gate(2, 64, 10_000));
    pgbench(&proxy, &["-i", "-s", "1", "-q"]);
    for mode in ["simple", "prepared"] {
        let report = pgbench(&proxy, &["-c", "8", "-j", "8", "-T", "2", "-M", mode]);
        assert!(
            report.contains("number of failed transactions: 0 (0.000%)"),
            "{mode}:\n{report}"
        );
        assert!(transactions(&report) > 20, "{mode}:\n{report}");
    }
    // Idle past the timeout, the pool closes them; c logs in on a new one.
    std::thread::sleep(Duration::from_millis(1_500));
    let mut c = PgConn::connect(proxy.addr, "postgres");
    assert_eq!(c.query("SELECT 1"), Ok(vec!["1".to_string()]));
    // Closed backends leave pg_stat_activity when their process exits.
    let left = client_backends_once_settled(&server, 1);
    assert_eq!(left, 1, "{left} backends left, not only c's");
    assert_eq!(proxy.stats.pool_idle(), 1, "the pool counts c's backend idle");
}

#[test]
fn transaction_pooling_refuses_clearly_when_it_cannot_log_in_itself() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 0, GateConfig::default());
    let mut a = PgConn::login(proxy.addr, PG_CLEARTEXT_USER, Some(PG_PASSWORD));
    // No idle time allowed: the backend a logged in on is soon closed, and
    // the server wants bob's password for a new one.
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..2 {
        let Err(QueryError::Server { sqlstate, message }) = a.query("SELECT 1") else {
            panic!("a got a backend the pool could not have opened")
        };
        assert_eq!(sqlstate, "08001", "{message}");
        assert!(message.contains("asks a password"), "{message}");
        assert!(message.contains("no auth_file is set"), "{message}");
    }
    let mut b = PgConn::connect(proxy.addr, "postgres");
    assert_eq!(
        b.query("SELECT 2"),
        Ok(vec!["2".to_string()]),
        "trusted logins are pooled"
    );
}

#[test]
fn transaction_pooling_opens_connections_with_the_auth_file() {
    let Some(server) = PgServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    let write_users = |alice: &str| {
        let text = format!("; alice by SCRAM, bob by cleartext\n\"{PG_USER}\" \"{alice}\"\n\"{PG_CLEARTEXT_USER}\" \"{PG_PASSWORD}\"\n");
        std::fs::write(&users, text).unwrap();
    };
    write_users(PG_PASSWORD);
    let mut config = pool_config(&server, 0);
    config.auth_file = Some(users.clone());
    let proxy = ProxyHandle::start_with(config, GateConfig::default());
    let mut a = PgConn::login(proxy.addr, PG_USER, Some(PG_PASSWORD));
    let mut b = PgConn::login(proxy.addr, PG_CLEARTEXT_USER, Some(PG_PASSWORD));
    let first = [backend_pid(&mut a), backend_pid(&mut b)];
    // No idle time allowed: the backends they logged in on are closed, so
    // each query below runs on one the pool opened with a password.
    let reopened = |conn: &mut PgConn, before: &str, user: &str| {
        std::thread::sleep(Duration::from_millis(300));
        let pid = backend_pid(conn);
        assert_ne!(pid, before, "{user}'s backend was not reopened");
        assert_eq!(conn.query("SELECT current_user"), Ok(vec![user.to_string()]));
        pid
    };
    let pid = reopened(&mut a, &first[0], PG_USER);
    reopened(&mut b, &first[1], PG_CLEARTEXT_USER);
    // A changed file is read at the next connection: no restart.
    write_users("not-the-password");
    std::thread::sleep(Duration::from_millis(300));
    let Err(QueryError::Server { sqlstate, message }) = a.query("SELECT 1") else {
        panic!("a got a backend with a wrong password")
    };
    assert_eq!(sqlstate, "28P01", "{message}");
    assert!(message.contains("password authentication failed"), "{message}");
    write_users(PG_PASSWORD);
    reopened(&mut a, &pid, PG_USER);
    std::fs::write(&users, format!("\"{PG_USER}\" \"{PG_PASSWORD}\"\n")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let Err(QueryError::Server { sqlstate, message }) = b.query("SELECT 1") else {
        panic!("b got a backend though its line is gone")
    };
    assert_eq!(sqlstate, "08001", "{message}");
    assert!(message.contains("has no line for this user"), "{message}");
    std::fs::write(&users, "bob secret\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let Err(QueryError::Server { message, .. }) = a.query("SELECT 1") else {
        panic!("a got a backend from a malformed file")
    };
    assert!(message.contains("users.txt, line 1"), "{message}");
}

#[test]
fn a_bad_auth_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    std::fs::write(&users, "\"alice\" \"SCRAM-SHA-256$4096:c2FsdA==$a:b\"\n").unwrap();
    let mut config = ProxyConfig::new("127.0.0.1:0", "127.0.0.1:1", Protocol::Pg);
    config.pool = PoolMode::Transaction;
    for (path, expected) in [
        (users, "line 1: a SCRAM secret must read"),
        (dir.path().join("none.txt"), "none.txt: "),
    ] {
        config.auth_file = Some(path);
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let gate = sluice_proxy::gate::Gate::new(GateConfig::default()).unwrap();
        let Err(err) = runtime.block_on(sluice_proxy::Proxy::bind(config.clone(), gate)) else {
            panic!("the proxy started with a bad auth_file")
        };
        assert!(err.to_string().contains(expected), "{err}");
    }
}

/// The tags of a batch's answer up to its ReadyForQuery, and the SQLSTATE
/// of an ErrorResponse among them.
fn answer(conn: &mut PgConn) -> (Vec<u8>, Option<String>) {
    let mut tags = Vec::new();
    let mut sqlstate = None;
    loop {
        let (tag, body) = conn.read_message().expect("an answer");
        tags.push(tag);
        if let (b'E', QueryError::Server { sqlstate: code, .. }) = (tag, server_error(&body)) {
            sqlstate = Some(code);
        }
        if tag == b'Z' {
            return (tags, sqlstate);
        }
    }
}

#[test]
fn prepared_statements_follow_their_client_across_pooled_backends() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let mut a = PgConn::connect(proxy.addr, "postgres");
    let mut b = PgConn::connect(proxy.addr, "postgres");
    a.send(&prepare("q", "SELECT 'one'"));
    assert_eq!(
        answer(&mut a),
        (b"1Z".to_vec(), None),
        "no CloseComplete the client never asked"
    );
    let first = backend_pid(&mut a);
    // b's open transaction holds the backend a prepared q on.
    assert_eq!(b.query("BEGIN"), Ok(vec![]));
    assert_eq!(backend_pid(&mut b), first);
    a.send(&execute("q"));
    assert_eq!(a.finish(), (Ok(vec!["one".to_string()]), b'I'));
    assert_ne!(backend_pid(&mut a), first, "q ran on another backend");

    // The same statement under b's own name, on the backend a made it on.
    b.send(&prepare("mine", "SELECT 'one'"));
    assert_eq!(answer(&mut b), (b"1Z".to_vec(), None));
    b.send(&execute("mine"));
    assert_eq!(b.finish(), (Ok(vec!["one".to_string()]), b'T'));
    assert_eq!(b.query("COMMIT"), Ok(vec![]));

    // A Parse that failed leaves its name free, as PostgreSQL does.
    a.send(&prepare("bad", "SELEC 1"));
    assert_eq!(answer(&mut a), (b"EZ".to_vec(), Some("42601".into())));
    a.send(&prepare("bad", "SELECT 'fixed'"));
    assert_eq!(answer(&mut a), (b"1Z".to_vec(), None));
    a.send(&execute("bad"));
    assert_eq!(a.finish(), (Ok(vec!["fixed".to_string()]), b'I'));

    // Closed, the name takes another statement; a held name is refused.
    let mut close = BytesMut::new();
    frame::write_message(&mut close, b'C', b"Sq\0");
    frame::write_message(&mut close, b'S', b"");
    a.send(&close);
    assert_eq!(answer(&mut a), (b"3Z".to_vec(), None));
    a.send(&prepare("q", "SELECT 'two'"));
    assert_eq!(answer(&mut a), (b"1Z".to_vec(), None));
    a.send(&prepare("q", "SELECT 'three'"));
    assert_eq!(answer(&mut a), (b"EZ".to_vec(), Some("42P05".into())));
    a.send(&execute("q"));
    assert_eq!(a.finish(), (Ok(vec!["two".to_string()]), b'I'));
    let unknown = execute("never");
    a.send(&unknown);
    assert!(matches!(a.finish().0, Err(QueryError::Server { sqlstate, .. }) if sqlstate == "26000"));
}

/// Parse of the statement `name`, Describe of it, then Sync: as drivers that
/// decode by the types they were told prepare (pgx, pgjdbc, asyncpg).
fn prepare_described(name: &str, sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frame::write_message(&mut out, b'P', format!("{name}\0{sql}\0\0\0").as_bytes());
    frame::write_message(&mut out, b'D', format!("S{name}\0").as_bytes());
    frame::write_message(&mut out, b'S', b"");
    out
}

/// A prepared statement answers with the result its client was told, or
/// fails as PostgreSQL fails it, whichever backend it runs on: after a
/// schema change alters its result, a client that described it before
/// gets 0A000 where the statement is made anew (never rows of the new
/// type, which its driver would decode as the old), and a client that
/// described it after gets its rows where a backend still holds it made
/// before.
#[test]
fn a_prepared_statement_whose_result_changed_fails_as_postgresql_fails_it() {
    let Some(server) = PgServer::start() else { return };
    let direct = server.addr().parse().expect("a TCP address");
    let mut setup = PgConn::connect(direct, "postgres");
    for sql in [
        "DROP TABLE IF EXISTS result_change",
        "CREATE TABLE result_change (v int)",
        "INSERT INTO result_change VALUES (1)",
    ] {
        assert_eq!(setup.query(sql), Ok(vec![]), "{sql}");
    }
    const SELECT: &str = "SELECT v FROM result_change";
    let changed = Err(QueryError::Server {
        sqlstate: "0A000".to_string(),
        message: "cached plan must not change result type".to_string(),
    });
    let proxy = pooled(&server, 60, GateConfig::default());
    // Each login brings a backend of its own to the pool.
    let [mut a, mut b, mut c] = ["postgres"; 3].map(|user| PgConn::connect(proxy.addr, user));
    a.send(&prepare_described("q", SELECT));
    assert_eq!(answer(&mut a), (b"1tTZ".to_vec(), None));
    let first = backend_pid(&mut a);
    assert_eq!(b.query("BEGIN"), Ok(vec![]));
    assert_eq!(backend_pid(&mut b), first, "b holds the backend q was made on");

    assert_eq!(setup.query("ALTER TABLE result_change ALTER v TYPE float8"), Ok(vec![]));
    a.send(&execute("q"));
    assert_eq!(a.finish(), (changed.clone(), b'I'), "made anew on another backend");
    c.send(&prepare_described("mine", SELECT));
    assert_eq!(answer(&mut c), (b"1tTZ".to_vec(), None));
    assert_eq!(b.query("COMMIT"), Ok(vec![]));

    // The backend given back last is leased first: the one q was made on
    // before the change.
    assert_eq!(c.query("BEGIN"), Ok(vec![]));
    assert_eq!(backend_pid(&mut c), first);
    c.send(&execute("mine"));
    assert_eq!(
        c.finish(),
        (Ok(vec!["1".to_string()]), b'T'),
        "described after the change"
    );
    assert_eq!(c.query("COMMIT"), Ok(vec![]));
    a.send(&execute("q"));
    assert_eq!(
        a.finish(),
        (changed, b'I'),
        "described before it, as on a server of its own"
    );
    a.send(&prepare_described("q2", SELECT));
    assert_eq!(answer(&mut a), (b"1tTZ".to_vec(), None));
    a.send(&execute("q2"));
    assert_eq!(a.finish(), (Ok(vec!["1".to_string()]), b'I'), "prepared again");
}

/// Under transaction pooling a `SET` of a setting PostgreSQL reports stays
/// on the backend that ran it: the proxy sets each client's own values on
/// whichever backend its next request gets, so neither client sees the
/// other's, whichever backend it lands on.
#[test]
fn reported_settings_follow_their_client_from_backend_to_backend() {
    let Some(server) = PgServer::start() else { return };
    let direct = server.addr().parse().expect("a TCP address");
    let mut plain = PgConn::connect(direct, "postgres");
    let default_zone = plain.query("SHOW TimeZone").expect("the server's time zone");
    assert_ne!(default_zone, ["Asia/Tokyo"], "the test needs another default");
    let proxy = pooled(&server, 60, GateConfig::default());
    let [mut a, mut b] = ["postgres"; 2].map(|user| PgConn::connect(proxy.addr, user));
    // A name no quoting of the proxy's may end early.
    const NAME: &str = "it's $sluice$ \\ mine";
    for sql in [
        "SET TimeZone = 'Asia/Tokyo'".to_string(),
        format!("SET application_name = '{}'", NAME.replace('\'', "''")),
    ] {
        assert_eq!(a.query(&sql), Ok(vec![]), "{sql}");
    }
    let settings = "SELECT current_setting('TimeZone') || ' / ' || current_setting('application_name')";
    let theirs = |zone: &[String]| vec![format!("{} / ", zone[0])];

    // The backend given back last is leased first: the one a set.
    assert_eq!(a.query("BEGIN"), Ok(vec![]));
    let first = backend_pid(&mut a);
    assert_eq!(a.query("COMMIT"), Ok(vec![]));
    assert_eq!(b.query("BEGIN"), Ok(vec![]));
    assert_eq!(backend_pid(&mut b), first, "b holds the backend a ran SET on");
    assert_eq!(b.query(settings), Ok(theirs(&default_zone)), "b keeps its own");
    assert_eq!(a.query("BEGIN"), Ok(vec![]));
    assert_ne!(backend_pid(&mut a), first, "a on the other backend");
    assert_eq!(
        a.query(settings),
        Ok(vec![format!("Asia/Tokyo / {NAME}")]),
        "a keeps its own"
    );
    assert_eq!(a.query("COMMIT"), Ok(vec![]));
    assert_eq!(b.query("COMMIT"), Ok(vec![]));
    assert_eq!(a.query("RESET ALL"), Ok(vec![]));
    assert_eq!(b.query(settings), Ok(theirs(&default_zone)));
    assert_eq!(a.query(settings), Ok(theirs(&default_zone)), "RESET is reported too");
}

/// The server reads a statement's date and time literals once, when it
/// parses it, under the time zone and date style of that moment. Two
/// clients that prepare the same text under different settings each read
/// their own conversion, whichever backend made the statement first: the
/// proxy shares a statement only between clients whose settings that
/// change its reading are the same.
#[test]
fn a_statement_prepared_under_other_settings_is_not_shared() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let [mut a, mut b] = ["postgres"; 2].map(|user| PgConn::connect(proxy.addr, user));
    assert_eq!(a.query("SET TimeZone = 'Asia/Tokyo'"), Ok(vec![]));
    assert_eq!(a.query("SET DateStyle = 'ISO, DMY'"), Ok(vec![]));
    assert_eq!(b.query("SET TimeZone = 'UTC'"), Ok(vec![]));
    assert_eq!(b.query("SET DateStyle = 'ISO, MDY'"), Ok(vec![]));
    const TEXT: &str = "SELECT '2024-01-01 12:00:00'::timestamptz::text || ' ' || '01/02/2024'::date::text";
    for conn in [&mut a, &mut b] {
        conn.send(&prepare("q", TEXT));
        let (tags, error) = answer(conn);
        // Ahead of ParseComplete, the settings restored on the backend.
        assert!(tags.ends_with(b"1Z") && error.is_none(), "{tags:?} {error:?}");
    }
    let read = |conn: &mut PgConn| {
        conn.send(&execute("q"));
        conn.finish()
    };
    for round in 0..4 {
        assert_eq!(
            read(&mut a),
            (Ok(vec!["2024-01-01 12:00:00+09 2024-02-01".to_string()]), b'I'),
            "round {round}: a reads Tokyo's noon and the 1st of February"
        );
        assert_eq!(
            read(&mut b),
            (Ok(vec!["2024-01-01 12:00:00+00 2024-01-02".to_string()]), b'I'),
            "round {round}: b reads UTC's noon and the 2nd of January"
        );
    }
    // A time zone changed after the Parse: from the next use the
    // statement is read under the new one (a server of a's own would keep
    // Tokyo's), and b, which prepared it under UTC, still reads UTC's.
    assert_eq!(a.query("SET TimeZone = 'America/New_York'"), Ok(vec![]));
    for round in 0..2 {
        assert_eq!(
            read(&mut a),
            (Ok(vec!["2024-01-01 12:00:00-05 2024-02-01".to_string()]), b'I'),
            "round {round}: a"
        );
        assert_eq!(
            read(&mut b),
            (Ok(vec!["2024-01-01 12:00:00+00 2024-01-02".to_string()]), b'I'),
            "round {round}: b"
        );
    }
}

/// A statement parsed in the batch that changes the time zone is parsed
/// under the new one, while the proxy learns of the change only at the
/// batch's end: another client that prepared the same text under the old
/// time zone, and binds it on that backend, still reads its own
/// conversion.
#[test]
fn a_statement_parsed_as_the_time_zone_changes_is_not_shared() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let [mut a, mut b] = ["postgres"; 2].map(|user| PgConn::connect(proxy.addr, user));
    for conn in [&mut a, &mut b] {
        assert_eq!(conn.query("SET TimeZone = 'UTC'"), Ok(vec![]));
    }
    const TEXT: &str = "SELECT '2024-01-01 12:00:00'::timestamptz::text";
    b.send(&prepare("q", TEXT));
    assert_eq!(answer(&mut b), (b"1Z".to_vec(), None));
    let mut batch = BytesMut::new();
    frame::write_message(&mut batch, b'P', b"\0SET TimeZone = 'Asia/Tokyo'\0\0\0");
    frame::write_message(&mut batch, b'B', b"\0\0\0\0\0\0\0\0");
    frame::write_message(&mut batch, b'E', b"\0\0\0\0\0");
    frame::write_message(&mut batch, b'P', format!("q\0{TEXT}\0\0\0").as_bytes());
    frame::write_message(&mut batch, b'S', b"");
    a.send(&batch);
    // The new time zone is reported at the batch's end, after the Parse.
    assert_eq!(answer(&mut a), (b"12C1SZ".to_vec(), None));
    // b binds on the backend a gave back last, where a's Parse made the
    // statement under the name b's has.
    b.send(&execute("q"));
    assert_eq!(
        b.finish(),
        (Ok(vec!["2024-01-01 12:00:00+00".to_string()]), b'I'),
        "b reads UTC's noon"
    );
    a.send(&execute("q"));
    assert_eq!(
        a.finish(),
        (Ok(vec!["2024-01-01 12:00:00+09".to_string()]), b'I'),
        "a reads Tokyo's"
    );
}

/// The proxy's own Query that sets a client's reported settings drops the
/// backend's unnamed statement, as any simple Query does: a client that
/// parsed its unnamed statement there in one request and binds it in the
/// next gets it made again (pgx's describe-exec mode).
#[test]
fn an_unnamed_statement_is_made_again_where_settings_were_restored() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server, 60, GateConfig::default());
    let [mut a, mut b] = ["postgres"; 2].map(|user| PgConn::connect(proxy.addr, user));
    b.send(&prepare("", "SELECT current_setting('TimeZone')"));
    assert_eq!(answer(&mut b), (b"1Z".to_vec(), None));
    // On the backend b gave back, a named statement changes the time zone
    // and leaves b's unnamed statement where it is.
    a.send(&prepare("tz", "SET TimeZone = 'Asia/Tokyo'"));
    assert_eq!(answer(&mut a), (b"1Z".to_vec(), None));
    a.send(&execute("tz"));
    assert_eq!(answer(&mut a), (b"2CSZ".to_vec(), None), "SET, reported");
    b.send(&execute(""));
    let bound = b.finish();
    let zone = b.query("SHOW TimeZone");
    assert_ne!(zone, Ok(vec!["Asia/Tokyo".to_string()]), "b keeps its own");
    assert_eq!(bound, (zone, b'I'), "b's unnamed statement ran, in b's zone");
}

#[test]
fn a_pooled_backend_keeps_at_most_max_prepared_statements() {
    let Some(server) = PgServer::start() else { return };
    let mut config = pool_config(&server, 60);
    config.max_prepared_statements = 2;
    let proxy = ProxyHandle::start_with(config, GateConfig::default());
    let mut a = PgConn::connect(proxy.addr, "postgres");
    let statements = [("a", "1"), ("b", "2"), ("c", "3")];
    for (name, value) in statements {
        a.send(&prepare(name, &format!("SELECT {value}")));
        assert_eq!(answer(&mut a), (b"1Z".to_vec(), None));
    }
    for (name, value) in statements.iter().chain(&statements) {
        a.send(&execute(name));
        assert_eq!(a.finish(), (Ok(vec![value.to_string()]), b'I'), "{name}");
    }
    assert_eq!(
        a.query("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sluice_%'"),
        Ok(vec!["2".to_string()]),
        "the backend's least recently bound statement was closed"
    );
}
