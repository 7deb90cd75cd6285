//! `sluice proxy`: AppleS admission control and fair scheduling in front of
//! an unmodified PostgreSQL or Redis (the service is `sluice_proxy::service`).

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use clap::Args;
use sluice_proxy::optimizer::ParallelismMode;
use sluice_proxy::settings::Settings;
use sluice_proxy::{PoolMode, Protocol};
use tokio::signal::unix::{signal, SignalKind};

/// Admission control and fair scheduling (AppleS) in front of PostgreSQL or Redis
#[derive(Args)]
#[command(long_about = "Put Sluice in front of PostgreSQL or Redis.\n\n\
    Requests wait in per-tenant queues; at most P of them are inside the database at once, \
    and tenants take turns by weighted round robin with round quota zeta (AppleS). P is tuned \
    by AppleS's three-sample throughput model (or a gradient limiter, or pinned), zeta by \
    feedback on unfairness and latency variability, and latency-sensitive tenants' weights \
    by their SLOs. A PostgreSQL client gets its own server connection (with --pool transaction, \
    one per request from a pool shared by clients of the same login); Redis clients share a few \
    until their first command that touches session state (SELECT, AUTH, MULTI, ...), then get \
    their own.\n\n\
    Quick start: sluice proxy --protocol pg --listen 127.0.0.1:6432 --upstream 127.0.0.1:5432\n\
    With a file: sluice proxy --config docs/proxy.example.toml (every setting documented there).\n\
    The admin port (default 127.0.0.1:9187) serves /metrics, /stats, POST /gate, POST /weight, POST /slo and DELETE /slo/NAME; \
    it accepts only Host names it is configured for, refuses browser pages of other sites, and with [admin] token_file \
    (required when it listens beyond localhost) only requests bearing the token. \
    SIGHUP reloads the file; SIGINT or SIGTERM drains requests in flight and stops.")]
pub struct ProxyArgs {
    /// Settings file (TOML; see docs/proxy.example.toml)
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Address to listen on (overrides the file)
    #[arg(long)]
    pub listen: Option<String>,
    /// A Unix socket file to listen on as well, such as /tmp/.s.PGSQL.6432
    /// for psql -h /tmp -p 6432 (overrides the file)
    #[arg(long)]
    pub listen_unix: Option<PathBuf>,
    /// The database's host:port, or its Unix socket's path such as
    /// /var/run/postgresql/.s.PGSQL.5432 (overrides the file)
    #[arg(long)]
    pub upstream: Option<String>,
    /// pg or redis (overrides the file)
    #[arg(long)]
    pub protocol: Option<String>,
    /// Pin P to this value instead of tuning it
    #[arg(long)]
    pub parallelism: Option<usize>,
    /// Worker threads (overrides the file; default: 1 for Redis and for PostgreSQL under transaction pooling, one per core for PostgreSQL with a backend per client)
    #[arg(long)]
    pub threads: Option<usize>,
    /// PostgreSQL: session (a server connection per client; the default) or transaction (one per request, from a pool; prepared statements carry over, other session state set outside a transaction block does not)
    #[arg(long)]
    pub pool: Option<String>,
    /// PostgreSQL transaction pooling: a file of "user" "password" lines (PgBouncer's auth_file format) for opening server connections where the server asks a password (overrides the file)
    #[arg(long)]
    pub auth_file: Option<PathBuf>,
}

pub fn run(args: ProxyArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let mut settings = settings(&args)?;
    // A PostgreSQL client may hold a server connection of its own (in
    // session mode, while it logs in, while it is in a transaction); Redis
    // clients share the upstream connections.
    let (per_client, upstream) = match settings.proxy.protocol {
        Protocol::Pg => (2, 0),
        Protocol::Redis => (1, settings.proxy.shared_upstreams as u64),
    };
    // A bound the user set is kept, with a warning where it does not fit
    // (a client of transaction pooling rarely holds its second descriptor);
    // the default is lowered to what fits.
    let fit = crate::fd_limit::Need {
        setting: "max_client_conn",
        clients: settings.proxy.max_client_conn(),
        asked: settings.proxy.max_client_conn.is_some(),
        per_client,
        upstream,
    }
    .fit();
    settings.proxy.max_client_conn.get_or_insert(fit);
    // Sessions run on the proxy's own worker threads; this one runs the
    // listener, the optimizer and the admin port.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(serve(settings, args.config))
}

/// The file's settings (or a minimal file built from the flags) with the
/// flags applied on top.
fn settings(args: &ProxyArgs) -> Result<Settings> {
    let mut settings = match &args.config {
        Some(path) => Settings::load(path).map_err(|e| anyhow!(e))?,
        None => {
            let (Some(listen), Some(upstream), Some(_)) = (&args.listen, &args.upstream, &args.protocol) else {
                return Err(anyhow!(
                    "give --config FILE, or all of --listen, --upstream and --protocol"
                ));
            };
            // The protocol flag is applied below, with the other overrides.
            let text = format!("[proxy]\nlisten = {listen:?}\nupstream = {upstream:?}\nprotocol = \"redis\"\n");
            Settings::parse(&text).map_err(|e| anyhow!("flags: {e}"))?
        }
    };
    if let Some(listen) = &args.listen {
        settings.proxy.listen = listen.clone();
    }
    if let Some(path) = &args.listen_unix {
        settings.proxy.listen_unix = Some(path.clone());
    }
    if let Some(upstream) = &args.upstream {
        settings.proxy.upstream = upstream.clone();
    }
    if let Some(protocol) = &args.protocol {
        settings.proxy.protocol = match protocol.as_str() {
            "pg" | "postgres" | "postgresql" => Protocol::Pg,
            "redis" => Protocol::Redis,
            other => return Err(anyhow!("--protocol must be pg or redis, got `{other}`")),
        };
    }
    if let Some(threads) = args.threads {
        settings.proxy.threads = threads;
    }
    if let Some(pool) = &args.pool {
        settings.proxy.pool = match pool.as_str() {
            "session" => PoolMode::Session,
            "transaction" => PoolMode::Transaction,
            other => return Err(anyhow!("--pool must be session or transaction, got `{other}`")),
        };
    }
    if let Some(path) = &args.auth_file {
        settings.proxy.auth_file = Some(path.clone());
    }
    if let Some(p) = args.parallelism {
        settings.gate.parallelism = p;
        settings.optimizer.parallelism = ParallelismMode::Fixed;
    }
    settings.proxy.validate()?;
    settings.gate.validate().map_err(|e| anyhow!(e))?;
    Ok(settings)
}

async fn serve(settings: Settings, path: Option<PathBuf>) -> Result<()> {
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            let _ = reload_tx.try_send(());
        }
    });
    let mut terminate = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = terminate.recv() => {},
        }
        eprintln!("sluice proxy: draining requests in flight");
    };
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<sluice_proxy::service::Addresses>();
    let unix = (settings.proxy.listen_unix.as_ref()).map_or(String::new(), |p| format!(" and {}", p.display()));
    let token = settings.admin.token.is_some() || settings.admin.token_file.is_some();
    let token = if token { " (bearer token required)" } else { "" };
    tokio::spawn(async move {
        if let Ok(a) = started_rx.await {
            let admin = a.admin.map_or("off".to_string(), |x| format!("http://{x}{token}"));
            eprintln!("sluice proxy: listening on {}{unix}, admin {admin}", a.proxy);
        }
    });
    sluice_proxy::service::run(settings, path, reload_rx, started_tx, shutdown)
        .await
        .map_err(|e| anyhow!(e))
}
