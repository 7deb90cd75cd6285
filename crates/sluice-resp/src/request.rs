//! Requests: what a client sends, an array of bulk strings (what every
//! client library sends) or an inline command (what `telnet` and
//! `redis-cli` in a pipe may send). One framer reads both, with Redis's
//! limits ([`Limits`]), for two kinds of reader:
//!
//! - [`CommandParser`], for a relay: where a command begins and ends and
//!   where its arguments are, as ranges over a buffer that grows between
//!   calls; framing resumes where the last call stopped, so a command
//!   arriving in many reads (a 512 MiB bulk, a million arguments) is never
//!   walked again from its start, and nothing is copied or, once warm,
//!   allocated.
//! - [`parse`], for a server: a whole request's arguments, owned. A request
//!   in a buffer of up to 64 KiB is parsed in one pass, its arguments
//!   copied as they are found: copying a request that turns out incomplete
//!   costs less than walking every request twice. A larger one arrives in
//!   many reads: it is found whole first without copying anything, and its
//!   arguments are copied once.

use std::ops::Range;

use bytes::BufMut;

use crate::error::ProtocolError;
use crate::inline::{self, Resolved, Words};
use crate::limits::{Limits, MAX_HEADER_LINE};
use crate::wire::{self, line, number, Ending};

/// A request's arguments and the bytes it took from the buffer.
pub type Request = (Vec<Vec<u8>>, usize);

/// Buffers up to this size are parsed in one pass (see [`parse`]).
const ONE_PASS: usize = 64 << 10;

/// One request from the front of `buf`: its arguments and the bytes it
/// took, or `None` if `buf` does not yet hold all of it. A blank inline
/// line or an empty array is a request with no arguments, which Redis
/// ignores without a reply; an inline command's arguments have their
/// quotes dropped and their escapes resolved. Each call starts afresh; a
/// server reading a connection uses a [`RequestParser`], which resumes.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
    RequestParser::default().parse(buf, limits)
}

/// [`parse`] for a server reading one connection. A request larger than
/// one pass is found whole across calls, each resuming where the previous
/// one stopped, and then copied once: a request of a million arguments
/// arriving in a thousand reads is walked twice, not a thousand times.
///
/// ```
/// use sluice_resp::{encode_command, Limits, RequestParser};
///
/// let keys: Vec<String> = (0..20_000).map(|i| format!("key{i}")).collect();
/// let mut wire = Vec::new();
/// encode_command(&[&["DEL".to_string()][..], &keys].concat(), &mut wire);
/// let mut parser = RequestParser::default();
/// for end in (4096..wire.len()).step_by(4096) {
///     assert_eq!(parser.parse(&wire[..end], &Limits::default()).unwrap(), None);
/// }
/// let (args, used) = parser.parse(&wire, &Limits::default()).unwrap().unwrap();
/// assert_eq!((args.len(), used), (20_001, wire.len()));
/// ```
#[derive(Debug, Default)]
pub struct RequestParser {
    /// How far the request at the front has been found.
    progress: Progress,
}

impl RequestParser {
    /// As [`parse`]; after `Ok(None)` the next call must pass the same
    /// bytes and more.
    pub fn parse(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
        match buf.first() {
            None => Ok(None),
            Some(b'*') => {
                if buf.len() > ONE_PASS || self.progress.expected.is_some() {
                    let framed = frame_array(buf, &mut self.progress, limits, &mut Skip);
                    if !matches!(framed, Ok(None)) {
                        self.progress = Progress::default();
                    }
                    if framed?.is_none() {
                        return Ok(None);
                    }
                }
                let mut args = Vec::new();
                Ok(frame_array(buf, &mut Progress::default(), limits, &mut args)?.map(|used| (args, used)))
            }
            Some(_) => {
                let mut words = Resolved::default();
                Ok(frame_inline(buf, limits, &mut words)?.map(|used| (words.args, used)))
            }
        }
    }
}

/// Frames client commands one at a time, resuming where the previous call
/// stopped when a command was incomplete. Argument ranges are kept in a
/// vector reused across commands, so framing allocates nothing once warm.
///
/// ```
/// use sluice_resp::{CommandParser, Limits};
///
/// let wire = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nSET k \"a b\"\r\n";
/// let mut parser = CommandParser::new(Limits::default());
/// assert_eq!(parser.parse(&wire[..10]).unwrap(), None, "not whole yet");
/// assert_eq!(parser.parse(wire).unwrap(), Some(20), "resumed at byte 10");
/// assert_eq!(&wire[parser.args()[1].clone()], b"k");
/// assert_eq!(parser.parse(&wire[20..]).unwrap(), Some(13));
/// let args: Vec<&[u8]> = parser.args().iter().map(|r| &wire[20..][r.clone()]).collect();
/// assert_eq!(args, [&b"SET"[..], b"k", b"a b"]);
/// ```
#[derive(Debug)]
pub struct CommandParser {
    args: Vec<Range<usize>>,
    progress: Progress,
    /// The previous call completed a command; the next one starts afresh.
    done: bool,
    limits: Limits,
}

impl Default for CommandParser {
    fn default() -> Self {
        CommandParser::new(Limits::default())
    }
}

impl CommandParser {
    /// A parser holding commands to `limits`.
    pub fn new(limits: Limits) -> CommandParser {
        CommandParser {
            args: Vec::new(),
            progress: Progress::default(),
            done: false,
            limits,
        }
    }

    /// Frames the command at the start of `buf`: `Ok(Some(len))` once all of
    /// its `len` bytes are there, `Ok(None)` while more are needed, and then
    /// the next call must pass the same bytes and more. A blank inline line
    /// or an empty array is a command with no arguments, which Redis
    /// ignores without a reply. An inline argument's range covers its raw
    /// bytes, without its outer quotes when it is quoted whole: escapes are
    /// left for the server to resolve, since a relay forwards the line as
    /// it came.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        if self.done {
            self.args.clear();
            self.progress = Progress::default();
            self.done = false;
        }
        let framed = match buf.first() {
            None => return Ok(None),
            Some(b'*') => frame_array(buf, &mut self.progress, &self.limits, &mut self.args)?,
            Some(_) => frame_inline(buf, &self.limits, &mut self.args)?,
        };
        self.done = framed.is_some();
        Ok(framed)
    }

    /// Whether Redis's bounds for a client that has not authenticated (and
    /// must) apply from the next call on ([`Limits::before_auth`]).
    pub fn set_before_auth(&mut self, before_auth: bool) {
        self.limits.unauthenticated = before_auth;
    }

    /// The arguments of the command just framed, as ranges of its bytes.
    pub fn args(&self) -> &[Range<usize>] {
        &self.args
    }
}

/// Appends `args` as a RESP array of bulk strings, as clients send
/// commands, to a `Vec<u8>` or a `BytesMut`.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut impl BufMut) {
    wire::header(out, b'*', args.len());
    for arg in args {
        wire::bulk(out, arg.as_ref());
    }
}

/// Where framing an array request stands: what a call that ran out of
/// bytes resumes from.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Arguments the header announced; `None` before the header.
    expected: Option<usize>,
    /// Arguments framed so far.
    framed: usize,
    /// Where framing resumes, from the start of the request.
    pos: usize,
}

/// What framing does with the bulk strings of an array request.
trait Bulks {
    /// The header announced `count` of them.
    fn announced(&mut self, _count: usize) {}

    /// One bulk string: its payload's range in `request`.
    fn bulk(&mut self, request: &[u8], range: Range<usize>);
}

/// Where each argument is.
impl Bulks for Vec<Range<usize>> {
    fn bulk(&mut self, _request: &[u8], range: Range<usize>) {
        self.push(range);
    }
}

/// Each argument's bytes.
impl Bulks for Vec<Vec<u8>> {
    fn announced(&mut self, count: usize) {
        // Made with its capacity, not reserved: it is the empty vector
        // `parse` starts with, and growing one costs a small request more
        // than allocating it. Not more at once: a count costs nothing to
        // send.
        *self = Vec::with_capacity(count.min(1024));
    }

    #[inline]
    fn bulk(&mut self, request: &[u8], range: Range<usize>) {
        self.push(request[range].to_vec());
    }
}

/// Nothing: only where the request ends is found.
struct Skip;

impl Bulks for Skip {
    fn bulk(&mut self, _request: &[u8], _range: Range<usize>) {}
}

/// Frames the array request at the start of `buf` from `progress` on,
/// handing each bulk string to `out`: the request's length once it is all
/// there.
fn frame_array(
    buf: &[u8],
    progress: &mut Progress,
    limits: &Limits,
    out: &mut impl Bulks,
) -> Result<Option<usize>, ProtocolError> {
    let expected = match progress.expected {
        Some(n) => n,
        None => {
            let Some((text, len)) = line(&buf[1..], MAX_HEADER_LINE, Ending::Crlf, "multibulk count")? else {
                return Ok(None);
            };
            let count = number(text).ok_or_else(|| ProtocolError::BadLength {
                what: "multibulk",
                text: text.to_vec(),
            })?;
            // Redis skips an array header whose count is below 1.
            let count = usize::try_from(count).unwrap_or(0);
            limits.check_args(count)?;
            out.announced(count);
            progress.expected = Some(count);
            progress.pos = 1 + len;
            count
        }
    };
    while progress.framed < expected {
        let Some(payload) = bulk(&buf[progress.pos..], limits)? else {
            return Ok(None);
        };
        out.bulk(buf, progress.pos + payload.start..progress.pos + payload.end);
        progress.pos += payload.end + 2;
        progress.framed += 1;
    }
    Ok(Some(progress.pos))
}

/// The payload range of the bulk string at the start of `buf`, once all of
/// it and its CRLF are there.
#[inline(always)]
fn bulk(buf: &[u8], limits: &Limits) -> Result<Option<Range<usize>>, ProtocolError> {
    match buf.first() {
        None => return Ok(None),
        Some(b'$') => {}
        Some(&found) => return Err(ProtocolError::Expected { expected: '$', found }),
    }
    let Some((text, len)) = line(&buf[1..], MAX_HEADER_LINE, Ending::Crlf, "bulk length")? else {
        return Ok(None);
    };
    let Some(size) = number(text).and_then(|n| usize::try_from(n).ok()) else {
        return Err(ProtocolError::BadLength {
            what: "bulk",
            text: text.to_vec(),
        });
    };
    limits.check_bulk(size)?;
    let start = 1 + len;
    let end = start + size;
    match buf.get(end..end + 2) {
        None => Ok(None),
        Some(b"\r\n") => Ok(Some(start..end)),
        Some(_) => Err(ProtocolError::MissingCrlf),
    }
}

/// Frames the inline command at the start of `buf`, handing its arguments
/// to `words`: its length once its line has ended.
fn frame_inline(buf: &[u8], limits: &Limits, words: &mut impl Words) -> Result<Option<usize>, ProtocolError> {
    let Some((text, len)) = line(buf, limits.max_inline, Ending::Lf, "inline command")? else {
        return Ok(None);
    };
    inline::split(text, limits.max_args, words)?;
    Ok(Some(len))
}

#[cfg(test)]
mod tests;
