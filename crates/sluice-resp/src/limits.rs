//! The bounds a peer's messages are held to: Redis's own by default, so
//! that a client is refused here exactly where Redis would refuse it, and
//! looser ones for the replies a relay passes on.

use crate::error::ProtocolError;

/// Longest bulk string: Redis's `proto-max-bulk-len` default (512 MiB).
pub const MAX_BULK_LEN: usize = 512 << 20;
/// Most arguments of one command: Redis's bound, `INT_MAX`.
pub const MAX_ARGS: usize = i32::MAX as usize;
/// Longest inline command line: Redis's `PROTO_INLINE_MAX_SIZE` (64 KiB).
pub const MAX_INLINE_LEN: usize = 64 << 10;
/// Most arguments of a command from a client that has not authenticated
/// where the server asks it to: Redis's bound for such a client.
pub const MAX_ARGS_BEFORE_AUTH: usize = 10;
/// Longest bulk string from such a client: Redis's bound too (16 KiB).
pub const MAX_BULK_BEFORE_AUTH: usize = 16 << 10;
/// Clients a server keeps at once: Redis's `maxclients` default.
pub const MAX_CLIENTS: usize = 10_000;
/// What redis-server tells a client over `maxclients` before it closes.
pub const MAX_CLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";
/// Longest line of a reply a relay passes on (a simple string, an error,
/// a number): 1 MiB.
pub const MAX_REPLY_LINE: usize = 1 << 20;
/// Longest header line of a command: the digits of `*<n>` or `$<n>`.
pub(crate) const MAX_HEADER_LINE: usize = 32;

/// Sizes a message may not exceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Arguments of a command; elements of a reply's array or map.
    pub max_args: usize,
    /// Bytes of a bulk string.
    pub max_bulk: usize,
    /// Bytes of an inline command's line; of a line of a reply.
    pub max_inline: usize,
    /// The client has not authenticated where it must
    /// ([`Limits::before_auth`]): Redis's bounds for such a client,
    /// [`MAX_ARGS_BEFORE_AUTH`] arguments of [`MAX_BULK_BEFORE_AUTH`]
    /// bytes, apply on top, and a command over them is named
    /// "unauthenticated", as Redis names it, so that the client learns it
    /// has to authenticate first.
    pub unauthenticated: bool,
}

impl Default for Limits {
    /// Redis's limits for a command.
    fn default() -> Self {
        Limits {
            max_args: MAX_ARGS,
            max_bulk: MAX_BULK_LEN,
            max_inline: MAX_INLINE_LEN,
            unauthenticated: false,
        }
    }
}

impl Limits {
    /// For replies a relay passes on: a server's replies are as large as
    /// the data asked for (an LRANGE of millions of elements, a string a
    /// server with a larger `proto-max-bulk-len` holds), so only the
    /// protocol's own bounds apply, and [`MAX_REPLY_LINE`] to a line.
    pub fn relay() -> Limits {
        Limits {
            max_args: i64::MAX as usize,
            max_bulk: i64::MAX as usize,
            max_inline: MAX_REPLY_LINE,
            unauthenticated: false,
        }
    }

    /// These limits for a client that has not authenticated yet, where the
    /// server asks it to: whoever can connect without the password cannot
    /// make the server buffer a large request.
    pub fn before_auth(self) -> Limits {
        Limits {
            unauthenticated: true,
            ..self
        }
    }

    /// The count of an array request, checked in Redis's order: over
    /// `max_args` it is invalid, then over the bound before AUTH
    /// unauthenticated.
    pub(crate) fn check_args(&self, count: usize) -> Result<(), ProtocolError> {
        self.check("multibulk", count, self.max_args, MAX_ARGS_BEFORE_AUTH)
    }

    /// The length of a request's bulk string, checked in the same order.
    pub(crate) fn check_bulk(&self, len: usize) -> Result<(), ProtocolError> {
        self.check("bulk", len, self.max_bulk, MAX_BULK_BEFORE_AUTH)
    }

    fn check(&self, what: &'static str, len: usize, limit: usize, before_auth: usize) -> Result<(), ProtocolError> {
        if len > limit {
            return Err(ProtocolError::TooLong {
                what,
                len: len as u64,
                limit: limit as u64,
            });
        }
        if self.unauthenticated && len > before_auth {
            return Err(ProtocolError::Unauthenticated(what));
        }
        Ok(())
    }
}
