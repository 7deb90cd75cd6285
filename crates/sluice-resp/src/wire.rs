//! What every RESP message is made of: lines (ended by CRLF, an inline
//! command's by LF), lengths in decimal, and the same written out. Requests,
//! the reply scanner and the reply reader all read with these, so that a
//! line or a length means the same to each.

use bytes::BufMut;

use crate::error::ProtocolError;

/// How a line ends: headers and replies with CRLF; inline commands, as
/// Redis reads them, at the first LF, a CR before it dropped (what `nc` or a
/// shell's `echo` send).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Crlf,
    Lf,
}

/// The line at the start of `buf` without its ending, and the bytes it
/// takes with its ending; `None` while the ending has not arrived. In a
/// CRLF line a bare LF is part of the line (and refused by whoever reads a
/// number from it). A line longer than `max` bytes is an error, `what`
/// naming it, judged the same whether its ending has arrived or not, so
/// that how the bytes were split never decides between a message and an
/// error; no more than `max + 2` bytes are looked at.
#[inline]
pub(crate) fn line<'a>(
    buf: &'a [u8],
    max: usize,
    ending: Ending,
    what: &'static str,
) -> Result<Option<(&'a [u8], usize)>, ProtocolError> {
    let window = &buf[..buf.len().min(max.saturating_add(2))];
    let end = match ending {
        Ending::Crlf => memchr::memchr_iter(b'\n', window)
            .find(|&n| n > 0 && window[n - 1] == b'\r')
            .map(|n| (n - 1, n + 1)),
        Ending::Lf => memchr::memchr(b'\n', window).map(|n| match n {
            0 => (0, 1),
            n if window[n - 1] == b'\r' => (n - 1, n + 1),
            n => (n, n + 1),
        }),
    };
    let too_long = match end {
        Some((len, next)) if len <= max => return Ok(Some((&buf[..len], next))),
        Some(_) => true,
        // A CR at the end may be the start of the ending.
        None => window.len() > max && window[max..] != *b"\r",
    };
    if too_long {
        return Err(ProtocolError::LineTooLong { what, limit: max });
    }
    Ok(None)
}

/// A number in decimal with an optional minus sign, as Redis reads a
/// length (no plus sign, no blanks).
#[inline]
pub(crate) fn number(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i64::from(digit))?;
    }
    Some(if negative { -n } else { n })
}

/// A length in a reply: `None` for -1 (a null), otherwise at most `limit`.
pub(crate) fn length(text: &[u8], what: &'static str, limit: usize) -> Result<Option<usize>, ProtocolError> {
    match number(text) {
        Some(-1) => Ok(None),
        Some(n) if n >= 0 && n as u64 > limit as u64 => Err(ProtocolError::TooLong {
            what,
            len: n as u64,
            limit: limit as u64,
        }),
        Some(n) if n >= 0 => Ok(Some(n as usize)),
        _ => Err(ProtocolError::BadLength {
            what,
            text: text.to_vec(),
        }),
    }
}

/// `tag`, `n` in decimal, CRLF, written in place: a relay writes several a
/// command, and formatting each through `format!` would show.
pub(crate) fn header(out: &mut impl BufMut, tag: u8, n: impl itoa::Integer) {
    out.put_u8(tag);
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
    out.put_slice(b"\r\n");
}

/// A bulk string.
pub(crate) fn bulk(out: &mut impl BufMut, bytes: &[u8]) {
    header(out, b'$', bytes.len());
    out.put_slice(bytes);
    out.put_slice(b"\r\n");
}
