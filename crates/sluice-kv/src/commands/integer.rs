//! Integers in commands' arguments, read as Redis reads them, and the
//! error Redis gives for one that is not.

use crate::resp::Reply;

pub(super) fn not_integer() -> Reply {
    Reply::error("value is not an integer or out of range")
}

/// An integer as Redis's `string2ll` reads one: no sign but `-`, no
/// leading zeros or spaces, within `i64`.
pub(super) fn parse_i64(text: &[u8]) -> Option<i64> {
    if text == b"0" {
        return Some(0);
    }
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if !matches!(digits.first(), Some(b'1'..=b'9')) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}
