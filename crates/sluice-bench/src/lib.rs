//! # sluice-bench: load generators
//!
//! YCSB core workloads ([`ycsb`]) and multi-tenant mixes ([`driver`])
//! against sluice-kv embedded or any RESP2 server ([`target`]), with
//! latency per tenant, per operation kind and per interval; and PostgreSQL
//! users running pgbench's scripts, measured per user ([`pgbench`]).

pub mod driver;
pub mod error;
pub mod pgbench;
pub mod target;
pub mod ycsb;

pub use driver::{load, run, Interval, TenantResult, TenantSpec, Tick};
pub use error::{BenchError, Result};
pub use target::{Client, Embedded, Resp, Target};
pub use ycsb::{Distribution, Generator, Op, Workload};
