//! # sluice-core: everything in Sluice that decides
//!
//! The request context ([`Ctx`]) that travels with every unit of work, the
//! [`Job`] that waits at a stage, the [`Policy`] trait with one file per
//! policy under [`policy`], the [`Stage`] that puts a policy behind an
//! admission limit, the device timing models under [`device`], the
//! controllers that turn measurements into knob settings under
//! [`controller`], the metric definitions under [`metrics`], and what the
//! servers' listeners do when an accept fails or a client is one too many
//! ([`accept`]).
//!
//! The crate is pure: it reads no clock (`now` is always an argument), spawns
//! no thread and does no I/O. The same policy therefore runs in virtual time
//! in `sluice-sim` and in wall time in the runtime and the proxy.

pub mod accept;
pub mod budget;
pub mod controller;
pub mod ctx;
pub mod deadline;
pub mod device;
pub mod job;
pub mod metrics;
pub mod policy;
pub mod stage;
pub mod success;
pub mod time;

pub use ctx::{Class, Ctx, RequestId, TenantId};
pub use device::DeviceView;
pub use job::Job;
pub use policy::{Policy, PolicyError, PolicyOptions, PolicySpec};
pub use stage::{Stage, StageError};
pub use time::Nanos;
