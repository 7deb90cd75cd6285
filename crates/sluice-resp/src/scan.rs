//! Replies as a relay frames them: where each reply a server sends ends,
//! without building it. [`ReplyScanner`] takes every RESP2 type and the
//! RESP3 types a server sends after `HELLO 3` (map, set, double, boolean,
//! null, big number, verbatim string, bulk error, push, attribute). Redis 7
//! sends RESP3 types only to a client that asked for them, so the scanner
//! accepts them at any time rather than tracking the protocol version.
//!
//! The scanner keeps its state between calls, so each byte is looked at
//! once however a reply is split across reads (a reply of a million
//! elements is never walked again from its start), and bulk payloads are
//! skipped without being buffered. Nesting has no fixed limit (Redis itself
//! sends replies thousands of levels deep, from a script returning a
//! recursive table): each open level costs 16 bytes and takes at least 4
//! bytes of the reply to open. It is the one place that decides where a
//! reply ends: [`reply_len`], [`array_items`] and
//! [`parse_reply`](crate::parse_reply) ask it.

use std::ops::Range;

use crate::error::ProtocolError;
use crate::limits::Limits;
use crate::wire::{length, line, Ending};

/// One complete reply, as the scanner saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScannedReply {
    /// The type byte of the top-level value (after any attribute).
    pub kind: u8,
}

impl ScannedReply {
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

/// Frames server replies as they stream in.
///
/// ```
/// use sluice_resp::ReplyScanner;
///
/// let wire = b"*2\r\n$5\r\nhello\r\n:1\r\n+OK\r\n";
/// let mut scanner = ReplyScanner::default();
/// assert_eq!(scanner.advance(&wire[..6]).unwrap(), (4, None), "an incomplete line is left");
/// let (used, reply) = scanner.advance(&wire[4..]).unwrap();
/// assert_eq!((4 + used, reply.map(|r| r.kind)), (19, Some(b'*')));
/// assert!(scanner.is_idle());
/// ```
#[derive(Debug)]
pub struct ReplyScanner {
    levels: Vec<Level>,
    /// Payload bytes (with the CRLF) of a bulk value still to pass.
    skip: u64,
    kind: Option<u8>,
    limits: Limits,
}

impl Default for ReplyScanner {
    /// A scanner for a relay: [`Limits::relay`].
    fn default() -> Self {
        ReplyScanner::with_limits(Limits::relay())
    }
}

impl ReplyScanner {
    /// A scanner that holds replies to `limits`: bulk strings to
    /// `max_bulk`, aggregates to `max_args` elements, lines to
    /// `max_inline` bytes.
    pub fn with_limits(limits: Limits) -> ReplyScanner {
        ReplyScanner {
            levels: Vec::new(),
            skip: 0,
            kind: None,
            limits,
        }
    }

    /// Between replies: nothing of the next one has been seen.
    pub fn is_idle(&self) -> bool {
        self.levels.is_empty() && self.skip == 0 && self.kind.is_none()
    }

    /// Scans `buf` until a reply completes or the bytes run out. Returns how
    /// many bytes were consumed (an incomplete line at the end is left for
    /// the next call, which must start with it) and the reply, if one
    /// completed at that point.
    pub fn advance(&mut self, buf: &[u8]) -> Result<(usize, Option<ScannedReply>), ProtocolError> {
        let mut pos = 0;
        loop {
            if self.skip > 0 {
                let n = self.skip.min((buf.len() - pos) as u64) as usize;
                // The last two bytes to pass are the bulk's CRLF, checked as
                // they pass, whichever read they come in.
                let payload = (self.skip.saturating_sub(2) as usize).min(n);
                let crlf = &b"\r\n"[2 - self.skip.min(2) as usize..];
                if !crlf.starts_with(&buf[pos + payload..pos + n]) {
                    return Err(ProtocolError::MissingCrlf);
                }
                pos += n;
                self.skip -= n as u64;
                if self.skip > 0 {
                    return Ok((pos, None));
                }
                if let Some(reply) = self.value_done() {
                    return Ok((pos, Some(reply)));
                }
                continue;
            }
            let Some((text, len)) = line(&buf[pos..], self.limits.max_inline, Ending::Crlf, "reply")? else {
                return Ok((pos, None));
            };
            pos += len;
            if let Some(reply) = self.header(text)? {
                return Ok((pos, Some(reply)));
            }
        }
    }

    /// Takes in one header line; returns the reply if it completed one.
    fn header(&mut self, text: &[u8]) -> Result<Option<ScannedReply>, ProtocolError> {
        let (&kind, rest) = text.split_first().ok_or(ProtocolError::EmptyLine)?;
        if self.levels.is_empty() && kind != b'|' {
            self.kind = Some(kind);
        }
        let elements = |what| length(rest, what, self.limits.max_args);
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(self.value_done()),
            b'$' | b'!' | b'=' => match length(rest, "bulk", self.limits.max_bulk)? {
                Some(len) => {
                    self.skip = len as u64 + 2;
                    Ok(None)
                }
                None => Ok(self.value_done()),
            },
            b'*' | b'~' | b'>' => {
                let len = elements("array")?;
                self.aggregate(len, 1, false)
            }
            b'%' => {
                let len = elements("map")?;
                self.aggregate(len, 2, false)
            }
            b'|' => {
                let len = elements("attribute")?;
                self.aggregate(len, 2, true)
            }
            other => Err(ProtocolError::UnknownType(other)),
        }
    }

    fn aggregate(
        &mut self,
        len: Option<usize>,
        per: u64,
        attribute: bool,
    ) -> Result<Option<ScannedReply>, ProtocolError> {
        match len {
            Some(n) if n > 0 => {
                self.levels.push(Level {
                    remaining: n as u64 * per,
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
    fn value_done(&mut self) -> Option<ScannedReply> {
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
        self.kind.take().map(|kind| ScannedReply { kind })
    }
}

/// The length of the reply at the front of `buf`, or `None` if `buf` does
/// not yet hold all of it: what a relay needs to pass a reply on as it
/// came, without building it. It scans from the start at each call; a
/// relay reading a long reply in many reads keeps a [`ReplyScanner`].
pub fn reply_len(buf: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
    let (used, reply) = ReplyScanner::with_limits(*limits).advance(buf)?;
    Ok(reply.map(|_| used))
}

/// The byte ranges of the elements of the array reply `buf` holds whole,
/// or `None` if it is not an array (or a null one): what a relay needs to
/// splice elements of several replies into one without building them.
pub fn array_items(buf: &[u8], limits: &Limits) -> Result<Option<Vec<Range<usize>>>, ProtocolError> {
    if buf.first() != Some(&b'*') {
        return Ok(None);
    }
    let Some((text, mut at)) = line(buf, limits.max_inline, Ending::Crlf, "reply")? else {
        return Err(ProtocolError::IncompleteArray);
    };
    let Some(count) = length(&text[1..], "array", limits.max_args)? else {
        return Ok(None);
    };
    // Not more at once: a count costs nothing to send.
    let mut items = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let Some(len) = reply_len(&buf[at..], limits)? else {
            return Err(ProtocolError::IncompleteArray);
        };
        items.push(at..at + len);
        at += len;
    }
    Ok(Some(items))
}

#[cfg(test)]
mod tests;
