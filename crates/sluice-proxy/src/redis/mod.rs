//! Redis behind the proxy (issue 5, §1–§3): RESP framing, what each
//! command means for admission, the shared upstream connections that carry
//! the commands of clients still in the default session state, and the
//! session that relays a client's commands to its own upstream connection
//! from its first stateful command on.

pub mod command;
pub(crate) mod mux;
pub mod resp;
pub(crate) mod session;
pub(crate) mod shared;

use crate::session::Backlog;

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

/// Whether a session reads more of what its client sends: not after the
/// client closed its side, and while commands are held for the backlog,
/// only up to `MAX_READ_AHEAD`.
fn reads_more(held: bool, eof: bool, buffered: usize) -> bool {
    !(eof || held && buffered >= MAX_READ_AHEAD)
}

/// The backlog bound of one Redis session.
fn backlog() -> Backlog {
    Backlog::new(MAX_OWED_REPLIES, MAX_UNREAD_REPLY_BYTES)
}
