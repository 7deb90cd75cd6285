//! The dirty budget of RCP's caching layer (§4.3): dirty bytes of the
//! whole runtime against a limit per class of writer, and the files that
//! hold them, oldest first, for writers over their limit to write back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::config::RcpConfig;
use crate::file::FileInner;
use crate::sched::Criticality;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Dirty bytes of the whole runtime against the per-class limits.
pub(crate) struct DirtyBudget {
    pub(crate) total: AtomicU64,
    /// Limits for critical and non-critical writers, bytes.
    limits: [u64; 2],
    /// Files that may hold dirty data, oldest first.
    files: Mutex<Vec<Weak<FileInner>>>,
}

impl DirtyBudget {
    pub(crate) fn new(c: &RcpConfig) -> Self {
        let budget = c.dirty_budget_mb * 1e6;
        let critical = (budget * c.critical_dirty_ratio) as u64;
        let noncritical = if c.enabled && c.split_dirty {
            (budget * c.noncritical_dirty_ratio) as u64
        } else {
            critical
        };
        DirtyBudget {
            total: AtomicU64::new(0),
            limits: [critical, noncritical],
            files: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    pub(crate) fn limit(&self, class: Criticality) -> u64 {
        match class {
            Criticality::Critical => self.limits[0],
            Criticality::NonCritical => self.limits[1],
        }
    }

    /// Notes that `file` holds dirty data (once per file).
    pub(crate) fn register(&self, file: &Arc<FileInner>) {
        let mut files = lock(&self.files);
        files.retain(|w| w.strong_count() > 0);
        if !files.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(file))) {
            files.push(Arc::downgrade(file));
        }
    }

    /// The oldest file that still holds dirty data, forgetting clean ones.
    pub(crate) fn oldest_dirty(&self) -> Option<Arc<FileInner>> {
        let mut files = lock(&self.files);
        files.retain(|w| w.upgrade().is_some_and(|f| !lock(&f.dirty).is_empty()));
        files.first().and_then(Weak::upgrade)
    }
}
