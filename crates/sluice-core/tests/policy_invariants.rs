//! Scheduler invariants that must hold for every policy, whatever the
//! interleaving of pushes, pops, arrivals and finishes: each pushed job is
//! popped exactly once, nothing is popped that was not pushed, `len` is
//! exact, a stage never has more than its limit in service, and a policy
//! that holds waiting jobs back names a later time to be asked again.

use std::collections::HashSet;

use proptest::prelude::*;
use sluice_core::budget::SlackModel;
use sluice_core::device::{SeekDisk, SeekDiskConfig};
use sluice_core::{Ctx, Job, PolicyOptions, PolicySpec, Stage};

#[derive(Clone, Debug)]
enum Op {
    /// Push an access of request `req` at cylinder `pos`.
    Push { req: u8, pos: u16, index: u8 },
    /// Pop one (serving it moves the head).
    Pop,
    /// Finish request `req` (the policy learns the outcome).
    Finish { req: u8 },
    /// Let time pass.
    Advance { ms: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), 0u16..1000, 1u8..20).prop_map(|(req, pos, index)| Op::Push { req, pos, index }),
        3 => Just(Op::Pop),
        1 => any::<u8>().prop_map(|req| Op::Finish { req }),
        1 => (0u16..200).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Request `req`'s context, of one of three tenants; every fifth has no
/// deadline.
fn ctx(req: u8) -> Ctx {
    let r = u64::from(req);
    let c = Ctx::new(r, r * 1_000_000)
        .with_est_ios(u32::from(req % 9) + 1)
        .with_tenant(u32::from(req % 3), 1.0);
    if req.is_multiple_of(5) {
        c
    } else {
        c.with_deadline((r * 7 % 50 + 1) * 10_000_000)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_pushed_job_is_popped_exactly_once(ops in proptest::collection::vec(op(), 1..300), limit in 1usize..4) {
        let model = SlackModel { avg_cost: 9_400_000, think: 500_000 };
        for spec in PolicySpec::NAMES.iter().map(|n| n.parse::<PolicySpec>().unwrap()) {
            let policy = spec.build(&PolicyOptions::default(), model).unwrap();
            let mut stage = Stage::new(policy, limit).unwrap();
            let mut disk = SeekDisk::new(SeekDiskConfig::default()).unwrap();
            let (mut now, mut seq) = (0u64, 0u64);
            let mut pushed = HashSet::new();
            let mut popped = HashSet::new();
            let serve = |stage: &mut Stage, disk: &mut SeekDisk, now: u64, popped: &mut HashSet<u64>| {
                while let Some(job) = stage.dispatch(now, disk) {
                    prop_assert!(stage.in_service() <= limit);
                    prop_assert!(popped.insert(job.seq), "{spec}: job {} popped twice", job.seq);
                    disk.access(job.pos);
                    stage.complete().unwrap();
                }
                Ok(())
            };
            for op in &ops {
                match *op {
                    Op::Push { req, pos, index } => {
                        let c = ctx(req);
                        stage.policy_mut().request_arrived(&c, now);
                        stage.push(Job::new(seq, c, u64::from(pos), now).at_index(u32::from(index)), now);
                        pushed.insert(seq);
                        seq += 1;
                    }
                    Op::Pop => {
                        if let Some(job) = stage.dispatch(now, &disk) {
                            prop_assert!(popped.insert(job.seq), "{spec}: job {} popped twice", job.seq);
                            disk.access(job.pos);
                            stage.complete().unwrap();
                        }
                    }
                    Op::Finish { req } => stage.policy_mut().request_finished(&ctx(req), now),
                    Op::Advance { ms } => now += u64::from(ms) * 1_000_000,
                }
                prop_assert_eq!(stage.queued(), pushed.len() - popped.len(), "{}: len", spec);
            }
            loop {
                serve(&mut stage, &mut disk, now, &mut popped)?;
                if stage.queued() == 0 {
                    break;
                }
                let wake = stage.wake_at();
                prop_assert!(wake.is_some_and(|t| t > now), "{}: jobs held back with no later wake time", spec);
                now = wake.unwrap();
            }
            prop_assert_eq!(&pushed, &popped, "{}: every job exactly once", spec);
            prop_assert!(stage.policy().is_empty());
        }
    }
}
