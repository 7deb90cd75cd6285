//! Turns: how many workers serve connections at once.
//!
//! At most one worker per core has a turn
//! ([`ServerOptions::active_workers`]); the others wait for one. A worker
//! with a turn takes every socket ready at once from the poller and serves
//! them one after another, on its own thread, as an event loop does: under
//! load a request costs no wake-up, where a worker woken per socket cost
//! two context switches per request, a quarter of the server's CPU.
//!
//! Serving in turns must not let one client stall the others, so a turn
//! passes on in two cases, as Go's scheduler hands a processor on:
//!
//! - **Before a worker blocks** in the store (an I/O, a lock: sluice-io
//!   tells it, [`sluice_io::before_blocking`]) it gives its turn up, and a
//!   waiting worker takes it if connections wait to be served or no
//!   worker with a turn is left to wait on the poller (with connections
//!   waiting and no worker waiting, the poller's doorbell wakes a worker
//!   with a turn). Otherwise nobody is woken (a read from the page cache
//!   costs no context switch), and the blocked worker takes a turn again
//!   when it is done. Requests that do I/O are thus in flight together,
//!   up to the pool's size ([`ServerOptions::workers`]), which an I/O
//!   scheduler needs to have anything to order.
//! - **A step that runs long** without blocking (a long script, `KEYS`
//!   over millions of keys) loses its turn to the watchdog, which looks
//!   every [`WATCH_TICK`] (more rarely while no worker serves): a step it
//!   sees twice has run at least one tick, and a waiting worker takes the
//!   turn at once. The long step runs on, without a turn.
//!
//! [`ServerOptions::active_workers`]: crate::ServerOptions::active_workers
//! [`ServerOptions::workers`]: crate::ServerOptions::workers

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How often the watchdog looks while workers serve: a step is preempted
/// after one to two ticks.
const WATCH_TICK: Duration = Duration::from_millis(10);

/// How rarely the watchdog looks while no worker serves.
const IDLE_TICK: Duration = Duration::from_millis(80);

pub(crate) struct Turns {
    state: Mutex<State>,
    /// Signalled when a turn is given up while workers wait for one.
    free: Condvar,
    /// Every worker, for the watchdog.
    workers: Mutex<Vec<Arc<Worker>>>,
}

struct State {
    /// Workers with a turn: at most `active`.
    taken: usize,
    active: usize,
    /// Workers waiting for a turn.
    waiting: usize,
}

/// A worker as the turns see it.
#[derive(Default)]
pub(crate) struct Worker {
    /// Whether it has a turn: changed under the turns' lock, read by the
    /// worker between steps.
    turn: AtomicBool,
    /// Bumped as a step begins and as it ends: odd during a step.
    steps: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Worker {
    pub fn has_turn(&self) -> bool {
        self.turn.load(Ordering::Acquire)
    }

    /// Runs one step (a connection served), visible to the watchdog.
    pub fn step<T>(&self, f: impl FnOnce() -> T) -> T {
        self.steps.fetch_add(1, Ordering::Relaxed);
        let out = f();
        self.steps.fetch_add(1, Ordering::Relaxed);
        out
    }
}

impl Turns {
    /// Turns for at most `active` workers at once (at least one).
    pub fn new(active: usize) -> Turns {
        Turns {
            state: Mutex::new(State {
                taken: 0,
                active: active.max(1),
                waiting: 0,
            }),
            free: Condvar::new(),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// A new worker, known to the watchdog.
    pub fn worker(&self) -> Arc<Worker> {
        let w = Arc::new(Worker::default());
        lock(&self.workers).push(w.clone());
        w
    }

    /// Waits until fewer than `active` workers have a turn, and takes one.
    pub fn take(&self, w: &Worker) {
        let mut st = lock(&self.state);
        while st.taken >= st.active {
            st.waiting += 1;
            st = self.free.wait(st).unwrap_or_else(|e| e.into_inner());
            st.waiting -= 1;
        }
        st.taken += 1;
        w.turn.store(true, Ordering::Release);
    }

    /// Takes `w`'s turn, if it has one. If connections wait to be served
    /// (`queued`), a waiting worker is woken to take the turn, or, with
    /// none waiting, `ring` wakes a worker with a turn from the poller; a
    /// waiting worker is woken too if no worker with a turn is left.
    pub fn give(&self, w: &Worker, queued: impl FnOnce() -> bool, ring: impl FnOnce()) {
        let mut st = lock(&self.state);
        if !w.turn.swap(false, Ordering::AcqRel) {
            return;
        }
        st.taken -= 1;
        let queued = queued();
        let wake = st.waiting > 0 && (st.taken == 0 || queued);
        drop(st);
        if wake {
            self.free.notify_one();
        } else if queued {
            ring();
        }
    }

    /// The watchdog, for as long as the process runs: a step seen twice
    /// loses its turn to a waiting worker, or, with none waiting, `ring`
    /// wakes a worker with a turn from the poller.
    pub fn watch(&self, ring: impl Fn()) {
        let mut seen: Vec<u64> = Vec::new();
        let mut tick = WATCH_TICK;
        loop {
            std::thread::sleep(tick);
            let workers = lock(&self.workers).clone();
            seen.resize(workers.len(), 0);
            let mut serving = false;
            for (w, last) in workers.iter().zip(&mut seen) {
                let steps = w.steps.load(Ordering::Relaxed);
                let in_step = steps % 2 == 1;
                serving |= in_step;
                if in_step && steps == *last {
                    self.give(w, || true, &ring);
                }
                *last = steps;
            }
            tick = if serving { WATCH_TICK } else { IDLE_TICK };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_given_up_is_taken_again_and_given_once() {
        let turns = Turns::new(1);
        let (a, b) = (turns.worker(), turns.worker());
        turns.take(&a);
        assert!(a.has_turn());
        turns.give(&a, || true, || {});
        turns.give(&a, || panic!("given twice"), || {});
        assert!(!a.has_turn());
        turns.take(&b);
        assert!(b.has_turn());
        assert_eq!(lock(&turns.state).taken, 1);
    }

    #[test]
    fn connections_left_waiting_ring_the_doorbell_when_no_worker_waits() {
        let turns = Turns::new(2);
        let (a, b) = (turns.worker(), turns.worker());
        turns.take(&a);
        turns.take(&b);
        let rung = std::cell::Cell::new(0);
        turns.give(&a, || true, || rung.set(rung.get() + 1));
        assert_eq!(rung.get(), 1, "b, polling, serves what a left");
        turns.give(&b, || false, || rung.set(rung.get() + 1));
        assert_eq!(rung.get(), 1, "nothing left: no wake-up");
    }

    #[test]
    fn a_waiting_worker_takes_a_turn_given_up() {
        let turns = Arc::new(Turns::new(1));
        let (a, b) = (turns.worker(), turns.worker());
        turns.take(&a);
        let waiter = std::thread::spawn({
            let (turns, b) = (turns.clone(), b.clone());
            move || turns.take(&b)
        });
        while lock(&turns.state).waiting == 0 {
            std::thread::yield_now();
        }
        turns.give(&a, || false, || panic!("a waiting worker takes the turn"));
        waiter.join().unwrap();
        assert!(b.has_turn() && !a.has_turn());
    }

    #[test]
    fn the_watchdog_takes_the_turn_of_a_step_that_runs_long() {
        let turns = Arc::new(Turns::new(1));
        let (a, b) = (turns.worker(), turns.worker());
        turns.take(&a);
        std::thread::spawn({
            let turns = turns.clone();
            move || turns.watch(|| {})
        });
        // A step that never blocks: it keeps running until b has the turn.
        a.step(|| turns.take(&b));
        assert!(b.has_turn() && !a.has_turn());
    }
}
