//! The admin HTTP port (issue 5, §7), bound to localhost unless configured
//! otherwise:
//!
//! - `GET /metrics`: Prometheus text — the gate (P, ζ, in flight, parked,
//!   queued) and per tenant: requests, errors, refusals, pass-through
//!   commands, queued, in flight, parked (waiting on their client inside a
//!   transaction, not counted toward P), and latency and queue-wait
//!   quantiles.
//! - `GET /stats`: the same as JSON, with the optimizer's recent decisions.
//! - `POST /gate` with `{"parallelism": 32}` and/or `{"zeta": 4}`, and
//!   `POST /weight` with `{"tenant": "alice", "weight": 2}`: live changes.
//!   A bad value gets a 400 naming it. An optimizer tuning the same knob
//!   will move it again; pin it in the configuration to keep it.
//! - `POST /slo` with `{"tenant": "alice", "percentile": 99.9, "target_ms":
//!   60}` sets a latency SLO (AppleS §5.3), `DELETE /slo/alice` drops it;
//!   both answer with the targets as they then stand (also in `/stats`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;

use crate::gate::{Gate, GateSnapshot};
use crate::optimizer::{DecisionLog, Slo, SloTargets};
use crate::stats::Stats;

/// What the admin port reads and changes.
#[derive(Clone)]
pub struct Admin {
    pub gate: Gate,
    pub stats: Arc<Stats>,
    pub decisions: DecisionLog,
    pub slo_targets: SloTargets,
}

/// Serves the admin port on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    admin: Admin,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
        .route("/gate", post(set_gate))
        .route("/weight", post(set_weight))
        .route("/slo", post(set_slo))
        .route("/slo/:tenant", delete(remove_slo))
        .with_state(admin);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

async fn stats(State(admin): State<Admin>) -> Json<serde_json::Value> {
    let sessions: Vec<_> = admin
        .stats
        .snapshot()
        .into_iter()
        .map(|t| json!({"tenant": &*t.tenant, "requests": t.requests, "errors": t.errors, "refused": t.refused, "passthrough": t.passthrough}))
        .collect();
    Json(json!({
        "gate": admin.gate.snapshot(),
        "sessions": sessions,
        "pool_idle_backends": admin.stats.pool_idle(),
        "decisions": admin.decisions.recent(),
        "slo": admin.slo_targets.list(),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GateChange {
    parallelism: Option<usize>,
    zeta: Option<f64>,
}

async fn set_gate(State(admin): State<Admin>, Json(change): Json<GateChange>) -> Response {
    let applied = change
        .parallelism
        .map_or(Ok(()), |p| admin.gate.set_parallelism(p))
        .and_then(|()| change.zeta.map_or(Ok(()), |z| admin.gate.set_zeta(z)));
    answer(applied, &admin.gate)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightChange {
    tenant: String,
    weight: f64,
}

async fn set_weight(State(admin): State<Admin>, Json(change): Json<WeightChange>) -> Response {
    answer(admin.gate.set_weight(&change.tenant, change.weight), &admin.gate)
}

async fn set_slo(State(admin): State<Admin>, Json(slo): Json<Slo>) -> Response {
    match admin.slo_targets.set(slo) {
        Ok(()) => Json(admin.slo_targets.list()).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e }))).into_response(),
    }
}

async fn remove_slo(State(admin): State<Admin>, Path(tenant): Path<String>) -> Response {
    if admin.slo_targets.remove(&tenant) {
        Json(admin.slo_targets.list()).into_response()
    } else {
        let e = format!("tenant `{tenant}` has no SLO");
        (StatusCode::NOT_FOUND, Json(json!({ "error": e }))).into_response()
    }
}

fn answer(applied: Result<(), String>, gate: &Gate) -> Response {
    match applied {
        Ok(()) => Json(gate.snapshot()).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e }))).into_response(),
    }
}

async fn metrics(State(admin): State<Admin>) -> Response {
    let mut text = String::new();
    match encode(&mut text, &registry(&admin.gate.snapshot(), &admin.stats)) {
        Ok(()) => ([("content-type", "text/plain; version=0.0.4")], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

type Labels = Vec<(&'static str, String)>;

/// A registry filled from one snapshot: the values live in the gate and the
/// session statistics, so each scrape builds its own.
fn registry(gate: &GateSnapshot, stats: &Stats) -> Registry {
    let mut reg = Registry::with_prefix("sluice");
    let gauge = |reg: &mut Registry, name: &str, help: &str, v: f64| {
        let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        g.set(v);
        reg.register(name, help, g);
    };
    gauge(
        &mut reg,
        "gate_parallelism",
        "Delivered parallelism P",
        gate.parallelism as f64,
    );
    gauge(&mut reg, "gate_zeta", "Round quota zeta", gate.zeta);
    gauge(
        &mut reg,
        "gate_in_flight",
        "Requests inside the database",
        gate.in_flight as f64,
    );
    gauge(
        &mut reg,
        "gate_parked",
        "Requests waiting on their client inside a transaction, not counted toward P",
        gate.parked as f64,
    );
    gauge(
        &mut reg,
        "gate_queued",
        "Requests waiting at the gate",
        gate.queued as f64,
    );
    gauge(
        &mut reg,
        "pool_idle_backends",
        "PostgreSQL transaction pooling: server connections idle in the pool",
        stats.pool_idle() as f64,
    );
    let family = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        reg.register(name, help, f.clone());
        f
    };
    let weight = family(&mut reg, "tenant_weight", "Weight phi");
    let queued = family(&mut reg, "tenant_queued", "Requests waiting");
    let in_flight = family(&mut reg, "tenant_in_flight", "Requests inside the database");
    let parked = family(
        &mut reg,
        "tenant_parked",
        "Requests waiting on their client inside a transaction",
    );
    let counters = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, Counter>::default();
        reg.register(name, help, f.clone());
        f
    };
    let admitted = counters(&mut reg, "tenant_admitted", "Requests admitted");
    let refused = counters(&mut reg, "tenant_refused", "Requests refused (queue full or timed out)");
    let latency = family(
        &mut reg,
        "tenant_latency_seconds",
        "Request latency from arrival at the proxy",
    );
    let wait = family(
        &mut reg,
        "tenant_queue_wait_mean_seconds",
        "Mean time waiting at the gate",
    );
    for t in &gate.tenants {
        let l = || vec![("tenant", t.name.clone())];
        weight.get_or_create(&l()).set(t.weight);
        queued.get_or_create(&l()).set(t.queued as f64);
        in_flight.get_or_create(&l()).set(t.in_flight as f64);
        parked.get_or_create(&l()).set(t.parked as f64);
        admitted.get_or_create(&l()).inc_by(t.admitted);
        refused.get_or_create(&l()).inc_by(t.refused + t.timed_out);
        let q = |s: &str| vec![("tenant", t.name.clone()), ("quantile", s.to_string())];
        latency.get_or_create(&q("0.99")).set(t.latency_p99_ms / 1e3);
        latency.get_or_create(&q("0.999")).set(t.latency_p999_ms / 1e3);
        wait.get_or_create(&l()).set(t.wait_mean_ms / 1e3);
    }
    let errors = counters(&mut reg, "tenant_errors", "Requests the server answered with an error");
    let passthrough = counters(
        &mut reg,
        "tenant_passthrough",
        "Commands outside admission (blocking, pub/sub)",
    );
    for t in stats.snapshot() {
        let l = vec![("tenant", t.tenant.to_string())];
        errors.get_or_create(&l).inc_by(t.errors);
        passthrough.get_or_create(&l).inc_by(t.passthrough);
    }
    reg
}
