//! `sluice serve`'s request parser on arbitrary bytes, with small limits so
//! that they are reached: never a panic; a request framed is never longer
//! than the bytes given, its own bytes parse to the same arguments, and a
//! prefix of it is incomplete, never an error. Each framed request is also
//! read for a request context (`SLUICE.WITH`): never a panic, and a context
//! found leaves a command that is the tail of the request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_kv::request_context::{unwrap, MAX_TENANT_LEN};
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
        assert_eq!(parse(&buf[..len], &LIMITS), Ok(Some((args.clone(), len))));
        for k in 0..len {
            assert_eq!(parse(&buf[..k], &LIMITS), Ok(None), "prefix {k} of {len}");
        }
        if let Ok(Some(sent)) = unwrap(&args) {
            assert!(!sent.command.is_empty() && args.ends_with(sent.command));
            assert!(sent.tenant.is_none_or(|t| !t.is_empty() && t.len() <= MAX_TENANT_LEN));
        }
        buf = &buf[len..];
    }
});
