//! # sluice-bench: load generators and the benchmarks of Sluice
//!
//! The load generators: YCSB core workloads ([`ycsb`]) and multi-tenant
//! mixes ([`driver`]) against sluice-kv embedded or any RESP2 server
//! ([`target`]), with latency per tenant, per operation kind and per
//! interval; and PostgreSQL users running pgbench's scripts, measured per
//! user ([`pgbench`]).
//!
//! The harness every benchmark shares: runs and rounds, medians, ranges,
//! ratios paired by round, runs set aside for CPU steal ([`harness`]), the
//! steal itself ([`steal`]), what a process used ([`process`]), I/O stall
//! ([`pressure`]), and the rows the benchmark scripts hand over ([`rows`]).
//!
//! The experiments, one module each, which the `sluice` command runs:
//!
//! | module | command | measures |
//! |---|---|---|
//! | [`sim`] | `sluice bench sim` | the simulator's speed |
//! | [`runtime`] | `sluice bench io` | the I/O runtime against its baselines (RCP §7.6) |
//! | [`pg`] | `sluice bench pg` | PostgreSQL users directly and through proxies |
//! | [`redis`] | `sluice bench redis` | Redis users directly and through proxies |
//! | [`route`] | `sluice bench route` | range scans through the router over `sluice serve` shards, per shard policy; with tenants, each tenant's deadline misses |
//! | [`deadline`] | `sluice bench deadline` | TraQIOS's workload on real I/O (an emulated seek disk), each run beside the simulator's prediction |
//! | [`demo`] | `sluice demo` | sluice-kv under YCSB with compaction active, FIFO against Sluice |
//! | [`fanout`] | `sluice fanout` | the simulator's fan-out model under each shard policy |
//! | [`model`] | `sluice model` | AppleS's throughput model fitted to measured samples |
//!
//! An experiment returns its table for standard output and reports its
//! progress, a line per run, on standard error; its errors say which flag
//! or target they concern.

pub mod deadline;
pub mod demo;
pub mod driver;
pub mod error;
pub mod fanout;
pub mod harness;
pub mod model;
pub mod pg;
pub mod pgbench;
pub mod pressure;
pub mod process;
pub mod redis;
pub mod route;
pub mod rows;
pub mod runtime;
pub mod sim;
pub mod steal;
pub mod target;
pub mod ycsb;

pub use driver::{load, run, Interval, TenantResult, TenantSpec, Tick};
pub use error::{BenchError, Result};
pub use target::{Client, Embedded, Resp, Target};
pub use ycsb::{Distribution, Generator, Op, Workload};
