//! The proxy's client-command framer on arbitrary bytes, fed in pieces: it
//! must never panic, and framing that resumes across reads must find the
//! same commands, with the same arguments, as framing the whole buffer.
#![no_main]

mod pieces;

use libfuzzer_sys::fuzz_target;
use sluice_proxy::redis::resp::CommandParser;

/// Commands framed from `buf`, growing the visible prefix `step` bytes at a
/// time: each command's length and argument ranges, then the error, if any.
fn frame(buf: &[u8], step: usize) -> (Vec<(usize, Vec<std::ops::Range<usize>>)>, Option<String>) {
    let mut parser = CommandParser::default();
    let mut commands = Vec::new();
    let mut start = 0;
    let mut seen = step.min(buf.len());
    loop {
        match parser.parse(&buf[start..start + seen]) {
            Ok(Some(len)) => {
                assert!(len > 0 && len <= seen, "framed {len} of {seen} bytes");
                commands.push((len, parser.args().to_vec()));
                start += len;
                seen = step.min(buf.len() - start);
            }
            Ok(None) if start + seen == buf.len() => return (commands, None),
            Ok(None) => seen = (seen + step).min(buf.len() - start),
            Err(e) => return (commands, Some(format!("{e:?}"))),
        }
    }
}

fuzz_target!(|data: &[u8]| pieces::same_whole_and_in_pieces(data, frame));
