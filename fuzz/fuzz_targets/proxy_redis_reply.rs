//! The proxy's reply scanner (RESP2 and RESP3) on arbitrary bytes, fed in
//! pieces: it must never panic or consume bytes it was not given, and the
//! replies it finds must not depend on how the bytes were split.
#![no_main]

mod pieces;

use libfuzzer_sys::fuzz_target;
use sluice_proxy::redis::resp::ReplyScanner;

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

fuzz_target!(|data: &[u8]| pieces::same_whole_and_in_pieces(data, scan));
