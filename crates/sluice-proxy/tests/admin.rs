//! The admin port over real HTTP: live changes of P, ζ, weights and SLO
//! targets, each bad value answered with a 400 naming it, and the changes
//! visible in `/stats` and `/metrics`. No database is needed: the proxy's
//! upstream is only dialled when a client connects.

use std::net::SocketAddr;

use sluice_proxy::service::{self, Addresses};
use sluice_proxy::settings::Settings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends one request; returns the status code and the body.
async fn http(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(admin).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status, body)
}

async fn start() -> (Addresses, tokio::sync::oneshot::Sender<()>) {
    let settings = Settings::parse(
        r#"
        [proxy]
        listen = "127.0.0.1:0"
        upstream = "127.0.0.1:1"
        protocol = "redis"
        [admin]
        listen = "127.0.0.1:0"
        [optimizer]
        parallelism = "fixed"
        zeta = "fixed"
        [[optimizer.slo]]
        tenant = "checkout"
        percentile = 99.9
        target_ms = 60.0
        "#,
    )
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
