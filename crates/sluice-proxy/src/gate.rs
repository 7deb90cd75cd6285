//! The gate in front of the database (AppleS §3.3): requests wait in
//! per-tenant queues and at most P of them are inside the database at once.
//!
//! Work in progress: this first version admits in arrival order behind a
//! semaphore of P slots; the weighted round robin with round quota ζ from
//! sluice-core replaces it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A tenant as the gate knows it: a name from the configuration's tenant key
/// and its weight φ.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenant {
    pub name: Arc<str>,
    pub weight: f64,
}

/// Why a request was not let in.
#[derive(Debug, Error, PartialEq)]
pub enum Refusal {
    #[error("sluice: queue of tenant `{tenant}` is full ({limit} requests waiting)")]
    QueueFull { tenant: Arc<str>, limit: usize },
    #[error("sluice: request of tenant `{tenant}` waited {waited:?} for admission and timed out")]
    Timeout { tenant: Arc<str>, waited: Duration },
}

impl Refusal {
    /// The PostgreSQL SQLSTATE that fits the refusal.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // insufficient_resources / too_many_connections family
            Refusal::QueueFull { .. } => "53300",
            // query_canceled, as for statement_timeout
            Refusal::Timeout { .. } => "57014",
        }
    }
}

/// Settings of the gate.
#[derive(Clone, Debug)]
pub struct GateConfig {
    /// Delivered parallelism P: requests inside the database at once.
    pub parallelism: usize,
    /// Requests one tenant may have waiting.
    pub queue_limit: usize,
    /// How long a request may wait for admission.
    pub wait_timeout: Duration,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            parallelism: 16,
            queue_limit: 1024,
            wait_timeout: Duration::from_secs(30),
        }
    }
}

/// The admission gate, shared by every connection.
#[derive(Clone)]
pub struct Gate {
    config: GateConfig,
    slots: Arc<Semaphore>,
}

/// A request inside the database. Dropping it returns the slot, whether the
/// request completed, failed, or its client went away.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    pub admitted: Instant,
}

impl Gate {
    pub fn new(config: GateConfig) -> Self {
        let slots = Arc::new(Semaphore::new(config.parallelism.max(1)));
        Gate { config, slots }
    }

    /// The tenant named `name`, with its configured weight.
    pub fn tenant(&self, name: &str) -> Tenant {
        Tenant {
            name: Arc::from(name),
            weight: 1.0,
        }
    }

    /// Waits until `tenant`'s request may enter the database.
    pub async fn admit(&self, tenant: &Tenant) -> Result<Slot, Refusal> {
        let start = Instant::now();
        let acquire = Arc::clone(&self.slots).acquire_owned();
        match tokio::time::timeout(self.config.wait_timeout, acquire).await {
            Ok(Ok(permit)) => Ok(Slot {
                _permit: permit,
                admitted: Instant::now(),
            }),
            _ => Err(Refusal::Timeout {
                tenant: Arc::clone(&tenant.name),
                waited: start.elapsed(),
            }),
        }
    }
}
