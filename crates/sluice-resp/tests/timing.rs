//! How long `parse` takes on the requests its one-pass tuning was judged
//! by: a SET of a 100-byte value, an MGET of 100 keys (both parsed in one
//! pass), and a request of a million arguments (found whole first, then
//! copied). Not a test of correctness, so not run by default; in an
//! optimized build:
//!
//! ```sh
//! cargo test --release -p sluice-resp --test timing -- --ignored --nocapture
//! ```

use std::hint::black_box;
use std::time::Instant;

use sluice_resp::{encode_command, parse, Limits};

fn request(args: &[String]) -> Vec<u8> {
    let mut wire = Vec::new();
    encode_command(args, &mut wire);
    wire
}

#[test]
#[ignore = "a timing, for an optimized build"]
fn parse_timing() {
    let set = request(&["SET".into(), "key:000001".into(), "x".repeat(100)]);
    let mget = request(
        &[
            vec!["MGET".to_string()],
            (0..100).map(|i| format!("key:{i:06}")).collect(),
        ]
        .concat(),
    );
    let million = request(
        &[
            vec!["RPUSH".to_string(), "list".into()],
            (0..999_998).map(|i| i.to_string()).collect(),
        ]
        .concat(),
    );
    let limits = Limits::default();
    for (name, wire, iterations) in [
        ("SET of 100 B", set, 1_000_000),
        ("MGET of 100 keys", mget, 20_000),
        ("1,000,000 arguments", million, 5),
    ] {
        let mut runs: Vec<f64> = (0..5)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..iterations {
                    let (args, used) = parse(black_box(&wire), &limits).unwrap().unwrap();
                    black_box((args, used));
                }
                start.elapsed().as_nanos() as f64 / f64::from(iterations)
            })
            .collect();
        runs.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.0} ns a parse of {} bytes (5 runs: {runs:.0?})",
            runs[2],
            wire.len()
        );
    }
}
