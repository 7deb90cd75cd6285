//! Why a peer's bytes are not RESP. One error type for requests and
//! replies; its text is what a client reads after `-ERR `, in Redis's own
//! words where Redis has them (`invalid bulk length`, `unbalanced quotes`,
//! `unauthenticated multibulk length`, ...), so that clients and Redis's
//! test suite that match them find them, followed by what was wrong.

/// Why a message cannot be framed; the connection is answered (a client,
/// with this text) and closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: expected '{expected}', got '{}'", char::from(*.found).escape_default())]
    Expected { expected: char, found: u8 },
    #[error("Protocol error: invalid {what} length '{}'", String::from_utf8_lossy(.text).escape_default())]
    BadLength { what: &'static str, text: Vec<u8> },
    #[error("Protocol error: invalid {what} length {len} (the limit is {limit})")]
    TooLong { what: &'static str, len: u64, limit: u64 },
    #[error("Protocol error: unauthenticated {0} length")]
    Unauthenticated(&'static str),
    #[error("Protocol error: {what} line longer than {limit} bytes without CRLF")]
    LineTooLong { what: &'static str, limit: usize },
    #[error("Protocol error: bulk string not followed by CRLF")]
    MissingCrlf,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: inline request with more than {0} arguments")]
    TooManyArgs(usize),
    #[error("Protocol error: unknown reply type byte 0x{0:02x}")]
    UnknownType(u8),
    #[error("Protocol error: empty line where a reply type byte belongs")]
    EmptyLine,
    #[error("Protocol error: invalid integer reply '{}'", String::from_utf8_lossy(.0).escape_default())]
    BadInteger(Vec<u8>),
    #[error("Protocol error: unexpected reply type '{}'", char::from(*.0).escape_default())]
    Unsupported(u8),
    #[error("Protocol error: reply nested deeper than {0} levels")]
    TooDeep(usize),
    #[error("Protocol error: incomplete array reply")]
    IncompleteArray,
}
