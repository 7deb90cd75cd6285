//! Replies (`sluice_resp`) on arbitrary bytes. The first byte picks a piece
//! size (see `pieces.rs`); the rest is what a server sent.
//!
//! - `ReplyScanner`, what the proxy and the router frame with (RESP2 and
//!   RESP3, relay limits): never a panic or a byte consumed that it was not
//!   given, and the replies it finds do not depend on how the bytes were
//!   split.
//! - `parse_reply`, what the router and the bench drivers read, with small
//!   limits so that they are reached: never a panic; a reply framed is
//!   never longer than the bytes given and is as long as `reply_len` says,
//!   its own bytes parse to the same reply, a prefix of it is incomplete,
//!   never an error, and the reply encoded again (in RESP3) parses back to
//!   itself, unless a status line holds a lone CR or LF, which encoding
//!   turns into a space, or it holds RESP2's null array, which RESP3
//!   writes as its one null.
#![no_main]

mod pieces;

use libfuzzer_sys::fuzz_target;
use pieces::LIMITS;
use sluice_resp::{parse_reply, reply_len, Limits, Reply, ReplyScanner};

/// Replies (their end offset and type byte) scanned from `buf` as it
/// arrives `step` bytes at a time, then the error, if any.
fn scan(buf: &[u8], step: usize) -> (Vec<(usize, u8)>, Option<String>) {
    let mut scanner = ReplyScanner::default();
    let mut replies = Vec::new();
    let (mut pos, mut end) = (0, step.min(buf.len()));
    loop {
        match scanner.advance(&buf[pos..end]) {
            Ok((used, reply)) => {
                assert!(used <= end - pos, "consumed {used} of {} bytes", end - pos);
                pos += used;
                if let Some(r) = reply {
                    replies.push((pos, r.kind));
                } else if end == buf.len() {
                    return (replies, None);
                } else {
                    end = (end + step).min(buf.len());
                }
            }
            Err(e) => return (replies, Some(format!("{e:?}"))),
        }
    }
}

/// Whether `reply` encodes in RESP3 to what parses back to it: no status
/// or error line holds a CR or LF, and no null array is inside.
fn round_trips(reply: &Reply) -> bool {
    match reply {
        Reply::Simple(s) | Reply::Error(s) => !s.contains(['\r', '\n']),
        Reply::Double(text) => !text.contains(&b'\r') && !text.contains(&b'\n'),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => items.iter().all(round_trips),
        Reply::Map(pairs) => pairs.iter().all(|(k, v)| round_trips(k) && round_trips(v)),
        Reply::Integer(_) | Reply::Bulk(_) => true,
        // Never parsed: several replies are read one by one.
        Reply::NullArray | Reply::Many(_) => false,
    }
}

fuzz_target!(|data: &[u8]| {
    pieces::same_whole_and_in_pieces(data, scan);
    let Some((_, mut buf)) = data.split_first() else { return };
    while let Ok(Some((reply, len))) = parse_reply(buf, &LIMITS) {
        assert!(len > 0 && len <= buf.len(), "framed {len} of {} bytes", buf.len());
        assert_eq!(reply_len(buf, &LIMITS), Ok(Some(len)));
        assert_eq!(parse_reply(&buf[..len], &LIMITS), Ok(Some((reply.clone(), len))));
        for k in 0..len {
            assert_eq!(parse_reply(&buf[..k], &LIMITS), Ok(None), "prefix {k} of {len}");
        }
        if round_trips(&reply) {
            let mut again = Vec::new();
            reply.encode_as(&mut again, true);
            let back = parse_reply(&again, &Limits::default()).expect("an encoded reply parses");
            assert_eq!(back.map(|(r, _)| r), Some(reply));
        }
        buf = &buf[len..];
    }
});
