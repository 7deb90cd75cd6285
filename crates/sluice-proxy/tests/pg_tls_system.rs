//! `[proxy.upstream_tls] ca = "system"`: the server's certificate checked
//! against the system's trusted roots. A test binary of its own, because
//! it points `SSL_CERT_FILE` (which the system store honours) at a test
//! certificate, and the environment is the whole process's.

mod support;

use std::path::PathBuf;

use sluice_proxy::gate::GateConfig;
use sluice_proxy::pg::upstream_tls::{SslMode, UpstreamTlsConfig};
use sluice_proxy::{Protocol, ProxyConfig};
use support::certs::self_signed;
use support::proxy::ProxyHandle;
use support::psql::{psql_with, text};
use support::servers::PgServer;

#[test]
fn verify_full_against_the_system_roots() {
    let dir = tempfile::tempdir().unwrap();
    let cert = self_signed(dir.path(), "server");
    let Some(server) = PgServer::start_tls(&cert) else {
        return;
    };
    let other = self_signed(dir.path(), "other");
    // A root store that lacks the server's certificate, then one that
    // holds it. Nothing else in this process reads the variable, and each
    // proxy reads it at start, after the one before has stopped.
    for (roots, ok) in [(&other.cert, false), (&cert.cert, true)] {
        std::env::set_var("SSL_CERT_FILE", roots);
        let mut config = ProxyConfig::new("", server.addr(), Protocol::Pg);
        config.upstream_tls = Some(UpstreamTlsConfig {
            mode: SslMode::VerifyFull,
            ca: Some(PathBuf::from("system")),
            ..Default::default()
        });
        let proxy = ProxyHandle::start_with(config, GateConfig::default());
        let out = psql_with(
            &proxy,
            "postgres",
            None,
            "disable",
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid();\n",
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.success(), ok, "roots {roots:?}: {stderr}");
        match ok {
            true => assert_eq!(text(&out.stdout), "t\n"),
            false => assert!(stderr.contains("invalid peer certificate"), "{stderr}"),
        }
    }
}
