//! Per-tenant request statistics of the proxy (issue 5, §7 "Operations":
//! requests, errors, refusals, queue wait and latency histograms), for the
//! admin port's `/metrics` and `/stats`.
//!
//! Counters are atomics; the two histograms (sluice-core's HdrHistogram
//! wrapper, about 270 KiB each) sit behind a per-tenant mutex and are
//! created on the tenant's first request, so idle connections cost no
//! histogram. Requests that pass through outside admission (blocking
//! commands, pub/sub) are counted but kept out of the latency statistics,
//! as §2 asks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sluice_core::metrics::LatencyHistogram;

/// Statistics of every tenant seen since the proxy started.
#[derive(Debug, Default)]
pub struct Stats {
    tenants: Mutex<HashMap<Arc<str>, Arc<TenantStats>>>,
}

/// One tenant's counters and histograms.
#[derive(Debug, Default)]
pub struct TenantStats {
    requests: AtomicU64,
    errors: AtomicU64,
    refused: AtomicU64,
    passthrough: AtomicU64,
    histograms: Mutex<Option<Box<Histograms>>>,
}

#[derive(Debug, Default, Clone)]
struct Histograms {
    queue_wait: LatencyHistogram,
    latency: LatencyHistogram,
}

/// A copy of one tenant's statistics at one moment.
#[derive(Clone, Debug)]
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
    /// Time from arrival at the proxy to admission.
    pub queue_wait: LatencyHistogram,
    /// Time from arrival at the proxy to the end of the server's answer.
    pub latency: LatencyHistogram,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Stats {
    /// The statistics of `tenant`, created on first use.
    pub fn tenant(&self, tenant: &Arc<str>) -> Arc<TenantStats> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(tenants.entry(Arc::clone(tenant)).or_default())
    }

    /// Every tenant's statistics, sorted by name.
    pub fn snapshot(&self) -> Vec<TenantSnapshot> {
        let tenants: Vec<_> = {
            let map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
            map.iter().map(|(k, v)| (Arc::clone(k), Arc::clone(v))).collect()
        };
        let mut out: Vec<_> = tenants.into_iter().map(|(name, t)| t.snapshot(name)).collect();
        out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        out
    }
}

impl TenantStats {
    /// A request completed: it waited `queue_wait` for admission and took
    /// `latency` from arrival to the end of its answer.
    pub fn record(&self, queue_wait: Duration, latency: Duration, error: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let mut histograms = self.histograms.lock().unwrap_or_else(PoisonError::into_inner);
        let h = histograms.get_or_insert_with(Box::default);
        h.queue_wait.record(nanos(queue_wait));
        h.latency.record(nanos(latency));
    }

    pub fn record_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_passthrough(&self) {
        self.passthrough.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self, tenant: Arc<str>) -> TenantSnapshot {
        let histograms = self.histograms.lock().unwrap_or_else(PoisonError::into_inner);
        let h = histograms.as_deref().cloned().unwrap_or_default();
        TenantSnapshot {
            tenant,
            requests: self.requests.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            passthrough: self.passthrough.load(Ordering::Relaxed),
            queue_wait: h.queue_wait,
            latency: h.latency,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_histograms_per_tenant() {
        let stats = Stats::default();
        let alice = stats.tenant(&Arc::from("alice"));
        alice.record(Duration::from_micros(5), Duration::from_millis(2), false);
        alice.record(Duration::from_micros(7), Duration::from_millis(4), true);
        stats.tenant(&Arc::from("alice")).record_refused();
        stats.tenant(&Arc::from("bob")).record_passthrough();
        let snap = stats.snapshot();
        assert_eq!(snap.len(), 2);
        let (a, b) = (&snap[0], &snap[1]);
        assert_eq!(
            (&*a.tenant, a.requests, a.errors, a.refused, a.passthrough),
            ("alice", 2, 1, 1, 0)
        );
        assert_eq!(a.latency.count(), 2);
        assert!(a.latency.max() >= 3_990_000, "{}", a.latency.max());
        assert!(a.queue_wait.max() < 10_000);
        assert_eq!(
            (&*b.tenant, b.requests, b.passthrough, b.latency.count()),
            ("bob", 0, 1, 0)
        );
    }
}
