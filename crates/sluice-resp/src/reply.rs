//! Replies as values: [`Reply`], what `sluice serve` and the router answer
//! with and what the router and the bench drivers read, in RESP2 or (after
//! `HELLO 3`) RESP3.

use bytes::Bytes;

use crate::error::ProtocolError;
use crate::limits::Limits;
use crate::scan::reply_len;
use crate::wire::{self, length, line, Ending};

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
    /// The null array (`*-1` in RESP2; RESP3 has one null, `_`): EXEC's
    /// reply when a watched key was written, kept apart from the null bulk
    /// string because RESP2 clients may tell them apart.
    NullArray,
    /// Field-value pairs: a map in RESP3, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// A floating-point number as the server writes it out (Redis: `%.17g`,
    /// `inf`, `-inf`): a double in RESP3, a bulk string in RESP2.
    Double(Vec<u8>),
    /// Distinct elements in no particular order (SMEMBERS, SINTER): a set
    /// in RESP3, an array in RESP2.
    Set(Vec<Reply>),
    /// Out-of-band data (a published message, SUBSCRIBE's confirmation): a
    /// push in RESP3, an array in RESP2.
    Push(Vec<Reply>),
    /// Several replies in a row, as one command gives them (SUBSCRIBE a b:
    /// a confirmation each). Not a RESP type: its replies are written one
    /// after another.
    Many(Vec<Reply>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    pub fn error(message: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {message}"))
    }

    /// In RESP2, the protocol of every connection until it says `HELLO 3`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_as(out, false);
    }

    /// In RESP3 if `resp3`: a null is `_` and a map `%`; otherwise RESP2.
    pub fn encode_as(&self, out: &mut Vec<u8>, resp3: bool) {
        match self {
            Reply::Simple(s) => line_reply(out, b'+', s),
            Reply::Error(e) => line_reply(out, b'-', e),
            Reply::Integer(n) => wire::header(out, b':', *n),
            Reply::Bulk(None) | Reply::NullArray if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Bulk(None) => out.extend_from_slice(b"$-1\r\n"),
            Reply::Bulk(Some(b)) => wire::bulk(out, b),
            Reply::Double(text) if resp3 => {
                out.push(b',');
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Double(text) => wire::bulk(out, text),
            Reply::Set(items) if resp3 => {
                wire::header(out, b'~', items.len());
                for i in items {
                    i.encode_as(out, resp3);
                }
            }
            Reply::Push(items) if resp3 => {
                wire::header(out, b'>', items.len());
                for i in items {
                    i.encode_as(out, resp3);
                }
            }
            Reply::Many(replies) => {
                for r in replies {
                    r.encode_as(out, resp3);
                }
            }
            Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => {
                wire::header(out, b'*', items.len());
                for i in items {
                    i.encode_as(out, resp3);
                }
            }
            Reply::Map(pairs) if resp3 => {
                wire::header(out, b'%', pairs.len());
                for (k, v) in pairs {
                    k.encode_as(out, resp3);
                    v.encode_as(out, resp3);
                }
            }
            Reply::Map(pairs) => {
                wire::header(out, b'*', 2 * pairs.len());
                for (k, v) in pairs {
                    k.encode_as(out, resp3);
                    v.encode_as(out, resp3);
                }
            }
        }
    }
}

/// A one-line reply; CR and LF would end it early, so they become spaces.
fn line_reply(out: &mut Vec<u8>, tag: u8, text: &str) {
    out.push(tag);
    out.extend(text.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    out.extend_from_slice(b"\r\n");
}

/// `-ERR message`, as a relay answers a client itself.
pub fn error_reply(message: &str) -> Bytes {
    let mut out = Vec::new();
    Reply::error(message).encode(&mut out);
    out.into()
}

/// Replies nested deeper than this are refused by [`parse_reply`]: it
/// builds them by recursion, and no reply Sluice reads nests more than a
/// few levels.
const MAX_REPLY_DEPTH: usize = 64;

/// One reply from the front of `buf`: the reply and the bytes it took, or
/// `None` if `buf` does not yet hold all of it. `limits` bounds its bulk
/// strings (`max_bulk`), the elements of each array (`max_args`) and its
/// lines (`max_inline`). RESP2's null array (`*-1`) reads as
/// [`Reply::NullArray`], RESP3's null (`_`) as a null bulk, its map
/// (`%`) as [`Reply::Map`], its set (`~`) as [`Reply::Set`], its push (`>`)
/// as [`Reply::Push`] and its double (`,`) as [`Reply::Double`]; other
/// RESP3 types are refused, as Sluice never asks a server for them.
pub fn parse_reply(buf: &[u8], limits: &Limits) -> Result<Option<(Reply, usize)>, ProtocolError> {
    // A large reply arrives in many reads: the scanner finds it whole first
    // without copying anything, and its bytes are copied once.
    if reply_len(buf, limits)?.is_none() {
        return Ok(None);
    }
    read(buf, limits, 0)
}

/// The reply at the front of `buf` and the bytes it takes; `None` if `buf`
/// ends before it does, which cannot happen once the scanner has found it
/// whole.
fn read(buf: &[u8], limits: &Limits, depth: usize) -> Result<Option<(Reply, usize)>, ProtocolError> {
    if depth > MAX_REPLY_DEPTH {
        return Err(ProtocolError::TooDeep(MAX_REPLY_DEPTH));
    }
    let Some((text, next)) = line(buf, limits.max_inline, Ending::Crlf, "reply")? else {
        return Ok(None);
    };
    let (&tag, text) = text.split_first().ok_or(ProtocolError::EmptyLine)?;
    let string = || String::from_utf8_lossy(text).into_owned();
    let reply = match tag {
        b'+' => Reply::Simple(string()),
        b'-' => Reply::Error(string()),
        b':' => match std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()) {
            Some(n) => Reply::Integer(n),
            None => return Err(ProtocolError::BadInteger(text.to_vec())),
        },
        b'_' => Reply::Bulk(None),
        b',' => Reply::Double(text.to_vec()),
        b'$' => {
            let Some(len) = length(text, "bulk", limits.max_bulk)? else {
                return Ok(Some((Reply::Bulk(None), next)));
            };
            let Some(payload) = buf.get(next..next + len) else {
                return Ok(None);
            };
            return Ok(Some((Reply::Bulk(Some(payload.to_vec())), next + len + 2)));
        }
        b'*' | b'%' | b'~' | b'>' => {
            let what = match tag {
                b'%' => "map",
                b'~' => "set",
                b'>' => "push",
                _ => "array",
            };
            let Some(count) = length(text, what, limits.max_args)? else {
                return Ok(Some((Reply::NullArray, next)));
            };
            let per = if tag == b'%' { 2 } else { 1 };
            // Not more at once: a count costs nothing to send.
            let mut items = Vec::with_capacity((count * per).min(1024));
            let mut at = next;
            for _ in 0..count * per {
                let Some((item, len)) = read(&buf[at..], limits, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                at += len;
            }
            let reply = match tag {
                b'%' => {
                    let mut items = items.into_iter();
                    Reply::Map(std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect())
                }
                b'~' => Reply::Set(items),
                b'>' => Reply::Push(items),
                _ => Reply::Array(items),
            };
            return Ok(Some((reply, at)));
        }
        b'!' | b'=' | b'|' | b'#' | b'(' => return Err(ProtocolError::Unsupported(tag)),
        other => return Err(ProtocolError::UnknownType(other)),
    };
    Ok(Some((reply, next)))
}

#[cfg(test)]
mod tests;
