//! The listener (issue 5, §1 and §7 "graceful shutdown that drains requests
//! in flight"): accepts clients, gives each a session task (with its own
//! upstream connection, or for Redis a shared one until it needs its own),
//! and on shutdown stops accepting, lets every request in flight finish (up
//! to the drain timeout), then closes the connections.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{Accepted, Listeners, Peer};
use crate::config::{ConfigError, PoolMode, Protocol, ProxyConfig, TenantKey};
use crate::gate::Gate;
use crate::pg::cancel::CancelRegistry;
use crate::pg::pool::{Pool, PoolSettings};
use crate::pg::upstream_tls::UpstreamTls;
use crate::redis::mux::Mux;
use crate::session::Context;
use crate::stats::Stats;
use crate::workers::Workers;
use crate::{pg, redis};

#[derive(Debug, Error)]
pub enum ProxyError {
    #[error("invalid proxy configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: String, source: io::Error },
    #[error(transparent)]
    Tls(#[from] pg::tls::TlsError),
    #[error(transparent)]
    AuthFile(#[from] pg::auth_file::AuthFileError),
    #[error("cannot start the worker threads: {0}")]
    Workers(io::Error),
}

/// A bound proxy listener, ready to [`run`](Proxy::run).
pub struct Proxy {
    listeners: Listeners,
    config: ProxyConfig,
    ctx: Arc<Context>,
    workers: Workers,
}

impl Proxy {
    /// Checks the configuration and binds the listening sockets.
    pub async fn bind(config: ProxyConfig, gate: Gate) -> Result<Proxy, ProxyError> {
        config.validate()?;
        let tls = config.tls.as_ref().map(pg::tls::acceptor).transpose()?;
        let upstream_tls = (config.upstream_tls.as_ref())
            .map(|c| UpstreamTls::new(c, &config.upstream).map(Arc::new))
            .transpose()?;
        if let Some(path) = &config.auth_file {
            // Read again at each use; here so that a bad file stops the start.
            pg::auth_file::read(path)?;
        }
        let listeners = Listeners::bind(&config.listen, config.listen_unix.as_deref())
            .await
            .map_err(|e| ProxyError::Listen {
                addr: e.addr,
                source: e.source,
            })?;
        let workers = Workers::start(config.worker_threads()).map_err(ProxyError::Workers)?;
        let stats = Arc::<Stats>::default();
        let ctx = Arc::new(Context {
            gate,
            stats: Arc::clone(&stats),
            cancels: Arc::default(),
            upstream: config.upstream.clone(),
            tenant_key: config.tenant_key,
            tls,
            upstream_tls: upstream_tls.clone(),
            mux: (config.protocol == Protocol::Redis && config.shared_upstreams > 0)
                .then(|| Mux::new(config.upstream.clone(), config.shared_upstreams, workers.len())),
            pool: (config.pool == PoolMode::Transaction).then(|| {
                let settings = PoolSettings {
                    upstream: config.upstream.clone(),
                    idle_timeout: Duration::from_secs(config.server_idle_timeout_secs),
                    max_prepared: config.max_prepared_statements,
                    auth_file: config.auth_file.clone(),
                    tls: upstream_tls,
                };
                Pool::start(settings, stats)
            }),
        });
        Ok(Proxy {
            listeners,
            config,
            ctx,
            workers,
        })
    }

    /// The TCP address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listeners.local_addr()
    }

    /// Per-tenant statistics, live while the proxy runs.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.ctx.stats)
    }

    /// The registry of PostgreSQL backend keys (for tests and the admin port).
    pub fn cancels(&self) -> Arc<CancelRegistry> {
        Arc::clone(&self.ctx.cancels)
    }

    /// Serves clients until `shutdown` completes, then drains.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
        let (stop, stopped) = watch::channel(false);
        let mut sessions = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = self.listeners.accept() => match accepted {
                    Ok((client, peer)) => {
                        let session = session(client, peer, Arc::clone(&self.ctx), self.config.protocol, stopped.clone());
                        sessions.spawn_on(session, self.workers.next());
                    }
                    // Out of descriptors and the like: the listener stays
                    // usable, so wait a little instead of spinning.
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                () = &mut shutdown => break,
            }
            while sessions.try_join_next().is_some() {}
        }
        drop(self.listeners);
        let _ = stop.send(true);
        let drain = Duration::from_secs(self.config.drain_timeout_secs);
        if tokio::time::timeout(drain, async { while sessions.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            tracing::warn!(
                "{} sessions still busy after the drain timeout; closing them",
                sessions.len()
            );
            sessions.shutdown().await;
        }
        Ok(())
    }
}

/// Binds and serves until `shutdown` completes, then drains.
pub async fn run(config: ProxyConfig, gate: Gate, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    Proxy::bind(config, gate).await?.run(shutdown).await
}

/// Serves one client on the worker it was given. The socket is registered
/// here, with that worker's reactor: registered with the listener's, each
/// of its wake-ups would cross threads.
async fn session(client: Accepted, peer: Peer, ctx: Arc<Context>, protocol: Protocol, stop: watch::Receiver<bool>) {
    let client = match client.register() {
        Ok(client) => client,
        Err(e) => return tracing::debug!("client {peer}: {e}"),
    };
    let served = match protocol {
        Protocol::Redis => redis::session::serve(client, &peer, &ctx, stop).await,
        Protocol::Pg => pg::session::serve(client, &peer, &ctx, stop).await,
    };
    if let Err(e) = served {
        tracing::debug!("client {peer}: session ended: {e}");
    }
    // A tenant named by its connection is never seen again.
    if let (TenantKey::Connection, Some(name)) = (ctx.tenant_key, ctx.tenant_by_address(&peer)) {
        if ctx.gate.forget(&name) {
            ctx.stats.forget(&name);
        }
    }
}
