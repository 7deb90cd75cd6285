//! The RESP server behind `sluice serve`: one poller thread holds every
//! connection, a bounded pool of workers runs their commands, one thread
//! syncs the WAL for all of them.
//!
//! | piece | file |
//! |---|---|
//! | accepting connections, the runtime | this file |
//! | a connection: reading, writing, its bounds against a hostile client | `connection.rs` |
//! | its requests on a worker, each inside its request context | `request.rs` |
//! | group commit across connections | `committer.rs` |
//!
//! The poller is a tokio runtime on one thread: a connection costs a task
//! and its socket, not a thread, so thousands of idle clients hold little
//! (a few KiB each). The store blocks in its I/O and sluice-io keeps a
//! request's context on the thread that runs it, so commands run on the
//! runtime's blocking threads, at most [`ServerOptions::workers`] at a time;
//! a connection with whole requests waits for a free worker in arrival
//! order. Workers never wait for a sync: a batch's writes are applied, the
//! worker moves on, and its replies wait for the committer
//! (`committer.rs`), which syncs once for every connection ready.
//!
//! # Hostile clients
//!
//! Whoever can connect must not be able to stop the server or take its
//! memory. Accept errors are never fatal: when the process runs out of
//! file descriptors the listener's error is logged at most once per
//! second, with how many were not, and accepting pauses 10 ms, doubling to
//! 100 ms, so that the server does not spin while it waits for connections
//! to close; errors that concern one connection only (aborted before it
//! was accepted) are retried at once. What one connection may hold, and
//! how a client that does not read is kept from the others, is in
//! `connection.rs`.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::committer::Committer;
use crate::connection::connection;
pub use crate::connection::{Held, HELD, UNAUTHENTICATED_HELD};
pub use crate::shared::ServerOptions;
use crate::shared::Shared;
use crate::Db;

/// The pause after a failed accept, doubling up to the second.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(100));

/// Accept failures are logged at most once per this interval.
const ACCEPT_REPORT_INTERVAL: Duration = Duration::from_secs(1);

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

    /// Accepts connections for as long as the process runs: a failure to
    /// accept one is logged (at most once per second) and backed off,
    /// never fatal. Fails only if the poller, its workers or the
    /// committing thread cannot be started.
    pub fn run(self) -> io::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(self.shared.options.workers.max(1))
            .thread_name("sluice-kv worker")
            .build()?;
        let committer = Committer::start(self.shared.clone())?;
        self.listener.set_nonblocking(true)?;
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::from_std(self.listener)?;
            let mut pause = ACCEPT_BACKOFF.0;
            let mut reports = Throttle::new(ACCEPT_REPORT_INTERVAL);
            loop {
                let e = match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(connection(self.shared.clone(), committer.clone(), stream));
                        pause = ACCEPT_BACKOFF.0;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => e,
                };
                let once = one_connection(&e);
                if let Some(unreported) = reports.report(Instant::now()) {
                    let retry = if once { Duration::ZERO } else { pause };
                    tracing::warn!(
                        "accepting a connection failed: {e}; retrying in {retry:?} ({unreported} more failures since the last report)"
                    );
                }
                if !once {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ACCEPT_BACKOFF.1);
                }
            }
        })
    }
}

/// Whether an accept error concerns one connection only (it went away
/// before it was accepted; Linux also passes on a pending network error
/// of the new socket), so that accepting the next needs no pause.
fn one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) || matches!(
        e.raw_os_error(),
        Some(
            libc::EPROTO
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
        )
    )
}

/// Reports of a repeating failure, at most one per interval.
struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    unreported: u64,
}

impl Throttle {
    fn new(interval: Duration) -> Throttle {
        Throttle {
            interval,
            last: None,
            unreported: 0,
        }
    }

    /// Whether a failure at `now` is reported; if so, how many since the
    /// last report were not.
    fn report(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|last| now.duration_since(last) < self.interval) {
            self.unreported += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_reported_once_per_interval_with_a_count() {
        let mut t = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(t.report(at(0)), Some(0));
        assert_eq!(t.report(at(10)), None);
        assert_eq!(t.report(at(999)), None);
        assert_eq!(t.report(at(1000)), Some(2), "the two in between are counted");
        assert_eq!(t.report(at(2500)), Some(0));
    }

    #[test]
    fn only_errors_of_one_connection_skip_the_pause() {
        assert!(one_connection(&io::ErrorKind::ConnectionAborted.into()));
        assert!(one_connection(&io::Error::from_raw_os_error(libc::EPROTO)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::ENOMEM)));
    }
}
