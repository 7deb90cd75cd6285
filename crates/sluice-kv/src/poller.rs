//! The poller the workers share: one epoll instance holding the listener
//! and every connection, each registered one-shot, so that a ready socket
//! goes to exactly one worker, which then owns it until it re-arms it.
//!
//! A worker serves in turns (`turns.rs`): while it has one, it takes every
//! socket ready at once (up to [`HARVEST`]) into the ready queue and
//! serves the queue, one connection after another, each request inside its
//! request context; before it blocks in the store, or once a step runs
//! long, its turn passes to another worker, which serves what is queued.
//!
//! Durable writes wait for the committer (`committer.rs`), which cuts a
//! group of them each time the workers run out of connections to serve,
//! and queues the connections a sync answered here, to be served as if
//! found ready; one that has nothing to read yet may be held back until
//! the next sync, so that a busy server's returning writers are served
//! together.
//!
//! Written on epoll directly (through `rustix`) because no crate offers a
//! poller that many threads wait on at once and hand each readiness to one
//! of them: `mio` polls from one thread, `polling` serializes its waiters,
//! and tokio's tasks must not block, which the store's reads do.
//!
//! # Accepting
//!
//! Accept errors are never fatal: when the process runs out of file
//! descriptors the listener's error is logged at most once per second,
//! with how many were not, and accepting pauses 10 ms, doubling to 100 ms
//! ([`AcceptBackoff`]), so that the server does not spin while it waits
//! for connections to close; errors that concern one connection only
//! (aborted before it was accepted) are retried at once.
//!
//! A client beyond [`ServerOptions::max_clients`] is told so in RESP and
//! closed at once, as redis-server does: the refusal holds no worker and
//! no descriptor past the accept.
//!
//! [`ServerOptions::max_clients`]: crate::ServerOptions::max_clients

use std::collections::VecDeque;
use std::io;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::EventfdFlags;
use rustix::fd::OwnedFd;
use slab::Slab;
use sluice_core::accept::AcceptBackoff;

use crate::committer::{Committer, Synced, HOLD_BACK};
use crate::connection::{Connection, Next};
use crate::shared::Shared;
use crate::turns::Turns;

/// The listener's token; connections' are their keys in the slab.
const LISTENER: u64 = u64::MAX;

/// The doorbell's token: rung when connections wait in the ready queue
/// and no worker is waiting for a turn to serve them, and by the committer
/// once it has queued the connections a sync answered.
const DOORBELL: u64 = u64::MAX - 1;

/// Sockets a worker takes from the poller at once: enough to take every
/// ready client of a busy server in one call. With as many workers serving
/// as there are (`active_workers` = `workers`), one: each ready socket
/// wakes a worker of its own, which suits a store whose every request
/// waits on the device, and no connection is held back for a sync.
const HARVEST: usize = 64;

/// [`HOLD_BACK`], as the poller's timeout.
const HOLD_BACK_TIMEOUT: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: HOLD_BACK.as_nanos() as i64,
};

/// Connections accepted per readiness of the listener, so that a flood of
/// new clients does not hold one worker from the clients already in.
const ACCEPT_BATCH: usize = 64;

/// The pause after a failed accept, doubling up to the second.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(100));

pub(crate) struct Poller {
    epoll: OwnedFd,
    listener: TcpListener,
    connections: Mutex<Connections>,
    shared: Arc<Shared>,
    committer: Committer,
    /// Taken only by the worker the listener woke.
    accepting: Mutex<AcceptBackoff>,
    /// Sockets taken from the poller and connections resumed, not yet
    /// served, oldest first.
    ready: Mutex<VecDeque<Ready>>,
    pub turns: Turns,
    doorbell: OwnedFd,
    /// Sockets a worker takes from the poller at once.
    harvest: usize,
}

/// A socket or connection to serve.
#[derive(Clone, Copy)]
enum Ready {
    /// A token the poller found ready.
    Polled(u64),
    /// A connection answered after a sync: held back if it has nothing to
    /// read yet.
    Answered(usize),
    /// A connection held back: re-armed if it has nothing to read yet.
    HeldBack(usize),
}

struct Connections {
    live: Slab<Arc<Connection>>,
    /// The most connections live since memory was last given back.
    peak: usize,
}

/// Connections whose leaving is worth giving memory back for.
const TRIM_AFTER: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Poller {
    pub fn new(listener: TcpListener, shared: Arc<Shared>) -> io::Result<Poller> {
        listener.set_nonblocking(true)?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(&epoll, &listener, EventData::new_u64(LISTENER), one_shot(true, false))?;
        let doorbell = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(&epoll, &doorbell, EventData::new_u64(DOORBELL), EventFlags::IN)?;
        let o = &shared.options;
        let harvest = if o.active_workers >= o.workers { 1 } else { HARVEST };
        Ok(Poller {
            epoll,
            listener,
            connections: Mutex::new(Connections {
                live: Slab::new(),
                peak: 0,
            }),
            committer: Committer::start(shared.clone(), doorbell.try_clone()?)?,
            turns: Turns::new(shared.options.active_workers),
            shared,
            accepting: Mutex::new(AcceptBackoff::new(ACCEPT_BACKOFF.0, ACCEPT_BACKOFF.1)),
            ready: Mutex::new(VecDeque::new()),
            doorbell,
            harvest,
        })
    }

    /// A worker: serves whatever becomes ready, in its turns, for as long
    /// as the process runs.
    pub fn work(self: &Arc<Self>) -> io::Result<()> {
        let mut events = vec![
            epoll::Event {
                flags: EventFlags::empty(),
                data: EventData::new_u64(0),
            };
            self.harvest
        ];
        let me = self.turns.worker();
        loop {
            self.turns.take(&me);
            sluice_io::before_blocking({
                let (poller, me) = (self.clone(), me.clone());
                move || {
                    poller.committer.release();
                    poller.turns.give(&me, || poller.queued(), || poller.ring())
                }
            });
            while me.has_turn() {
                let token = match self.next_ready() {
                    Some(token) => token,
                    None => {
                        // Nothing left to serve: the writes served so far
                        // are one group.
                        self.committer.release();
                        let timeout = self.committer.holds_back().then_some(&HOLD_BACK_TIMEOUT);
                        match epoll::wait(&self.epoll, &mut events[..], timeout) {
                            Ok(0) => {
                                self.committer.resume_held_back();
                                continue;
                            }
                            Err(rustix::io::Errno::INTR) => continue,
                            Ok(n) => {
                                let mut ready = lock(&self.ready);
                                ready.extend(events[1..n].iter().map(|e| Ready::Polled(e.data.u64())));
                                Ready::Polled(events[0].data.u64())
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                };
                me.step(|| match token {
                    Ready::Polled(LISTENER) => self.accept(),
                    Ready::Polled(DOORBELL) => self.answer_doorbell(),
                    Ready::Polled(key) => self.serve(key as usize, false),
                    Ready::Answered(key) => self.serve(key, true),
                    Ready::HeldBack(key) => self.serve(key, false),
                });
            }
            // The turn was lost to the watchdog: what this worker served
            // is not held while it waits for another.
            self.committer.release();
        }
    }

    fn next_ready(&self) -> Option<Ready> {
        lock(&self.ready).pop_front()
    }

    /// Queues a connection to be served next, as if the poller had found
    /// it ready. The committer rings the doorbell once it has queued a
    /// group; a worker queues only what it serves itself.
    fn queue(&self, conn: Ready) {
        lock(&self.ready).push_back(conn);
    }

    /// Whether connections wait in the ready queue.
    pub fn queued(&self) -> bool {
        !lock(&self.ready).is_empty()
    }

    /// Wakes a worker waiting on the poller, to serve the ready queue.
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.doorbell, &1u64.to_ne_bytes());
    }

    /// Silences the doorbell; the ready queue is served next.
    fn answer_doorbell(&self) {
        let mut count = [0u8; 8];
        let _ = rustix::io::read(&self.doorbell, &mut count);
    }

    /// Serves the connection at `key`: a step, then whom its writes woke.
    /// A connection just `answered` after a sync that has nothing to read
    /// yet may be held back until the next sync instead of re-armed.
    fn serve(self: &Arc<Self>, key: usize, answered: bool) {
        let Some(conn) = lock(&self.connections).live.get(key).cloned() else {
            return;
        };
        match conn.step(&self.shared) {
            Next::Idle if answered && self.harvest > 1 => {
                // Tried once more when resumed, then re-armed.
                let poller = self.clone();
                if self
                    .committer
                    .hold_back(Box::new(move || poller.queue(Ready::HeldBack(key))))
                    .is_err()
                {
                    self.follow(key, &conn, Next::Idle);
                }
            }
            next => self.follow(key, &conn, next),
        }
        let written = crate::commands::take_written();
        if !written.is_empty() {
            for blocked in self.shared.waiters.take(written.iter().map(Vec::as_slice)) {
                self.wake(blocked);
            }
        }
        for subscriber in crate::commands::take_notified() {
            self.wake(subscriber);
        }
    }

    /// Wakes the parked connection at `key` (blocked, or a subscriber), if
    /// it is still there.
    pub fn wake(&self, key: usize) {
        let Some(conn) = lock(&self.connections).live.get(key).cloned() else {
            return;
        };
        conn.wake(|| {
            epoll::modify(
                &self.epoll,
                &conn.stream,
                EventData::new_u64(key as u64),
                one_shot(true, true),
            )
            .map_err(io::Error::from)
        });
    }

    /// Does what a step of the connection at `key` decided.
    fn follow(self: &Arc<Self>, key: usize, conn: &Arc<Connection>, next: Next) {
        match next {
            Next::Idle => self.follow(
                key,
                conn,
                Next::Wait {
                    read: true,
                    write: false,
                },
            ),
            Next::Wait { read, write } => {
                if epoll::modify(
                    &self.epoll,
                    &conn.stream,
                    EventData::new_u64(key as u64),
                    one_shot(read, write),
                )
                .is_err()
                {
                    self.close(key, conn);
                }
            }
            Next::Sync {
                unsynced,
                tenant,
                answered,
            } => {
                let then = AwaitingSync {
                    poller: self.clone(),
                    key,
                    conn: conn.clone(),
                    answered,
                    next: Next::Close,
                };
                self.committer.sync(unsynced, tenant, Box::new(then));
            }
            Next::Park { read, write } => {
                let armed = conn.arm_parked(read, write, |read, write| {
                    epoll::modify(
                        &self.epoll,
                        &conn.stream,
                        EventData::new_u64(key as u64),
                        one_shot(read, write),
                    )
                    .map_err(io::Error::from)
                });
                if armed.is_err() {
                    self.close(key, conn);
                }
            }
            Next::Close => self.close(key, conn),
        }
    }

    fn close(&self, key: usize, conn: &Connection) {
        let _ = epoll::delete(&self.epoll, &conn.stream);
        let trim = {
            let mut c = lock(&self.connections);
            c.live.remove(key);
            self.shared.clients.store(c.live.len() as u64, Ordering::Relaxed);
            let trim = c.peak >= c.live.len() * 2 + TRIM_AFTER;
            if trim {
                c.peak = c.live.len();
            }
            trim
        };
        conn.closed(&self.shared);
        self.shared.forget(conn.own);
        if trim {
            give_back_memory();
        }
    }

    /// Accepts what is waiting, up to a batch; then waits for the listener
    /// again.
    fn accept(&self) {
        let mut accepting = lock(&self.accepting);
        for _ in 0..ACCEPT_BATCH {
            let e = match self.listener.accept() {
                Ok((stream, _))
                    if self.shared.clients.load(Ordering::Relaxed) as usize >= self.shared.options.max_clients =>
                {
                    accepting.succeeded();
                    refuse(stream);
                    self.shared.rejected.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Ok((stream, _)) => match self.register(stream) {
                    Ok(()) => {
                        accepting.succeeded();
                        continue;
                    }
                    Err(e) => e,
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => e,
            };
            let (pause, report) = accepting.failed(Instant::now(), &e);
            if let Some(failures) = report {
                tracing::warn!(
                    "accepting a connection failed ({failures} times since the last report): {e}; retrying in {pause:?}"
                );
            }
            if !pause.is_zero() {
                sluice_io::blocking();
                std::thread::sleep(pause);
                break;
            }
        }
        drop(accepting);
        let rearmed = epoll::modify(
            &self.epoll,
            &self.listener,
            EventData::new_u64(LISTENER),
            one_shot(true, false),
        );
        if let Err(e) = rearmed {
            tracing::error!("the server can no longer accept connections: {e}");
        }
    }

    /// Makes an accepted stream a connection the workers serve.
    fn register(&self, stream: std::net::TcpStream) -> io::Result<()> {
        let (key, conn) = {
            let mut c = lock(&self.connections);
            let entry = c.live.vacant_entry();
            let key = entry.key();
            let conn = Arc::new(Connection::new(&self.shared, stream, key)?);
            entry.insert(conn.clone());
            self.shared.clients.store(c.live.len() as u64, Ordering::Relaxed);
            c.peak = c.peak.max(c.live.len());
            (key, conn)
        };
        let added = epoll::add(
            &self.epoll,
            &conn.stream,
            EventData::new_u64(key as u64),
            one_shot(true, false),
        );
        if let Err(e) = added {
            self.close(key, &conn);
            return Err(e.into());
        }
        Ok(())
    }
}

/// A connection whose replies from `answered` on wait for a sync.
struct AwaitingSync {
    poller: Arc<Poller>,
    key: usize,
    conn: Arc<Connection>,
    answered: usize,
    /// What the connection does once resumed: decided as it is answered.
    next: Next,
}

impl Synced for AwaitingSync {
    fn answer(&mut self, outcome: Result<(), String>) {
        self.next = self.conn.synced(&self.poller.shared, outcome, self.answered);
    }

    fn resume(self: Box<Self>) {
        let AwaitingSync {
            poller,
            key,
            conn,
            next,
            ..
        } = *self;
        match next {
            // The client most likely sent its next request while the
            // group's replies were written: the connection is served as
            // if the poller had found it ready (a read that finds nothing
            // re-arms it), so that a group costs one wake-up, not one per
            // connection.
            Next::Wait {
                read: true,
                write: false,
            } => poller.queue(Ready::Answered(key)),
            next => poller.follow(key, &conn, next),
        }
    }
}

/// Returns the allocator's free memory to the kernel. glibc keeps what
/// many small frees leave between live blocks; after thousands of clients
/// have left (each a few KiB of state), the server would keep their memory
/// for good. Called once at least half of the peak's connections (and a
/// thousand) are gone, so a steady churn of clients never pays for it.
fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it takes the
    // allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Tells a client over `max_clients` so and closes its connection, without
/// blocking the worker: the socket is new, so its empty send buffer takes
/// the refusal at once. What the client sent already is read first (up to
/// [`REFUSAL_DRAIN`]), since closing with bytes unread would reset the
/// connection, and the reset can overtake the refusal; a client that goes
/// on sending cannot hold the worker past that bound.
fn refuse(mut stream: std::net::TcpStream) {
    use std::io::{Read, Write};
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let _ = stream.write_all(sluice_resp::MAX_CLIENTS_REACHED);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut unread = [0u8; 4096];
    let mut drained = 0;
    while drained < REFUSAL_DRAIN {
        match stream.read(&mut unread) {
            Ok(n) if n > 0 => drained += n,
            _ => break,
        }
    }
}

/// Bytes a refused client's connection is drained of at most.
const REFUSAL_DRAIN: usize = 64 << 10;

/// Interest in one readiness of a socket, after which it is disarmed until
/// re-armed: no two workers ever hold one connection.
fn one_shot(read: bool, write: bool) -> EventFlags {
    let mut flags = EventFlags::ONESHOT;
    if read {
        flags |= EventFlags::IN;
    }
    if write {
        flags |= EventFlags::OUT;
    }
    flags
}
