//! One client's connection: what a worker does with it each time its
//! socket is ready (read what arrived, run whole requests, write replies),
//! within the bounds that keep a hostile client from taking the server's
//! memory or another client's turn. Each step ends in a [`Next`]: what the
//! poller waits for before the next step.
//!
//! A connection holds no thread and, while idle, no buffer
//! ([`crate::request::Buffers`] are freed once empty): a few hundred bytes
//! and its socket.
//!
//! # Bounds
//!
//! - **Before authentication** (with a password configured) a client gets
//!   Redis's limits ([`crate::resp::Limits::before_auth`]: 10 arguments of
//!   16 KiB) and small buffers ([`UNAUTHENTICATED_HELD`]); past them it is
//!   answered with the protocol error and closed.
//! - **Pipelines flow.** The connection reads and writes at once, so a
//!   client that writes a long pipeline before it reads any reply is not
//!   deadlocked against a server blocked writing replies. While a client
//!   does not read, its replies wait up to a bound ([`Held::output`]); past
//!   it the connection runs none of that client's requests (the others go
//!   on: no worker waits for this one), reads on, and holds the requests
//!   read but not run up to another bound ([`Held::input`]); past that it
//!   stops reading, and TCP holds the client back. A request still
//!   arriving is bounded by [`crate::resp::Limits`] instead: it is not run
//!   before it is whole.
//! - **A blocked client** (BLPOP on empty lists) holds no worker: its
//!   connection parks (`crate::blocked`), reads on up to the same bound,
//!   and runs nothing until a write or its deadline wakes it. A client
//!   that leaves while blocked is closed without its command running
//!   again, so no element is popped for a client that cannot receive it.
//!   A subscriber parks the same way between messages (`crate::pubsub`);
//!   its messages wait in its mailbox while its replies are over the
//!   bound, and past the mailbox's own bound it is closed.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

use rustix::buffer::spare_capacity;
use rustix::io::Errno;

use crate::blocked::ConnKey;
use crate::commands::{leave, Session};
use crate::pubsub::Mailbox;
use crate::request::{run_requests, Buffers};
use crate::shared::Shared;
use crate::Unsynced;

/// Bytes a connection may hold for its client, beyond the request it is
/// still receiving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Whole requests read but not run, waiting for the client to read its
    /// replies.
    pub input: usize,
    /// Replies not yet written; past this the connection runs nothing
    /// more for the client until it reads.
    pub output: usize,
}

/// An authenticated client's bounds. Redis lets a client's query buffer
/// reach 1 GiB; with a few hundred clients that is more memory than the
/// machine has, so 64 MiB: many times the pipelines client libraries send
/// (1,000 SETs of 1 KiB are 1 MiB) and several of the store's largest
/// values (16 MiB by default). 1 MiB of replies keeps the socket fed with
/// few system calls; more would only hold memory.
pub const HELD: Held = Held {
    input: 64 << 20,
    output: 1 << 20,
};

/// A client that has not authenticated (with a password configured): a
/// few of its largest requests (10 arguments of 16 KiB) and replies.
pub const UNAUTHENTICATED_HELD: Held = Held {
    input: 256 << 10,
    output: 64 << 10,
};

/// Room a read has at least: more than most requests, so that one read
/// takes them whole, and little enough that a connection with a request
/// half-read holds little. Reads go straight into the connection's input,
/// which is freed once run, so an idle connection holds no buffer and a
/// worker none of its own.
const READ_ROOM: usize = 16 << 10;

/// What the poller does with a connection after a step.
pub(crate) enum Next {
    /// Waits until the socket can be read (`read`) or written (`write`),
    /// then steps again.
    Wait { read: bool, write: bool },
    /// Syncs the writes of the requests just run, then calls
    /// [`Connection::synced`]: no reply from `answered` on is sent before.
    Sync {
        unsynced: Vec<Unsynced>,
        tenant: u32,
        answered: usize,
    },
    /// The socket had nothing to read, no request ran and nothing is left
    /// to write: as `Wait { read: true, write: false }`.
    Idle,
    /// Parks the connection, blocked: as `Wait`, armed through
    /// [`Connection::arm_parked`] so that a wake is never lost.
    Park { read: bool, write: bool },
    /// Forgets the connection: the client left, or the session ended and
    /// its last replies are written.
    Close,
}

pub(crate) struct Connection {
    pub stream: TcpStream,
    /// Its key in the poller, which the blocked clients' registry names.
    pub key: ConnKey,
    /// The tenant the connection is, forgotten when it closes.
    pub own: u32,
    /// Taken by one worker at a time: the poller hands a connection to one
    /// worker per readiness, and not while its writes are being synced.
    state: Mutex<State>,
}

struct State {
    session: Session,
    buffers: Buffers,
    /// The client has closed its side: what it sent is still run and
    /// answered.
    eof: bool,
    /// Input arrived since the last run, which may complete a request.
    fresh: bool,
    /// The last run stopped for unsent replies, with requests left.
    stalled: bool,
    /// Blocked and registered with the waiters; cleared by the next step
    /// or a wake.
    parked: bool,
    /// Parked and waiting in the poller: a wake re-arms it.
    armed: bool,
    /// A write or the deadline woke the blocked request: it runs again.
    woken: bool,
}

impl Connection {
    /// A new client's connection, as a tenant of its own.
    pub fn new(shared: &Shared, stream: TcpStream, key: ConnKey) -> io::Result<Connection> {
        stream.set_nonblocking(true)?;
        let _ = stream.set_nodelay(true);
        let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
        let own = shared.tenant(&format!("client-{id}"));
        let mut session = Session::new(id, own, shared.options.password.is_none());
        session.addresses = stream.peer_addr().ok().zip(stream.local_addr().ok());
        session.mailbox = Some(std::sync::Arc::new(Mailbox::new(key)));
        Ok(Connection {
            stream,
            key,
            own,
            state: Mutex::new(State {
                session,
                buffers: Buffers::default(),
                eof: false,
                fresh: false,
                stalled: false,
                parked: false,
                armed: false,
                woken: false,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A step once the socket is ready: reads what arrived (one read),
    /// runs whole requests, writes their replies.
    pub fn step(&self, shared: &Shared) -> Next {
        let mut st = self.state();
        st.armed = false;
        if std::mem::take(&mut st.parked) {
            shared.waiters.forget(self.key);
        }
        let held = st.held();
        let mut found_nothing = false;
        if st.reads(held) {
            let input = &mut st.buffers.input;
            crate::request::reserve(input, READ_ROOM);
            match rustix::io::read(&self.stream, spare_capacity(input)) {
                Ok(0) => st.eof = true,
                Ok(_) => st.fresh = true,
                Err(Errno::WOULDBLOCK) => found_nothing = true,
                Err(Errno::INTR) => {}
                Err(_) => return Next::Close,
            }
        }
        if st.eof && st.session.block.is_some() {
            return Next::Close;
        }
        if st.buffers.unsent() < held.output && !self.deliver(&mut st) {
            tracing::warn!(
                "client {} left {} MiB of published messages unread; closing it",
                st.session.id,
                crate::pubsub::MAILBOX_BYTES >> 20
            );
            return Next::Close;
        }
        if (st.fresh || st.stalled || st.woken) && !st.session.quit && st.buffers.unsent() < held.output {
            let State { session, buffers, .. } = &mut *st;
            let Ok(ran) = catch_unwind(AssertUnwindSafe(|| run_requests(shared, session, buffers, held.output))) else {
                tracing::error!("a request of client {} panicked; closing the connection", session.id);
                return Next::Close;
            };
            st.fresh = false;
            st.woken = false;
            st.stalled = ran.stalled;
            if !ran.unsynced.is_empty() {
                return Next::Sync {
                    unsynced: ran.unsynced,
                    tenant: st.session.tenant,
                    answered: ran.answered,
                };
            }
            found_nothing = false;
        }
        match self.settle(shared, &mut st) {
            Next::Wait {
                read: true,
                write: false,
            } if found_nothing => Next::Idle,
            next => next,
        }
    }

    /// Goes on once the writes of [`Next::Sync`] are synced, or, if they
    /// could not be (`Err`), drops the replies they would have acknowledged
    /// and closes, as a crash would: no write acknowledged that may not
    /// survive one.
    pub fn synced(&self, shared: &Shared, outcome: Result<(), String>, answered: usize) -> Next {
        let mut st = self.state();
        if let Err(e) = outcome {
            tracing::warn!("a connection's writes could not be made durable: {e}; closing it unanswered");
            st.buffers.output.truncate(answered);
            st.session.quit = true;
        }
        self.settle(shared, &mut st)
    }

    /// Moves the connection's published messages to its output; false if
    /// it let them overflow.
    fn deliver(&self, st: &mut State) -> bool {
        let Some(mailbox) = &st.session.mailbox else {
            return true;
        };
        match mailbox.take() {
            Ok(messages) => {
                for m in messages {
                    m.encode_as(&mut st.buffers.output, st.session.resp3);
                }
                true
            }
            Err(()) => false,
        }
    }

    /// Arms a connection [`Next::Park`] parked, with `arm(read, write)`,
    /// under its lock, so that a wake comes before (then it runs at once)
    /// or after (then the wake re-arms it), never in between.
    pub fn arm_parked(
        &self,
        read: bool,
        write: bool,
        arm: impl FnOnce(bool, bool) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut st = self.state();
        st.armed = st.parked;
        arm(read, write || st.woken)
    }

    /// Wakes the connection if it is parked: its blocked request runs
    /// again on the next step, which `arm` (for the socket's writability)
    /// brings at once if the connection waits in the poller.
    pub fn wake(&self, arm: impl FnOnce() -> io::Result<()>) {
        let mut st = self.state();
        if !std::mem::take(&mut st.parked) {
            return;
        }
        st.woken = true;
        if st.armed {
            let _ = arm();
        }
    }

    /// The connection is gone: a request of several commands it left open
    /// ends now.
    pub fn closed(&self, shared: &Shared) {
        shared.waiters.forget(self.key);
        let mut st = self.state();
        leave(shared, &mut st.session);
        if let Some(open) = st.session.open.take() {
            shared.db.runtime().request_finished(&open);
        }
    }

    /// Writes what the socket takes; then closes, or waits for the socket.
    fn settle(&self, shared: &Shared, st: &mut State) -> Next {
        let b = &mut st.buffers;
        while b.unsent() > 0 {
            match (&self.stream).write(&b.output[b.sent..]) {
                Ok(0) => return Next::Close,
                Ok(n) => b.written(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        let unsent = b.unsent() > 0;
        if (st.session.quit || st.eof) && !unsent {
            let _ = self.stream.shutdown(Shutdown::Write);
            return Next::Close;
        }
        if let Some(block) = &st.session.block {
            if shared
                .waiters
                .park(self.key, &block.keys, block.deadline, block.generation)
            {
                st.parked = true;
                return Next::Park {
                    read: st.reads(st.held()),
                    write: unsent,
                };
            }
            // A key was written since the request looked: it runs again.
            st.woken = true;
            return Next::Wait {
                read: st.reads(st.held()),
                write: true,
            };
        }
        if st.session.subscriptions() > 0 {
            // Checked under the connection's lock, which a publisher's wake
            // waits for: a message is in the mailbox now, or wakes it.
            if st.session.mailbox.as_ref().is_some_and(|m| m.is_empty()) {
                st.parked = true;
                return Next::Park {
                    read: st.reads(st.held()),
                    write: unsent,
                };
            }
            return Next::Wait {
                read: st.reads(st.held()),
                write: true,
            };
        }
        Next::Wait {
            read: st.reads(st.held()),
            // A stalled connection whose replies are all written runs on
            // as soon as a worker takes it: its socket is writable now.
            write: unsent || st.stalled,
        }
    }
}

impl State {
    fn held(&self) -> Held {
        if self.session.authenticated {
            HELD
        } else {
            UNAUTHENTICATED_HELD
        }
    }

    /// Whether to read: stalled on its replies, the connection reads on up
    /// to its bound.
    fn reads(&self, held: Held) -> bool {
        let running = !self.stalled && self.session.block.is_none();
        !self.eof && !self.session.quit && (running || self.buffers.unrun() < held.input)
    }
}
