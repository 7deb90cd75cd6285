//! The listener: accepts clients, gives each a session task (with its own
//! upstream connection, or for Redis a shared one until it needs its own),
//! and on shutdown stops accepting, lets every request in flight finish (up
//! to the drain timeout), then closes the connections.
//!
//! At `max_client_conn` sessions a new client is told so in its protocol
//! (PostgreSQL: FATAL 53300, as PostgreSQL at max_connections; Redis: the
//! error redis-server gives at maxclients) and closed, without the cost of
//! a session. A failed accept (out of file descriptors, most often) leaves
//! the listener usable: the loop pauses, 10 ms after the first failure in a
//! row and twice as long after each next one up to 1 s, instead of spinning
//! on the connection it cannot take, and says so at most once a second with
//! the count since ([`AcceptBackoff`]); a connection lost before it was
//! accepted is no reason to pause.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_core::accept::{AcceptBackoff, Refusal, Refusals};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{Accepted, Listeners, Peer};
use crate::config::{ConfigError, PoolMode, Protocol, ProxyConfig, TenantKey};
use crate::gate::Gate;
use crate::pg::cancel::CancelRegistry;
use crate::pg::context::{Limits, PgContext};
use crate::pg::pool::{Pool, PoolSettings};
use crate::pg::upstream_tls::UpstreamTls;
use crate::redis::context::RedisContext;
use crate::redis::mux::Mux;
use crate::redis::UpstreamAuth;
use crate::relay::Context;
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
    stats: Arc<Stats>,
    cancels: Arc<CancelRegistry>,
    ctx: Sessions,
    workers: Workers,
}

/// What the sessions of the listener share, by protocol.
#[derive(Clone)]
enum Sessions {
    Pg(Arc<PgContext>),
    Redis(Arc<RedisContext>),
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
        let cancels = Arc::<CancelRegistry>::default();
        let common = Context {
            gate,
            stats: Arc::clone(&stats),
            upstream: config.upstream.clone(),
            tenant_key: config.tenant_key,
            max_message: match (config.max_message_bytes, config.protocol) {
                (0, Protocol::Pg) => pg::frame::MAX_MESSAGE_LEN,
                (0, Protocol::Redis) => sluice_resp::MAX_BULK_LEN,
                (n, _) => n,
            },
        };
        let ctx = match config.protocol {
            Protocol::Redis => {
                let upstream_auth = Arc::new(UpstreamAuth::probe(&config.upstream).await);
                let mux = (config.shared_upstreams > 0).then(|| {
                    let upstream = (config.upstream.clone(), Arc::clone(&upstream_auth));
                    Mux::new(upstream, config.shared_upstreams, workers.len())
                });
                Sessions::Redis(Arc::new(RedisContext {
                    common,
                    mux,
                    upstream_auth,
                }))
            }
            Protocol::Pg => Sessions::Pg(Arc::new(PgContext {
                common,
                cancels: Arc::clone(&cancels),
                tls,
                upstream_tls: upstream_tls.clone(),
                pool: (config.pool == PoolMode::Transaction).then(|| {
                    let settings = PoolSettings {
                        upstream: config.upstream.clone(),
                        idle_timeout: Duration::from_secs(config.server_idle_timeout_secs),
                        max_prepared: config.max_prepared_statements,
                        auth_file: config.auth_file.clone(),
                        tls: upstream_tls,
                    };
                    Pool::start(settings, Arc::clone(&stats))
                }),
                limits: Limits {
                    login_timeout: Duration::from_millis(config.login_timeout_ms),
                    idle_release: Duration::from_millis(config.idle_in_transaction_release_ms),
                    idle_timeout: (config.idle_in_transaction_timeout_ms > 0)
                        .then(|| Duration::from_millis(config.idle_in_transaction_timeout_ms)),
                },
            })),
        };
        Ok(Proxy {
            listeners,
            config,
            stats,
            cancels,
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
        Arc::clone(&self.stats)
    }

    /// The registry of PostgreSQL backend keys (for tests and the admin port).
    pub fn cancels(&self) -> Arc<CancelRegistry> {
        Arc::clone(&self.cancels)
    }

    /// Serves clients until `shutdown` completes, then drains.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
        let (stop, stopped) = watch::channel(false);
        let mut sessions = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut backoff = AcceptBackoff::default();
        let refusals = Refusals::default();
        let (protocol, limit) = (self.config.protocol, self.config.max_client_conn());
        loop {
            tokio::select! {
                accepted = self.listeners.accept() => match accepted {
                    Ok((client, peer)) => {
                        backoff.succeeded();
                        while sessions.try_join_next().is_some() {}
                        if limit != 0 && sessions.len() >= limit {
                            tracing::debug!("client {peer} refused: max_client_conn = {limit} reached");
                            self.workers.next().spawn(refuse(client, protocol, limit, refusals.begin()));
                            continue;
                        }
                        let session = session(client, peer, self.ctx.clone(), stopped.clone());
                        sessions.spawn_on(session, self.workers.next());
                    }
                    Err(e) => {
                        let (pause, report) = backoff.failed(Instant::now(), &e);
                        if let Some(failures) = report {
                            tracing::warn!("accept failed ({failures} times since the last report): {e}; pausing {pause:?}");
                        }
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            () = &mut shutdown => break,
                        }
                    }
                },
                () = &mut shutdown => break,
            }
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

/// How long a refused client is given to read its refusal.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// What a client over `max_client_conn` is told, in its protocol.
fn too_many_clients(protocol: Protocol, limit: usize) -> BytesMut {
    let mut out = BytesMut::new();
    match protocol {
        Protocol::Pg => {
            let message = format!("sorry, too many clients already (sluice: max_client_conn = {limit})");
            pg::frame::write_error(&mut out, "FATAL", "53300", &message);
        }
        Protocol::Redis => out.extend_from_slice(sluice_resp::MAX_CLIENTS_REACHED),
    }
    out
}

/// Tells a client over the limit why, and closes: the refusal is written,
/// the write side shut, and what the client sends meanwhile read and
/// dropped until it closes (up to [`REFUSAL_TIME`]) if `refusal` may wait
/// (see sluice-core's `accept`: closing with the client's bytes unread
/// would reset the connection, and the reset can reach the client before
/// it read the refusal).
async fn refuse(client: Accepted, protocol: Protocol, limit: usize, refusal: Refusal) {
    let Ok(mut client) = client.register() else {
        return;
    };
    let told = async {
        client.write_all(&too_many_clients(protocol, limit)).await?;
        client.shutdown().await?;
        let mut sink = [0u8; 512];
        while refusal.may_wait && client.read(&mut sink).await? > 0 {}
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, told).await;
}

/// Serves one client on the worker it was given. The socket is registered
/// here, with that worker's reactor: registered with the listener's, each
/// of its wake-ups would cross threads.
async fn session(client: Accepted, peer: Peer, ctx: Sessions, stop: watch::Receiver<bool>) {
    let client = match client.register() {
        Ok(client) => client,
        Err(e) => return tracing::debug!("client {peer}: {e}"),
    };
    let served = match &ctx {
        Sessions::Redis(redis) => redis::session::serve(client, &peer, redis, stop).await,
        Sessions::Pg(pg) => pg::session::serve(client, &peer, pg, stop).await,
    };
    let ctx: &Context = match &ctx {
        Sessions::Redis(redis) => redis,
        Sessions::Pg(pg) => pg,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_speaks_the_client_protocol() {
        let pg = too_many_clients(Protocol::Pg, 7);
        let header = pg::frame::parse_header(&pg).unwrap().unwrap();
        assert_eq!((header.tag, header.len), (b'E', pg.len()));
        assert_eq!(pg::frame::error_field(&pg[5..], b'C'), Some("53300"));
        let message = pg::frame::error_field(&pg[5..], b'M').unwrap();
        assert!(message.starts_with("sorry, too many clients already"), "{message}");
        assert_eq!(
            &too_many_clients(Protocol::Redis, 7)[..],
            b"-ERR max number of clients reached\r\n"
        );
    }
}
