//! Clients blocked in BLPOP, BRPOP, BLMOVE and BRPOPLPUSH: which keys
//! each waits for and until when, and who to wake when one is written.
//!
//! A blocked client holds no worker. Its command found every key empty,
//! so its connection parks: it is registered here under its keys and its
//! socket waits for input only (to see the client leave). A write to one
//! of the keys wakes it, and so does its deadline; its command then runs
//! again, from the start, as if just sent: it pops, or it parks again if
//! another client took the element first. Every client woken by a write
//! runs, and the first to get to the list is served: Redis serves the
//! longest-blocked client first, which with several workers would cost a
//! queue per key for an order that the workers' scheduling blurs anyway.
//! And Redis serves its blocked clients before the writer's next command
//! runs; here they run once the writer's step (its whole pipeline) is
//! done, so a read pipelined right after the push may still see the
//! element that a blocked client is about to take.
//!
//! # No wake is lost
//!
//! A write can land after a command found its keys empty and before its
//! connection is registered. Every write counts in [`Waiters::wrote`]'s
//! generation before it looks for clients to wake, and a connection
//! compares the generation it saw before its attempt with the one after
//! it registered ([`Waiters::park`], both inside one lock): one of the two
//! sees the other, and a connection that missed a write runs its command
//! again at once instead of parking.
//!
//! Deadlines are kept in order and served by one thread
//! ([`Waiters::run_timeouts`]) that sleeps until the nearest.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A connection, by its key in the poller.
pub(crate) type ConnKey = usize;

/// The blocked clients of one server.
#[derive(Default)]
pub(crate) struct Waiters {
    /// Writes so far: a parking connection that missed one runs again.
    generation: AtomicU64,
    /// Connections parked, read by writers before they take the lock.
    parked: AtomicUsize,
    inner: Mutex<Inner>,
    /// Signalled when a deadline earlier than the timer's is added.
    timer: Condvar,
}

#[derive(Default)]
struct Inner {
    /// Connections waiting for each key, in the order they parked.
    by_key: HashMap<Vec<u8>, Vec<ConnKey>>,
    /// Each parked connection's keys and deadline.
    of_conn: HashMap<ConnKey, (Vec<Vec<u8>>, Option<Instant>)>,
    deadlines: BTreeSet<(Instant, ConnKey)>,
}

impl Inner {
    fn forget(&mut self, conn: ConnKey) -> bool {
        let Some((keys, deadline)) = self.of_conn.remove(&conn) else {
            return false;
        };
        for key in keys {
            if let Some(conns) = self.by_key.get_mut(&key) {
                conns.retain(|&c| c != conn);
                if conns.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
        if let Some(at) = deadline {
            self.deadlines.remove(&(at, conn));
        }
        true
    }
}

impl Waiters {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The generation a command sees before it looks at its keys.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Counts a write; true if some connection is parked, so that the
    /// writer should name its keys to [`Waiters::take`].
    pub fn wrote(&self) -> bool {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.parked.load(Ordering::SeqCst) > 0
    }

    /// Parks `conn` on `keys` until `deadline`; false, and nothing
    /// registered, if a write landed since `generation`.
    pub fn park(&self, conn: ConnKey, keys: &[Vec<u8>], deadline: Option<Instant>, generation: u64) -> bool {
        let mut inner = self.inner();
        inner.forget(conn);
        if self.generation.load(Ordering::SeqCst) != generation {
            return false;
        }
        for key in keys {
            let conns = inner.by_key.entry(key.clone()).or_default();
            if !conns.contains(&conn) {
                conns.push(conn);
            }
        }
        inner.of_conn.insert(conn, (keys.to_vec(), deadline));
        self.parked.store(inner.of_conn.len(), Ordering::SeqCst);
        if let Some(at) = deadline {
            let earliest = inner.deadlines.first().is_none_or(|&(first, _)| at < first);
            inner.deadlines.insert((at, conn));
            if earliest {
                self.timer.notify_one();
            }
        }
        true
    }

    /// Unregisters `conn` (it was stepped, or it closed).
    pub fn forget(&self, conn: ConnKey) {
        if self.parked.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut inner = self.inner();
        if inner.forget(conn) {
            self.parked.store(inner.of_conn.len(), Ordering::SeqCst);
        }
    }

    /// The connections waiting for any of `keys`, unregistered: the
    /// caller wakes them.
    pub fn take<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Vec<ConnKey> {
        let mut inner = self.inner();
        let mut woken = Vec::new();
        for key in keys {
            for conn in inner.by_key.get(key).cloned().unwrap_or_default() {
                inner.forget(conn);
                woken.push(conn);
            }
        }
        self.parked.store(inner.of_conn.len(), Ordering::SeqCst);
        woken
    }

    /// How many connections are parked (INFO's `blocked_clients`).
    pub fn blocked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Wakes connections whose deadline has come, with `wake`, for as long
    /// as the process runs.
    pub fn run_timeouts(&self, wake: impl Fn(ConnKey)) {
        let mut inner = self.inner();
        loop {
            let now = Instant::now();
            let due: Vec<ConnKey> = inner
                .deadlines
                .iter()
                .take_while(|&&(at, _)| at <= now)
                .map(|&(_, conn)| conn)
                .collect();
            if !due.is_empty() {
                for &conn in &due {
                    inner.forget(conn);
                }
                self.parked.store(inner.of_conn.len(), Ordering::SeqCst);
                drop(inner);
                due.into_iter().for_each(&wake);
                inner = self.inner();
                continue;
            }
            // Without a deadline, a long sleep: a new earliest one signals.
            let sleep = inner
                .deadlines
                .first()
                .map_or(Duration::from_secs(3600), |&(at, _)| at - now);
            inner = self
                .timer
                .wait_timeout(inner, sleep)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Vec<Vec<u8>> {
        k.iter().map(|k| k.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_write_wakes_the_connections_of_its_keys_once() {
        let w = Waiters::default();
        let g = w.generation();
        assert!(w.park(1, &keys(&["a", "b"]), None, g));
        assert!(w.park(2, &keys(&["b"]), None, g));
        assert_eq!(w.blocked(), 2);
        assert!(w.wrote(), "someone is parked");
        assert_eq!(w.take([&b"b"[..]]), vec![1, 2]);
        assert_eq!(w.take([&b"a"[..]]), Vec::<ConnKey>::new(), "1 left every key");
        assert_eq!(w.blocked(), 0);
        assert!(!w.wrote());
    }

    #[test]
    fn a_write_between_the_attempt_and_parking_is_not_missed() {
        let w = Waiters::default();
        let seen = w.generation();
        w.wrote();
        assert!(!w.park(1, &keys(&["a"]), None, seen), "runs again instead");
        assert_eq!(w.blocked(), 0);
    }

    #[test]
    fn forgetting_and_parking_again_leave_one_registration() {
        let w = Waiters::default();
        let g = w.generation();
        assert!(w.park(1, &keys(&["a"]), None, g));
        assert!(w.park(1, &keys(&["a"]), None, g));
        assert_eq!(w.take([&b"a"[..]]), vec![1]);
        assert!(w.park(1, &keys(&["a"]), Some(Instant::now()), g));
        w.forget(1);
        assert_eq!((w.blocked(), w.inner().deadlines.len()), (0, 0));
    }

    #[test]
    fn deadlines_wake_in_order() {
        let w = std::sync::Arc::new(Waiters::default());
        let g = w.generation();
        let now = Instant::now();
        assert!(w.park(1, &keys(&["a"]), Some(now + Duration::from_millis(40)), g));
        assert!(w.park(2, &keys(&["a"]), Some(now), g));
        assert!(w.park(3, &keys(&["a"]), None, g));
        let (tx, rx) = std::sync::mpsc::channel();
        let timer = w.clone();
        std::thread::spawn(move || timer.run_timeouts(|c| tx.send(c).unwrap()));
        assert_eq!(rx.recv().unwrap(), 2);
        assert_eq!(rx.recv().unwrap(), 1);
        assert_eq!(w.blocked(), 1, "3 waits for a write");
    }
}
