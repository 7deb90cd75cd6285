//! `sluice proxy`: per-tenant admission control and fair scheduling (AppleS)
//! in front of unmodified PostgreSQL and Redis (issue 5).
//!
//! - [`server`]: the listener, one session per client with its own upstream
//!   connection, graceful shutdown.
//! - [`pg`] and [`redis`]: each protocol's framing and what a request is.
//! - [`gate`]: admission (delivered parallelism P, weighted round robin).
//! - [`stats`]: per-tenant counters and latency histograms.
//! - [`config`]: the listener's settings.

pub mod admin;
pub mod config;
pub mod gate;
pub mod optimizer;
pub mod pg;
pub mod redis;
pub mod server;
pub mod service;
mod session;
pub mod settings;
pub mod stats;

pub use config::{Protocol, ProxyConfig, TenantKey};
pub use server::{run, Proxy, ProxyError};
pub use stats::{Stats, TenantSnapshot};
