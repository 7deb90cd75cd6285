//! Programmable background tasks (background-tasks paper §VI): flush,
//! compaction, checkpoint and the like register by name and kind, expose
//! knobs that can change while they run (byte and IOPS rates, pause, a
//! priority that makes their I/O critical), and report progress and
//! backlog, so that a controller with global visibility can set the knobs
//! from live load (see [`crate::control`]).
//!
//! A thread works for a background task while it holds the task's
//! [`BackgroundGuard`]; its I/O is then non-critical, throttled by the
//! task's rates and held while the task is paused. A task that inherits
//! criticality (a critical request waits for it) bypasses rates and pause:
//! throttling the work a request waits for would be a priority inversion.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::task::Task;

/// What a background task does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    Flush,
    Compaction,
    /// Deleting values past their deadline (a store's active expiry).
    Expiry,
    Checkpoint,
    Backup,
    Other,
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskKind::Flush => "flush",
            TaskKind::Compaction => "compaction",
            TaskKind::Expiry => "expiry",
            TaskKind::Checkpoint => "checkpoint",
            TaskKind::Backup => "backup",
            TaskKind::Other => "other",
        })
    }
}

/// The run-time knobs of a background task.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Knobs {
    /// Bytes per second; `None` is unthrottled.
    pub rate_bytes: Option<f64>,
    /// I/Os per second; `None` is unthrottled.
    pub rate_iops: Option<f64>,
    pub paused: bool,
    /// Run the task's I/O as critical (raised by an operator or controller).
    pub critical: bool,
}

/// A snapshot of a background task for reports and controllers.
#[derive(Clone, Debug, PartialEq)]
pub struct BackgroundStats {
    pub name: String,
    pub kind: TaskKind,
    pub knobs: Knobs,
    pub bytes: u64,
    pub ios: u64,
    pub backlog_bytes: u64,
    /// How near the task's owner is to stalling its writers, as the owner
    /// reports it: 0 far, 1 where they start to slow down.
    pub stall_pressure: f64,
}

/// Tokens of the rate limiter: bytes and I/Os.
struct Bucket {
    bytes: f64,
    ios: f64,
    at: Instant,
}

/// Burst allowance: this many seconds of the configured rate.
const BURST_S: f64 = 0.05;
/// Longest sleep between checks of knobs and criticality while throttled.
const RECHECK: Duration = Duration::from_millis(5);

pub struct Background {
    name: String,
    kind: TaskKind,
    knobs: Mutex<Knobs>,
    bucket: Mutex<Bucket>,
    bytes: AtomicU64,
    ios: AtomicU64,
    backlog: AtomicU64,
    /// `stall_pressure`'s bits.
    stall: AtomicU64,
    /// Holders of [`Background::urgent`]'s guard: while any, its I/O runs
    /// unthrottled and unpaused.
    urgent: AtomicU64,
    /// The thread that last entered the task: what a waiter on its work
    /// names for inheritance.
    worker: Mutex<Option<Arc<Task>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Background {
    pub(crate) fn new(name: String, kind: TaskKind) -> Self {
        Background {
            name,
            kind,
            knobs: Mutex::new(Knobs::default()),
            bucket: Mutex::new(Bucket {
                bytes: 0.0,
                ios: 0.0,
                at: Instant::now(),
            }),
            bytes: AtomicU64::new(0),
            ios: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
            stall: AtomicU64::new(0),
            urgent: AtomicU64::new(0),
            worker: Mutex::new(None),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current thread works for this task until the guard drops.
    pub fn enter(self: &Arc<Self>) -> BackgroundGuard {
        *lock(&self.worker) = Some(Task::current());
        BackgroundGuard {
            outer: set_background(Some(self.clone())),
        }
    }

    /// The thread that last entered the task, if any: a thread waiting on
    /// the task's work names it as its helper (see [`crate::sync::Condvar`]).
    pub fn worker(&self) -> Option<Arc<Task>> {
        lock(&self.worker).clone()
    }

    pub fn knobs(&self) -> Knobs {
        *lock(&self.knobs)
    }

    pub fn set_knobs(&self, knobs: Knobs) {
        *lock(&self.knobs) = knobs;
    }

    /// The task's I/O runs unthrottled and unpaused until the guard drops,
    /// whatever its knobs say: for the work that the owner itself would
    /// otherwise stop on (a store's compaction once L0 reaches the count at
    /// which writes stop), when those it stops may not be requests that
    /// inheritance could lift it with.
    pub fn urgent(self: &Arc<Self>) -> UrgentGuard {
        self.urgent.fetch_add(1, Ordering::Relaxed);
        UrgentGuard(self.clone())
    }

    /// The task reports the work it still has (bytes to flush or compact).
    pub fn set_backlog(&self, bytes: u64) {
        self.backlog.store(bytes, Ordering::Relaxed);
    }

    /// The task reports how near its owner is to stalling writers on it
    /// (0 far, 1 where they start to slow down): a store's L0 between its
    /// compaction and slowdown triggers.
    pub fn set_stall_pressure(&self, pressure: f64) {
        self.stall.store(pressure.to_bits(), Ordering::Relaxed);
    }

    pub fn stats(&self) -> BackgroundStats {
        BackgroundStats {
            name: self.name.clone(),
            kind: self.kind,
            knobs: self.knobs(),
            bytes: self.bytes.load(Ordering::Relaxed),
            ios: self.ios.load(Ordering::Relaxed),
            backlog_bytes: self.backlog.load(Ordering::Relaxed),
            stall_pressure: f64::from_bits(self.stall.load(Ordering::Relaxed)),
        }
    }

    pub(crate) fn account(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.ios.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the task's knobs bind its work now: neither raised to
    /// critical nor under an [`Background::urgent`] guard. A task may also
    /// ask this before it starts a piece of work, to leave a paused one
    /// unstarted.
    pub fn bound_by_knobs(&self) -> bool {
        !self.knobs().critical && self.urgent.load(Ordering::Relaxed) == 0
    }

    /// Holds the calling thread while the task is paused or over its rates,
    /// unless the thread is critical.
    pub(crate) fn throttle(&self, task: &Task, inheritance: bool, bytes: u64) {
        loop {
            let knobs = self.knobs();
            if !self.bound_by_knobs() || task.is_critical(inheritance) {
                return;
            }
            let wait = if knobs.paused {
                RECHECK
            } else {
                match self.take(knobs, bytes) {
                    None => return,
                    Some(w) => w.min(RECHECK),
                }
            };
            std::thread::sleep(wait);
        }
    }

    /// Takes tokens for one I/O of `bytes`, or says how long until there
    /// are enough.
    fn take(&self, knobs: Knobs, bytes: u64) -> Option<Duration> {
        let mut b = lock(&self.bucket);
        let now = Instant::now();
        let dt = now.duration_since(b.at).as_secs_f64();
        b.at = now;
        let mut wait: f64 = 0.0;
        if let Some(rate) = knobs.rate_bytes {
            b.bytes = (b.bytes + dt * rate).min(rate * BURST_S + bytes as f64);
            wait = wait.max((bytes as f64 - b.bytes) / rate);
        }
        if let Some(rate) = knobs.rate_iops {
            b.ios = (b.ios + dt * rate).min(rate * BURST_S + 1.0);
            wait = wait.max((1.0 - b.ios) / rate);
        }
        if wait > 0.0 {
            return Some(Duration::from_secs_f64(wait));
        }
        if knobs.rate_bytes.is_some() {
            b.bytes -= bytes as f64;
        }
        if knobs.rate_iops.is_some() {
            b.ios -= 1.0;
        }
        None
    }
}

/// The current thread works for a background task while this lives.
#[must_use = "the thread stops working for the task when the guard drops"]
pub struct BackgroundGuard {
    outer: Option<Arc<Background>>,
}

impl Drop for BackgroundGuard {
    fn drop(&mut self) {
        set_background(self.outer.take());
    }
}

thread_local! {
    static BACKGROUND: RefCell<Option<Arc<Background>>> = const { RefCell::new(None) };
}

/// The background task the current thread works for, if any.
pub(crate) fn current_background() -> Option<Arc<Background>> {
    BACKGROUND.with(|b| b.borrow().clone())
}

pub(crate) fn set_background(bg: Option<Arc<Background>>) -> Option<Arc<Background>> {
    BACKGROUND.with(|b| std::mem::replace(&mut *b.borrow_mut(), bg))
}

/// Ends [`Background::urgent`] when dropped.
pub struct UrgentGuard(Arc<Background>);

impl Drop for UrgentGuard {
    fn drop(&mut self) {
        self.0.urgent.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_knob_spaces_io() {
        let bg = Arc::new(Background::new("c".into(), TaskKind::Compaction));
        bg.set_knobs(Knobs {
            rate_iops: Some(200.0),
            ..Knobs::default()
        });
        let task = Task::current();
        let start = Instant::now();
        for _ in 0..12 {
            bg.throttle(&task, true, 4096);
        }
        // The bucket starts empty: 12 I/Os at 200 IOPS take at least 55 ms.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(55), "{took:?}");
    }

    #[test]
    fn a_critical_thread_is_never_throttled() {
        let bg = Arc::new(Background::new("c".into(), TaskKind::Compaction));
        bg.set_knobs(Knobs {
            paused: true,
            ..Knobs::default()
        });
        let _req = crate::task::enter(sluice_core::Ctx::new(1, 0));
        let start = Instant::now();
        bg.throttle(&Task::current(), true, 1 << 20);
        assert!(start.elapsed() < Duration::from_millis(50));
    }

    #[test]
    fn urgent_work_runs_through_a_pause_until_its_guard_drops() {
        let bg = Arc::new(Background::new("c".into(), TaskKind::Compaction));
        bg.set_knobs(Knobs {
            paused: true,
            ..Knobs::default()
        });
        let urgent = bg.urgent();
        let start = Instant::now();
        bg.throttle(&Task::current(), true, 1 << 20);
        assert!(start.elapsed() < Duration::from_millis(50));
        drop(urgent);
        let held = std::thread::spawn({
            let bg = bg.clone();
            move || bg.throttle(&Task::current(), true, 4096)
        });
        std::thread::sleep(Duration::from_millis(30));
        assert!(!held.is_finished(), "paused again once the guard dropped");
        bg.set_knobs(Knobs::default());
        held.join().unwrap();
    }
}
