//! RESP framing for the proxy: where each client command and each server
//! reply begins and ends, nothing more. The proxy forwards the original
//! bytes, so it never builds values.
//!
//! Written by hand because a proxy needs what no RESP crate offers: resumable
//! framing over a growing buffer (a 512 MiB bulk string or a reply with a
//! million elements arrives in many reads and must not be rescanned from its
//! start each time) and streaming of replies without holding them whole.
//!
//! - [`CommandParser`] frames client commands: arrays of bulk strings and
//!   inline commands, with Redis's own limits (bulk ≤ 512 MiB, inline line
//!   ≤ 64 KiB) and a bound on the number of arguments. Inline commands are
//!   split as Redis splits them (double quotes with escapes, single quotes),
//!   so that a line Redis would refuse with "unbalanced quotes" is refused
//!   here and never reaches a connection other clients share.
//! - [`ReplyScanner`] frames server replies: every RESP2 type and the RESP3
//!   types a server sends after `HELLO 3` (map, set, double, boolean, null,
//!   big number, verbatim string, bulk error, push, attribute). Redis 7 sends
//!   RESP3 types only to a client that asked for them, so the scanner accepts
//!   them at any time rather than tracking the protocol version. Nesting
//!   has no fixed limit (Redis itself sends replies thousands of levels
//!   deep, from a script returning a recursive table): each open level
//!   costs 16 bytes and takes at least 4 bytes of the reply to open.
//!
//! Malformed input is an error that names what is wrong; nothing here panics
//! on any input (property-tested).

use std::ops::Range;

use bytes::Bytes;

use thiserror::Error;

/// Longest bulk string, as Redis's `proto-max-bulk-len` default.
pub const MAX_BULK_LEN: u64 = 512 * 1024 * 1024;
/// Most elements in one array or map; far above any real command or reply,
/// low enough that a bogus header cannot make counters overflow.
pub const MAX_ARRAY_LEN: u64 = 1 << 26;
/// Longest inline command line, as Redis's `PROTO_INLINE_MAX_SIZE`.
pub const MAX_INLINE_LEN: usize = 64 * 1024;
/// Most arguments of a command from a client that has not authenticated
/// where the server asks it to, as Redis's own bound for such a client.
pub const MAX_ARGS_BEFORE_AUTH: u64 = 10;
/// Longest bulk string from such a client (Redis's bound too).
pub const MAX_BULK_BEFORE_AUTH: u64 = 16 * 1024;
/// Longest header line of a command (`*<n>` or `$<n>`).
const MAX_HEADER_LINE: usize = 32;
/// Longest line in a reply (simple strings, errors, numbers, big numbers).
pub const MAX_REPLY_LINE: usize = 1024 * 1024;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RespError {
    #[error("Protocol error: expected '{expected}', got '{}'", char::from(*.found).escape_default())]
    Expected { expected: char, found: u8 },
    #[error("Protocol error: invalid {what} length '{}'", String::from_utf8_lossy(.text).escape_default())]
    BadLength { what: &'static str, text: Vec<u8> },
    #[error("Protocol error: invalid {what} length {len} (the limit is {limit})")]
    TooLong { what: &'static str, len: u64, limit: u64 },
    #[error("Protocol error: {what} line longer than {limit} bytes without CRLF")]
    LineTooLong { what: &'static str, limit: usize },
    #[error("Protocol error: bulk string not followed by CRLF")]
    MissingCrlf,
    #[error("Protocol error: unknown reply type byte 0x{0:02x}")]
    UnknownType(u8),
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: unauthenticated {0} length")]
    Unauthenticated(&'static str),
    #[error("Protocol error: empty line where a reply type byte belongs")]
    EmptyLine,
}

/// The line at the start of `buf` without its terminator, and the length
/// including the terminator; `None` while the line is incomplete.
fn line<'a>(buf: &'a [u8], limit: usize, what: &'static str) -> Result<Option<(&'a [u8], usize)>, RespError> {
    match buf.iter().take(limit + 2).position(|&b| b == b'\n') {
        Some(nl) if nl > 0 && buf[nl - 1] == b'\r' => Ok(Some((&buf[..nl - 1], nl + 1))),
        // A bare LF ends an inline command (Redis accepts it); elsewhere it
        // is kept in the line and rejected by the number parser.
        Some(nl) => Ok(Some((&buf[..nl], nl + 1))),
        None if buf.len() > limit + 1 => Err(RespError::LineTooLong { what, limit }),
        None => Ok(None),
    }
}

fn number(text: &[u8], what: &'static str) -> Result<i64, RespError> {
    std::str::from_utf8(text)
        .ok()
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| RespError::BadLength {
            what,
            text: text.to_vec(),
        })
}

/// A length that may be -1 (null) and is otherwise at most `limit`.
fn length(text: &[u8], what: &'static str, limit: u64) -> Result<Option<u64>, RespError> {
    match number(text, what)? {
        -1 => Ok(None),
        n if n < 0 => Err(RespError::BadLength {
            what,
            text: text.to_vec(),
        }),
        n if n as u64 > limit => Err(RespError::TooLong {
            what,
            len: n as u64,
            limit,
        }),
        n => Ok(Some(n as u64)),
    }
}

/// Frames client commands one at a time, resuming where the previous call
/// stopped when a command was incomplete. Argument ranges are kept in a
/// vector reused across commands, so framing allocates nothing once warm.
#[derive(Debug, Default)]
pub struct CommandParser {
    args: Vec<Range<usize>>,
    /// Arguments announced by the array header; `None` before the header.
    expected: Option<usize>,
    /// Where framing resumes, relative to the start of the command.
    pos: usize,
    /// The previous call completed a command; the next one starts afresh.
    done: bool,
    /// Redis's bounds for a client that has not authenticated apply.
    before_auth: bool,
    /// The longest bulk after authentication; `MAX_BULK_LEN` if 0.
    max_bulk: u64,
}

impl CommandParser {
    /// Frames the command at the start of `buf`: `Ok(Some(len))` once all of
    /// its `len` bytes are there, `Ok(None)` while more are needed. A blank
    /// inline line or an empty array is a command with no arguments, which
    /// Redis ignores without a reply.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<usize>, RespError> {
        if self.done {
            self.args.clear();
            self.expected = None;
            self.pos = 0;
            self.done = false;
        }
        let framed = match buf.first() {
            None => return Ok(None),
            Some(b'*') => self.multibulk(buf)?,
            Some(_) => self.inline(buf)?,
        };
        self.done = framed.is_some();
        Ok(framed)
    }

    /// Whether Redis's bounds for a client that has not authenticated (and
    /// must) apply: at most [`MAX_ARGS_BEFORE_AUTH`] arguments of at most
    /// [`MAX_BULK_BEFORE_AUTH`] bytes each.
    pub fn set_before_auth(&mut self, before_auth: bool) {
        self.before_auth = before_auth;
    }

    /// A parser that refuses bulks longer than `max_bulk` (at most
    /// [`MAX_BULK_LEN`], which 0 stands for).
    pub fn with_max_bulk(max_bulk: u64) -> CommandParser {
        CommandParser {
            max_bulk: max_bulk.min(MAX_BULK_LEN),
            ..CommandParser::default()
        }
    }

    /// The arguments of the command just framed, as ranges of its bytes.
    pub fn args(&self) -> &[Range<usize>] {
        &self.args
    }

    fn inline(&mut self, buf: &[u8]) -> Result<Option<usize>, RespError> {
        let Some((text, len)) = line(buf, MAX_INLINE_LEN, "inline command")? else {
            return Ok(None);
        };
        split_inline(text, &mut self.args)?;
        Ok(Some(len))
    }

    fn multibulk(&mut self, buf: &[u8]) -> Result<Option<usize>, RespError> {
        let expected = match self.expected {
            Some(n) => n,
            None => {
                let Some((text, len)) = line(buf, MAX_HEADER_LINE, "multibulk count")? else {
                    return Ok(None);
                };
                // Redis skips an array header whose count is below 1.
                let n = match number(&text[1..], "multibulk")? {
                    n if n <= 0 => 0,
                    n if n as u64 > MAX_ARRAY_LEN => {
                        return Err(RespError::TooLong {
                            what: "multibulk",
                            len: n as u64,
                            limit: MAX_ARRAY_LEN,
                        })
                    }
                    n => n as u64,
                };
                if self.before_auth && n > MAX_ARGS_BEFORE_AUTH {
                    return Err(RespError::Unauthenticated("multibulk"));
                }
                let n = n as usize;
                self.pos = len;
                self.expected = Some(n);
                n
            }
        };
        let max_bulk = match (self.before_auth, self.max_bulk) {
            (true, _) => MAX_BULK_BEFORE_AUTH,
            (false, 0) => MAX_BULK_LEN,
            (false, max) => max,
        };
        while self.args.len() < expected {
            let arg = bulk(&buf[self.pos..], max_bulk).map_err(|e| match e {
                RespError::TooLong { .. } if self.before_auth => RespError::Unauthenticated("bulk"),
                e => e,
            })?;
            let Some(arg) = arg else {
                return Ok(None);
            };
            self.args.push(self.pos + arg.start..self.pos + arg.end);
            self.pos += arg.end + 2;
        }
        Ok(Some(self.pos))
    }
}

/// Splits an inline command into arguments as Redis's `sdssplitargs` does:
/// blanks separate arguments; a double-quoted part may hold escapes
/// (`\"`, `\n`, `\x41`, ...), a single-quoted part only `\'`; a closing
/// quote must end its argument. A range covers an argument's raw bytes,
/// without its outer quotes when it is quoted whole: escapes are left for
/// the server to resolve, since the proxy forwards the line as it came.
fn split_inline(text: &[u8], args: &mut Vec<Range<usize>>) -> Result<(), RespError> {
    let mut i = 0;
    loop {
        while text.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if i == text.len() {
            return Ok(());
        }
        let start = i;
        let mut quoted_whole = None;
        while let Some(&b) = text.get(i) {
            match b {
                b if b.is_ascii_whitespace() => break,
                b'"' | b'\'' => {
                    let close = closing_quote(text, i)?;
                    if i == start && text.get(close + 1).is_none_or(u8::is_ascii_whitespace) {
                        quoted_whole = Some(start + 1..close);
                    }
                    i = close + 1;
                    if text.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                        return Err(RespError::UnbalancedQuotes);
                    }
                }
                _ => i += 1,
            }
        }
        args.push(quoted_whole.unwrap_or(start..i));
    }
}

/// Where the quote opened at `open` closes; a backslash escapes the next
/// byte inside double quotes, and a quote inside single quotes.
fn closing_quote(text: &[u8], open: usize) -> Result<usize, RespError> {
    let quote = text[open];
    let mut i = open + 1;
    while let Some(&b) = text.get(i) {
        match b {
            b'\\' if quote == b'"' || text.get(i + 1) == Some(&b'\'') => i += 2,
            b if b == quote => return Ok(i),
            _ => i += 1,
        }
    }
    Err(RespError::UnbalancedQuotes)
}

/// The payload range of the bulk string at the start of `buf`, once it is
/// complete with its CRLF; longer than `limit`, an error.
fn bulk(buf: &[u8], limit: u64) -> Result<Option<Range<usize>>, RespError> {
    let Some((text, header)) = line(buf, MAX_HEADER_LINE, "bulk length")? else {
        return Ok(None);
    };
    if text.first() != Some(&b'$') {
        return Err(RespError::Expected {
            expected: '$',
            found: text.first().copied().unwrap_or(b'\n'),
        });
    }
    let len = match number(&text[1..], "bulk")? {
        n if n < 0 => {
            return Err(RespError::BadLength {
                what: "bulk",
                text: text[1..].to_vec(),
            })
        }
        n if n as u64 > limit => {
            return Err(RespError::TooLong {
                what: "bulk",
                len: n as u64,
                limit,
            })
        }
        n => n as usize,
    };
    let end = header + len;
    match buf.get(end..end + 2) {
        None => Ok(None),
        Some(b"\r\n") => Ok(Some(header..end)),
        Some(_) => Err(RespError::MissingCrlf),
    }
}

/// One complete reply, as the scanner saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The type byte of the top-level value (after any attribute).
    pub kind: u8,
}

impl Reply {
    /// An error reply: simple error or RESP3 bulk error.
    pub fn is_error(&self) -> bool {
        matches!(self.kind, b'-' | b'!')
    }

    /// A RESP3 push: out-of-band data, not the answer to a command.
    pub fn is_push(&self) -> bool {
        self.kind == b'>'
    }
}

/// One open aggregate: elements still to come, and whether it is an
/// attribute (which annotates the value after it instead of being one).
#[derive(Clone, Copy, Debug)]
struct Level {
    remaining: u64,
    attribute: bool,
}

/// Frames server replies as they stream in. State survives between calls,
/// so each byte is looked at once however the reply is split across reads,
/// and bulk payloads are skipped without being buffered.
#[derive(Debug, Default)]
pub struct ReplyScanner {
    levels: Vec<Level>,
    /// Payload bytes (with the CRLF) of a bulk value still to pass.
    skip: u64,
    kind: Option<u8>,
}

impl ReplyScanner {
    /// Between replies: nothing of the next one has been seen.
    pub fn is_idle(&self) -> bool {
        self.levels.is_empty() && self.skip == 0 && self.kind.is_none()
    }

    /// Scans `buf` until a reply completes or the bytes run out. Returns how
    /// many bytes were consumed (an incomplete line at the end is left for
    /// the next call, which must start with it) and the reply, if one
    /// completed at that point.
    pub fn advance(&mut self, buf: &[u8]) -> Result<(usize, Option<Reply>), RespError> {
        let mut pos = 0;
        loop {
            if self.skip > 0 {
                let n = self.skip.min((buf.len() - pos) as u64);
                pos += n as usize;
                self.skip -= n;
                if self.skip > 0 {
                    return Ok((pos, None));
                }
                if let Some(reply) = self.value_done() {
                    return Ok((pos, Some(reply)));
                }
                continue;
            }
            let Some((text, len)) = line(&buf[pos..], MAX_REPLY_LINE, "reply")? else {
                return Ok((pos, None));
            };
            pos += len;
            if let Some(reply) = self.header(text)? {
                return Ok((pos, Some(reply)));
            }
        }
    }

    /// Takes in one header line; returns the reply if it completed one.
    fn header(&mut self, text: &[u8]) -> Result<Option<Reply>, RespError> {
        let (&kind, rest) = text.split_first().ok_or(RespError::EmptyLine)?;
        if self.levels.is_empty() && kind != b'|' {
            self.kind = Some(kind);
        }
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(self.value_done()),
            b'$' | b'!' | b'=' => match length(rest, "bulk", MAX_BULK_LEN)? {
                Some(len) => {
                    self.skip = len + 2;
                    Ok(None)
                }
                None => Ok(self.value_done()),
            },
            b'*' | b'~' | b'>' => self.aggregate(length(rest, "array", MAX_ARRAY_LEN)?, 1, false),
            b'%' => self.aggregate(length(rest, "map", MAX_ARRAY_LEN)?, 2, false),
            b'|' => self.aggregate(length(rest, "attribute", MAX_ARRAY_LEN)?, 2, true),
            other => Err(RespError::UnknownType(other)),
        }
    }

    fn aggregate(&mut self, len: Option<u64>, per: u64, attribute: bool) -> Result<Option<Reply>, RespError> {
        match len {
            Some(n) if n > 0 => {
                self.levels.push(Level {
                    remaining: n * per,
                    attribute,
                });
                Ok(None)
            }
            // An empty attribute annotates nothing and is not a value.
            _ if attribute => Ok(None),
            _ => Ok(self.value_done()),
        }
    }

    /// One value finished: close the aggregates it completes, and report
    /// the reply when the top-level value is done.
    fn value_done(&mut self) -> Option<Reply> {
        while let Some(level) = self.levels.last_mut() {
            level.remaining -= 1;
            if level.remaining > 0 {
                return None;
            }
            let attribute = level.attribute;
            self.levels.pop();
            if attribute {
                return None;
            }
        }
        self.kind.take().map(|kind| Reply { kind })
    }
}

/// Appends `args` as a RESP array of bulk strings (how clients send commands).
pub fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut bytes::BytesMut) {
    use std::io::Write;
    let mut w = bytes::BufMut::writer(out);
    // Writing to a BytesMut cannot fail.
    let _ = write!(w, "*{}\r\n", args.len());
    for arg in args {
        let arg = arg.as_ref();
        let _ = write!(w, "${}\r\n", arg.len());
        let _ = w.write_all(arg);
        let _ = w.write_all(b"\r\n");
    }
}

/// A RESP error line; CR and LF, which would end it early, become spaces.
pub(crate) fn error_reply(message: &str) -> Bytes {
    let clean: String = message
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    Bytes::from(format!("-ERR {clean}\r\n"))
}

#[cfg(test)]
mod tests;
