//! The router's admin port: `/stats` (JSON) and `/metrics` (Prometheus
//! text), both read from the same [`Snapshot`]. The exposition is written
//! here rather than through a metrics crate because the latencies live in
//! HDR histograms: a Prometheus summary of their quantiles is a few lines.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::routing::get;
use serde::Serialize;

use crate::compaction::{ShardSteering, SteeringSnapshot};
use crate::router::Router;
use crate::stats::Summary;

/// What the router has measured since it started.
#[derive(Debug, Default, Serialize)]
pub struct Snapshot {
    /// Clients connected now, and refused at `max_clients` since the start.
    pub clients: u64,
    pub refused_clients: u64,
    pub requests: u64,
    pub failed: u64,
    pub sub_requests: u64,
    pub max_fanout: u64,
    pub redirects: u64,
    pub latency: Summary,
    /// Of requests split over more than one shard.
    pub gap: Summary,
    pub shards: Vec<ShardSnapshot>,
    /// The steering of the shards' compactions, if configured.
    pub compaction: Option<SteeringSnapshot>,
}

#[derive(Debug, Serialize)]
pub struct ShardSnapshot {
    pub name: String,
    pub addr: String,
    pub in_flight: u64,
    pub sub_requests: u64,
    pub errors: u64,
    pub latency: Summary,
    pub gate_wait: Summary,
}

pub fn snapshot(router: &Router) -> Snapshot {
    let s = &router.stats;
    Snapshot {
        clients: router.clients.connected.load(Ordering::Relaxed),
        refused_clients: router.clients.refused.load(Ordering::Relaxed),
        requests: s.requests.load(Ordering::Relaxed),
        failed: s.failed.load(Ordering::Relaxed),
        sub_requests: s.sub_requests.load(Ordering::Relaxed),
        max_fanout: s.max_fanout.load(Ordering::Relaxed),
        redirects: s.redirects.load(Ordering::Relaxed),
        latency: s.latency.summary(),
        gap: s.gap.summary(),
        shards: router
            .shards()
            .iter()
            .map(|shard| ShardSnapshot {
                name: shard.name.clone(),
                addr: shard.addr.clone(),
                in_flight: shard.stats.in_flight.load(Ordering::Relaxed),
                sub_requests: shard.stats.sub_requests.load(Ordering::Relaxed),
                errors: shard.stats.errors.load(Ordering::Relaxed),
                latency: shard.stats.latency.summary(),
                gate_wait: shard.stats.gate_wait.summary(),
            })
            .collect(),
        compaction: router
            .compaction
            .as_ref()
            .map(|c| c.snapshot(router.shards().iter().map(|s| s.name.clone()).collect())),
    }
}

/// The snapshot in Prometheus's text format.
pub fn metrics(snap: &Snapshot) -> String {
    let mut out = String::new();
    let head = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
    };
    let summary = |out: &mut String, name: &str, labels: &str, s: &Summary| {
        let sep = if labels.is_empty() { "" } else { "," };
        for (q, v) in [("0.5", s.p50_ms), ("0.99", s.p99_ms), ("0.999", s.p999_ms)] {
            let _ = writeln!(out, "{name}{{{labels}{sep}quantile=\"{q}\"}} {}", v / 1000.0);
        }
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", s.count);
    };
    let _ = writeln!(
        out,
        "# HELP sluice_route_clients Clients connected.\n# TYPE sluice_route_clients gauge\nsluice_route_clients {}",
        snap.clients
    );
    let _ = writeln!(
        out,
        "# HELP sluice_route_refused_clients_total Clients refused at max_clients.\n# TYPE sluice_route_refused_clients_total counter\nsluice_route_refused_clients_total {}",
        snap.refused_clients
    );
    let _ = writeln!(
        out,
        "# HELP sluice_route_requests_total Requests routed to shards.\n# TYPE sluice_route_requests_total counter\nsluice_route_requests_total {}",
        snap.requests
    );
    let _ = writeln!(
        out,
        "# HELP sluice_route_failed_total Requests answered with a shard's failure.\n# TYPE sluice_route_failed_total counter\nsluice_route_failed_total {}",
        snap.failed
    );
    let _ = writeln!(
        out,
        "# HELP sluice_route_sub_requests_total Sub-requests sent to shards.\n# TYPE sluice_route_sub_requests_total counter\nsluice_route_sub_requests_total {}",
        snap.sub_requests
    );
    head(
        &mut out,
        "sluice_route_request_seconds",
        "Request latency at the router.",
    );
    summary(&mut out, "sluice_route_request_seconds", "", &snap.latency);
    head(
        &mut out,
        "sluice_route_gap_seconds",
        "Latest minus earliest sub-request completion of split requests.",
    );
    summary(&mut out, "sluice_route_gap_seconds", "", &snap.gap);
    let per_shard = |out: &mut String, name: &str, help: &str, kind: &str, value: &dyn Fn(&ShardSnapshot) -> u64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in &snap.shards {
            let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", label(&s.name), value(s));
        }
    };
    per_shard(
        &mut out,
        "sluice_route_shard_in_flight",
        "Sub-requests at the shard.",
        "gauge",
        &|s| s.in_flight,
    );
    per_shard(
        &mut out,
        "sluice_route_shard_errors_total",
        "Sub-requests the shard failed.",
        "counter",
        &|s| s.errors,
    );
    head(
        &mut out,
        "sluice_route_shard_seconds",
        "Sub-request latency at the shard, gate wait excluded.",
    );
    for s in &snap.shards {
        let labels = format!("shard=\"{}\"", label(&s.name));
        summary(&mut out, "sluice_route_shard_seconds", &labels, &s.latency);
    }
    if let Some(c) = &snap.compaction {
        compaction_metrics(&mut out, c);
    }
    out
}

fn compaction_metrics(out: &mut String, c: &SteeringSnapshot) {
    let gauge = |out: &mut String, name: &str, help: &str, value: &dyn Fn(&ShardSteering) -> Option<u64>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for s in &c.shards {
            if let Some(v) = value(s) {
                let _ = writeln!(out, "{name}{{shard=\"{}\"}} {v}", label(&s.name));
            }
        }
    };
    gauge(
        out,
        "sluice_shard_compaction_debt_bytes",
        "Bytes the shard's levels hold beyond their targets, as last read.",
        &|s| s.debt_bytes,
    );
    gauge(
        out,
        "sluice_shard_compaction_paused",
        "1 while the shard's compaction is paused.",
        &|s| s.paused.map(u64::from),
    );
    let name = "sluice_controller_decisions_total";
    let _ = writeln!(
        out,
        "# HELP {name} Decisions of the router's controllers.\n# TYPE {name} counter"
    );
    for (shard, why, paused, n) in &c.totals {
        let _ = writeln!(
            out,
            "{name}{{controller=\"compaction_schedule\",knob=\"compaction_paused\",shard=\"{}\",value=\"{paused}\",reason=\"{why}\"}} {n}",
            label(shard)
        );
    }
}

/// A label value as Prometheus's text format writes it.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Serves the admin port until the process ends.
pub async fn serve(router: Arc<Router>, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let stats_router = router.clone();
    let app = axum::Router::new()
        .route(
            "/stats",
            get(move || async move { axum::Json(snapshot(&stats_router)) }),
        )
        .route("/metrics", get(move || async move { metrics(&snapshot(&router)) }));
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_metric_is_described_once_and_labels_are_escaped() {
        let shard = |name: &str| ShardSnapshot {
            name: name.into(),
            addr: "x:1".into(),
            in_flight: 0,
            sub_requests: 0,
            errors: 0,
            latency: Summary::default(),
            gate_wait: Summary::default(),
        };
        let snap = Snapshot {
            shards: vec![shard("a"), shard("b\"c")],
            ..Snapshot::default()
        };
        let text = metrics(&snap);
        for line in text.lines().filter(|l| l.starts_with("# HELP")) {
            assert_eq!(text.matches(line).count(), 1, "{line} twice in\n{text}");
        }
        assert!(
            text.contains("sluice_route_shard_in_flight{shard=\"b\\\"c\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn the_compaction_steering_has_its_gauges_and_decision_counters() {
        use sluice_core::controller::compaction_schedule::{Schedule, Why};
        let snap = Snapshot {
            compaction: Some(SteeringSnapshot {
                schedule: Schedule::Synchronized,
                window: None,
                width: Some(4.0),
                shards: vec![ShardSteering {
                    name: "a".into(),
                    debt_bytes: Some(7),
                    paused: Some(true),
                }],
                decisions: Vec::new(),
                totals: vec![("a".into(), Why::Window, false, 3)],
            }),
            ..Snapshot::default()
        };
        let text = metrics(&snap);
        assert!(
            text.contains("sluice_shard_compaction_debt_bytes{shard=\"a\"} 7"),
            "{text}"
        );
        assert!(text.contains("sluice_shard_compaction_paused{shard=\"a\"} 1"), "{text}");
        assert!(
            text.contains("sluice_controller_decisions_total{controller=\"compaction_schedule\",knob=\"compaction_paused\",shard=\"a\",value=\"false\",reason=\"window\"} 3"),
            "{text}"
        );
    }
}
