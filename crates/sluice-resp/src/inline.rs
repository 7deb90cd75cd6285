//! Inline commands: a line of words, what `telnet` or `redis-cli` in a
//! pipe sends, split as Redis's `sdssplitargs` splits them, so that a line
//! Redis would refuse with "unbalanced quotes" is refused here too (and
//! never reaches a connection other clients share). Blanks separate
//! arguments; a double-quoted part may hold escapes (`\"`, `\n`, `\x41`,
//! ...), a single-quoted part only `\'`; a closing quote must end its
//! argument.
//!
//! One walk serves both readers of a line: a relay, which forwards the
//! line as it came and wants where each argument is, and a server, which
//! wants each argument's bytes with its quotes dropped and its escapes
//! resolved.

use std::ops::Range;

use crate::error::ProtocolError;

/// What splitting does with each argument of a line.
pub(crate) trait Words {
    /// Bytes of the argument being split, quotes dropped and escapes
    /// resolved; an argument comes in as many pieces as it has parts.
    fn bytes(&mut self, _bytes: &[u8]) {}

    /// The argument ends. `raw` is where it is in the line, without its
    /// quotes when it is quoted whole; its escapes are left as they are.
    fn end(&mut self, raw: Range<usize>);
}

/// Where each argument is: what a relay needs.
impl Words for Vec<Range<usize>> {
    fn end(&mut self, raw: Range<usize>) {
        self.push(raw);
    }
}

/// Each argument's bytes, as Redis reads them: what a server needs.
#[derive(Default)]
pub(crate) struct Resolved {
    pub args: Vec<Vec<u8>>,
    word: Vec<u8>,
}

impl Words for Resolved {
    fn bytes(&mut self, bytes: &[u8]) {
        self.word.extend_from_slice(bytes);
    }

    fn end(&mut self, _raw: Range<usize>) {
        self.args.push(std::mem::take(&mut self.word));
    }
}

/// Splits `text` into at most `max_args` arguments, handing each to `words`.
pub(crate) fn split(text: &[u8], max_args: usize, words: &mut impl Words) -> Result<(), ProtocolError> {
    let blank = |b: &u8| b.is_ascii_whitespace();
    let mut i = 0;
    let mut count = 0;
    loop {
        while text.get(i).is_some_and(blank) {
            i += 1;
        }
        if i == text.len() {
            return Ok(());
        }
        if count == max_args {
            return Err(ProtocolError::TooManyArgs(max_args));
        }
        let start = i;
        let mut raw = None;
        while let Some(&b) = text.get(i) {
            match b {
                b'"' | b'\'' => {
                    let close = quoted(text, i, words)?;
                    // A quote that opens the argument and closes it (what
                    // else may follow a closing quote fails below).
                    if i == start {
                        raw = Some(start + 1..close);
                    }
                    i = close + 1;
                    if text.get(i).is_some_and(|b| !blank(b)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                }
                b if blank(&b) => break,
                _ => {
                    let end = text[i..]
                        .iter()
                        .position(|b| blank(b) || matches!(b, b'"' | b'\''))
                        .map_or(text.len(), |n| i + n);
                    words.bytes(&text[i..end]);
                    i = end;
                }
            }
        }
        words.end(raw.unwrap_or(start..i));
        count += 1;
    }
}

/// Where the quote opened at `open` closes, handing `words` what is
/// between with its escapes resolved: inside double quotes `\xHH`, `\n`,
/// `\r`, `\t`, `\b`, `\a`, and a backslash before any other byte stands
/// for that byte; inside single quotes only `\'`.
fn quoted(text: &[u8], open: usize, words: &mut impl Words) -> Result<usize, ProtocolError> {
    let quote = text[open];
    let mut from = open + 1;
    let mut i = from;
    while let Some(&b) = text.get(i) {
        if b == quote {
            words.bytes(&text[from..i]);
            return Ok(i);
        }
        let escape = match (quote, b, text.get(i + 1)) {
            (b'"', b'\\', Some(&next)) => Some(escaped(next, text.get(i + 2..i + 4))),
            (b'\'', b'\\', Some(b'\'')) => Some((b'\'', 2)),
            _ => None,
        };
        match escape {
            Some((byte, len)) => {
                words.bytes(&text[from..i]);
                words.bytes(&[byte]);
                i += len;
                from = i;
            }
            None => i += 1,
        }
    }
    Err(ProtocolError::UnbalancedQuotes)
}

/// What a backslash and `next` stand for inside double quotes (`hex`: the
/// two bytes after `next`, if any, for `\xHH`), and how many bytes the
/// escape takes.
fn escaped(next: u8, hex: Option<&[u8]>) -> (u8, usize) {
    let digit = |b: u8| char::from(b).to_digit(16);
    if let (b'x', Some(&[high, low])) = (next, hex) {
        if let (Some(high), Some(low)) = (digit(high), digit(low)) {
            return ((high * 16 + low) as u8, 4);
        }
    }
    let byte = match next {
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'b' => 0x08,
        b'a' => 0x07,
        other => other,
    };
    (byte, 2)
}
