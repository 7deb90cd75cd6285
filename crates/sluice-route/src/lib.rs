//! # sluice-route: a router for sharded Redis-protocol stores
//!
//! Clients speak RESP2 or RESP3 to the router as to one Redis; keys go to
//! shards by Redis Cluster hash slots. A request that touches several
//! shards (MGET, MSET, DEL, a `RANGE` scan) is split into one sub-request
//! per shard, and finishes when its slowest part does. To keep the parts
//! of one request close together, the router gives every request an id in
//! arrival order and sends it with each part (Jo et al., "Request-aware
//! Cooperative I/O Scheduling for Scale-out Database Applications", §4.1):
//! `sluice serve` shards read it from `SLUICE.WITH` and serve their queued
//! I/O in that order (the `coop` policy of sluice-core); in front of a
//! stock Redis, which cannot read it, the router keeps the order itself,
//! in who enters each shard's pipeline next.
//!
//! | piece | file |
//! |---|---|
//! | hash slots and hash tags | `sluice_resp::slot` |
//! | the command table: where each command goes | `command.rs` |
//! | configuration (TOML) | `config.rs` |
//! | splitting, request context, merging, MOVED/ASK | `router.rs` |
//! | a shard: its connections (a pool, or one pipeline to Redis), gate and statistics | `shard.rs`, `pipeline.rs`, `gate.rs` |
//! | a client's connection | `client.rs` |
//! | what is measured; the admin port | `stats.rs`, `admin.rs` |
//! | when the shards compact (`[compaction]`) | `compaction.rs` |
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = sluice_route::config::Config::from_toml(r#"
//!     listen = "127.0.0.1:6390"
//!     [[shard]]
//!     name = "a"
//!     addr = "127.0.0.1:7001"
//!     slots = "0-8191"
//!     [[shard]]
//!     name = "b"
//!     addr = "127.0.0.1:7002"
//!     slots = "8192-16383"
//! "#)?;
//! sluice_route::run(config).await?;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod client;
pub mod command;
pub mod compaction;
pub mod config;
pub mod gate;
mod pipeline;
pub mod router;
pub mod scan;
pub mod shard;
pub mod stats;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::accept::{AcceptBackoff, Refusal, Refusals};
use sluice_resp::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub use config::Config;
pub use router::Router;

/// Why the router could not start.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("listening on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error("starting the router's thread: {0}")]
    Thread(std::io::Error),
}

/// A router bound to its ports, not yet serving.
pub struct Bound {
    pub router: Arc<Router>,
    listener: TcpListener,
    admin: Option<TcpListener>,
    limits: Limits,
    max_clients: usize,
}

impl Bound {
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Accepts clients until the task is dropped. A client over
    /// `max_clients` is told so and closed; a failed accept (out of file
    /// descriptors, most often) pauses the loop, 10 ms doubling to 1 s
    /// while failures continue, reported at most once a second.
    pub async fn serve(self) {
        if let Some(steering) = self.router.compaction.clone() {
            tokio::spawn(steer(steering, self.router.clone()));
        }
        if let Some(admin) = self.admin {
            let router = self.router.clone();
            tokio::spawn(async move {
                if let Err(e) = admin::serve(router, admin).await {
                    tracing::error!("admin port stopped: {e}");
                }
            });
        }
        let mut backoff = AcceptBackoff::default();
        let clients = &self.router.clients;
        let refusals = Refusals::default();
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    backoff.succeeded();
                    let connected = clients.connected.load(Ordering::Relaxed);
                    if self.max_clients != 0 && connected >= self.max_clients as u64 {
                        clients.refused.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("client {peer} refused: max_clients = {} reached", self.max_clients);
                        tokio::spawn(refuse(stream, refusals.begin()));
                        continue;
                    }
                    let connected = Connected::new(self.router.clone());
                    let limits = self.limits;
                    tokio::spawn(async move {
                        client::serve_client(connected.0.clone(), stream, limits).await;
                    });
                }
                Err(e) => {
                    let (pause, report) = backoff.failed(Instant::now(), &e);
                    if let Some(failures) = report {
                        tracing::warn!(
                            "accept failed ({failures} times since the last report): {e}; pausing {pause:?}"
                        );
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

/// A client counted as connected for as long as its task holds this,
/// however the task ends.
struct Connected(Arc<Router>);

impl Connected {
    fn new(router: Arc<Router>) -> Connected {
        router.clients.connected.fetch_add(1, Ordering::Relaxed);
        Connected(router)
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.clients.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tells a client over `max_clients` so, and closes: the refusal is
/// written and the write side shut, then what the client sends meanwhile
/// read and dropped until it closes (up to a second), if `refusal` may
/// wait (see sluice-core's `accept`).
async fn refuse(mut stream: TcpStream, refusal: Refusal) {
    let told = async {
        stream.write_all(sluice_resp::MAX_CLIENTS_REACHED).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 512];
        while refusal.may_wait && stream.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), told).await;
}

/// Steers the shards' compactions every interval, for as long as the
/// task runs.
async fn steer(steering: Arc<compaction::Steering>, router: Arc<Router>) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut tick = tokio::time::interval(steering.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (requests, sub_requests) = (
            router.stats.requests.load(Relaxed),
            router.stats.sub_requests.load(Relaxed),
        );
        steering
            .step(&router.shards(), requests, sub_requests, router.uptime())
            .await;
    }
}

async fn listen(addr: &str) -> Result<TcpListener, RouteError> {
    TcpListener::bind(addr).await.map_err(|source| RouteError::Listen {
        addr: addr.to_string(),
        source,
    })
}

/// Binds the router's ports and, in cluster mode, reads the slot map.
pub async fn bind(config: &Config) -> Result<Bound, RouteError> {
    let router = Router::new(config).await?;
    let listener = listen(&config.listen).await?;
    let admin = match &config.admin {
        Some(addr) => Some(listen(addr).await?),
        None => None,
    };
    let limits = Limits {
        max_bulk: config.max_request_mb << 20,
        ..Limits::default()
    };
    Ok(Bound {
        router,
        listener,
        admin,
        limits,
        max_clients: config.max_clients,
    })
}

/// Binds and serves until the task is dropped.
pub async fn run(config: Config) -> Result<(), RouteError> {
    bind(&config).await?.serve().await;
    Ok(())
}

/// Binds and serves on a thread of its own (a current-thread runtime), for
/// a process that embeds the router (a benchmark, a test): the address it
/// listens on, and the router for its statistics.
pub fn spawn(config: Config) -> Result<(std::net::SocketAddr, Arc<Router>), RouteError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => return drop(tx.send(Err(RouteError::Thread(e)))),
        };
        runtime.block_on(async {
            let bound = match bind(&config).await {
                Ok(bound) => bound,
                Err(e) => return drop(tx.send(Err(e))),
            };
            match bound.local_addr() {
                Ok(addr) => drop(tx.send(Ok((addr, bound.router.clone())))),
                Err(e) => return drop(tx.send(Err(RouteError::Thread(e)))),
            }
            bound.serve().await;
        });
    });
    rx.recv()
        .map_err(|_| RouteError::Thread(std::io::Error::other("it ended before binding")))?
}
