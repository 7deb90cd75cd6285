//! The order `coop` promises, checked against a model under any
//! interleaving of pushes, pops and time: a job leaves either because it
//! waited out the starvation guard (and then it is the oldest job queued),
//! or because nothing is starved (and then no queued job comes before it:
//! foreground before background, earlier request before later, push order
//! within a request). So no job of a later request ever leaves ahead of an
//! earlier request's, except by the guard, and no job waits past the guard
//! longer than the pops it takes to serve the jobs starved before it.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sluice_core::ctx::Class;
use sluice_core::device::FlatDevice;
use sluice_core::policy::coop::{Coop, CoopOptions};
use sluice_core::{Ctx, Job, Policy};

const MS: u64 = 1_000_000;
const GUARD_MS: u64 = 10;

#[derive(Clone, Debug)]
enum Op {
    Push { req: u8, background: bool },
    Pop,
    Advance { ms: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..40, proptest::bool::weighted(0.2)).prop_map(|(req, background)| Op::Push { req, background }),
        4 => Just(Op::Pop),
        1 => (0u8..8).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// What the model knows of a queued job.
#[derive(Clone, Copy, Debug)]
struct Queued {
    key: (bool, u64, u64),
    pushed: u64,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn jobs_leave_in_request_order_except_by_the_guard(ops in proptest::collection::vec(op(), 1..400)) {
        let mut policy = Coop::new(CoopOptions { starvation_ms: GUARD_MS as f64 });
        let device = FlatDevice::default();
        let mut queued: BTreeMap<u64, Queued> = BTreeMap::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for op in ops {
            match op {
                Op::Push { req, background } => {
                    let mut ctx = Ctx::new(u64::from(req), now);
                    if background {
                        ctx.class = Class::Background;
                    }
                    policy.push(Job::new(seq, ctx, 0, now), now);
                    queued.insert(seq, Queued { key: (background, u64::from(req), seq), pushed: now });
                    seq += 1;
                }
                Op::Pop => {
                    let Some(job) = policy.pop(now, &device) else {
                        prop_assert!(queued.is_empty(), "nothing popped with {} queued", queued.len());
                        continue;
                    };
                    let left = queued.remove(&job.seq).expect("a job that was pushed and not yet popped");
                    let oldest = queued.values().map(|q| (q.pushed, q.key.2)).min();
                    let starved = now - left.pushed >= GUARD_MS * MS;
                    if starved {
                        // Served by the guard: no job queued longer.
                        prop_assert!(oldest.is_none_or(|oldest| (left.pushed, left.key.2) < oldest),
                            "starved job {:?} left before the older {:?}", left, oldest);
                    } else {
                        prop_assert!(oldest.is_none_or(|(pushed, _)| now - pushed < GUARD_MS * MS),
                            "job {:?} left while an older one was starved", left);
                        prop_assert!(queued.values().all(|q| left.key < q.key),
                            "job {:?} left ahead of one that comes before it", left);
                    }
                }
                Op::Advance { ms } => now += u64::from(ms) * MS,
            }
            prop_assert_eq!(policy.len(), queued.len());
        }
    }
}
