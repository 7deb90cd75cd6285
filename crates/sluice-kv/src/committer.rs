//! Group commit across connections: one thread syncs the WAL for every
//! connection whose writes are waiting, then hands each its outcome.
//!
//! A worker applies a connection's writes and moves on to the next
//! connection at once; the connection's replies wait here until a sync
//! covers its writes. Redis with `appendfsync always` syncs once per pass
//! of its event loop, for every client's writes, and blocks while it
//! syncs, so the clients it answered last have sent their next requests
//! by the time it polls again. The committer cuts its groups the same way
//! without blocking a worker on the disk:
//!
//! - **Held until the workers poll.** A connection's writes are held
//!   ([`Committer::sync`]) until a worker finds no connection left to
//!   serve, is about to block, or loses its turn ([`Committer::release`]),
//!   or until [`HOLD`] are held; then they go to the committing thread as
//!   one group. Handed over one by one, each would wake the thread and
//!   start a sync of its own while the rest of the harvest was served.
//! - **Answered, then resumed.** Once a sync is done, every connection of
//!   the group is answered first and only then resumed ([`Synced`]), so
//!   that the clients' next requests, sent while the group's later replies
//!   are written, are found together.
//! - **Held back until the next sync.** A connection answered that has
//!   nothing more to read yet, while at least [`BATCH`] connections wait
//!   for a sync, is held back until the next sync is answered, at most
//!   [`HOLD_BACK`] ([`Committer::hold_back`]), instead of being re-armed
//!   in the poller: its client's next request, which most likely comes
//!   meanwhile, is then served with the group's, where a worker woken for
//!   each returning client was the server's largest cost under durable
//!   writes. Only these clients wait, and only that long; any other
//!   client is served as soon as its request arrives.
//!
//! The sync runs as foreground work of the first waiting connection's
//! tenant: it is on the critical path of every request it covers.

use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::fd::OwnedFd;

use crate::request::own_ctx;
use crate::shared::Shared;
use crate::Unsynced;

/// Writes held at most before they are handed to the committing thread
/// without waiting for the workers to poll: a busy server's harvest.
const HOLD: usize = 64;

/// Connections waiting for a sync from which answered connections are
/// held back: below it, a wake-up per returning client costs little.
const BATCH: usize = 8;

/// The longest a connection is held back: what the next request of a
/// client answered after a sync may wait at most.
pub(crate) const HOLD_BACK: Duration = Duration::from_millis(1);

/// A connection whose replies wait for a sync.
pub(crate) trait Synced: Send {
    /// Writes the replies the sync held back; `Err` names why the writes
    /// may not be durable.
    fn answer(&mut self, outcome: Result<(), String>);
    /// Serves the connection again, once every connection of its group is
    /// answered.
    fn resume(self: Box<Self>);
}

/// Serves a connection held back ([`Committer::hold_back`]) again.
pub(crate) type Resume = Box<dyn FnOnce() + Send>;

/// Holds writes until a group is cut, and hands each group to the
/// committing thread. Shared by every worker; the thread ends when the
/// committer is dropped.
pub(crate) struct Committer {
    groups: mpsc::Sender<Vec<Waiter>>,
    /// Writes of requests run since a group was last cut.
    held: Mutex<Vec<Waiter>>,
    syncing: Arc<Syncing>,
}

struct Waiter {
    unsynced: Vec<Unsynced>,
    tenant: u32,
    then: Box<dyn Synced>,
}

/// Connections of the groups cut and not yet answered, and those held
/// back until the next of them is.
struct Syncing {
    state: Mutex<SyncState>,
    /// Written once after each group is resumed: wakes a worker to serve
    /// the group, where waking one per connection cost a context switch
    /// each.
    resumed: OwnedFd,
}

#[derive(Default)]
struct SyncState {
    waiters: usize,
    held_back: Vec<Resume>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Committer {
    /// Starts the committing thread; `resumed`, an eventfd, is written
    /// once after each group is resumed.
    pub fn start(shared: Arc<Shared>, resumed: OwnedFd) -> std::io::Result<Committer> {
        let (groups, queue) = mpsc::channel();
        let syncing = Arc::new(Syncing {
            state: Mutex::new(SyncState::default()),
            resumed,
        });
        std::thread::Builder::new().name("sluice-kv commit".into()).spawn({
            let syncing = syncing.clone();
            move || commit(&shared, &queue, &syncing)
        })?;
        Ok(Committer {
            groups,
            held: Mutex::new(Vec::new()),
            syncing,
        })
    }

    /// Answers `then`, on the committing thread, once `unsynced` (writes
    /// of `tenant`'s request) is durable or cannot be made so. The writes
    /// are held until the next [`release`](Committer::release), or until
    /// [`HOLD`] are held.
    pub fn sync(&self, unsynced: Vec<Unsynced>, tenant: u32, then: Box<dyn Synced>) {
        let full = {
            let mut held = lock(&self.held);
            held.push(Waiter { unsynced, tenant, then });
            held.len() >= HOLD
        };
        if full {
            self.release();
        }
    }

    /// Cuts a group: hands every held write to the committing thread.
    pub fn release(&self) {
        let group = std::mem::take(&mut *lock(&self.held));
        if group.is_empty() {
            return;
        }
        lock(&self.syncing.state).waiters += group.len();
        if let Err(mpsc::SendError(group)) = self.groups.send(group) {
            finish(group, &Err("the committing thread stopped".to_string()), &self.syncing);
        }
    }

    /// Holds back a connection answered after a sync and with nothing
    /// more to read yet: `resume` runs once the next sync is answered or
    /// [`resume_held_back`] is called, if at least [`BATCH`] connections
    /// wait for a sync or are held for one; hands it back otherwise.
    ///
    /// [`resume_held_back`]: Committer::resume_held_back
    pub fn hold_back(&self, resume: Resume) -> Result<(), Resume> {
        let mut syncing = lock(&self.syncing.state);
        if syncing.waiters + lock(&self.held).len() < BATCH {
            return Err(resume);
        }
        syncing.held_back.push(resume);
        Ok(())
    }

    /// Whether connections are held back.
    pub fn holds_back(&self) -> bool {
        !lock(&self.syncing.state).held_back.is_empty()
    }

    /// Resumes every connection held back: called once [`HOLD_BACK`] has
    /// passed without a sync answered.
    pub fn resume_held_back(&self) {
        let held_back = std::mem::take(&mut lock(&self.syncing.state).held_back);
        for resume in held_back {
            resume();
        }
    }
}

/// Syncs, for as long as there is a committer, every group cut since the
/// previous sync.
fn commit(shared: &Shared, queue: &mpsc::Receiver<Vec<Waiter>>, syncing: &Syncing) {
    while let Ok(mut group) = queue.recv() {
        group.extend(queue.try_iter().flatten());
        let mut furthest = Vec::new();
        for w in &mut group {
            for u in w.unsynced.drain(..) {
                u.merge_into(&mut furthest);
            }
        }
        let outcome = {
            let rt = shared.db.runtime();
            let _request = rt.enter(own_ctx(shared, group[0].tenant, rt.now()));
            shared.db.sync_to(&furthest).map_err(|e| e.to_string())
        };
        finish(group, &outcome, syncing);
    }
}

/// Answers every waiter of a group, then resumes the connections held
/// back and the group's: a connection of the group is held back for the
/// next sync, not this one.
fn finish(group: Vec<Waiter>, outcome: &Result<(), String>, syncing: &Syncing) {
    let mut answered: Vec<_> = group.into_iter().map(|w| w.then).collect();
    for then in &mut answered {
        then.answer(outcome.clone());
    }
    let held_back = {
        let mut state = lock(&syncing.state);
        state.waiters -= answered.len();
        std::mem::take(&mut state.held_back)
    };
    for resume in held_back {
        resume();
    }
    for conn in answered {
        conn.resume();
    }
    let _ = rustix::io::write(&syncing.resumed, &1u64.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{Receiver, Sender};
    use std::sync::Condvar;

    use super::*;

    /// A connection that reports what the committer does with it, and
    /// whose answer waits for `go` when given one.
    struct Probe {
        id: usize,
        events: Sender<String>,
        go: Option<Arc<(Mutex<bool>, Condvar)>>,
    }

    impl Synced for Probe {
        fn answer(&mut self, outcome: Result<(), String>) {
            if let Some(go) = &self.go {
                let open = lock(&go.0);
                drop(go.1.wait_while(open, |open| !*open));
            }
            self.events.send(format!("answer {} {outcome:?}", self.id)).unwrap();
        }

        fn resume(self: Box<Self>) {
            self.events.send(format!("resume {}", self.id)).unwrap();
        }
    }

    fn committer() -> (Committer, tempfile::TempDir) {
        let (shared, dir) = Shared::for_test();
        let resumed = rustix::event::eventfd(0, rustix::event::EventfdFlags::NONBLOCK).unwrap();
        (Committer::start(Arc::new(shared), resumed).unwrap(), dir)
    }

    fn probes(c: &Committer, n: usize, go: Option<&Arc<(Mutex<bool>, Condvar)>>) -> Receiver<String> {
        let (events, seen) = mpsc::channel();
        for id in 0..n {
            let go = go.cloned();
            c.sync(
                Vec::new(),
                0,
                Box::new(Probe {
                    id,
                    events: events.clone(),
                    go,
                }),
            );
        }
        seen
    }

    #[test]
    fn writes_are_held_until_released_and_a_group_is_answered_before_it_resumes() {
        let (c, _dir) = committer();
        let seen = probes(&c, 3, None);
        assert_eq!(lock(&c.held).len(), 3, "held until a worker polls");
        assert_eq!(lock(&c.syncing.state).waiters, 0);
        c.release();
        assert!(lock(&c.held).is_empty());
        let events: Vec<String> = seen.iter().take(6).collect();
        assert_eq!(
            events,
            [
                "answer 0 Ok(())",
                "answer 1 Ok(())",
                "answer 2 Ok(())",
                "resume 0",
                "resume 1",
                "resume 2"
            ],
        );
    }

    #[test]
    fn a_full_harvest_of_writes_is_cut_without_a_release() {
        let (c, _dir) = committer();
        let seen = probes(&c, HOLD, None);
        assert!(lock(&c.held).is_empty(), "the last write cut the group");
        assert_eq!(seen.iter().filter(|e| e.starts_with("resume")).take(HOLD).count(), HOLD);
    }

    #[test]
    fn an_answered_connection_is_held_back_only_behind_a_large_group_and_until_it_is_answered() {
        let (c, _dir) = committer();
        let (events, seen) = mpsc::channel();
        let probe = |id: usize| -> Resume {
            let events = events.clone();
            Box::new(move || events.send(format!("resume {id}")).unwrap())
        };
        assert!(
            c.hold_back(probe(100)).is_err(),
            "no sync in flight: nothing to wait for"
        );
        let go = Arc::new((Mutex::new(false), Condvar::new()));
        let group = probes(&c, BATCH - 1, Some(&go));
        c.release();
        assert!(c.hold_back(probe(100)).is_err(), "a small group is not waited for");
        let more = probes(&c, 1, Some(&go));
        c.release();
        assert!(c.hold_back(probe(100)).is_ok());
        assert!(c.holds_back());
        assert!(seen.try_recv().is_err(), "held while the group's sync is unanswered");
        *lock(&go.0) = true;
        go.1.notify_all();
        assert_eq!(
            group.iter().filter(|e| e.starts_with("resume")).take(BATCH - 1).count(),
            BATCH - 1
        );
        assert_eq!(more.iter().filter(|e| e.starts_with("resume")).count(), 1);
        assert_eq!(seen.recv().unwrap(), "resume 100", "resumed once the group is answered");
        assert!(!c.holds_back());
    }

    #[test]
    fn connections_held_back_past_the_delay_are_resumed() {
        let (c, _dir) = committer();
        let go = Arc::new((Mutex::new(false), Condvar::new()));
        let group = probes(&c, BATCH, Some(&go));
        c.release();
        let (events, seen) = mpsc::channel();
        assert!(c
            .hold_back(Box::new(move || events.send("resume 100".to_string()).unwrap()))
            .is_ok());
        c.resume_held_back();
        assert_eq!(
            seen.try_recv().unwrap(),
            "resume 100",
            "resumed before the sync is answered"
        );
        *lock(&go.0) = true;
        go.1.notify_all();
        assert_eq!(group.iter().filter(|e| e.starts_with("resume")).count(), BATCH);
    }
}
