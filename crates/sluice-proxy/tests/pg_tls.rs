//! TLS through the proxy with a real PostgreSQL 15: for
//! clients that ask for it (`[proxy.tls]`), and to a server that takes TCP
//! connections only inside TLS (`[proxy.upstream_tls]`), with SCRAM logins
//! and transaction pooling across both.

mod support;

use std::path::Path;
use std::time::Duration;

use sluice_proxy::gate::GateConfig;
use sluice_proxy::pg::upstream_tls::{SslMode, UpstreamTlsConfig};
use sluice_proxy::{PoolMode, Protocol, ProxyConfig};
use support::certs::{client_cert, self_signed};
use support::pgwire::{server_error, PgConn, QueryError};
use support::proxy::ProxyHandle;
use support::psql::{psql_command, psql_with, text};
use support::servers::{PgServer, PG_PASSWORD, PG_USER};

/// Whether the backend serving the query sits inside TLS, as the server
/// sees it.
const SSL_IN_USE: &str = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid();\n";

fn start(server: &PgServer, change: impl FnOnce(&mut ProxyConfig)) -> ProxyHandle {
    let mut config = ProxyConfig::new("", server.addr(), Protocol::Pg);
    change(&mut config);
    ProxyHandle::start_with(config, GateConfig::default())
}

fn upstream_tls(mode: SslMode, ca: Option<&Path>, server_name: Option<&str>) -> Option<UpstreamTlsConfig> {
    Some(UpstreamTlsConfig {
        mode,
        ca: ca.map(Path::to_path_buf),
        server_name: server_name.map(str::to_string),
        ..Default::default()
    })
}

#[test]
fn tls_is_offered_only_when_configured() {
    let Some(server) = PgServer::start() else { return };
    let plain = start(&server, |_| {});
    let out = psql_with(&plain, "postgres", None, "require", "SELECT 1;\n");
    assert!(
        !out.status.success(),
        "sslmode=require succeeded without TLS configured"
    );
    assert!(
        text(&out.stderr).contains("does not support SSL"),
        "{}",
        text(&out.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let tls = start(&server, |c| c.tls = Some(self_signed(dir.path(), "proxy")));
    let out = psql_with(&tls, "postgres", None, "require", "SELECT 41 + 1;\n\\conninfo\n");
    assert!(out.status.success(), "psql over TLS failed: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("42\n") && stdout.contains("SSL connection"),
        "{stdout}"
    );
    let out = psql_with(&tls, "postgres", None, "disable", "SELECT 1;\n");
    assert!(
        out.status.success(),
        "a plain client of a TLS proxy: {}",
        text(&out.stderr)
    );
    assert_eq!(tls.tenant("postgres").expect("stats of tenant postgres").requests, 2);
}

/// A client inside TLS that has not sent its StartupMessage when the proxy
/// drains is told why inside TLS, as a plain one is (see pg.rs).
#[test]
fn a_drain_tells_a_tls_client_still_logging_in_inside_tls() {
    let Some(server) = PgServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cert = self_signed(dir.path(), "proxy");
    let mut proxy = start(&server, |c| {
        c.tls = Some(cert.clone());
        c.login_timeout_ms = 600_000;
    });
    let mut quiet = PgConn::tls(proxy.addr, &cert.cert, Duration::ZERO);
    assert!(proxy.shutdown());
    let Some((b'E', body)) = quiet.read_message() else {
        panic!("an ErrorResponse inside TLS before the close")
    };
    assert_eq!(
        server_error(&body),
        QueryError::Server {
            sqlstate: "57P01".into(),
            message: "sluice: the proxy is shutting down".into()
        }
    );
}

#[test]
fn a_large_answer_reaches_a_slow_tls_client_whole() {
    let Some(server) = PgServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cert = self_signed(dir.path(), "proxy");
    let proxy = start(&server, |c| c.tls = Some(cert.clone()));
    let mut conn = PgConn::connect_tls(proxy.addr, "postgres", &cert.cert, Duration::from_millis(1));
    // 8 MiB, far more than the socket buffers between proxy and client
    // hold: the proxy's writes keep meeting a full socket, the last one
    // too, whose tail TLS keeps until it is flushed.
    let rows = conn
        .query("SELECT repeat('x', 1048576) FROM generate_series(1, 8)")
        .expect("the rows, up to ReadyForQuery");
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|row| row.len() == 1 << 20));
    assert_eq!(conn.query("SELECT 1"), Ok(vec!["1".to_string()]));
}

#[test]
fn server_connections_go_inside_tls_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let cert = self_signed(dir.path(), "server");
    let Some(server) = PgServer::start_tls(&cert) else {
        return;
    };

    // Without upstream_tls the server's own refusal reaches the client.
    let plain = start(&server, |_| {});
    let out = psql_with(&plain, "postgres", None, "disable", SSL_IN_USE);
    assert!(!out.status.success(), "a plain login to a hostssl-only server");
    assert!(text(&out.stderr).contains("no encryption"), "{}", text(&out.stderr));

    let ca = Some(cert.cert.as_path());
    for (mode, ca, name) in [
        (SslMode::Prefer, None, None),
        (SslMode::Require, None, None),
        (SslMode::VerifyFull, ca, None),
        // verify-ca checks the chain, not the name.
        (SslMode::VerifyCa, ca, Some("db.example")),
    ] {
        let proxy = start(&server, |c| c.upstream_tls = upstream_tls(mode, ca, name));
        let out = psql_with(&proxy, "postgres", None, "disable", SSL_IN_USE);
        assert!(out.status.success(), "{mode:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "t\n", "{mode:?}");
    }

    // A CA that did not sign it, or under verify-full a name it lacks.
    let other = self_signed(dir.path(), "other");
    for (mode, ca, name) in [
        (SslMode::VerifyFull, &other.cert, None),
        (SslMode::VerifyCa, &other.cert, None),
        (SslMode::VerifyFull, &cert.cert, Some("db.example")),
    ] {
        let proxy = start(&server, |c| c.upstream_tls = upstream_tls(mode, Some(ca), name));
        let out = psql_with(&proxy, "postgres", None, "disable", SSL_IN_USE);
        assert!(!out.status.success(), "{mode:?} accepted {ca:?} {name:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("cannot reach the upstream server") && stderr.contains("invalid peer certificate"),
            "{stderr}"
        );
    }
}

/// A server that takes `postgres` only with a client certificate: the
/// proxy's own (`cert`, `key`) logs every client in.
#[test]
fn the_proxy_shows_its_client_certificate_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let cert = self_signed(dir.path(), "server");
    let client = client_cert(dir.path(), "postgres");
    let Some(server) = PgServer::start_tls_client_certs(&cert, &client.cert) else {
        return;
    };
    let without = start(&server, |c| c.upstream_tls = upstream_tls(SslMode::Require, None, None));
    let out = psql_with(&without, "postgres", None, "disable", SSL_IN_USE);
    assert!(!out.status.success(), "a login without a client certificate");
    assert!(text(&out.stderr).contains("certificate"), "{}", text(&out.stderr));

    let with = start(&server, |c| {
        c.upstream_tls = Some(UpstreamTlsConfig {
            cert: Some(client.cert.clone()),
            key: Some(client.key.clone()),
            ..upstream_tls(SslMode::Require, None, None).unwrap()
        })
    });
    let out = psql_with(&with, "postgres", None, "disable", SSL_IN_USE);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "t\n");
}

#[test]
fn require_refuses_a_server_without_tls_and_prefer_stays_plain() {
    let Some(server) = PgServer::start() else { return };
    let prefer = start(&server, |c| c.upstream_tls = upstream_tls(SslMode::Prefer, None, None));
    let out = psql_with(&prefer, "postgres", None, "disable", SSL_IN_USE);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "f\n");
    let require = start(&server, |c| c.upstream_tls = upstream_tls(SslMode::Require, None, None));
    let out = psql_with(&require, "postgres", None, "disable", SSL_IN_USE);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("the server does not accept TLS"),
        "{}",
        text(&out.stderr)
    );
}

/// A TLS client of a proxy whose server connections are TLS too: libpq
/// binds its SCRAM login to the certificate it saw (SCRAM-SHA-256-PLUS),
/// which the server checks against its own.
#[test]
fn scram_logins_cross_tls_on_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let server_cert = self_signed(dir.path(), "server");
    let Some(server) = PgServer::start_tls(&server_cert) else {
        return;
    };
    let login = |proxy: &ProxyHandle, binding: &str| {
        let mut psql = psql_command(proxy, PG_USER, Some(PG_PASSWORD), "require");
        psql.env("PGCHANNELBINDING", binding);
        support::run_with_stdin(psql, SSL_IN_USE)
    };
    // The proxy presents the server's own certificate: binding passes.
    let same = start(&server, |c| {
        c.tls = Some(server_cert.clone());
        c.upstream_tls = upstream_tls(SslMode::Require, None, None);
    });
    let out = login(&same, "require");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "t\n");
    // Its own certificate: the server refuses the binding, and a client
    // that does without binding logs in.
    let own = start(&server, |c| {
        c.tls = Some(self_signed(dir.path(), "proxy"));
        c.upstream_tls = upstream_tls(SslMode::Require, None, None);
    });
    let out = login(&own, "prefer");
    assert!(text(&out.stderr).contains("channel binding"), "{}", text(&out.stderr));
    let out = login(&own, "disable");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "t\n");
}

#[test]
fn transaction_pooling_opens_its_connections_inside_tls() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PgServer::start_tls(&self_signed(dir.path(), "server")) else {
        return;
    };
    let users = dir.path().join("users.txt");
    std::fs::write(&users, format!("\"{PG_USER}\" \"{PG_PASSWORD}\"\n")).unwrap();
    let proxy = start(&server, |c| {
        c.upstream_tls = upstream_tls(SslMode::Require, None, None);
        c.pool = PoolMode::Transaction;
        c.server_idle_timeout_secs = 0;
        c.auth_file = Some(users);
    });
    let mut conn = PgConn::login(proxy.addr, PG_USER, Some(PG_PASSWORD));
    let backend = "SELECT pg_backend_pid() || ' ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    let first = conn.query(backend).expect("the login's backend").remove(0);
    // No idle time allowed: the login's backend is closed, and the next
    // query runs on one the pool opened, with SCRAM, inside TLS.
    std::thread::sleep(Duration::from_millis(300));
    let second = conn.query(backend).expect("a pooled backend").remove(0);
    assert_ne!(first, second, "the backend was not reopened");
    assert!(
        first.ends_with(" true") && second.ends_with(" true"),
        "{first}, {second}"
    );
}
