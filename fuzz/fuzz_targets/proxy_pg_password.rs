//! The proxy's side of a password exchange it asks itself (`pg::verifier`)
//! on arbitrary responses, and the reading of an auth_file's SCRAM secret
//! (`pg::scram`). Never a panic; no response proves a password the input
//! cannot know (the proxy's nonce is random), so every exchange ends
//! refused or still asking, and a secret read is one that reads back.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_proxy::pg::scram::ScramSecret;
use sluice_proxy::pg::verifier::{Check, Verifier};

fuzz_target!(|data: &[u8]| {
    // One iteration: the salting is not what is tested.
    let secret = ScramSecret::salted("s3cret", "c2FsdA==", 1).expect("a secret");
    let verifier = Verifier::Scram(secret);
    let mut out = BytesMut::new();
    let mut check = Check::ask(&verifier, "alice", &mut out);
    // Responses are the input's pieces between 0xff bytes.
    for response in data.split(|&b| b == 0xff) {
        match check.answer(response, &mut out) {
            Ok(proved) => assert!(!proved, "a password proved without it: {response:?}"),
            Err(_) => break,
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(read) = ScramSecret::parse(text) {
            let written = format!(
                "SCRAM-SHA-256${}:{}${}:{}",
                read.iterations,
                read.salt,
                sluice_proxy::pg::scram::base64(&read.stored_key),
                sluice_proxy::pg::scram::base64(&read.server_key)
            );
            assert_eq!(ScramSecret::parse(&written).as_ref(), Ok(&read));
        }
    }
});
