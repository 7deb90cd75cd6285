//! # sluice-sim: a deterministic simulator for Sluice policies
//!
//! A discrete-event engine in virtual time ([`engine`]), the transaction
//! workload of TraQIOS §4 ([`workload`]), the simulation that runs it on the
//! seek disk through a `sluice-core` stage ([`run`]), experiment files and
//! sweeps ([`experiment`], [`sweep`]), and their reports ([`report`]);
//! requests that fan out over shards, each shard a device and a queue
//! ([`fanout`]: the setting of cooperative request-order scheduling);
//! AppleS's gate and optimizer in front of a simulated database
//! ([`apples`]), run side by side from scenario files
//! ([`apples_scenario`]); and a controller's recorded run decided again
//! from its observations ([`replay`]).
//!
//! Every random draw comes from a seeded generator, and each transaction
//! draws from a stream of its own, so a seed fixes the workload exactly:
//! every policy sees the same transactions, and the same experiment file and
//! seed give byte-identical output on any number of threads.
//!
//! An experiment is a TOML text (the files under `scenarios/` are such
//! texts); running it gives one cell per swept value and policy:
//!
//! ```
//! use sluice_sim::sweep::run_experiment;
//! use sluice_sim::Experiment;
//!
//! let exp = Experiment::parse(
//!     r#"
//!     policies = ["edf", "traqios"]
//!     baselines = ["edf"]
//!     seeds = 2
//!     [sweep]
//!     parameter = "utilization"
//!     values = [0.5, 0.7]
//!     [workload]
//!     transactions = 300
//!     "#,
//!     "example",
//! )
//! .unwrap();
//! let result = run_experiment(&exp, &|_runs_done| {});
//! let cell = result.cell(0.7, "traqios").unwrap();
//! println!("traqios at ρ = 0.7: {:.3} of deadlines missed", cell.miss_ratio);
//! // The same file and seed give the same figures.
//! assert_eq!(run_experiment(&exp, &|_| {}).cells, result.cells);
//! ```

pub mod apples;
pub mod apples_scenario;
pub mod engine;
pub mod experiment;
pub mod fanout;
pub mod replay;
pub mod report;
pub mod run;
pub mod sweep;
pub mod workload;

pub use experiment::{Experiment, ExperimentError};
pub use run::{simulate, RunStats};
pub use sweep::{Cell, SweepResult};
pub use workload::TraqiosWorkload;
