//! Per-tenant outcome counters of the proxy's sessions: what only a session
//! sees — requests answered, of which errors, refusals, and commands that
//! passed through outside admission (blocking commands, pub/sub; see
//! [`crate::redis::command`]), which take no slot and so stay out of the
//! latency statistics. Queue wait and latency are recorded by the gate,
//! which sees every request's slot from arrival to release
//! ([`crate::gate::GateSnapshot`]). Also the number of
//! backends idle in the transaction pool. Counters are atomics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Counters of every tenant seen since the proxy started (but for those
/// forgotten with their connection).
#[derive(Debug, Default)]
pub struct Stats {
    tenants: Mutex<HashMap<Arc<str>, Arc<TenantStats>>>,
    pool_idle: AtomicU64,
}

/// One tenant's counters.
#[derive(Debug, Default)]
pub struct TenantStats {
    requests: AtomicU64,
    errors: AtomicU64,
    refused: AtomicU64,
    passthrough: AtomicU64,
}

/// A copy of one tenant's counters at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSnapshot {
    pub tenant: Arc<str>,
    /// Requests completed through the gate.
    pub requests: u64,
    /// Of those, requests the server answered with an error.
    pub errors: u64,
    /// Requests the gate refused (queue full or wait timeout).
    pub refused: u64,
    /// Commands that bypassed the gate (blocking commands, pub/sub, MONITOR).
    pub passthrough: u64,
}

impl Stats {
    /// The counters of `tenant`, created on first use.
    pub fn tenant(&self, tenant: &Arc<str>) -> Arc<TenantStats> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(tenants.entry(Arc::clone(tenant)).or_default())
    }

    /// Drops `tenant`'s counters (see [`crate::gate::Gate::forget`]).
    pub fn forget(&self, tenant: &str) {
        self.tenants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(tenant);
    }

    /// Transaction pooling: backends idle in the pool.
    pub fn pool_idle(&self) -> u64 {
        self.pool_idle.load(Ordering::Relaxed)
    }

    pub(crate) fn pool_idle_added(&self, n: usize) {
        self.pool_idle.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn pool_idle_taken(&self, n: usize) {
        self.pool_idle.fetch_sub(n as u64, Ordering::Relaxed);
    }

    /// Every tenant's counters, sorted by name.
    pub fn snapshot(&self) -> Vec<TenantSnapshot> {
        let map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = map.iter().map(|(name, t)| t.snapshot(Arc::clone(name))).collect();
        out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        out
    }
}

impl TenantStats {
    /// A request's answer is complete.
    pub fn record(&self, error: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn record_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_passthrough(&self) {
        self.passthrough.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self, tenant: Arc<str>) -> TenantSnapshot {
        TenantSnapshot {
            tenant,
            requests: self.requests.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            passthrough: self.passthrough.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_tenant() {
        let stats = Stats::default();
        let alice = stats.tenant(&Arc::from("alice"));
        alice.record(false);
        alice.record(true);
        stats.tenant(&Arc::from("alice")).record_refused();
        stats.tenant(&Arc::from("bob")).record_passthrough();
        let snap = stats.snapshot();
        let counts: Vec<_> = snap
            .iter()
            .map(|t| (&*t.tenant, t.requests, t.errors, t.refused, t.passthrough))
            .collect();
        assert_eq!(counts, [("alice", 2, 1, 1, 0), ("bob", 0, 0, 0, 1)]);
    }
}
