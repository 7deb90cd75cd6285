//! A condition variable that infers its helper (RCP §4.2.1, after the
//! helper tasks of [27]): whoever signals it is registered as its helper,
//! since a task that signalled a condition once is likely to signal it
//! again (background tasks are dedicated to one activity). A critical task
//! that waits raises the helper until its wait ends. A helper that has not
//! signalled within the window is forgotten. A waiter that knows which
//! task will signal names it for its own wait ([`Condvar::wait_helped_by`]):
//! the helper shared by all waiters is whoever signalled last, and a
//! signal from another task between naming and waiting would otherwise
//! decide whom the wait raises.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::raw::RawInheritMutex;
use crate::task::{Blocker, Task};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Condvar {
    /// Bumped by every notification, so a waiter cannot miss one.
    generation: Mutex<u64>,
    cv: std::sync::Condvar,
    helper: Mutex<Option<(Arc<Task>, Instant)>>,
    window: Duration,
}

impl Default for Condvar {
    fn default() -> Self {
        Self::new()
    }
}

impl Condvar {
    /// A condition variable whose inferred helper expires after 1 s
    /// without a signal.
    pub fn new() -> Self {
        Self::with_helper_window(Duration::from_secs(1))
    }

    pub fn with_helper_window(window: Duration) -> Self {
        Condvar {
            generation: Mutex::new(0),
            cv: std::sync::Condvar::new(),
            helper: Mutex::new(None),
            window,
        }
    }

    fn set_helper(&self, task: Arc<Task>) {
        *lock(&self.helper) = Some((task, Instant::now()));
    }

    /// The helper, if it signalled within the window.
    pub fn helper(&self) -> Option<Arc<Task>> {
        let h = lock(&self.helper);
        h.as_ref()
            .filter(|(_, at)| at.elapsed() <= self.window)
            .map(|(t, _)| t.clone())
    }

    /// Releases the mutex, waits for a notification, takes the mutex again.
    /// Like every condition variable, it may wake spuriously: wait in a loop
    /// that checks the condition.
    pub fn wait<T>(&self, guard: &mut lock_api::MutexGuard<'_, RawInheritMutex, T>) {
        self.wait_until(guard, self.helper(), None);
    }

    /// As [`Condvar::wait`], raising `helper` (if the waiter is critical)
    /// instead of the inferred helper.
    pub fn wait_helped_by<T>(&self, guard: &mut lock_api::MutexGuard<'_, RawInheritMutex, T>, helper: Arc<Task>) {
        self.wait_until(guard, Some(helper), None);
    }

    /// As [`Condvar::wait`], giving up after `timeout`; true if it timed out.
    pub fn wait_timeout<T>(&self, guard: &mut lock_api::MutexGuard<'_, RawInheritMutex, T>, timeout: Duration) -> bool {
        self.wait_until(guard, self.helper(), Some(Instant::now() + timeout))
    }

    fn wait_until<T>(
        &self,
        guard: &mut lock_api::MutexGuard<'_, RawInheritMutex, T>,
        helper: Option<Arc<Task>>,
        deadline: Option<Instant>,
    ) -> bool {
        crate::blocking();
        let me = Task::current();
        if let Some(h) = &helper {
            me.begin_wait(Blocker::Task(h.clone()));
        }
        let generation = lock(&self.generation);
        let start = *generation;
        let timed_out = lock_api::MutexGuard::unlocked(guard, || {
            let mut g = generation;
            while *g == start {
                match deadline {
                    None => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                    Some(d) => {
                        let Some(left) = d.checked_duration_since(Instant::now()) else {
                            return true;
                        };
                        g = self.cv.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
                    }
                }
            }
            false
        });
        if helper.is_some() {
            me.end_wait();
        }
        timed_out
    }

    pub fn notify_one(&self) {
        self.notify(|cv| cv.notify_one());
    }

    pub fn notify_all(&self) {
        self.notify(|cv| cv.notify_all());
    }

    fn notify(&self, wake: impl FnOnce(&std::sync::Condvar)) {
        self.set_helper(Task::current());
        *lock(&self.generation) += 1;
        wake(&self.cv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signaller_becomes_the_helper_until_the_window_passes() {
        let cv = Condvar::with_helper_window(Duration::from_millis(200));
        assert!(cv.helper().is_none());
        let signaller = std::thread::spawn({
            let cv = Arc::new(cv);
            move || {
                cv.notify_all();
                (Task::current().id(), cv)
            }
        });
        let (id, cv) = signaller.join().unwrap();
        assert_eq!(cv.helper().map(|t| t.id()), Some(id));
        std::thread::sleep(Duration::from_millis(250));
        assert!(cv.helper().is_none(), "forgotten after the window");
    }

    #[test]
    fn a_named_helper_is_raised_whoever_signalled_last() {
        let m = Arc::new(crate::sync::Mutex::new(false));
        let cv = Arc::new(Condvar::new());
        let helper = std::thread::spawn(Task::current).join().unwrap();
        let other = std::thread::spawn({
            let cv = cv.clone();
            move || {
                cv.notify_all();
                Task::current()
            }
        })
        .join()
        .unwrap();
        let waiter = std::thread::spawn({
            let (m, cv, helper) = (m.clone(), cv.clone(), helper.clone());
            move || {
                let _request = crate::enter(sluice_core::Ctx::new(1, 0));
                let mut g = m.lock();
                while !*g {
                    cv.wait_helped_by(&mut g, helper.clone());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while helper.inherited() == 0 {
            assert!(Instant::now() < deadline, "the named helper was never raised");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(other.inherited(), 0, "the last signaller is not raised");
        *m.lock() = true;
        cv.notify_all();
        waiter.join().unwrap();
        assert_eq!(helper.inherited(), 0, "the raise ends with the wait");
    }

    #[test]
    fn waits_time_out_and_notifications_wake() {
        let m = Arc::new(crate::sync::Mutex::new(false));
        let cv = Arc::new(Condvar::new());
        let mut g = m.lock();
        assert!(cv.wait_timeout(&mut g, Duration::from_millis(5)), "nobody signals");
        drop(g);
        let (m2, cv2) = (m.clone(), cv.clone());
        let t = std::thread::spawn(move || {
            *m2.lock() = true;
            cv2.notify_one();
        });
        let mut g = m.lock();
        while !*g {
            cv.wait(&mut g);
        }
        t.join().unwrap();
    }
}
