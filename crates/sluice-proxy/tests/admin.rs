//! The admin port over real HTTP: live changes of P, ζ, weights and SLO
//! targets, each bad value answered with a 4xx naming it, and the changes
//! visible in `/stats` and `/metrics`; Host, Origin and bearer-token
//! checks; the cap on tenants the port creates. No database is needed: the
//! proxy's upstream is only dialled when a client connects.

use std::net::SocketAddr;

use sluice_proxy::service::{self, Addresses};
use sluice_proxy::settings::Settings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A reply: status, header lines, body.
struct Reply {
    status: u16,
    head: String,
    body: String,
}

/// Sends one request with `headers` (each a whole line, such as
/// "Origin: http://x"; a Host line replaces the default one).
async fn send(admin: SocketAddr, method: &str, path: &str, headers: &[&str], body: &str) -> Reply {
    let conn = TcpStream::connect(admin).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|h| h.to_ascii_lowercase().starts_with("host:")) {
        head.push_str(&format!("Host: {admin}\r\n"));
    }
    for h in headers {
        head.push_str(&format!("{h}\r\n"));
    }
    let request = format!(
        "{head}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // The port may answer (413) and close before it has read a large body:
    // the writer's error is expected then, and the reader keeps what came
    // before the connection was reset.
    let (mut reader, mut writer) = conn.into_split();
    tokio::spawn(async move { writer.write_all(request.as_bytes()).await });
    let mut response = Vec::new();
    let mut chunk = [0; 4096];
    while let Ok(n @ 1..) = reader.read(&mut chunk).await {
        response.extend_from_slice(&chunk[..n]);
    }
    let response = String::from_utf8(response).unwrap();
    let status = response[9..12].parse().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Reply {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// Sends one request; returns the status code and the body.
async fn http(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let reply = send(admin, method, path, &[], body).await;
    (reply.status, reply.body)
}

/// A proxy whose `[admin]` section is `listen = "127.0.0.1:0"` and `admin`.
async fn start_with(admin: &str) -> (Addresses, tokio::sync::oneshot::Sender<()>) {
    let settings = Settings::parse(&format!(
        r#"
        [proxy]
        listen = "127.0.0.1:0"
        upstream = "127.0.0.1:1"
        protocol = "redis"
        [admin]
        listen = "127.0.0.1:0"
        {admin}
        [optimizer]
        parallelism = "fixed"
        zeta = "fixed"
        [[optimizer.slo]]
        tenant = "checkout"
        percentile = 99.9
        target_ms = 60.0
        "#
    ))
    .unwrap();
    let (_reload_tx, reload) = tokio::sync::mpsc::channel(1);
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _keep_reload_open = _reload_tx;
        service::run(settings, None, reload, started_tx, async {
            let _ = stopped.await;
        })
        .await
    });
    (started.await.unwrap(), stop)
}

async fn start() -> (Addresses, tokio::sync::oneshot::Sender<()>) {
    start_with("").await
}

#[tokio::test]
async fn live_changes_apply_and_bad_values_are_named() {
    let (addrs, _stop) = start().await;
    let admin = addrs.admin.expect("the admin port listens");

    let (status, body) = http(admin, "POST", "/gate", r#"{"parallelism": 8, "zeta": 4}"#).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(admin, "POST", "/gate", r#"{"parallelism": 0}"#).await;
    assert_eq!(status, 400);
    assert!(body.contains("parallelism"), "{body}");
    let (status, body) = http(admin, "POST", "/weight", r#"{"tenant": "alice", "weight": -1}"#).await;
    assert_eq!((status, body.contains("alice")), (400, true), "{body}");
    let (status, _) = http(admin, "POST", "/weight", r#"{"tenant": "alice", "weight": 3}"#).await;
    assert_eq!(status, 200);

    let (status, body) = http(
        admin,
        "POST",
        "/slo",
        r#"{"tenant": "alice", "percentile": 99, "target_ms": 0}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("target_ms") && body.contains("alice"), "{body}");
    let (status, body) = http(
        admin,
        "POST",
        "/slo",
        r#"{"tenant": "alice", "percentile": 99, "target_ms": 20}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("checkout") && body.contains("alice"), "{body}");
    let (status, body) = http(admin, "DELETE", "/slo/checkout", "").await;
    assert_eq!(status, 200);
    assert!(!body.contains("checkout"), "{body}");
    let (status, body) = http(admin, "DELETE", "/slo/checkout", "").await;
    assert_eq!(status, 404);
    assert!(body.contains("no SLO"), "{body}");

    let (_, stats) = http(admin, "GET", "/stats", "").await;
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["gate"]["parallelism"], 8);
    assert_eq!(stats["gate"]["zeta"], 4.0);
    assert_eq!(stats["slo"][0]["tenant"], "alice");
    let alice = stats["gate"]["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "alice")
        .unwrap();
    assert_eq!(alice["weight"], 3.0);
    assert_eq!(
        (stats["gate"]["parked"].as_u64(), alice["parked"].as_u64()),
        (Some(0), Some(0))
    );
    let (status, metrics) = http(admin, "GET", "/metrics", "").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("tenant=\"alice\""), "{metrics}");
    assert!(metrics.contains("sluice_gate_parked 0"), "{metrics}");
    assert!(
        metrics.contains("sluice_tenant_parked{tenant=\"alice\"} 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn every_bad_value_is_refused_naming_its_field() {
    let (addrs, _stop) = start().await;
    let admin = addrs.admin.expect("the admin port listens");
    let long_name = "x".repeat(257);
    let cases = [
        (
            "/gate",
            r#"{"parallelism": 18446744073709551615}"#.to_string(),
            "parallelism",
        ),
        ("/gate", r#"{"parallelism": 65537}"#.to_string(), "parallelism"),
        ("/gate", r#"{"parallelism": 2.5}"#.to_string(), "parallelism"),
        ("/gate", r#"{"zeta": 5e-324}"#.to_string(), "zeta"),
        ("/gate", r#"{"zeta": 1e300}"#.to_string(), "zeta"),
        ("/gate", r#"{"zeta": "4"}"#.to_string(), "zeta"),
        ("/gate", r#"{"parallelism": 8, "zeta": 0}"#.to_string(), "zeta"),
        ("/gate", r#"{"paralelism": 8}"#.to_string(), "paralelism"),
        (
            "/weight",
            r#"{"tenant": "alice", "weight": 1e308}"#.to_string(),
            "weight",
        ),
        (
            "/weight",
            r#"{"tenant": "alice", "weight": 0.0001}"#.to_string(),
            "weight",
        ),
        ("/weight", r#"{"tenant": "alice"}"#.to_string(), "weight"),
        ("/weight", r#"{"tenant": "", "weight": 1}"#.to_string(), "tenant"),
        (
            "/weight",
            format!(r#"{{"tenant": "{long_name}", "weight": 1}}"#),
            "tenant",
        ),
        (
            "/weight",
            r#"{"tenant": "a\u0000b", "weight": 1}"#.to_string(),
            "tenant",
        ),
        ("/weight", r#"{"tenant": 7, "weight": 1}"#.to_string(), "tenant"),
        (
            "/slo",
            r#"{"tenant": "alice", "percentile": 100, "target_ms": 5}"#.to_string(),
            "percentile",
        ),
        (
            "/slo",
            r#"{"tenant": "alice", "percentile": 10, "target_ms": 5}"#.to_string(),
            "percentile",
        ),
        (
            "/slo",
            r#"{"tenant": "alice", "percentile": 99, "target_ms": 1e9}"#.to_string(),
            "target_ms",
        ),
        (
            "/slo",
            r#"{"tenant": "alice", "percentile": 99}"#.to_string(),
            "target_ms",
        ),
    ];
    for (path, body, field) in cases {
        let (status, reply) = http(admin, "POST", path, &body).await;
        assert_eq!(status, 400, "{path} {body}: {reply}");
        assert!(reply.contains(field), "{path} {body}: {reply}");
    }
    let (status, reply) = http(admin, "DELETE", "/slo/a%01b", "").await;
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("tenant"), "{reply}");

    // Nothing refused changed anything: P stays, ζ stays.
    let (_, stats) = http(admin, "GET", "/stats", "").await;
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["gate"]["parallelism"], 16);
    assert_eq!(stats["gate"]["zeta"], 1.0);

    let huge = format!(r#"{{"tenant": "{}", "weight": 1}}"#, "x".repeat(1_900_000));
    let (status, _) = http(admin, "POST", "/weight", &huge).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn a_foreign_host_or_origin_is_refused() {
    let (addrs, _stop) = start().await;
    let admin = addrs.admin.expect("the admin port listens");
    let change = r#"{"parallelism": 8}"#;
    let reply = send(admin, "POST", "/gate", &["Host: evil.example.com"], change).await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(reply.body.contains("Host"), "{}", reply.body);
    let reply = send(admin, "GET", "/metrics", &["Host: evil.example.com:9187"], "").await;
    assert_eq!(reply.status, 403);
    let origin = "Origin: http://evil.example.com";
    let reply = send(admin, "POST", "/gate", &[origin], change).await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(reply.body.contains("Origin"), "{}", reply.body);

    for host in ["localhost:1", "LOCALHOST", "127.0.0.2", "[::1]:9187"] {
        let reply = send(admin, "GET", "/stats", &[&format!("Host: {host}")], "").await;
        assert_eq!(reply.status, 200, "{host}: {}", reply.body);
    }
    let (_, stats) = http(admin, "GET", "/stats", "").await;
    assert!(stats.contains("\"parallelism\":16"), "nothing changed: {stats}");

    let (addrs, _stop) = start_with(
        r#"allowed_hosts = ["sluice.internal"]
        allowed_origins = ["https://grafana.example.com"]"#,
    )
    .await;
    let admin = addrs.admin.unwrap();
    let headers = ["Host: sluice.internal:9187", "Origin: https://grafana.example.com"];
    let reply = send(admin, "POST", "/gate", &headers, change).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = send(
        admin,
        "POST",
        "/gate",
        &["Origin: https://grafana.example.com.evil"],
        change,
    )
    .await;
    assert_eq!(reply.status, 403);
}

#[tokio::test]
async fn with_a_token_only_requests_bearing_it_pass() {
    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let (from_file, _stop) = start_with(&format!("token_file = {:?}", file.display().to_string())).await;
    let (inline, _stop2) = start_with(&format!("token = {TOKEN:?}")).await;
    for admin in [from_file.admin.unwrap(), inline.admin.unwrap()] {
        for headers in [
            &[][..],
            &["Authorization: Bearer wrong-token-of-some-length"],
            &["Authorization: Basic YTpi"],
        ] {
            let reply = send(admin, "GET", "/metrics", headers, "").await;
            assert_eq!(reply.status, 401, "{headers:?}: {}", reply.body);
            assert!(
                reply.head.to_ascii_lowercase().contains("www-authenticate: bearer"),
                "{}",
                reply.head
            );
            assert!(reply.body.contains("Bearer"), "{}", reply.body);
        }
        let bearer = format!("Authorization: Bearer {TOKEN}");
        let reply = send(admin, "GET", "/metrics", &[&bearer], "").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let reply = send(admin, "POST", "/gate", &[&bearer], r#"{"zeta": 2}"#).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        // The dashboard's page holds no data: it loads without the token,
        // and asks for it before it reads /stats.
        let reply = send(admin, "GET", "/", &[], "").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.body.contains("<canvas") && reply.body.contains("token-form"));
        assert_eq!(send(admin, "GET", "/stats", &[], "").await.status, 401);
        // Host checks hold for the page too (DNS rebinding).
        assert_eq!(send(admin, "GET", "/", &["Host: evil.example"], "").await.status, 403);
    }
}

#[test]
fn a_port_beyond_localhost_needs_a_token() {
    let file = |admin: &str| {
        Settings::parse(&format!(
            "[proxy]\nlisten = '127.0.0.1:6432'\nupstream = '127.0.0.1:5432'\nprotocol = 'pg'\n[admin]\n{admin}"
        ))
    };
    let err = file("listen = '0.0.0.0:9187'\n").unwrap_err();
    assert!(err.contains("admin.token"), "{err}");
    let err = file("listen = '0.0.0.0:9187'\ntoken = 'short'\n").unwrap_err();
    assert!(err.contains("admin.token"), "{err}");
    file("listen = '0.0.0.0:9187'\ntoken = '0123456789abcdef'\n").unwrap();
    file("listen = '[::1]:9187'\n").unwrap();
    file("listen = 'localhost:9187'\n").unwrap();
}

#[tokio::test]
async fn a_missing_token_file_stops_the_start_naming_the_setting() {
    let settings = Settings::parse(
        "[proxy]\nlisten = '127.0.0.1:0'\nupstream = '127.0.0.1:1'\nprotocol = 'redis'\n\
         [admin]\nlisten = '127.0.0.1:0'\ntoken_file = '/nonexistent/sluice-admin-token'\n",
    )
    .unwrap();
    let (_reload_tx, reload) = tokio::sync::mpsc::channel(1);
    let (started_tx, _started) = tokio::sync::oneshot::channel();
    let err = service::run(settings, None, reload, started_tx, std::future::pending())
        .await
        .unwrap_err();
    assert!(err.contains("admin.token_file"), "{err}");
}

#[tokio::test]
async fn the_port_creates_at_most_max_tenants() {
    let (addrs, _stop) = start_with("max_tenants = 2").await;
    let admin = addrs.admin.unwrap();
    for tenant in ["a", "b", "a"] {
        let (status, body) = http(
            admin,
            "POST",
            "/weight",
            &format!(r#"{{"tenant": "{tenant}", "weight": 2}}"#),
        )
        .await;
        assert_eq!(status, 200, "{tenant}: {body}");
    }
    let (status, body) = http(admin, "POST", "/weight", r#"{"tenant": "c", "weight": 2}"#).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("max_tenants") && body.contains("`c`"), "{body}");
    let (status, body) = http(
        admin,
        "POST",
        "/slo",
        r#"{"tenant": "d", "percentile": 99, "target_ms": 5}"#,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    // Tenants it has created (and those the proxy knows) still change.
    let (status, body) = http(
        admin,
        "POST",
        "/slo",
        r#"{"tenant": "b", "percentile": 99, "target_ms": 5}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn metrics_are_served_as_openmetrics() {
    let (addrs, _stop) = start().await;
    let reply = send(addrs.admin.unwrap(), "GET", "/metrics", &[], "").await;
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .head
            .to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{}",
        reply.head
    );
    assert!(reply.body.trim_end().ends_with("# EOF"), "{}", reply.body);
}
