//! Redis behind the proxy: what each command means for admission, the
//! shared upstream connections that carry the commands of clients still in
//! the default session state, and the session that relays a client's
//! commands to its own upstream connection from its first stateful command
//! on. Commands and replies are framed by the shared RESP codec,
//! `sluice-resp`.

pub mod command;
pub(crate) mod context;
pub(crate) mod mux;
pub(crate) mod session;
pub(crate) mod shared;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::relay::Backlog;

/// Unread reply bytes past which a session takes no new command from its
/// client: Redis's socket buffers hold about this much for a client that
/// reads as it writes, so a pipelining client that keeps up never meets it.
const MAX_UNREAD_REPLY_BYTES: usize = 1024 * 1024;

/// Commands let through and not yet answered past which a session takes no
/// new one: keeps the record of owed replies small for a client that sends
/// small commands with small replies and reads none of them.
const MAX_OWED_REPLIES: usize = 1024;

/// What a session reads from its client ahead of the commands it can let
/// through, while the backlog is full. A client that writes a pipeline in
/// full before reading its replies needs its whole pipeline read: 200,000
/// GETs take about 7 MiB. Redis's own bound, `client-query-buffer-limit`,
/// is 1 GiB; 64 MiB per client keeps a thousand hostile ones from taking
/// the machine. A command larger than this (up to the 512 MiB of a bulk)
/// is still read in full once the backlog has room.
const MAX_READ_AHEAD: usize = 64 * 1024 * 1024;

/// `MAX_READ_AHEAD` for a client that has not authenticated where it must:
/// with Redis's bounds on its commands, it holds less than 1 MiB in all.
const MAX_READ_AHEAD_BEFORE_AUTH: usize = 64 * 1024;

/// Whether a session reads more of what its client sends: not after the
/// client closed its side, and while commands are held for the backlog,
/// only up to `MAX_READ_AHEAD` (or `MAX_READ_AHEAD_BEFORE_AUTH`).
fn reads_more(held: bool, eof: bool, before_auth: bool, buffered: usize) -> bool {
    let limit = if before_auth {
        MAX_READ_AHEAD_BEFORE_AUTH
    } else {
        MAX_READ_AHEAD
    };
    !(eof || held && buffered >= limit)
}

/// Whether the server asks clients to authenticate: probed when the proxy
/// starts, and learned from any NOAUTH reply since. Until a client has
/// authenticated where it must, Redis's bounds for such a client apply to
/// its commands ([`sluice_resp::CommandParser::set_before_auth`]), so that a
/// client without the password cannot make the proxy hold more than a
/// small request for it. A server that stops asking keeps the bounds on
/// until the proxy restarts; they cost a client only its first commands'
/// size before AUTH.
#[derive(Debug, Default)]
pub(crate) struct UpstreamAuth(AtomicBool);

impl UpstreamAuth {
    /// Asks `upstream` for a PING as a client that has not authenticated;
    /// a server that cannot be reached within a second is taken not to ask
    /// (until its replies say otherwise).
    pub async fn probe(upstream: &str) -> UpstreamAuth {
        let ping = async {
            let mut stream = crate::socket::connect_stream(upstream).await.ok()?;
            stream.write_all(b"PING\r\n").await.ok()?;
            let mut reply = [0u8; 7];
            stream.read_exact(&mut reply).await.ok()?;
            Some(reply.starts_with(b"-NOAUTH"))
        };
        let asks = tokio::time::timeout(Duration::from_secs(1), ping).await;
        UpstreamAuth(AtomicBool::new(asks.ok().flatten().unwrap_or(false)))
    }

    pub fn required(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Learns from one reply of the server.
    pub fn note(&self, reply: &[u8]) {
        if reply.starts_with(b"-NOAUTH") {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// The backlog bound of one Redis session.
fn backlog() -> Backlog {
    Backlog::new(MAX_OWED_REPLIES, MAX_UNREAD_REPLY_BYTES)
}
