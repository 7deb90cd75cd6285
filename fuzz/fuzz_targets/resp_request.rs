//! Requests (`sluice_resp`) on arbitrary bytes, with small limits so that
//! they are reached. The first byte picks a piece size (see `pieces.rs`);
//! the rest is what a client sent.
//!
//! - `parse`, what `sluice serve` and the router read: never a panic; a
//!   request framed is never longer than the bytes given nor has more
//!   arguments than the limit, its own bytes parse to the same arguments,
//!   and a prefix of it is incomplete, never an error. Each request is also
//!   read for a request context (`SLUICE.WITH`): never a panic, and a
//!   context found leaves a command that is the tail of the request.
//! - `CommandParser`, what the proxy frames with: framing that resumes as
//!   the bytes arrive in pieces finds the same commands, with the same
//!   arguments, and the same error, as framing the whole buffer; each
//!   command framed is at least a byte and at most the bytes seen.
//! - Both read the same: the same commands of the same lengths, an array's
//!   arguments the same bytes (an inline argument's range keeps its
//!   escapes, which `parse` resolves), the same error.
#![no_main]

mod pieces;

use libfuzzer_sys::fuzz_target;
use pieces::LIMITS;
use sluice_resp::request_context::{unwrap, MAX_TENANT_LEN};
use sluice_resp::{parse, CommandParser, ProtocolError};

/// Each command's length and, for an array, its arguments; then the error
/// the bytes end with, if any.
type Commands = (Vec<(usize, Vec<Vec<u8>>)>, Option<ProtocolError>);

/// What `parse` reads from `buf`, checking its own properties.
fn parsed(mut buf: &[u8]) -> Commands {
    let mut commands = Vec::new();
    loop {
        let (args, len) = match parse(buf, &LIMITS) {
            Ok(Some(request)) => request,
            Ok(None) => return (commands, None),
            Err(e) => return (commands, Some(e)),
        };
        assert!(len > 0 && len <= buf.len(), "framed {len} of {} bytes", buf.len());
        assert!(args.len() <= LIMITS.max_args);
        assert_eq!(parse(&buf[..len], &LIMITS), Ok(Some((args.clone(), len))));
        for k in 0..len {
            assert_eq!(parse(&buf[..k], &LIMITS), Ok(None), "prefix {k} of {len}");
        }
        if let Ok(Some(sent)) = unwrap(&args) {
            assert!(!sent.command.is_empty() && args.ends_with(sent.command));
            assert!(sent.tenant.is_none_or(|t| !t.is_empty() && t.len() <= MAX_TENANT_LEN));
        }
        commands.push((len, if buf[0] == b'*' { args } else { Vec::new() }));
        buf = &buf[len..];
    }
}

/// What `CommandParser` frames from `buf`, growing the visible prefix
/// `step` bytes at a time.
fn framed(buf: &[u8], step: usize) -> Commands {
    let mut parser = CommandParser::new(LIMITS);
    let mut commands = Vec::new();
    let mut start = 0;
    let mut seen = step.min(buf.len());
    loop {
        match parser.parse(&buf[start..start + seen]) {
            Ok(Some(len)) => {
                assert!(len > 0 && len <= seen, "framed {len} of {seen} bytes");
                let command = &buf[start..start + len];
                let args = match command[0] {
                    b'*' => parser.args().iter().map(|r| command[r.clone()].to_vec()).collect(),
                    _ => Vec::new(),
                };
                commands.push((len, args));
                start += len;
                seen = step.min(buf.len() - start);
            }
            Ok(None) if start + seen == buf.len() => return (commands, None),
            Ok(None) => seen = (seen + step).min(buf.len() - start),
            Err(e) => return (commands, Some(e)),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    pieces::same_whole_and_in_pieces(data, framed);
    if let Some((_, buf)) = data.split_first() {
        assert_eq!(parsed(buf), framed(buf, buf.len().max(1)));
    }
});
