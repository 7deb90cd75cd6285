//! Group commit across connections: one thread syncs the WAL for every
//! connection whose writes are waiting, then releases all their replies.
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

use tokio::sync::oneshot;

use crate::request::own_ctx;
use crate::shared::Shared;
use crate::Unsynced;

/// Hands writes to the committing thread and waits for their sync. Cloned
/// into every connection; the thread ends when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Committer {
    waiting: mpsc::Sender<Waiter>,
}

struct Waiter {
    unsynced: Vec<Unsynced>,
    tenant: u32,
    /// The sync's outcome: `Err` names why the writes may not be durable.
    synced: oneshot::Sender<Result<(), String>>,
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

    /// Returns once `unsynced` is durable, or with why it may not be.
    pub async fn sync(&self, unsynced: Vec<Unsynced>, tenant: u32) -> Result<(), String> {
        let (synced, outcome) = oneshot::channel();
        let waiter = Waiter {
            unsynced,
            tenant,
            synced,
        };
        let stopped = || "the committing thread stopped".to_string();
        self.waiting.send(waiter).map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

/// Syncs, for as long as there are committers, whatever the waiters
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
            // A connection that closed meanwhile no longer waits.
            let _ = w.synced.send(outcome.clone());
        }
    }
}
