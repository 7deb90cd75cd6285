//! The threads that run sessions: one single-threaded tokio runtime per
//! worker, each session kept on the worker it was given (round robin), as
//! an event loop per core in the style of Envoy's workers.
//!
//! Why not tokio's work-stealing runtime: on 2 cores shared with the
//! database and its clients, an idle worker woken to steal a session that
//! the busy one would have run a moment later costs a futex wake and two
//! context switches, and the profile put a fifth of the proxy's CPU in its
//! own threads' switches. A session that stays on one thread is woken
//! only by its own sockets. What crosses workers is rare or inherent: the
//! gate handing a freed slot to a session waiting on another worker, and a
//! pooled backend opened by another worker (which the pool avoids where it
//! can, and otherwise moves to the leasing worker's reactor: `pg::pool`).
//!
//! Measured against the work-stealing runtime with the same two threads
//! (docs/BENCHMARKS.md, "An event loop per worker"): with 8 pgbench users
//! 1.08× its throughput (0.93–1.13) and 3% less CPU per transaction; at
//! 256 users level (0.95–1.01). The price is that a descheduled worker
//! stalls its own sessions only, not the other's: U_f at 8 users rose
//! from 0.02–0.03 to 0.04–0.05 (direct: 0.07–0.08).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

thread_local! {
    /// The index of the worker this thread is; `None` off the workers.
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The worker the calling thread is, if it is one.
pub(crate) fn current() -> Option<usize> {
    WORKER.with(Cell::get)
}

/// Running worker threads; each stops, dropping its sessions, when this is
/// dropped.
pub(crate) struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
    _stops: Vec<oneshot::Sender<()>>,
}

impl Workers {
    /// Starts `n` worker threads (at least one).
    pub fn start(n: usize) -> std::io::Result<Workers> {
        let mut handles = Vec::new();
        let mut stops = Vec::new();
        for i in 0..n.max(1) {
            let runtime = Builder::new_current_thread().enable_all().build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            handles.push(runtime.handle().clone());
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("sluice-worker-{i}"))
                .spawn(move || {
                    WORKER.with(|w| w.set(Some(i)));
                    let _ = runtime.block_on(stopped);
                    // Not waiting for blocking work (a name lookup) to end.
                    runtime.shutdown_background();
                })?;
        }
        Ok(Workers {
            handles,
            next: AtomicUsize::new(0),
            _stops: stops,
        })
    }

    /// How many workers run.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// The worker the next session goes to.
    pub fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn sessions_go_round_robin_each_to_its_own_thread() {
        let workers = Workers::start(2).unwrap();
        let mut names = Vec::new();
        for _ in 0..4 {
            names.push(workers.next().spawn(async { thread_name() }).await.unwrap());
        }
        assert_eq!(
            names,
            [
                "sluice-worker-0",
                "sluice-worker-1",
                "sluice-worker-0",
                "sluice-worker-1"
            ]
        );
    }

    #[tokio::test]
    async fn a_worker_knows_its_index() {
        let workers = Workers::start(2).unwrap();
        assert_eq!(current(), None);
        assert_eq!(workers.next().spawn(async { current() }).await.unwrap(), Some(0));
        assert_eq!(workers.next().spawn(async { current() }).await.unwrap(), Some(1));
    }

    #[tokio::test]
    async fn dropping_the_workers_drops_their_tasks() {
        let workers = Workers::start(1).unwrap();
        let (held, dropped) = oneshot::channel::<()>();
        workers.next().spawn(async move {
            let _held = held;
            std::future::pending::<()>().await
        });
        drop(workers);
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), dropped).await;
        assert!(matches!(waited, Ok(Err(_))), "the task outlived its worker: {waited:?}");
    }

    #[test]
    fn zero_workers_means_one() {
        let workers = Workers::start(0).unwrap();
        assert_eq!(workers.handles.len(), 1);
    }
}
