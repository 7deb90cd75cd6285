//! The RESP server behind `sluice serve`: every connection on one poller,
//! a bounded pool of workers that wait on it and run the commands of
//! whichever connection is ready, and one thread that syncs the WAL for
//! all of them.
//!
//! | piece | file |
//! |---|---|
//! | the poller, the workers' loop, accepting | `poller.rs` |
//! | how many workers serve at once, and when a turn passes on | `turns.rs` |
//! | a connection: reading, writing, its bounds against a hostile client | `connection.rs` |
//! | its requests, each inside its request context | `request.rs` |
//! | group commit across connections: where a group is cut, and which clients wait for the next | `committer.rs` |
//! | values past their deadline deleted in the background | `sweeper.rs` |
//! | clients blocked in BLPOP and the like, and what wakes them | `blocked.rs` |
//!
//! A connection costs its socket and a few hundred bytes, not a thread, so
//! thousands of idle clients hold little. The store blocks in its I/O and
//! sluice-io keeps a request's context on the thread that runs it, so
//! commands run on the workers: one per core at a time serves every ready
//! connection in turn, as an event loop does, and hands its turn to
//! another worker when it is about to block (the poller's turns), so that
//! up to [`ServerOptions::workers`] requests wait on the disk together.
//! Workers never wait for a sync: a batch's writes are applied, the worker
//! moves on, and the batch's replies wait for the committer, which syncs
//! once for all the writes served since the workers last ran out of
//! connections to serve, as Redis syncs once per pass of its event loop.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;

pub use crate::connection::{Held, HELD, UNAUTHENTICATED_HELD};
use crate::poller::Poller;
pub use crate::shared::ServerOptions;
use crate::shared::Shared;
use crate::Db;

pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    pub fn bind(addr: impl ToSocketAddrs, db: Arc<Db>, options: ServerOptions) -> io::Result<Server> {
        Ok(Server {
            listener: TcpListener::bind(addr)?,
            shared: Arc::new(Shared::new(db, options)),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves for as long as the process runs, this thread one of the
    /// workers. Fails only if the poller, a worker, the committing thread
    /// or the expiry sweeper cannot be started.
    pub fn run(self) -> io::Result<()> {
        let workers = self.shared.options.workers.max(1);
        crate::sweeper::spawn(self.shared.clone())?;
        let poller = Arc::new(Poller::new(self.listener, self.shared.clone())?);
        let timeouts = poller.clone();
        std::thread::Builder::new()
            .name("sluice-kv timeouts".into())
            .spawn(move || self.shared.waiters.run_timeouts(|key| timeouts.wake(key)))?;
        let turns = poller.clone();
        std::thread::Builder::new()
            .name("sluice-kv turns".into())
            .spawn(move || turns.turns.watch(|| turns.ring()))?;
        for _ in 1..workers {
            let poller = poller.clone();
            std::thread::Builder::new()
                .name("sluice-kv worker".into())
                .spawn(move || poller.work())?;
        }
        poller.work()
    }
}
