//! The reply parser shared by the router and the bench drivers
//! (`sluice_resp::parse_reply`) on arbitrary bytes, with small limits so
//! that they are reached: never a panic; a reply framed is never longer
//! than the bytes given, its own bytes parse to the same reply, a prefix
//! of it is incomplete, never an error, and the reply encoded again parses
//! back to itself (unless a status line holds a lone CR or LF, which
//! encoding turns into a space).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_resp::{parse_reply, Limits, Reply};

const LIMITS: Limits = Limits {
    max_args: 8,
    max_bulk: 64,
    max_inline: 128,
    unauthenticated: false,
};

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    while let Ok(Some((reply, len))) = parse_reply(buf, &LIMITS) {
        assert!(len > 0 && len <= buf.len(), "framed {len} of {} bytes", buf.len());
        assert_eq!(parse_reply(&buf[..len], &LIMITS), Ok(Some((reply.clone(), len))));
        for k in 0..len {
            assert_eq!(parse_reply(&buf[..k], &LIMITS), Ok(None), "prefix {k} of {len}");
        }
        if plain(&reply) {
            let mut again = Vec::new();
            reply.encode_as(&mut again, true);
            let back = parse_reply(&again, &Limits::default()).expect("an encoded reply parses");
            assert_eq!(back.map(|(r, _)| r), Some(reply));
        }
        buf = &buf[len..];
    }
});

/// No status or error line holds a CR or LF.
fn plain(reply: &Reply) -> bool {
    match reply {
        Reply::Simple(s) | Reply::Error(s) => !s.contains(['\r', '\n']),
        Reply::Double(text) => !text.contains(&b'\r') && !text.contains(&b'\n'),
        Reply::Array(items) => items.iter().all(plain),
        Reply::Map(pairs) => pairs.iter().all(|(k, v)| plain(k) && plain(v)),
        Reply::Integer(_) | Reply::Bulk(_) => true,
    }
}
