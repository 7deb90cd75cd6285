//! One client's connection, as the server's poller drives it: read what
//! arrives, hand whole requests to a worker, write the replies, within the
//! bounds that keep a hostile client from taking the server's memory or
//! another client's turn.
//!
//! The connection is a task on the poller's thread; it holds no thread and,
//! while idle, no buffer ([`crate::request::Buffers`] shrink once empty).
//! Its requests run on a worker from the runtime's bounded pool of
//! blocking threads ([`crate::ServerOptions::workers`]): the session and
//! the buffers move to the worker and back, so a request runs on one
//! thread inside its request context, as sluice-io needs, and the poller
//! never waits for the store.
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
//!   on, and no worker waits for this one), reads on, and holds the
//!   requests read but not run up to another bound ([`Held::input`]); past
//!   that it stops reading, and TCP holds the client back. A request still
//!   arriving is bounded by [`crate::resp::Limits`] instead: it is not run
//!   before it is whole.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::commands::Session;
use crate::committer::Committer;
use crate::request::{run_requests, Buffers};
use crate::shared::Shared;

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

/// Bytes the poller reads at a time.
const READ_CHUNK: usize = 64 << 10;

thread_local! {
    /// The poller's buffer for reads: one for every connection, since a
    /// read's bytes are copied into its connection's input at once.
    static CHUNK: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_CHUNK]);
}

/// What moves to a worker and back with each batch of requests.
struct Client {
    session: Session,
    buffers: Buffers,
}

/// Serves one client until it quits, disconnects or breaks the protocol
/// (answered with the protocol error, then closed); then forgets the
/// tenant named by the connection (a tenant named by AUTH stays).
pub(crate) async fn connection(shared: Arc<Shared>, committer: Committer, mut stream: TcpStream) {
    let id = shared.next_client.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let own = shared.tenant(&format!("client-{id}"));
    let client = Client {
        session: Session::new(id, own, shared.options.password.is_none()),
        buffers: Buffers::default(),
    };
    let _ = stream.set_nodelay(true);
    if let Err(e) = serve(&shared, &committer, &mut stream, client).await {
        tracing::debug!("client {id}: {e}");
    }
    shared.forget(own);
}

/// Serves the connection until the client leaves or the session ends
/// (QUIT, a protocol error), its last replies written.
async fn serve(shared: &Arc<Shared>, committer: &Committer, stream: &mut TcpStream, mut c: Client) -> io::Result<()> {
    let mut eof = false;
    // Input arrived since the last run, which may complete a request.
    let mut fresh = false;
    // The last run stopped for unsent replies, with requests left.
    let mut stalled = false;
    loop {
        let held = if c.session.authenticated {
            HELD
        } else {
            UNAUTHENTICATED_HELD
        };
        if (fresh || stalled) && !c.session.quit && c.buffers.unsent() < held.output {
            let shared = shared.clone();
            let (back, ran) = tokio::task::spawn_blocking(move || {
                let ran = run_requests(&shared, &mut c.session, &mut c.buffers, held.output);
                (c, ran)
            })
            .await
            .map_err(|e| io::Error::other(format!("a request failed: {e}")))?;
            c = back;
            fresh = false;
            stalled = ran.stalled;
            if !ran.unsynced.is_empty() {
                if let Err(e) = committer.sync(ran.unsynced, c.session.tenant).await {
                    // As a crash would: no write acknowledged that may not
                    // survive one.
                    tracing::warn!("a connection's writes could not be made durable: {e}; closing it unanswered");
                    c.buffers.output.truncate(ran.answered);
                    c.session.quit = true;
                }
            }
        }
        write(stream, &mut c.buffers)?;
        let unsent = c.buffers.unsent() > 0;
        if stalled && !unsent {
            // The socket took every reply: room to run more at once.
            continue;
        }
        if (c.session.quit || eof) && !unsent {
            let _ = stream.shutdown().await;
            return Ok(());
        }
        // Stalled on its replies, the connection reads on up to its bound.
        let read = !eof && !c.session.quit && (!stalled || c.buffers.unrun() < held.input);
        let interest = match (read, unsent) {
            (true, true) => Interest::READABLE | Interest::WRITABLE,
            (true, false) => Interest::READABLE,
            _ => Interest::WRITABLE,
        };
        let ready = stream.ready(interest).await?;
        if read && (ready.is_readable() || ready.is_read_closed()) {
            match CHUNK.with_borrow_mut(|chunk| {
                let n = stream.try_read(chunk)?;
                c.buffers.input.extend_from_slice(&chunk[..n]);
                io::Result::Ok(n)
            }) {
                Ok(0) => eof = true,
                Ok(_) => fresh = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Writes replies until they are all written or the socket is full.
fn write(stream: &TcpStream, b: &mut Buffers) -> io::Result<()> {
    while b.unsent() > 0 {
        match stream.try_write(&b.output[b.sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => b.written(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
