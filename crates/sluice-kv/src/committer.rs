//! Group commit across connections: one thread syncs the WAL for every
//! connection whose writes are waiting, then hands each its outcome.
//!
//! A worker applies a connection's writes and moves on to the next
//! connection at once; the connection's replies wait here until a sync
//! covers its writes. While one sync runs, the writes of every connection
//! that finishes meanwhile queue up, and the next sync covers them all:
//! the way Redis with `appendfsync always` syncs once per pass of its event
//! loop for every client's writes. Workers never wait on the disk for a
//! sync, so a few of them keep many clients' writes flowing.
//!
//! The sync runs as foreground work of the first waiting connection's
//! tenant: it is on the critical path of every request it covers.

use std::sync::mpsc;
use std::sync::Arc;

use crate::request::own_ctx;
use crate::shared::Shared;
use crate::Unsynced;

/// What a waiter is told once its writes are synced: `Err` names why they
/// may not be durable.
pub(crate) type Then = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Hands writes to the committing thread. Shared by every worker; the
/// thread ends when the committer is dropped.
pub(crate) struct Committer {
    waiting: mpsc::Sender<Waiter>,
}

struct Waiter {
    unsynced: Vec<Unsynced>,
    tenant: u32,
    then: Then,
}

impl Committer {
    /// Starts the committing thread.
    pub fn start(shared: Arc<Shared>) -> std::io::Result<Committer> {
        let (waiting, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("sluice-kv commit".into())
            .spawn(move || commit(&shared, &queue))?;
        Ok(Committer { waiting })
    }

    /// Calls `then`, on the committing thread, once `unsynced` (writes of
    /// `tenant`'s request) is durable or cannot be made so.
    pub fn sync(&self, unsynced: Vec<Unsynced>, tenant: u32, then: Then) {
        let waiter = Waiter { unsynced, tenant, then };
        if let Err(mpsc::SendError(w)) = self.waiting.send(waiter) {
            (w.then)(Err("the committing thread stopped".into()));
        }
    }
}

/// Syncs, for as long as there is a committer, whatever the waiters
/// queued since the previous sync.
fn commit(shared: &Shared, queue: &mpsc::Receiver<Waiter>) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        group.extend(queue.try_iter());
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
        for w in group {
            (w.then)(outcome.clone());
        }
    }
}
