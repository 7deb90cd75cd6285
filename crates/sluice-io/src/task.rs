//! Tasks, their request context, and I/O priority inheritance (RCP §4.1,
//! §4.2, §4.4).
//!
//! Every thread that does I/O through Sluice is a [`Task`]. A task is
//! *critical* while it serves a foreground request (it holds a [`CtxGuard`],
//! the `ctx_begin/ctx_end` of the cooperative-scheduling paper and RCP's
//! enlightenment API) or while it has inherited criticality from a critical
//! task that waits for it.
//!
//! Inheritance follows RCP's blocking status (§4.4): a task about to block
//! records what it waits for (`Blocker`): another task (a lock's owner, a
//! condition variable's helper) or one of its own outstanding I/Os. If the
//! blocked task is critical, or becomes critical while it waits, it raises
//! what it waits for: the other task inherits criticality (and passes it on
//! along its own blocking status, which resolves transitive chains), and an
//! outstanding I/O is promoted wherever it is in the I/O path. What a wait
//! raised is revoked when that wait ends.
//!
//! Departure from RCP: a task that loses its inherited criticality while
//! it is itself still blocked keeps what it passed on until its own wait
//! ends, instead of revoking along the chain at once. The over-promotion
//! lasts one wait at most and keeps revocation local to the waiter.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_core::{Class, Ctx};

/// Something that can promote one of its outstanding I/Os to critical.
pub(crate) trait Promote: Send + Sync {
    fn promote(&self, seq: u64);
}

/// What a blocked task waits for.
#[derive(Clone)]
pub(crate) enum Blocker {
    /// Another task: a lock's owner or a condition variable's helper.
    Task(Arc<Task>),
    /// An outstanding I/O, by its sequence number in a runtime.
    Io(Arc<dyn Promote>, u64),
}

#[derive(Default)]
struct WaitRecord {
    on: Option<Blocker>,
    /// Tasks this wait has raised; revoked when the wait ends.
    raised: Vec<Arc<Task>>,
    /// Counts waits, so that a raise that races with the end of a wait is
    /// revoked at once instead of leaking.
    epoch: u64,
}

/// A thread doing I/O through Sluice.
pub struct Task {
    id: u64,
    /// Nesting depth of foreground context guards.
    foreground: AtomicU32,
    /// Critical waiters currently raising this task.
    inherited: AtomicU32,
    ctx: Mutex<Option<Current>>,
    wait: Mutex<WaitRecord>,
}

/// The request a task serves, and the I/Os it has issued for it.
#[derive(Clone, Copy)]
struct Current {
    ctx: Ctx,
    ios: u32,
}

static NEXT_TASK: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CURRENT: Arc<Task> = Arc::new(Task::new());
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned record is still consistent: every update is one assignment.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Task {
    fn new() -> Self {
        Task {
            id: NEXT_TASK.fetch_add(1, Ordering::Relaxed),
            foreground: AtomicU32::new(0),
            inherited: AtomicU32::new(0),
            ctx: Mutex::new(None),
            wait: Mutex::new(WaitRecord::default()),
        }
    }

    /// The calling thread's task.
    pub fn current() -> Arc<Task> {
        CURRENT.with(Arc::clone)
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Serving a foreground request right now.
    pub fn is_foreground(&self) -> bool {
        self.foreground.load(Ordering::Acquire) > 0
    }

    /// Critical waiters raising this task right now.
    pub fn inherited(&self) -> u32 {
        self.inherited.load(Ordering::Acquire)
    }

    /// Critical, either by its own request or by inheritance (when
    /// `inheritance` is on).
    pub fn is_critical(&self, inheritance: bool) -> bool {
        self.is_foreground() || (inheritance && self.inherited() > 0)
    }

    /// The request context the task works for, if any.
    pub fn ctx(&self) -> Option<Ctx> {
        lock(&self.ctx).map(|c| c.ctx)
    }

    /// For an I/O the task issues now: its request's context and the
    /// access's 1-based index x among the request's I/Os on this thread
    /// (TraQIOS §2, from which M = N - x + 1 follows).
    pub(crate) fn next_access(&self) -> Option<(Ctx, u32)> {
        lock(&self.ctx).as_mut().map(|c| {
            c.ios = c.ios.saturating_add(1);
            (c.ctx, c.ios)
        })
    }

    /// Records that the task is about to block on `on`; raises it if the
    /// task is critical. Pair with [`Task::end_wait`].
    pub(crate) fn begin_wait(self: &Arc<Self>, on: Blocker) {
        let epoch = {
            let mut w = lock(&self.wait);
            w.on = Some(on.clone());
            w.epoch
        };
        if self.is_critical(true) {
            self.raise(on, epoch);
        }
    }

    /// The wait is over: revoke what it raised.
    pub(crate) fn end_wait(&self) {
        let raised = {
            let mut w = lock(&self.wait);
            w.on = None;
            w.epoch += 1;
            std::mem::take(&mut w.raised)
        };
        for t in raised {
            t.unboost();
        }
    }

    /// Raises what this task waits for, recording raised tasks against the
    /// wait `epoch`.
    fn raise(&self, on: Blocker, epoch: u64) {
        match on {
            Blocker::Io(p, seq) => p.promote(seq),
            Blocker::Task(t) => {
                if t.id == self.id {
                    return;
                }
                t.boost();
                let mut w = lock(&self.wait);
                if w.epoch == epoch {
                    w.raised.push(t);
                } else {
                    drop(w);
                    t.unboost();
                }
            }
        }
    }

    /// A critical waiter depends on this task. On the step from
    /// non-critical to critical, pass it on to what this task waits for.
    fn boost(&self) {
        let before = self.inherited.fetch_add(1, Ordering::AcqRel);
        if before > 0 || self.is_foreground() {
            return;
        }
        let (on, epoch) = {
            let w = lock(&self.wait);
            (w.on.clone(), w.epoch)
        };
        if let Some(on) = on {
            self.raise(on, epoch);
        }
    }

    fn unboost(&self) {
        self.inherited.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Holds the current thread in a foreground request; dropping it ends the
/// request (`ctx_end`). Nested guards restore the outer context.
#[must_use = "the request ends when the guard is dropped"]
pub struct CtxGuard {
    task: Arc<Task>,
    outer: Option<Current>,
}

/// Begins a request on the current thread (`ctx_begin`): every I/O issued
/// until the guard drops carries `ctx` and, for a foreground `ctx`, is
/// critical. To continue the request on another thread, call `enter` there
/// with the same context.
pub fn enter(ctx: Ctx) -> CtxGuard {
    let task = Task::current();
    let outer = lock(&task.ctx).replace(Current { ctx, ios: 0 });
    if ctx.class == Class::Foreground {
        task.foreground.fetch_add(1, Ordering::AcqRel);
    }
    CtxGuard { task, outer }
}

impl CtxGuard {
    /// I/Os issued so far in the request now current on the thread (this
    /// guard's, unless a nested guard is live).
    pub fn ios(&self) -> u32 {
        lock(&self.task.ctx).map_or(0, |c| c.ios)
    }
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        let ctx = std::mem::replace(&mut *lock(&self.task.ctx), self.outer);
        if ctx.is_some_and(|c| c.ctx.class == Class::Foreground) {
            self.task.foreground.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The context of the request the current thread serves, if any.
pub fn current_ctx() -> Option<Ctx> {
    Task::current().ctx()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn guards_nest_and_restore_the_outer_context() {
        let task = Task::current();
        assert!(!task.is_foreground());
        let outer = enter(Ctx::new(1, 0));
        {
            let _inner = enter(Ctx::new(2, 0));
            assert_eq!(current_ctx().map(|c| c.id.0), Some(2));
        }
        assert_eq!(current_ctx().map(|c| c.id.0), Some(1));
        assert!(task.is_foreground());
        drop(outer);
        assert!(!task.is_foreground() && current_ctx().is_none());
    }

    #[test]
    fn accesses_are_counted_per_request_and_the_outer_count_survives_a_nested_one() {
        let task = Task::current();
        assert_eq!(task.next_access(), None, "no request: no index");
        let _outer = enter(Ctx::new(1, 0));
        assert_eq!(task.next_access().map(|(c, x)| (c.id.0, x)), Some((1, 1)));
        {
            let _inner = enter(Ctx::new(2, 0));
            assert_eq!(task.next_access().map(|(c, x)| (c.id.0, x)), Some((2, 1)));
        }
        assert_eq!(task.next_access().map(|(c, x)| (c.id.0, x)), Some((1, 2)));
    }

    struct CountPromotions(AtomicUsize);
    impl Promote for CountPromotions {
        fn promote(&self, _seq: u64) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_critical_wait_raises_a_chain_and_revokes_it_at_the_end() {
        // fg waits for a; a waits for b; b waits on an I/O.
        let (fg, a, b) = (Arc::new(Task::new()), Arc::new(Task::new()), Arc::new(Task::new()));
        let io = Arc::new(CountPromotions(AtomicUsize::new(0)));
        b.begin_wait(Blocker::Io(io.clone(), 7));
        a.begin_wait(Blocker::Task(b.clone()));
        assert_eq!(io.0.load(Ordering::SeqCst), 0, "nobody critical yet");
        fg.foreground.store(1, Ordering::SeqCst);
        fg.begin_wait(Blocker::Task(a.clone()));
        assert!(a.is_critical(true) && b.is_critical(true));
        assert!(!b.is_critical(false), "inheritance off: only its own request counts");
        assert_eq!(io.0.load(Ordering::SeqCst), 1, "b's I/O promoted");
        fg.end_wait();
        assert_eq!(a.inherited(), 0);
        a.end_wait();
        assert_eq!(b.inherited(), 0);
    }
}
