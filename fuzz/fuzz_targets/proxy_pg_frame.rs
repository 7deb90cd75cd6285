//! The proxy's PostgreSQL framing on arbitrary bytes: the startup packet
//! and typed-message headers. Never a panic; a packet framed is never longer
//! than the bytes given, and a prefix of a framed packet is incomplete,
//! never an error or another packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_proxy::pg::frame::{parse_header, parse_startup};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((_, len))) = parse_startup(data) {
        assert!(len <= data.len());
        for k in 0..len {
            assert!(matches!(parse_startup(&data[..k]), Ok(None)), "prefix {k} of {len}");
        }
    }
    let mut pos = 0;
    while let Ok(Some(header)) = parse_header(&data[pos..]) {
        assert!(header.len >= 5);
        if data.len() - pos < header.len {
            break;
        }
        pos += header.len;
    }
});
