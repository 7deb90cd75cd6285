//! `[postgres.background]`: PostgreSQL's checkpoints, and with
//! `[postgres.background.vacuum]` its autovacuum, paced from the load the
//! proxy sees. The rules are sluice-core's
//! [`CheckpointController`](sluice_core::controller::checkpoint) and
//! [`VacuumController`](sluice_core::controller::vacuum); this file
//! observes PostgreSQL, applies the settings the controllers decide through
//! `ALTER SYSTEM` and `pg_reload_conf()`, and gives every setting back.
//!
//! Each interval (`interval_ms`) the driver reads, in one query, the WAL
//! written since the last checkpoint's redo point (`pg_current_wal_lsn()`
//! less `pg_control_checkpoint().redo_lsn`), the time since that checkpoint
//! started, the WAL insert position (from which the controller measures
//! what a burst writes), whether the checkpointer is working (its wait
//! event is anything but its idle `CheckpointerMain`) and the vacuums
//! running (`pg_stat_progress_vacuum`), and counts the requests the gate
//! finished. The controller's changed settings are each an
//! `ALTER SYSTEM SET`, then one `pg_reload_conf()`; the checkpointer takes a
//! new completion target up within its next write delay, mid-checkpoint.
//!
//! What it changes it gives back. Before its first change it records each
//! steered setting as PostgreSQL had it (set by `ALTER SYSTEM`, with its
//! value, or not: `ALTER SYSTEM RESET` restores it) in `state_file`, with
//! the server's system identifier; at a clean stop (SIGTERM, Ctrl-C) it
//! restores them and removes the file. After a crash the file is still
//! there, and the next start restores what it holds before it steers
//! anything. A state file from another server stops steering with an error
//! rather than restoring the wrong server.
//!
//! Faults end steering, never the proxy: a role without the grants, a
//! setting pinned where `ALTER SYSTEM` cannot reach (the server's command
//! line: `pg_settings.source`), or an unreachable server is logged with
//! what to do and shown in `/stats` (`postgres_background`), and the proxy
//! serves on. A lost connection is retried each interval. The role needs no
//! superuser (PostgreSQL 15 or later, which grants `ALTER SYSTEM` per
//! parameter):
//!
//! ```sql
//! CREATE ROLE sluice_steer LOGIN;
//! GRANT pg_monitor TO sluice_steer;
//! GRANT ALTER SYSTEM ON PARAMETER checkpoint_completion_target, max_wal_size, checkpoint_timeout,
//!     wal_compression TO sluice_steer; -- wal_compression unless compress_full_pages is off
//! GRANT EXECUTE ON FUNCTION pg_reload_conf() TO sluice_steer;
//! -- with [postgres.background.vacuum] (backend_flush_after unless its
//! -- flush_after_kib is 0):
//! GRANT ALTER SYSTEM ON PARAMETER autovacuum_vacuum_cost_limit, autovacuum_vacuum_cost_delay,
//!     backend_flush_after TO sluice_steer;
//! ```
//!
//! A role that may `ALTER SYSTEM` none of the checkpoint settings (a managed
//! server that forbids it) but is a member of `pg_monitor` and
//! `pg_checkpoint` gets the one lever left: the checkpoint controller times
//! `CHECKPOINT` alone, in lulls of the foreground
//! ([`decide_timing`](sluice_core::controller::CheckpointController::decide_timing)),
//! changes no setting and steers no vacuum, and says so at start and in
//! `/stats`. The interval that issues one waits for it to finish.
//!
//! The connection goes over TCP inside TLS as `[proxy.upstream_tls]` has
//! it (the server the proxy relays to is the one it steers, so the same
//! certificate check applies, against the connection string's host or
//! `server_name`; the section's mode decides, whatever the string's
//! `sslmode`); without that section, as the string's `sslmode` asks
//! (`prefer` by default, `require`), checking no certificate, as libpq
//! does without a root certificate. A Unix socket stays plain.
//!
//! Limits, as built today: the background writer is not steered, since a
//! measured eager writer moved neither the backends' own writes nor the
//! tail (docs/BENCHMARKS.md, run BW1); and one state file serves one
//! proxy: two proxies steering one server would each restore what the
//! other changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_core::controller::trace::{Step, TraceHeader};
use sluice_core::controller::{
    CheckpointControllerConfig, CheckpointObservation, Decision, Knob, PostgresControllers, VacuumControllerConfig,
    VacuumObservation,
};
use tokio::sync::watch;
use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::upstream_tls::{client_config, SslMode, UpstreamTlsConfig};
use crate::gate::Gate;
use crate::optimizer::DecisionLog;

/// The settings the checkpoint controller steers (`wal_compression` unless
/// its `compress_full_pages` is off).
pub const CHECKPOINT_SETTINGS: [&str; 4] = [
    "checkpoint_completion_target",
    "max_wal_size",
    "checkpoint_timeout",
    "wal_compression",
];

/// `wal_compression`'s methods, fastest first: the first the server was
/// built with is the one turned on.
const COMPRESSION_METHODS: [&str; 3] = ["lz4", "zstd", "pglz"];

/// The settings the vacuum controller steers (`backend_flush_after` unless
/// its `flush_after_kib` is 0).
pub const VACUUM_SETTINGS: [&str; 3] = [
    "autovacuum_vacuum_cost_limit",
    "autovacuum_vacuum_cost_delay",
    "backend_flush_after",
];

/// `[postgres]` in the settings file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Off unless present.
    pub background: Option<BackgroundConfig>,
}

/// `[postgres.background]`.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackgroundConfig {
    /// A libpq-style connection string (`host=/run/postgresql
    /// user=sluice_steer dbname=postgres`) or URL for the steering role.
    pub conninfo: String,
    /// Where the original settings are kept while they are changed.
    pub state_file: PathBuf,
    /// How often PostgreSQL is observed and steered.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// The controller's rules: `[postgres.background.checkpoint]`.
    #[serde(default)]
    pub checkpoint: CheckpointControllerConfig,
    /// Autovacuum's pace, steered if present: `[postgres.background.vacuum]`.
    #[serde(default)]
    pub vacuum: Option<VacuumControllerConfig>,
    /// If set, each interval's observation and decisions are appended here
    /// (JSON lines, made anew at each start), for `sluice replay`.
    #[serde(default)]
    pub trace_file: Option<PathBuf>,
}

fn default_interval_ms() -> u64 {
    1000
}

/// Written by hand so that a password in the connection string never
/// reaches a log.
impl std::fmt::Debug for BackgroundConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundConfig")
            .field("conninfo", &"<hidden>")
            .field("state_file", &self.state_file)
            .field("interval_ms", &self.interval_ms)
            .field("checkpoint", &self.checkpoint)
            .field("vacuum", &self.vacuum)
            .field("trace_file", &self.trace_file)
            .finish()
    }
}

impl BackgroundConfig {
    pub fn validate(&self) -> Result<(), String> {
        let field = |e: String| format!("postgres.background.{e}");
        self.conninfo
            .parse::<tokio_postgres::Config>()
            .map_err(|e| field(format!("conninfo: {e}")))?;
        if self.state_file.as_os_str().is_empty() {
            return Err(field("state_file must name a file".into()));
        }
        if self.trace_file.as_ref().is_some_and(|t| t.as_os_str().is_empty()) {
            return Err(field("trace_file must name a file (or be left out)".into()));
        }
        if !(100..=60_000).contains(&self.interval_ms) {
            return Err(field(format!(
                "interval_ms must lie in 100..=60000, got {}",
                self.interval_ms
            )));
        }
        self.checkpoint
            .validate()
            .map_err(|e| field(format!("checkpoint.{e}")))?;
        match &self.vacuum {
            Some(v) => v.validate().map_err(|e| field(format!("vacuum.{e}"))),
            None => Ok(()),
        }
    }

    /// The settings this configuration steers.
    pub fn steered(&self) -> Vec<&'static str> {
        let checkpoint: &[&'static str] = match self.checkpoint.compress_full_pages {
            true => &CHECKPOINT_SETTINGS,
            false => &CHECKPOINT_SETTINGS[..3],
        };
        let vacuum: &[&'static str] = match &self.vacuum {
            None => &[],
            Some(v) if v.steers_flush() => &VACUUM_SETTINGS,
            Some(_) => &VACUUM_SETTINGS[..2],
        };
        checkpoint.iter().chain(vacuum).copied().collect()
    }
}

/// What `/stats` shows of the steering.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackgroundState {
    /// "starting", "steering", "stopped", or why it does not steer.
    pub status: String,
    /// The last observation: recovery debt (MiB), whether a checkpoint
    /// runs, and the foreground's rate (requests/s).
    pub recovery_debt_mib: Option<f64>,
    pub checkpoint_running: Option<bool>,
    pub foreground_rate: Option<f64>,
    /// Vacuums running on the server.
    pub vacuums_running: Option<u32>,
    /// The WAL the early start keeps before PostgreSQL's call for a
    /// checkpoint (MiB): 1.5 times the largest recent burst's, fading, or
    /// `min_burst_room_mib` if more.
    pub burst_room_kept_mib: Option<f64>,
    /// Time from the last decision to PostgreSQL's reload returning, ms.
    pub last_apply_ms: Option<f64>,
    /// The steered settings as last applied (max_wal_size in MB,
    /// checkpoint_timeout in seconds, wal_compression 1 for on,
    /// autovacuum_vacuum_cost_delay in ms, backend_flush_after in kB).
    pub settings: BTreeMap<String, f64>,
}

/// Shared with the admin port.
#[derive(Clone, Default)]
pub struct BackgroundStatus(Arc<Mutex<BackgroundState>>);

impl BackgroundStatus {
    pub fn get(&self) -> BackgroundState {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn update(&self, f: impl FnOnce(&mut BackgroundState)) {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn status(&self, status: impl Into<String>) {
        let status = status.into();
        self.update(|s| s.status = status);
    }
}

/// One steered setting as PostgreSQL had it before the first change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Original {
    pub name: String,
    /// The value `ALTER SYSTEM` had given it, with its unit; `None` if it
    /// had not (then `ALTER SYSTEM RESET` gives it back).
    pub altered: Option<String>,
}

/// The state file's content.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Recorded {
    /// `pg_control_system().system_identifier`, as text.
    system: String,
    originals: Vec<Original>,
}

/// Steers until `shutdown` turns true, then gives the settings back. Faults
/// are logged and shown in `status`; the task then ends (or, if the server
/// is unreachable, keeps trying) without touching the proxy.
pub async fn run(
    config: BackgroundConfig,
    upstream_tls: Option<UpstreamTlsConfig>,
    gate: Gate,
    log: DecisionLog,
    status: BackgroundStatus,
    mut shutdown: watch::Receiver<bool>,
) {
    status.status("starting");
    let stopping = async {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let connector = match Connector::new(&config.conninfo, upstream_tls.as_ref()) {
        Ok(connector) => connector,
        Err(e) => {
            tracing::error!("postgres.background: not steering: {e}; the proxy serves on");
            status.status(format!("not steering: {e}"));
            return;
        }
    };
    let mut steering = None;
    tokio::select! {
        started = start(&config, &connector, &status) => steering = started,
        () = stopping => {}
    }
    let Some(mut steering) = steering else { return };
    let running = running_status(steering.controllers.is_timing_alone());
    status.status(running);
    let mut tick = tokio::time::interval(Duration::from_millis(config.interval_ms));
    let mut completed = gate.completed();
    let mut at = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
        let now = Instant::now();
        let done = gate.completed();
        let rate = (done - completed) as f64 / (now - at).as_secs_f64().max(1e-3);
        (completed, at) = (done, now);
        if let Err(e) = steering.tick(&connector, rate, &log, &status).await {
            tracing::warn!("postgres.background: {e}; trying again next interval");
            status.status(format!("retrying: {e}"));
            steering.client = None;
            steering.gap = true;
        } else {
            status.status(running);
        }
    }
    match steering.give_back(&config, &connector).await {
        Ok(()) if steering.controllers.is_timing_alone() => status.status("stopped: no setting was changed"),
        Ok(()) => {
            tracing::info!("postgres.background: settings given back");
            status.status("stopped: settings given back");
        }
        Err(e) => {
            tracing::error!(
                "postgres.background: settings not given back ({e}); {} keeps the originals and the next start restores them",
                config.state_file.display()
            );
            status.status(format!("stopped: settings not given back: {e}"));
        }
    }
}

/// A connection, the controllers and what they have recorded (nothing
/// when they time `CHECKPOINT` alone, which changes no setting).
struct Steering {
    client: Option<Client>,
    controllers: PostgresControllers,
    recorded: Option<Recorded>,
    trace: Option<TraceFile>,
    /// An interval went unobserved: the next observation carries no WAL
    /// position, so that the WAL of the gap is not booked to one interval
    /// (and, in a burst, taken for what the burst wrote).
    gap: bool,
    /// What `wal_compression` is set to when the controller turns it on
    /// (`off` where it does not: timing alone, or `compress_full_pages`
    /// off).
    compression: &'static str,
}

/// How the controllers act on this server.
enum Mode {
    /// Through `ALTER SYSTEM`, the originals recorded.
    Steer(Recorded),
    /// `CHECKPOINT` timed alone, since the role may not `ALTER SYSTEM` any
    /// checkpoint setting; why, for the log.
    TimingAlone(String),
}

/// What `/stats` says while the controllers run.
fn running_status(timing_alone: bool) -> &'static str {
    if timing_alone {
        "steering: timing CHECKPOINT alone (no ALTER SYSTEM on the checkpoint settings)"
    } else {
        "steering"
    }
}

/// The controller's run as `sluice replay` reads it (sluice-core's
/// `controller::trace`): a header line, then a line per interval, each
/// written whole in one call so that a crash leaves at most the last cut.
struct TraceFile {
    file: std::fs::File,
    path: PathBuf,
}

impl TraceFile {
    fn create(path: &Path, header: &TraceHeader) -> Result<TraceFile, String> {
        let mut trace = TraceFile {
            file: std::fs::File::create(path)
                .map_err(|e| format!("cannot create the trace file {}: {e}", path.display()))?,
            path: path.to_owned(),
        };
        trace.line(header)?;
        Ok(trace)
    }

    fn line(&mut self, record: &impl Serialize) -> Result<(), String> {
        use std::io::Write;
        let mut text = serde_json::to_vec(record).expect("a trace record is plain data");
        text.push(b'\n');
        self.file
            .write_all(&text)
            .map_err(|e| format!("cannot write the trace file {}: {e}", self.path.display()))
    }
}

/// Connects (retrying every interval while the server is unreachable),
/// checks the grants and the settings, restores what a crashed run left,
/// and records the originals. `None` if steering cannot go on.
async fn start(config: &BackgroundConfig, connector: &Connector, status: &BackgroundStatus) -> Option<Steering> {
    let refuse = |e: String| {
        tracing::error!("postgres.background: not steering: {e}; the proxy serves on");
        status.status(format!("not steering: {e}"));
    };
    // Settings the controllers refuse are refused before any connection.
    if let Err(e) = PostgresControllers::new(config.checkpoint, config.vacuum) {
        refuse(e);
        return None;
    }
    let client = loop {
        match connector.connect().await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!("postgres.background: {e}; trying again in {} ms", config.interval_ms);
                status.status(format!("waiting for PostgreSQL: {e}"));
                tokio::time::sleep(Duration::from_millis(config.interval_ms)).await;
            }
        }
    };
    let recorded = match prepare(&client, config).await {
        Ok(Mode::Steer(recorded)) => Some(recorded),
        Ok(Mode::TimingAlone(why)) => {
            tracing::warn!("postgres.background: {why}");
            None
        }
        Err(e) => {
            refuse(e);
            return None;
        }
    };
    if let (Some(_), Some(why)) = (&recorded, config.checkpoint.crowding()) {
        tracing::warn!("postgres.background.checkpoint: {why}");
    }
    let (controllers, header) = match &recorded {
        Some(_) => (
            PostgresControllers::new(config.checkpoint, config.vacuum),
            TraceHeader::postgres(config.checkpoint, config.vacuum),
        ),
        None => (
            PostgresControllers::timing_alone(config.checkpoint),
            TraceHeader::postgres_timing_alone(config.checkpoint),
        ),
    };
    let controllers = controllers.expect("the settings were checked above");
    // Asked of the server only where the controller turns it on.
    let compression = match &recorded {
        Some(_) if config.checkpoint.compress_full_pages => match compression_method(&client).await {
            Ok(method) => method,
            Err(e) => {
                refuse(e);
                return None;
            }
        },
        _ => "off",
    };
    let trace = match config.trace_file.as_deref() {
        None => None,
        Some(path) => match TraceFile::create(path, &header) {
            Ok(trace) => Some(trace),
            Err(e) => {
                refuse(e);
                return None;
            }
        },
    };
    Some(Steering {
        client: Some(client),
        controllers,
        recorded,
        trace,
        gap: false,
        compression,
    })
}

/// The fastest `wal_compression` method the server was built with
/// (`on`, PostgreSQL's name for pglz before version 15, if it lists none).
async fn compression_method(client: &Client) -> Result<&'static str, String> {
    let methods: Vec<String> = query_one(
        client,
        "SELECT coalesce(enumvals, '{}')::text[] FROM pg_settings WHERE name = 'wal_compression'",
        |r| r.get(0),
    )
    .await?;
    Ok(COMPRESSION_METHODS
        .into_iter()
        .find(|m| methods.iter().any(|v| v == m))
        .unwrap_or("on"))
}

/// The steering role's way to the server: the parsed connection string,
/// and TLS as `[proxy.upstream_tls]` has it (the server the proxy reaches
/// is the one it steers), or without one as the string's own `sslmode`
/// asks, checking no certificate (libpq's `require` without a root
/// certificate). PostgreSQL speaks no TLS on its Unix socket, so a
/// connection there stays plain.
struct Connector {
    config: tokio_postgres::Config,
    tls: ServerNamed,
}

impl Connector {
    fn new(conninfo: &str, upstream_tls: Option<&UpstreamTlsConfig>) -> Result<Connector, String> {
        let mut config: tokio_postgres::Config = conninfo.parse().map_err(|e| format!("conninfo: {e}"))?;
        if config.get_hosts().is_empty() {
            // TLS needs a name to check: an address given alone is its own.
            for address in config.get_hostaddrs().to_vec() {
                config.host(address.to_string());
            }
        }
        let on_unix_socket = config.get_hostaddrs().is_empty()
            && !config.get_hosts().is_empty()
            && config.get_hosts().iter().all(|h| !matches!(h, Host::Tcp(_)));
        if on_unix_socket {
            config.ssl_mode(PgSslMode::Disable);
        } else if let Some(tls) = upstream_tls {
            config.ssl_mode(match tls.mode {
                SslMode::Prefer => PgSslMode::Prefer,
                SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
            });
        }
        let lenient = UpstreamTlsConfig::default();
        let tls = upstream_tls.unwrap_or(&lenient);
        Ok(Connector {
            config,
            tls: ServerNamed {
                inner: MakeRustlsConnect::new(client_config(tls).map_err(|e| e.to_string())?),
                name: tls.server_name.clone(),
            },
        })
    }

    async fn connect(&self) -> Result<Client, String> {
        let (client, connection) = self
            .config
            .connect(self.tls.clone())
            .await
            .map_err(|e| format!("cannot connect to PostgreSQL: {}", with_causes(&e)))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("postgres.background: connection ended: {e}");
            }
        });
        Ok(client)
    }
}

/// TLS that checks the certificate against `name` (`upstream_tls`'s
/// `server_name`) when given, else against the connection string's host.
#[derive(Clone)]
struct ServerNamed {
    inner: MakeRustlsConnect,
    name: Option<String>,
}

impl<S> MakeTlsConnect<S> for ServerNamed
where
    MakeRustlsConnect: MakeTlsConnect<S>,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, host: &str) -> Result<Self::TlsConnect, Self::Error> {
        let name = self.name.as_deref().unwrap_or(host);
        MakeTlsConnect::<S>::make_tls_connect(&mut self.inner, name)
    }
}

/// Checks the grants, where each setting comes from and the server's WAL
/// segment size, restores a crashed run's originals, and records the
/// originals in `state_file`. A role that may `ALTER SYSTEM` no checkpoint
/// setting but may `CHECKPOINT` (a managed server's) gets
/// [`Mode::TimingAlone`].
async fn prepare(client: &Client, config: &BackgroundConfig) -> Result<Mode, String> {
    let (state_file, steered) = (config.state_file.as_path(), &config.steered()[..]);
    let role: String = query_one(client, "SELECT current_user::text", |r| r.get(0)).await?;
    let missing = missing_grants(client, steered).await?;
    if !missing.is_empty() {
        let forbidden = CHECKPOINT_SETTINGS[..3]
            .iter()
            .all(|name| missing.contains(&format!("ALTER SYSTEM on {name}")));
        let observes = !missing.iter().any(|m| m == "pg_monitor");
        let checkpoints: bool = query_one(client, "SELECT pg_has_role('pg_checkpoint', 'USAGE')", |r| r.get(0)).await?;
        if forbidden && observes && checkpoints {
            if state_file.exists() {
                return Err(format!(
                    "{} holds settings an earlier run changed, and role {role} cannot give them back \
                     (no ALTER SYSTEM); restore them as a role that can, or remove the file",
                    state_file.display()
                ));
            }
            return Ok(Mode::TimingAlone(format!(
                "role {role} may not ALTER SYSTEM the checkpoint settings: timing CHECKPOINT alone, \
                 in lulls of the foreground (no setting is changed{}). To steer them: GRANT ALTER SYSTEM ON PARAMETER {} TO {role}; \
                 GRANT EXECUTE ON FUNCTION pg_reload_conf() TO {role};",
                if steered.len() > CHECKPOINT_SETTINGS.len() { ", autovacuum is not steered" } else { "" },
                steered.join(", ")
            )));
        }
        return Err(format!(
            "role {role} lacks {}. As a superuser: GRANT pg_monitor TO {role}; \
             GRANT ALTER SYSTEM ON PARAMETER {} TO {role}; GRANT EXECUTE ON FUNCTION pg_reload_conf() TO {role}; \
             (or, where ALTER SYSTEM is not allowed, GRANT pg_monitor, pg_checkpoint TO {role}; to time CHECKPOINT alone)",
            missing.join(", "),
            steered.join(", ")
        ));
    }
    let system: String = query_one(client, "SELECT system_identifier::text FROM pg_control_system()", |r| {
        r.get(0)
    })
    .await?;
    let segment: i64 = query_one(
        client,
        "SELECT pg_size_bytes(current_setting('wal_segment_size'))",
        |r| r.get(0),
    )
    .await?;
    let expected = config.checkpoint.wal_segment_mib << 20;
    if u64::try_from(segment).ok() != Some(expected) {
        return Err(format!(
            "the server's WAL segments are {} MiB, not the {} MiB of wal_segment_mib: set \
             [postgres.background.checkpoint] wal_segment_mib = {}",
            segment >> 20,
            config.checkpoint.wal_segment_mib,
            segment >> 20
        ));
    }
    let sources = settings(client, steered).await?;
    let pinned: Vec<String> = sources
        .iter()
        .filter(|s| !matches!(s.source.as_str(), "default" | "configuration file"))
        .map(|s| format!("{} (pg_settings.source = {})", s.name, s.source))
        .collect();
    if !pinned.is_empty() {
        return Err(format!(
            "{} set where ALTER SYSTEM cannot change it; remove it from the server's command line \
             (or environment) to let it be steered",
            pinned.join(", ")
        ));
    }
    let mut originals: Vec<Original> = sources
        .into_iter()
        .map(|s| Original {
            altered: s.altered.then_some(s.value),
            name: s.name,
        })
        .collect();
    if let Some(left) = read_state(state_file)? {
        if left.system != system {
            return Err(format!(
                "{} holds settings of another server (system identifier {}, this one is {system}); \
                 restore them there or remove the file",
                state_file.display(),
                left.system
            ));
        }
        restore(client, &left.originals).await?;
        tracing::warn!(
            "postgres.background: restored the settings a run that did not stop cleanly left changed ({})",
            state_file.display()
        );
        // What that run changed is known from its file, not from
        // pg_settings (the reload may not have reached this session yet);
        // it may have steered fewer settings than this run.
        for original in &mut originals {
            if let Some(recorded) = left.originals.iter().find(|o| o.name == original.name) {
                original.clone_from(recorded);
            }
        }
    }
    let recorded = Recorded { system, originals };
    write_state(state_file, &recorded)?;
    Ok(Mode::Steer(recorded))
}

async fn query_one<T>(client: &Client, sql: &str, get: impl FnOnce(&tokio_postgres::Row) -> T) -> Result<T, String> {
    client
        .query_one(sql, &[])
        .await
        .map(|row| get(&row))
        .map_err(|e| format!("{sql}: {}", db_error(&e)))
}

/// An error and what caused it (the driver's TLS failure says why only in
/// its source).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

/// The server's message where it sent one (the driver's own text says
/// only "db error").
fn db_error(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |db| db.message().to_string())
}

/// The grants the role lacks, by name.
async fn missing_grants(client: &Client, steered: &[&str]) -> Result<Vec<String>, String> {
    let sql = "SELECT name, has_parameter_privilege(name, 'ALTER SYSTEM') FROM unnest($1::text[]) AS name";
    let rows = client
        .query(sql, &[&steered])
        .await
        .map_err(|e| format!("checking grants: {}", db_error(&e)))?;
    let mut missing: Vec<String> = rows
        .iter()
        .filter(|r| !r.get::<_, bool>(1))
        .map(|r| format!("ALTER SYSTEM on {}", r.get::<_, String>(0)))
        .collect();
    let checks = "SELECT has_function_privilege('pg_reload_conf()', 'EXECUTE'), \
                  pg_has_role('pg_monitor', 'USAGE')";
    let row = client
        .query_one(checks, &[])
        .await
        .map_err(|e| format!("checking grants: {}", db_error(&e)))?;
    if !row.get::<_, bool>(0) {
        missing.push("EXECUTE on pg_reload_conf()".into());
    }
    if !row.get::<_, bool>(1) {
        missing.push("pg_monitor".into());
    }
    Ok(missing)
}

/// A steered setting as `pg_settings` shows it.
struct Source {
    name: String,
    /// With its unit, as `ALTER SYSTEM SET` takes it.
    value: String,
    source: String,
    /// Set by `ALTER SYSTEM` (it comes from `postgresql.auto.conf`).
    altered: bool,
}

async fn settings(client: &Client, steered: &[&str]) -> Result<Vec<Source>, String> {
    // A setting counted in pages has the unit "8kB": its value is given
    // back in kB, since "32" with "8kB" appended would read as 328 kB.
    let sql = "SELECT name, CASE WHEN unit = '8kB' THEN (setting::int8 * 8)::text || 'kB' \
               ELSE setting || coalesce(unit, '') END, source, \
               coalesce(sourcefile LIKE '%postgresql.auto.conf', false) \
               FROM pg_settings WHERE name = ANY($1) ORDER BY name";
    let rows = client
        .query(sql, &[&steered])
        .await
        .map_err(|e| format!("reading pg_settings: {}", db_error(&e)))?;
    Ok(rows
        .iter()
        .map(|r| Source {
            name: r.get(0),
            value: r.get(1),
            source: r.get(2),
            altered: r.get(3),
        })
        .collect())
}

/// `ALTER SYSTEM` back to the originals, then one reload.
async fn restore(client: &Client, originals: &[Original]) -> Result<(), String> {
    for original in originals {
        let mut steerable = CHECKPOINT_SETTINGS.iter().chain(&VACUUM_SETTINGS);
        let Some(name) = steerable.find(|s| **s == original.name) else {
            return Err(format!(
                "the state file names {:?}, which is not steered",
                original.name
            ));
        };
        let sql = match &original.altered {
            Some(value) => format!("ALTER SYSTEM SET {name} = {}", quote(value)),
            None => format!("ALTER SYSTEM RESET {name}"),
        };
        execute(client, &sql).await?;
    }
    execute(client, "SELECT pg_reload_conf()").await
}

/// A string literal: the value is PostgreSQL's own text, but the state
/// file could have been edited.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

async fn execute(client: &Client, sql: &str) -> Result<(), String> {
    client
        .simple_query(sql)
        .await
        .map(drop)
        .map_err(|e| format!("{sql}: {}", db_error(&e)))
}

fn read_state(path: &Path) -> Result<Option<Recorded>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{} is not a state file of sluice ({e}); remove it", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Written whole or not at all: a crash mid-write leaves the old file.
fn write_state(path: &Path, recorded: &Recorded) -> Result<(), String> {
    let text = serde_json::to_string_pretty(recorded).expect("plain data serializes");
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("cannot write the state file {}: {e}", path.display()))
}

impl Steering {
    /// Connects again if the connection was lost.
    async fn connected<'a>(client: &'a mut Option<Client>, connector: &Connector) -> Result<&'a Client, String> {
        if client.is_none() {
            *client = Some(connector.connect().await?);
        }
        Ok(client.as_ref().expect("just connected"))
    }

    /// Observes, decides, applies.
    async fn tick(
        &mut self,
        connector: &Connector,
        rate: f64,
        log: &DecisionLog,
        status: &BackgroundStatus,
    ) -> Result<(), String> {
        let client = Self::connected(&mut self.client, connector).await?;
        let sql = "SELECT (pg_current_wal_lsn() - redo_lsn)::float8, \
                   extract(epoch FROM clock_timestamp() - checkpoint_time)::float8, \
                   coalesce((SELECT wait_event <> 'CheckpointerMain' OR wait_event IS NULL \
                             FROM pg_stat_activity WHERE backend_type = 'checkpointer'), false), \
                   (SELECT count(*)::int4 FROM pg_stat_progress_vacuum), \
                   (SELECT setting::float8 * 1048576 FROM pg_settings WHERE name = 'max_wal_size') \
                     / (1 + current_setting('checkpoint_completion_target')::float8), \
                   (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8 \
                   FROM pg_control_checkpoint()";
        let row = client
            .query_one(sql, &[])
            .await
            .map_err(|e| format!("observing: {}", db_error(&e)))?;
        let (debt, since, running, vacuums, trigger, position): (f64, f64, bool, i32, f64, f64) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
        let vacuums_running = u32::try_from(vacuums).unwrap_or(0);
        let obs = CheckpointObservation {
            foreground_rate: rate,
            wal_since_redo: debt.max(0.0) as u64,
            checkpoint_running: running,
            since_checkpoint_start: (since.max(0.0) * 1e9) as u64,
            wal_position: (!std::mem::take(&mut self.gap)).then_some(position.max(0.0) as u64),
            server_trigger_point: self.controllers.is_timing_alone().then_some(trigger.max(0.0) as u64),
        };
        let vacuum_obs = self.controllers.steers_vacuum().then_some(VacuumObservation {
            foreground_rate: rate,
            vacuums_running,
        });
        let decisions = self.controllers.decide(obs, vacuum_obs);
        let room = self.controllers.burst_room();
        status.update(|s| {
            s.recovery_debt_mib = Some(debt / (1 << 20) as f64);
            s.checkpoint_running = Some(running);
            s.foreground_rate = Some(rate);
            s.vacuums_running = Some(vacuums_running);
            s.burst_room_kept_mib = room.map(|r| r / (1 << 20) as f64);
        });
        if decisions.is_empty() {
            self.record(obs, vacuum_obs, &decisions, true);
            return Ok(());
        }
        let decided = Instant::now();
        let applied = async {
            let mut reload = false;
            for d in &decisions {
                let sql = match d.knob {
                    Knob::Postgres(name) => {
                        reload = true;
                        format!(
                            "ALTER SYSTEM SET {name} = {}",
                            setting_value(name, d.value, self.compression)
                        )
                    }
                    // Waits for the checkpoint, seconds at most in a lull.
                    Knob::PostgresCheckpoint => "CHECKPOINT".to_string(),
                    _ => unreachable!("the checkpoint and vacuum controllers decide PostgreSQL's knobs alone"),
                };
                execute(client, &sql).await?;
            }
            if reload {
                execute(client, "SELECT pg_reload_conf()").await?;
            }
            Ok::<(), String>(())
        }
        .await;
        self.record(obs, vacuum_obs, &decisions, applied.is_ok());
        if let Err(e) = applied {
            self.controllers.forget_applied();
            return Err(e);
        }
        let took = decided.elapsed().as_secs_f64() * 1e3;
        status.update(|s| {
            s.last_apply_ms = Some(took);
            for d in &decisions {
                if let Knob::Postgres(_) = d.knob {
                    s.settings.insert(d.knob.to_string(), d.value);
                }
            }
        });
        for d in decisions {
            log.record(d.knob.to_string(), d.value, d.why);
        }
        Ok(())
    }

    /// Appends the interval to the trace, if there is one; a trace that
    /// cannot be written is given up with a warning, and steering goes on.
    fn record(
        &mut self,
        obs: CheckpointObservation,
        vacuum_obs: Option<VacuumObservation>,
        decisions: &[Decision],
        applied: bool,
    ) {
        let Some(trace) = &mut self.trace else { return };
        if let Err(e) = trace.line(&Step::new(obs, vacuum_obs, decisions, applied)) {
            tracing::warn!("postgres.background: {e}; no more of this run is traced");
            self.trace = None;
        }
    }

    /// Restores the originals and removes the state file; timing alone
    /// changed nothing.
    async fn give_back(&mut self, config: &BackgroundConfig, connector: &Connector) -> Result<(), String> {
        let Some(recorded) = &self.recorded else { return Ok(()) };
        let client = Self::connected(&mut self.client, connector).await?;
        restore(client, &recorded.originals).await?;
        std::fs::remove_file(&config.state_file).map_err(|e| {
            format!(
                "settings restored, but cannot remove {}: {e}",
                config.state_file.display()
            )
        })
    }
}

/// A decided value as `ALTER SYSTEM SET` takes it (max_wal_size in MB,
/// checkpoint_timeout in seconds, autovacuum_vacuum_cost_delay in ms,
/// backend_flush_after in kB; wal_compression on is `compression`, the
/// server's fastest method).
fn setting_value(name: &str, value: f64, compression: &str) -> String {
    match name {
        "wal_compression" if value > 0.0 => format!("'{compression}'"),
        "wal_compression" => "'off'".to_string(),
        "max_wal_size" => format!("'{}MB'", value as u64),
        "backend_flush_after" => format!("'{}kB'", value as u64),
        "checkpoint_timeout" => format!("'{}s'", value as u64),
        "autovacuum_vacuum_cost_delay" => format!("'{value}ms'"),
        _ => format!("{value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Result<BackgroundConfig, String> {
        let text = format!("conninfo = 'host=/tmp user=s'\nstate_file = '/tmp/s.json'\n{extra}");
        let c: BackgroundConfig = toml::from_str(&text).map_err(|e| e.to_string())?;
        c.validate().map(|()| c)
    }

    #[test]
    fn bad_settings_name_the_field() {
        assert!(config("").is_ok());
        assert!(config("interval_ms = 5")
            .unwrap_err()
            .contains("postgres.background.interval_ms"));
        let e = config("[checkpoint]\nbusy_completion_target = 2.0\n").unwrap_err();
        assert!(
            e.contains("postgres.background.checkpoint.busy_completion_target"),
            "{e}"
        );
        assert!(config("[checkpoint]\nmax_recovery_wal_mb = 128\n")
            .unwrap_err()
            .contains("max_recovery_wal_mb"));
        let e = config("[vacuum]\nbusy_cost_limit = 0\n").unwrap_err();
        assert!(e.contains("postgres.background.vacuum.busy_cost_limit"), "{e}");
    }

    #[test]
    fn vacuum_settings_are_steered_only_when_asked() {
        assert_eq!(config("").unwrap().steered(), CHECKPOINT_SETTINGS);
        let with = config("[vacuum]\n").unwrap();
        assert_eq!(with.vacuum, Some(VacuumControllerConfig::default()));
        assert_eq!(with.steered().len(), 7);
        assert!(with.steered().contains(&"autovacuum_vacuum_cost_limit"));
        assert!(with.steered().contains(&"backend_flush_after"));
        let paced = config("[vacuum]\nflush_after_kib = 0\n").unwrap();
        assert!(!paced.steered().contains(&"backend_flush_after"));
        assert_eq!(paced.steered().len(), 6);
        let plain = config("[checkpoint]\ncompress_full_pages = false\n").unwrap();
        assert_eq!(plain.steered(), CHECKPOINT_SETTINGS[..3]);
    }

    #[test]
    fn the_connection_string_stays_out_of_debug_output() {
        let c: BackgroundConfig =
            toml::from_str("conninfo = 'host=/tmp password=hunter2'\nstate_file = '/tmp/s.json'\n").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn values_carry_their_units() {
        let value = |name, v| setting_value(name, v, "lz4");
        assert_eq!(value("max_wal_size", 190.0), "'190MB'");
        assert_eq!(value("checkpoint_timeout", 46.0), "'46s'");
        assert_eq!(value("checkpoint_completion_target", 0.9), "0.9");
        assert_eq!(value("wal_compression", 1.0), "'lz4'");
        assert_eq!(value("wal_compression", 0.0), "'off'");
        assert_eq!(value("autovacuum_vacuum_cost_delay", 2.0), "'2ms'");
        assert_eq!(value("autovacuum_vacuum_cost_limit", 400.0), "400");
        assert_eq!(value("backend_flush_after", 256.0), "'256kB'");
        assert_eq!(quote("it's"), "'it''s'");
    }

    #[test]
    fn a_state_file_survives_a_round_trip_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(read_state(&path).unwrap(), None);
        let recorded = Recorded {
            system: "7".into(),
            originals: vec![Original {
                name: "max_wal_size".into(),
                altered: Some("2GB".into()),
            }],
        };
        write_state(&path, &recorded).unwrap();
        assert_eq!(read_state(&path).unwrap(), Some(recorded));
        std::fs::write(&path, "{").unwrap();
        assert!(read_state(&path).unwrap_err().contains("not a state file"));
    }
}
