//! `sluice serve`'s request parser on arbitrary bytes, with small limits so
//! that they are reached: never a panic; a request framed is never longer
//! than the bytes given, its own bytes parse to the same arguments, and a
//! prefix of it is incomplete, never an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_kv::resp::{parse, Limits};

const LIMITS: Limits = Limits {
    max_args: 8,
    max_bulk: 64,
    max_inline: 128,
    unauthenticated: false,
};

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    while let Ok(Some((args, len))) = parse(buf, &LIMITS) {
        assert!(len > 0 && len <= buf.len(), "framed {len} of {} bytes", buf.len());
        assert!(args.len() <= LIMITS.max_args);
        assert_eq!(parse(&buf[..len], &LIMITS), Ok(Some((args, len))));
        for k in 0..len {
            assert_eq!(parse(&buf[..k], &LIMITS), Ok(None), "prefix {k} of {len}");
        }
        buf = &buf[len..];
    }
});
