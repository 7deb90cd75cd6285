//! Invariants of AppleS's three-sample model (§4.3.1), whatever throughput
//! is measured: the matching point C lies in 1..=P2, and in P0..=P2 when a
//! curve is fitted; a fitted curve passes through λ(P0) (α(P0) = 1 by construction) and is finite and positive
//! from P0 to P2; without a fit, C is the best measured of the three
//! samples.

use proptest::prelude::*;
use sluice_core::controller::matching_point::{matching_point, Sample};

fn samples() -> impl Strategy<Value = [Sample; 3]> {
    (
        1usize..8,
        1usize..64,
        1usize..512,
        [1.0f64..5_000.0, 1.0f64..5_000.0, 1.0f64..5_000.0],
    )
        .prop_map(|(p0, d1, d2, [l0, l1, l2])| {
            let (p1, p2) = (p0 + d1, p0 + d1 + d2);
            [
                Sample { p: p0, throughput: l0 },
                Sample { p: p1, throughput: l1 },
                Sample { p: p2, throughput: l2 },
            ]
        })
}

proptest! {
    #[test]
    fn the_matching_point_is_in_range_and_never_worse_than_the_data_without_a_model(s in samples()) {
        let mp = matching_point(s[0], s[1], s[2]);
        prop_assert!((1..=s[2].p).contains(&mp.p), "C = {} outside 1..={}", mp.p, s[2].p);
        match mp.model {
            Some(m) => {
                prop_assert!(mp.p >= s[0].p, "C = {} below P0 = {} for {m:?}", mp.p, s[0].p);
                let at_p0 = m.throughput(s[0].p as f64);
                prop_assert!((at_p0 - s[0].throughput).abs() <= 1e-9 * s[0].throughput);
                for p in s[0].p..=s[2].p {
                    let l = m.throughput(p as f64);
                    prop_assert!(l.is_finite() && l > 0.0, "λ({p}) = {l} for {m:?}");
                }
            }
            None => {
                let best = s.iter().map(|x| x.throughput).fold(f64::MIN, f64::max);
                let at_c = s.iter().find(|x| x.p == mp.p).map(|x| x.throughput);
                prop_assert_eq!(at_c, Some(best));
            }
        }
    }
}
