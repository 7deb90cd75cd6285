//! The admin HTTP port, bound to localhost unless configured otherwise:
//!
//! - `GET /`: the dashboard, one self-contained page (no external scripts,
//!   styles or fonts; `dashboard.html`) that draws `/stats` every second:
//!   the gate's P and ζ with every controller's decisions on the same time
//!   axis, each tenant's rate, queue, latency and SLO standing, and the
//!   steering of PostgreSQL's checkpoints. The page holds no data, so it
//!   needs no token; with a token configured, it asks for one and sends it
//!   with each `/stats`.
//! - `GET /metrics`: OpenMetrics text — the gate (P, ζ, in flight, parked,
//!   queued) and per tenant: requests, errors, refusals, pass-through
//!   commands, queued, in flight, parked (waiting on their client inside a
//!   transaction, not counted toward P), and latency and queue-wait
//!   quantiles; decisions by controller and knob
//!   (`sluice_controller_decisions_total`); with `[postgres.background]`,
//!   the steering's state, recovery debt, the WAL room the early start
//!   keeps for a burst, whether a checkpoint runs, and the settings applied
//!   (`sluice_postgres_*`).
//!   `docs/grafana-dashboard.json` draws them in Grafana.
//! - `GET /stats`: the same as JSON, with the controllers' recent decisions
//!   and, if configured, the steering of PostgreSQL's checkpoints.
//! - `POST /gate` with `{"parallelism": 32}` and/or `{"zeta": 4}` (answered
//!   with P and ζ), and `POST /weight` with `{"tenant": "alice", "weight":
//!   2}` (answered with the tenant's weight): live changes. An optimizer
//!   tuning the same knob will move it again; pin it in the configuration
//!   to keep it.
//! - `POST /slo` with `{"tenant": "alice", "percentile": 99.9, "target_ms":
//!   60}` sets a latency SLO (AppleS §5.3), `DELETE /slo/alice` drops it;
//!   both answer with the targets as they then stand (also in `/stats`).
//!
//! The port changes how the database is shared, so it checks every request
//! before it reaches a handler ([`Rules`], from `[admin]`):
//!
//! - The Host header must name loopback, the host of `listen`, or one of
//!   `allowed_hosts` (else 403): a web page whose name an attacker points at
//!   127.0.0.1 (DNS rebinding) still sends its own name.
//! - A request with an Origin header comes from a browser page; unless the
//!   origin is in `allowed_origins` it gets 403. The port's own dashboard
//!   reads `/stats` with same-origin GETs, which carry none; curl and
//!   Prometheus send none.
//! - With a token (`token_file` or `token`; required when `listen` is not a
//!   loopback address), a request without `Authorization: Bearer <token>`
//!   gets 401. The SHA-256 digests of the two are compared in constant
//!   time, so neither the token's bytes nor its length leak through timing.
//!
//! Every value has bounds, and a value outside them gets a 400 naming the
//! field: P in 1..=[`MAX_PARALLELISM`], ζ in [`ZETA`], weights in
//! [`WEIGHT`], percentiles in [`PERCENTILE`], targets in [`TARGET_MS`],
//! tenant names of 1..=[`MAX_TENANT_LEN`] bytes without control
//! characters; bodies are at most [`BODY_LIMIT`] bytes (else 413). A weight
//! or an SLO for a tenant the proxy has not seen creates that tenant for
//! good, so the port creates at most `max_tenants` of them (then 409):
//! every tenant costs memory and a share of each `/stats` and `/metrics`.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::gate::{Gate, GateSnapshot};
use crate::optimizer::{DecisionLog, Slo, SloTargets};
use crate::pg::background::{BackgroundState, BackgroundStatus};
use crate::settings::{check_token, AdminConfig};
use crate::stats::Stats;

/// Highest P the port sets. Each request inside a PostgreSQL server holds
/// its own connection, and one proxy address reaches one upstream address
/// through at most 2^16 ports, so a higher P could never be delivered.
pub const MAX_PARALLELISM: u64 = 65_536;
/// ζ the port sets. Together with [`WEIGHT`] it keeps a turn's quota φ·ζ
/// within [1e-5, 1e12]: the smallest reaches a whole request in 10^5
/// rounds, which the gate skips in one step, and the largest keeps a
/// credit below 2^53, where f64 counts requests exactly. The optimizer's
/// own ζ range (`[optimizer.quota]`, 1 to 64 by default) lies well inside.
pub const ZETA: RangeInclusive<f64> = 0.01..=1e6;
/// Weights φ the port sets; the SLO controller's default range (0.1 to
/// 1000) lies inside.
pub const WEIGHT: RangeInclusive<f64> = 1e-3..=1e6;
/// SLO percentiles: from the median to 99.999; beyond that a window (5 s
/// by default) would need over 100,000 requests to hold a single one above
/// the percentile.
pub const PERCENTILE: RangeInclusive<f64> = 50.0..=99.999;
/// SLO targets, ms: the latency histograms span 1 µs to an hour.
pub const TARGET_MS: RangeInclusive<f64> = 0.001..=3_600_000.0;
/// Longest tenant name, bytes.
pub const MAX_TENANT_LEN: usize = 256;
/// Largest request body, bytes; the port's requests are a few fields.
pub const BODY_LIMIT: usize = 64 * 1024;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the admin port reads and changes.
#[derive(Clone)]
pub struct Admin {
    pub gate: Gate,
    pub stats: Arc<Stats>,
    pub decisions: DecisionLog,
    pub slo_targets: SloTargets,
    /// The steering of PostgreSQL's checkpoints, if configured.
    pub background: Option<BackgroundStatus>,
}

/// Who may use the port, and how many tenants it may create: `[admin]`
/// with the token read.
pub struct Rules {
    /// SHA-256 of the bearer token, if one is required.
    token: Option<[u8; 32]>,
    /// Lowercase host names and addresses accepted in Host besides
    /// loopback; `None`: any.
    hosts: Option<Vec<String>>,
    /// Lowercase origins accepted in Origin.
    origins: Vec<String>,
    max_tenants: usize,
}

impl Rules {
    /// Checks `config` and reads its token file; an error names the field.
    pub fn new(config: &AdminConfig) -> Result<Self, String> {
        config.validate()?;
        let token = match (&config.token, &config.token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("admin.token_file: cannot read {}: {e}", path.display()))?;
                let token = text.trim();
                check_token(token).map_err(|e| format!("admin.token_file: the token in {} {e}", path.display()))?;
                Some(token.to_string())
            }
            (None, None) => None,
        };
        let hosts = (!config.allowed_hosts.iter().any(|h| h == "*")).then(|| {
            let listen = host_of(&config.listen).filter(|h| !h.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()));
            (config.allowed_hosts.iter().filter_map(|h| host_of(h)))
                .chain(listen)
                .collect()
        });
        Ok(Rules {
            token: token.map(|t| Sha256::digest(t.as_bytes()).into()),
            hosts,
            origins: config
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            max_tenants: config.max_tenants,
        })
    }

    /// Lets a request through, or says why not. `public` requests (the
    /// dashboard's page, which holds no data) need no token; the Host and
    /// Origin checks hold for every request.
    fn check(&self, headers: &HeaderMap, public: bool) -> Result<(), Refusal> {
        let text = |name| {
            headers
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        // A browser always sends Host; a request without one is no page's.
        if let Some(host) = text(header::HOST) {
            if !self.host_allowed(&host) {
                return Err(Refusal(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Host header {:?} names neither loopback, admin.listen nor admin.allowed_hosts",
                        shown(&host)
                    ),
                ));
            }
        }
        if let Some(origin) = text(header::ORIGIN) {
            if !self
                .origins
                .contains(&origin.trim_end_matches('/').to_ascii_lowercase())
            {
                return Err(Refusal(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Origin header {:?} is not in admin.allowed_origins: browser pages of other sites may not use the admin port",
                        shown(&origin)
                    ),
                ));
            }
        }
        if let Some(expected) = self.token.as_ref().filter(|_| !public) {
            let presented = text(header::AUTHORIZATION);
            let token = presented
                .as_deref()
                .and_then(|v| v.trim().split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim());
            let digest: Option<[u8; 32]> = token.map(|t| Sha256::digest(t.as_bytes()).into());
            if !digest.is_some_and(|d| bool::from(d.ct_eq(expected))) {
                return Err(Refusal(
                    StatusCode::UNAUTHORIZED,
                    "the admin port requires `Authorization: Bearer <token>` with the token of admin.token_file or admin.token".into(),
                ));
            }
        }
        Ok(())
    }

    fn host_allowed(&self, header: &str) -> bool {
        let Some(hosts) = &self.hosts else {
            return true;
        };
        host_of(header).is_some_and(|host| {
            host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) || hosts.contains(&host)
        })
    }
}

/// The host of `host[:port]` (an IPv6 address bare or in brackets),
/// lowercase, without a final dot, an address in its usual form; `None` if
/// it is not of that form.
fn host_of(text: &str) -> Option<String> {
    let text = text.trim();
    let host = if text.parse::<IpAddr>().is_ok() {
        text
    } else if let Some(rest) = text.strip_prefix('[') {
        let (ip, port) = rest.split_once(']')?;
        if !(port.is_empty() || port.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        ip
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) if is_port(port) && !host.contains(':') => host,
            Some(_) => return None,
            None => text,
        }
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    match host.parse::<IpAddr>() {
        Ok(ip) => Some(ip.to_string()),
        Err(_) => (!host.is_empty()).then_some(host),
    }
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[derive(Clone)]
struct App {
    admin: Admin,
    rules: Arc<Rules>,
    /// Names of the tenants this port created (see `creating`).
    created: Arc<Mutex<HashSet<String>>>,
}

/// Serves the admin port on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    admin: Admin,
    rules: Rules,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let rules = Arc::new(rules);
    let app = App {
        admin,
        rules: Arc::clone(&rules),
        created: Arc::default(),
    };
    let app = Router::new()
        .route("/", get(dashboard))
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
        .route("/gate", post(set_gate))
        .route("/weight", post(set_weight))
        .route("/slo", post(set_slo))
        .route("/slo/:tenant", delete(remove_slo))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(rules, check_access))
        .with_state(app);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

async fn check_access(State(rules): State<Arc<Rules>>, request: Request, next: Next) -> Response {
    let public = request.method() == Method::GET && request.uri().path() == "/";
    match rules.check(request.headers(), public) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// A request refused: its status and why.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = (self.0, Json(json!({ "error": self.1 }))).into_response();
        if self.0 == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

fn bad(why: String) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, why)
}

/// At most 40 characters of `text`, for an error that quotes what it got.
fn shown(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A request's JSON object, read field by field so that every error names
/// its field.
struct Fields(Map<String, Value>);

impl Fields {
    fn parse(body: Result<Json<Value>, JsonRejection>, known: &[&str]) -> Result<Self, Refusal> {
        let Json(value) = body.map_err(|e| Refusal(e.status(), e.body_text()))?;
        let Value::Object(map) = value else {
            return Err(bad(format!("the body must be a JSON object with {}", known.join(", "))));
        };
        if let Some(field) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(bad(format!(
                "unknown field `{}`, expected {}",
                shown(field),
                known.join(", ")
            )));
        }
        Ok(Fields(map))
    }

    fn required<T>(field: &str, value: Option<T>) -> Result<T, Refusal> {
        value.ok_or_else(|| bad(format!("missing field `{field}`")))
    }

    /// A number in `range`; `what` names it in an error.
    fn number(&self, field: &str, what: &str, range: RangeInclusive<f64>) -> Result<Option<f64>, Refusal> {
        let Some(value) = self.0.get(field) else {
            return Ok(None);
        };
        match value.as_f64() {
            Some(v) if range.contains(&v) => Ok(Some(v)),
            _ => Err(bad(format!(
                "{what} must be a number in [{}, {}], got {}",
                range.start(),
                range.end(),
                shown(&value.to_string())
            ))),
        }
    }

    fn tenant(&self) -> Result<String, Refusal> {
        match self.0.get("tenant") {
            Some(Value::String(name)) => check_tenant(name).map(|()| name.clone()),
            Some(other) => Err(bad(format!(
                "tenant must be a string, got {}",
                shown(&other.to_string())
            ))),
            None => Err(bad("missing field `tenant`".into())),
        }
    }
}

fn check_tenant(name: &str) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(bad("tenant must not be empty".into()));
    }
    if name.len() > MAX_TENANT_LEN {
        return Err(bad(format!(
            "tenant must be at most {MAX_TENANT_LEN} bytes, got {} bytes starting {:?}",
            name.len(),
            shown(name)
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(bad(format!(
            "tenant {:?} must not contain control characters",
            shown(name)
        )));
    }
    Ok(())
}

/// Runs `apply`, which may bring tenant `name` into being: refused if the
/// proxy has not seen `name` and the port has created `max_tenants`
/// tenants already. Names stay counted, as the tenants stay (the gate
/// never forgets a tenant with a weight or an SLO); the lock makes the
/// check and the change one step.
fn creating<T>(app: &App, name: &str, apply: impl FnOnce() -> Result<T, String>) -> Result<T, Refusal> {
    let mut created = app.created.lock().unwrap_or_else(PoisonError::into_inner);
    let new = !app.admin.gate.knows(name) && !created.contains(name);
    if new && created.len() >= app.rules.max_tenants {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "tenant `{name}` is new and the admin port has created admin.max_tenants = {} tenants already",
                app.rules.max_tenants
            ),
        ));
    }
    let applied = apply().map_err(bad)?;
    if new {
        created.insert(name.to_string());
    }
    Ok(applied)
}

/// The dashboard: one page, scripts and styles inline, that draws `/stats`
/// every second. Its policy lets it reach nothing but this port.
async fn dashboard() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        include_str!("dashboard.html"),
    )
        .into_response()
}

async fn stats(State(app): State<App>) -> Json<Value> {
    let admin = &app.admin;
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
        "uptime_s": admin.decisions.uptime(),
        "decisions": admin.decisions.recent(),
        "slo": admin.slo_targets.list(),
        "postgres_background": admin.background.as_ref().map(BackgroundStatus::get),
    }))
}

async fn set_gate(State(app): State<App>, body: Result<Json<Value>, JsonRejection>) -> Result<Response, Refusal> {
    let fields = Fields::parse(body, &["parallelism", "zeta"])?;
    let parallelism = match fields.0.get("parallelism") {
        None => None,
        Some(value) => match value.as_u64() {
            Some(p) if (1..=MAX_PARALLELISM).contains(&p) => Some(p as usize),
            _ => {
                return Err(bad(format!(
                    "parallelism must be a whole number in 1..={MAX_PARALLELISM}, got {}",
                    shown(&value.to_string())
                )))
            }
        },
    };
    let zeta = fields.number("zeta", "zeta", ZETA)?;
    let gate = &app.admin.gate;
    // Both are checked before either changes: a refused request changes nothing.
    parallelism.map_or(Ok(()), |p| gate.set_parallelism(p)).map_err(bad)?;
    zeta.map_or(Ok(()), |z| gate.set_zeta(z)).map_err(bad)?;
    Ok(Json(json!({"parallelism": gate.parallelism(), "zeta": gate.zeta()})).into_response())
}

async fn set_weight(State(app): State<App>, body: Result<Json<Value>, JsonRejection>) -> Result<Response, Refusal> {
    let fields = Fields::parse(body, &["tenant", "weight"])?;
    let tenant = fields.tenant()?;
    let weight = fields.number("weight", &format!("weight of `{tenant}`"), WEIGHT)?;
    let weight = Fields::required("weight", weight)?;
    creating(&app, &tenant, || app.admin.gate.set_weight(&tenant, weight))?;
    Ok(Json(json!({"tenant": tenant, "weight": weight})).into_response())
}

async fn set_slo(State(app): State<App>, body: Result<Json<Value>, JsonRejection>) -> Result<Response, Refusal> {
    let fields = Fields::parse(body, &["tenant", "percentile", "target_ms"])?;
    let tenant = fields.tenant()?;
    let percentile = fields.number("percentile", &format!("percentile of `{tenant}`"), PERCENTILE)?;
    let target_ms = fields.number("target_ms", &format!("target_ms of `{tenant}`"), TARGET_MS)?;
    let slo = Slo {
        tenant: tenant.clone(),
        percentile: Fields::required("percentile", percentile)?,
        target_ms: Fields::required("target_ms", target_ms)?,
    };
    let targets = &app.admin.slo_targets;
    creating(&app, &tenant, || targets.set(slo))?;
    Ok(Json(targets.list()).into_response())
}

async fn remove_slo(State(app): State<App>, Path(tenant): Path<String>) -> Result<Response, Refusal> {
    check_tenant(&tenant)?;
    let targets = &app.admin.slo_targets;
    if targets.remove(&tenant) {
        Ok(Json(targets.list()).into_response())
    } else {
        Err(Refusal(StatusCode::NOT_FOUND, format!("tenant `{tenant}` has no SLO")))
    }
}

async fn metrics(State(app): State<App>) -> Response {
    let admin = &app.admin;
    let mut text = String::new();
    let background = admin.background.as_ref().map(BackgroundStatus::get);
    let registry = registry(
        &admin.gate.snapshot(),
        &admin.stats,
        &admin.decisions.totals(),
        background.as_ref(),
    );
    match encode(&mut text, &registry) {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

type Labels = Vec<(&'static str, String)>;

/// A registry filled from one snapshot: the values live in the gate, the
/// session statistics, the decision log and the steering's state, so each
/// scrape builds its own.
fn registry(
    gate: &GateSnapshot,
    stats: &Stats,
    decisions: &BTreeMap<String, u64>,
    background: Option<&BackgroundState>,
) -> Registry {
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
    let made = counters(
        &mut reg,
        "controller_decisions",
        "Decisions made, by controller and knob",
    );
    for (knob, &n) in decisions {
        let setting = knob.strip_prefix("postgres.");
        let controller = if setting.is_some_and(|s| crate::pg::background::VACUUM_SETTINGS.contains(&s)) {
            "vacuum"
        } else if setting.is_some() {
            "checkpoint"
        } else {
            "optimizer"
        };
        let l = vec![("controller", controller.to_string()), ("knob", knob.clone())];
        made.get_or_create(&l).inc_by(n);
    }
    if let Some(bg) = background {
        gauge(
            &mut reg,
            "postgres_steering",
            "1 while PostgreSQL's background work is steered, 0 otherwise",
            f64::from(u8::from(bg.status.starts_with("steering"))),
        );
        if let Some(debt) = bg.recovery_debt_mib {
            gauge(
                &mut reg,
                "postgres_recovery_debt_bytes",
                "WAL written since the last checkpoint's redo point",
                debt * (1 << 20) as f64,
            );
        }
        if let Some(room) = bg.burst_room_kept_mib {
            gauge(
                &mut reg,
                "postgres_burst_room_bytes",
                "WAL the early start keeps before PostgreSQL's call for a checkpoint",
                room * (1 << 20) as f64,
            );
        }
        if let Some(running) = bg.checkpoint_running {
            gauge(
                &mut reg,
                "postgres_checkpoint_running",
                "1 while a checkpoint runs",
                f64::from(u8::from(running)),
            );
        }
        if let Some(running) = bg.vacuums_running {
            gauge(
                &mut reg,
                "postgres_vacuums_running",
                "Vacuums running on the server (pg_stat_progress_vacuum)",
                f64::from(running),
            );
        }
        let setting = family(
            &mut reg,
            "postgres_setting",
            "A steered setting as last applied (MB, seconds, ms)",
        );
        for (name, &value) in &bg.settings {
            let name = name.trim_start_matches("postgres.").to_string();
            setting.get_or_create(&vec![("name", name)]).set(value);
        }
    }
    reg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_as_browsers_send_them() {
        assert_eq!(host_of("Example.COM.:8080").as_deref(), Some("example.com"));
        assert_eq!(host_of("[::1]:9187").as_deref(), Some("::1"));
        assert_eq!(host_of("0:0:0:0:0:0:0:1").as_deref(), Some("::1"));
        assert_eq!(host_of("127.0.0.1").as_deref(), Some("127.0.0.1"));
        for bad in ["", ":80", "a:b:c", "host:port", "[::1]x", "[::1]:"] {
            assert_eq!(host_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn loopback_the_listen_host_and_allowed_hosts_pass() {
        let rules = |listen: &str, allowed: &[&str]| {
            Rules::new(&AdminConfig {
                listen: listen.into(),
                token: Some("0123456789abcdef".into()),
                allowed_hosts: allowed.iter().map(|h| h.to_string()).collect(),
                ..AdminConfig::default()
            })
            .unwrap()
        };
        let r = rules("10.0.0.5:9187", &["Sluice.Internal"]);
        for ok in [
            "localhost",
            "127.0.0.1:9187",
            "[::1]",
            "10.0.0.5:9187",
            "sluice.internal:1",
        ] {
            assert!(r.host_allowed(ok), "{ok}");
        }
        for refused in [
            "evil.example.com",
            "10.0.0.6",
            "localhost.evil.example.com",
            "sluice.internal.evil",
        ] {
            assert!(!r.host_allowed(refused), "{refused}");
        }
        assert!(!rules("0.0.0.0:9187", &[]).host_allowed("0.0.0.0"));
        assert!(rules("0.0.0.0:9187", &["*"]).host_allowed("anything.example.com"));
    }
}
