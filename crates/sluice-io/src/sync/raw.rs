//! The raw locks: state under a std mutex, waiters on a std condition
//! variable, and the holders recorded so that a blocked waiter can name
//! whom it waits for. Every waiter re-reads the holders after each wake-up,
//! so a new owner is raised as soon as it takes over.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::task::{Blocker, Task};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Holders of a lock: one writer or many readers.
#[derive(Default)]
struct Holders {
    writer: Option<Arc<Task>>,
    readers: Vec<Arc<Task>>,
    /// Tasks waiting on `released`. A release with none makes no system
    /// call: notifying a condition variable always enters the kernel, and
    /// the store takes these locks several times per request.
    waiting: usize,
}

impl Holders {
    /// A task to raise for a waiter: the writer, else the reader that took
    /// the lock first (it is likely to release first; the others are
    /// raised in turn as the waiter wakes and looks again).
    fn blocker(&self) -> Option<Arc<Task>> {
        self.writer.clone().or_else(|| self.readers.first().cloned())
    }
}

pub struct RawInheritRwLock {
    holders: Mutex<Holders>,
    released: Condvar,
}

impl RawInheritRwLock {
    /// Blocks until `free` says the lock can be taken, then `take`s it.
    fn acquire(&self, free: impl Fn(&Holders) -> bool, take: impl FnOnce(&mut Holders, Arc<Task>)) {
        let me = Task::current();
        let mut h = lock(&self.holders);
        while !free(&h) {
            let Some(owner) = h.blocker() else { break };
            drop(h);
            crate::blocking();
            me.begin_wait(Blocker::Task(owner));
            h = lock(&self.holders);
            if !free(&h) {
                h.waiting += 1;
                h = self.released.wait(h).unwrap_or_else(|e| e.into_inner());
                h.waiting -= 1;
            }
            me.end_wait();
        }
        take(&mut h, me);
    }

    fn release(&self, f: impl FnOnce(&mut Holders)) {
        let mut h = lock(&self.holders);
        f(&mut h);
        // Counted under the same lock a waiter holds until it waits, so a
        // waiter is either counted here or sees the lock free.
        if h.waiting > 0 {
            drop(h);
            self.released.notify_all();
        }
    }
}

fn no_writer(h: &Holders) -> bool {
    h.writer.is_none()
}

fn nobody(h: &Holders) -> bool {
    h.writer.is_none() && h.readers.is_empty()
}

unsafe impl lock_api::RawRwLock for RawInheritRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawInheritRwLock {
        holders: Mutex::new(Holders {
            writer: None,
            readers: Vec::new(),
            waiting: 0,
        }),
        released: Condvar::new(),
    };
    type GuardMarker = lock_api::GuardNoSend;

    fn lock_shared(&self) {
        self.acquire(no_writer, |h, me| h.readers.push(me));
    }

    fn try_lock_shared(&self) -> bool {
        let mut h = lock(&self.holders);
        let ok = no_writer(&h);
        if ok {
            h.readers.push(Task::current());
        }
        ok
    }

    unsafe fn unlock_shared(&self) {
        let id = Task::current().id();
        self.release(|h| {
            if let Some(i) = h.readers.iter().position(|t| t.id() == id) {
                h.readers.swap_remove(i);
            }
        });
    }

    fn lock_exclusive(&self) {
        self.acquire(nobody, |h, me| h.writer = Some(me));
    }

    fn try_lock_exclusive(&self) -> bool {
        let mut h = lock(&self.holders);
        let ok = nobody(&h);
        if ok {
            h.writer = Some(Task::current());
        }
        ok
    }

    unsafe fn unlock_exclusive(&self) {
        self.release(|h| h.writer = None);
    }
}

/// A mutex is the exclusive half of the reader-writer lock.
pub struct RawInheritMutex(RawInheritRwLock);

unsafe impl lock_api::RawMutex for RawInheritMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawInheritMutex(<RawInheritRwLock as lock_api::RawRwLock>::INIT);
    type GuardMarker = lock_api::GuardNoSend;

    fn lock(&self) {
        lock_api::RawRwLock::lock_exclusive(&self.0)
    }

    fn try_lock(&self) -> bool {
        lock_api::RawRwLock::try_lock_exclusive(&self.0)
    }

    unsafe fn unlock(&self) {
        lock_api::RawRwLock::unlock_exclusive(&self.0)
    }
}
