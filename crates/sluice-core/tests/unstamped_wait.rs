//! Jobs without a deadline under every deadline policy: whatever mix of
//! stamped jobs (with deadlines near, far or already passed) keeps coming,
//! a job without a deadline that has waited `unstamped_wait_ms` is the next
//! one served, and such jobs are served in the order they came. Together:
//! the k-th of them in line waits at most the bound plus k decisions.

use std::collections::VecDeque;

use proptest::prelude::*;
use sluice_core::budget::SlackModel;
use sluice_core::device::{SeekDisk, SeekDiskConfig};
use sluice_core::{Ctx, Job, PolicyOptions, PolicySpec};

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
enum Op {
    /// A job of a request with a deadline `budget_ms` after now (0: it
    /// arrives already due).
    Stamped {
        pos: u16,
        budget_ms: u16,
    },
    /// A job of a request without a deadline.
    Unstamped {
        pos: u16,
    },
    Pop,
    Advance {
        ms: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..1000, 0u16..500).prop_map(|(pos, budget_ms)| Op::Stamped { pos, budget_ms }),
        1 => (0u16..1000).prop_map(|pos| Op::Unstamped { pos }),
        3 => Just(Op::Pop),
        2 => (1u8..40).prop_map(|ms| Op::Advance { ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn an_overdue_job_without_a_deadline_is_served_next(ops in proptest::collection::vec(op(), 1..400)) {
        let options = PolicyOptions::default();
        let bound = (options.unstamped_wait_ms * 1e6) as u64;
        let model = SlackModel { avg_cost: 9_400_000, think: 500_000 };
        let deadline_policies = ["edf", "edf+budget", "fd-scan", "ssedv", "ssedv+budget", "traqios", "traqios-all", "traqios-uniform", "atc"];
        for name in deadline_policies {
            let mut policy = name.parse::<PolicySpec>().unwrap().build(&options, model).unwrap();
            let mut disk = SeekDisk::new(SeekDiskConfig::default()).unwrap();
            // Jobs without a deadline in line: (pushed at, seq).
            let mut line: VecDeque<(u64, u64)> = VecDeque::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for op in &ops {
                match *op {
                    Op::Stamped { pos, budget_ms } => {
                        let ctx = Ctx::new(seq, now).with_deadline(now + u64::from(budget_ms) * MS).with_est_ios(3);
                        policy.request_arrived(&ctx, now);
                        policy.push(Job::new(seq, ctx, u64::from(pos), now), now);
                        seq += 1;
                    }
                    Op::Unstamped { pos } => {
                        policy.push(Job::new(seq, Ctx::new(seq, now), u64::from(pos), now), now);
                        line.push_back((now, seq));
                        seq += 1;
                    }
                    Op::Pop => {
                        let overdue = line.front().filter(|(at, _)| now - at >= bound).map(|&(_, s)| s);
                        let Some(job) = policy.pop(now, &disk) else {
                            prop_assert!(line.is_empty(), "{name}: empty while jobs wait");
                            continue;
                        };
                        if let Some(s) = overdue {
                            prop_assert_eq!(job.seq, s, "{}: the overdue job without a deadline goes next", name);
                        }
                        if job.ctx.deadline.is_none() {
                            prop_assert_eq!(line.pop_front().map(|(_, s)| s), Some(job.seq), "{}: in the order they came", name);
                        } else {
                            policy.request_finished(&job.ctx, now);
                        }
                        now += disk.access(job.pos);
                    }
                    Op::Advance { ms } => now += u64::from(ms) * MS,
                }
            }
        }
    }
}
