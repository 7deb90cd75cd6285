//! The proxy's scan of query text for statements about session state
//! (`DEALLOCATE`, `DISCARD ALL`, `LISTEN`) on arbitrary bytes. Never a
//! panic; a `LISTEN` after the input and a semicolon is found whenever the
//! input leaves no comment, quote or dollar quote open (no byte that could
//! open one), and the same input split at that semicolon is read the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_proxy::pg::sql::{classify, SessionSql};

fuzz_target!(|data: &[u8]| {
    let seen = classify(data);
    if !data.iter().any(|b| matches!(b, b'\'' | b'"' | b'$' | b'-' | b'/')) {
        let query = [data, b";LISTEN x"].concat();
        assert_eq!(classify(&query), Some(SessionSql::Listen));
        // A LISTEN the input already held is still the answer.
        if seen == Some(SessionSql::Listen) {
            assert_eq!(classify(&[data, b";SELECT 1"].concat()), Some(SessionSql::Listen));
        }
    }
});
