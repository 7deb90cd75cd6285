//! A race of a session's branches (client → server, server → client, the
//! shutdown watch) that polls a branch only when its own waker fired.
//!
//! A session runs its branches in one task. `tokio::select!` polls every
//! branch whenever the task wakes: each message from the client would also
//! poll the server's side and the shutdown watch (a lock in the watch), and
//! each message from the server the client's side, two futile polls a
//! wake-up. Here each branch gets a waker of its own that marks it before
//! waking the task, and the task polls the marked branches only.
//!
//! Written by hand rather than taken from `futures-concurrency`, whose joins
//! do the same with a mutex and a scan of a readiness array at every poll
//! and wake: an atomic bit mask in their place costs 8% fewer of the
//! proxy's instructions under pgbench (docs/BENCHMARKS.md, "Polled when
//! woken").
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use std::pin::pin;
//! use sluice_proxy::race::race;
//!
//! let slow = pin!(std::future::pending::<u32>());
//! let fast = pin!(async { 7 });
//! let never = pin!(std::future::pending::<u32>());
//! assert_eq!(race(slow, fast, never).await, 7);
//! # });
//! ```

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use atomic_waker::AtomicWaker;

/// Which branches were woken since the task last polled them, and the
/// task's waker.
struct Woken {
    /// Bit `i` set: branch `i` is to be polled.
    marked: AtomicU32,
    task: AtomicWaker,
}

/// The waker a branch polls with.
struct BranchWaker {
    woken: Arc<Woken>,
    bit: u32,
}

impl Wake for BranchWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Marked already: the task has been woken for it and not yet polled.
        if self.woken.marked.fetch_or(self.bit, Ordering::AcqRel) & self.bit == 0 {
            self.woken.task.wake();
        }
    }
}

/// Runs three branches until one completes and returns its output; the
/// others are left where they stand (dropped with their pins by the
/// caller, or awaited further). Every branch is polled once at first;
/// after that only those whose wakers fired, in the order given.
pub async fn race<T, A, B, C>(mut a: Pin<&mut A>, mut b: Pin<&mut B>, mut c: Pin<&mut C>) -> T
where
    A: Future<Output = T> + ?Sized,
    B: Future<Output = T> + ?Sized,
    C: Future<Output = T> + ?Sized,
{
    let woken = Arc::new(Woken {
        marked: AtomicU32::new(u32::MAX),
        task: AtomicWaker::new(),
    });
    let wakers: [Waker; 3] = std::array::from_fn(|i| {
        Waker::from(Arc::new(BranchWaker {
            woken: Arc::clone(&woken),
            bit: 1 << i,
        }))
    });
    poll_fn(|cx| {
        // Registered before the marks are read: a wake after the read finds
        // the task's waker and schedules another poll.
        woken.task.register(cx.waker());
        let marked = woken.marked.swap(0, Ordering::AcqRel);
        if let Poll::Ready(out) = poll_marked(marked, &wakers, 0, a.as_mut()) {
            return Poll::Ready(out);
        }
        if let Poll::Ready(out) = poll_marked(marked, &wakers, 1, b.as_mut()) {
            return Poll::Ready(out);
        }
        if let Poll::Ready(out) = poll_marked(marked, &wakers, 2, c.as_mut()) {
            return Poll::Ready(out);
        }
        Poll::Pending
    })
    .await
}

/// Polls branch `i` with its own waker if it is among those `marked`.
fn poll_marked<F: Future + ?Sized>(marked: u32, wakers: &[Waker], i: usize, branch: Pin<&mut F>) -> Poll<F::Output> {
    if marked & (1 << i) == 0 {
        return Poll::Pending;
    }
    branch.poll(&mut Context::from_waker(&wakers[i]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::Notify;

    /// Counts its polls; completes once `go` is notified.
    async fn counted(polls: &AtomicUsize, go: &Notify, value: u32) -> u32 {
        let mut notified = pin!(go.notified());
        poll_fn(|cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            notified.as_mut().poll(cx)
        })
        .await;
        value
    }

    #[tokio::test]
    async fn only_the_woken_branch_is_polled_again() {
        let (a_polls, b_polls) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let (a_go, b_go) = (Notify::new(), Notify::new());
        let a = pin!(counted(&a_polls, &a_go, 1));
        let b = pin!(counted(&b_polls, &b_go, 2));
        let c = pin!(std::future::pending());
        let mut raced = pin!(race(a, b, c));
        assert_eq!(futures_poll(raced.as_mut()), Poll::Pending);
        assert_eq!(
            (a_polls.load(Ordering::Relaxed), b_polls.load(Ordering::Relaxed)),
            (1, 1)
        );
        b_go.notify_one();
        assert_eq!(raced.await, 2);
        assert_eq!(
            a_polls.load(Ordering::Relaxed),
            1,
            "a was never woken, so never polled again"
        );
        assert_eq!(b_polls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_branch_woken_from_another_thread_wakes_the_task() {
        let go = Arc::new(Notify::new());
        let polls = AtomicUsize::new(0);
        let waiting = pin!(counted(&polls, &go, 5));
        let (never, nor) = (pin!(std::future::pending()), pin!(std::future::pending()));
        let remote = Arc::clone(&go);
        std::thread::spawn(move || remote.notify_one());
        assert_eq!(race(never, waiting, nor).await, 5);
    }

    /// Polls once with a waker that does nothing.
    fn futures_poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }
}
