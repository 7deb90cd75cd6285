//! `sluice route`: the router in front of sharded `sluice serve` or a
//! Redis Cluster (the router is `sluice_route`).

use std::path::PathBuf;

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use sluice_route::compaction::Steering;
use sluice_route::config::{ClusterConfig, Config, ShardKind};
use tokio::signal::unix::{signal, SignalKind};

use crate::fd_limit::Need;

/// A router for sharded stores: hash slots, multi-key commands split by shard, request order sent to every shard
#[derive(Args)]
#[command(long_about = "Put one Redis-protocol endpoint in front of several shards.\n\n\
    Keys go to shards by Redis Cluster hash slots (CRC16 of the key or its {hash tag}, mod 16384). \
    MGET, MSET, DEL, EXISTS, UNLINK and TOUCH are split into one sub-request per shard and their \
    replies merged; RANGE goes to every shard and the sorted parts are merged. Every request gets \
    an id in arrival order that travels with its sub-requests: inside SLUICE.WITH to sluice serve \
    shards (whose coop I/O policy serves it in that order), and through each shard's gate, which \
    lets sub-requests into the shard's pipeline in request order, to a stock Redis.\n\n\
    Commands over several keys that cannot be split (RENAME, SMOVE, SINTER, LMPOP, MULTI...EXEC, \
    EVAL and the rest) need their keys in one slot, else CROSSSLOT, as in Redis Cluster; SCRIPT \
    LOAD, FLUSHALL and DBSIZE go to every shard. Not supported, each refused with an error naming \
    it: pub/sub, blocking commands (BLPOP, BZPOPMIN, ...), XREAD, WAIT, MONITOR, RANDOMKEY.\n\n\
    Quick start, in front of a Redis Cluster: sluice route --listen 127.0.0.1:6390 --cluster 127.0.0.1:7000\n\
    With a file of shards and their slots: sluice route --config route.toml \
    (every setting: docs/route.example.toml).\n\
    With [compaction] in the file, the router also decides when the shards compact: together \
    when requests span the shards, one after another when they do not (schedule = \"auto\"), \
    and resumes every shard's compaction when it stops.\n\
    The admin port, if configured (--admin), serves /stats (JSON) and /metrics (Prometheus).\n\n\
    A client beyond max_clients (10,000, as redis-server's maxclients, or fewer if the open-file \
    limit has no room for them: the router says so at start) is told \"max number of clients \
    reached\" and closed.")]
pub struct RouteArgs {
    /// Configuration file (TOML): listen, admin, [[shard]] or [cluster], [pool]
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Address to listen on (overrides the file)
    #[arg(long)]
    pub listen: Option<String>,
    /// Admin address for /stats and /metrics (overrides the file)
    #[arg(long)]
    pub admin: Option<String>,
    /// A Redis Cluster node to read the slot map from (repeatable; in place of a file's shards)
    #[arg(long)]
    pub cluster: Vec<String>,
}

pub fn run(args: RouteArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let mut config = config(&args)?;
    // Past the limit, the next client is refused in RESP, not left to
    // wait in the listen backlog.
    config.max_clients = Need {
        setting: "max_clients",
        clients: config.max_clients,
        asked: true,
        per_client: 1,
        upstream: upstream(&config),
    }
    .fit();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let bound = sluice_route::bind(&config).await?;
        eprintln!(
            "sluice route: listening on {}{}, {} shards",
            bound.local_addr()?,
            bound
                .admin_addr()
                .map(|a| format!(", admin on {a}"))
                .unwrap_or_default(),
            bound.router.shards().len()
        );
        let router = bound.router.clone();
        let mut terminate = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = bound.serve() => {}
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("sluice route: stopping");
        if router.compaction.is_some() {
            // No shard is left with its compaction paused by a router that is gone.
            Steering::resume_all(&router.shards(), Duration::from_secs(2)).await;
        }
        Ok(())
    })
}

/// Connections the router may open to its shards: a pool to each
/// `sluice serve`, one pipeline to each Redis (in cluster mode, at least
/// one to each seed), and to each the connections of its watching clients.
fn upstream(config: &Config) -> u64 {
    let watching = config.pool.max_watching as u64;
    let listed = config.shards.iter().map(|s| match s.kind {
        ShardKind::Sluice => config.pool.size as u64 + watching,
        ShardKind::Redis => 1 + watching,
    });
    let seeds = config
        .cluster
        .as_ref()
        .map_or(0, |c| c.seeds.len() as u64 * (1 + watching));
    listed.sum::<u64>() + seeds
}

fn config(args: &RouteArgs) -> Result<Config> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let mut config: Config = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
            if !args.cluster.is_empty() {
                config.shards.clear();
            }
            config
        }
        None => {
            let Some(listen) = &args.listen else {
                return Err(anyhow!("give --config FILE, or --listen ADDR with --cluster NODE"));
            };
            Config::new(listen.clone())
        }
    };
    if let Some(listen) = &args.listen {
        config.listen = listen.clone();
    }
    if args.admin.is_some() {
        config.admin = args.admin.clone();
    }
    if !args.cluster.is_empty() {
        let password = config.cluster.as_ref().and_then(|c| c.password.clone());
        config.cluster = Some(ClusterConfig {
            seeds: args.cluster.clone(),
            password,
        });
    }
    config.validate().map_err(|e| match &args.config {
        Some(path) => anyhow!("in {}: {e}", path.display()),
        None => anyhow!(e),
    })?;
    Ok(config)
}
