//! The compaction schedule's invariants over random runs: whatever the
//! shards' debts do, the debt bound is never kept waiting, a staggered
//! schedule runs one shard at a time below it, and a synchronized window
//! leaves no shard with debt behind.

use proptest::prelude::*;
use sluice_core::controller::compaction_schedule::{
    CompactionSchedule, CompactionScheduleConfig, Schedule, ScheduleObservation, ShardState, STALL_MARGIN,
};

const BOUND: u64 = 100;

fn schedule() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        Just(Schedule::PerNode),
        Just(Schedule::Synchronized),
        Just(Schedule::Staggered),
        Just(Schedule::Auto),
    ]
}

/// Each shard's debt and room in L0 (`None`: unread), and the mean width.
type Step = (Vec<Option<(u64, u32)>>, u64);

/// Per step and shard: its debt (0 often, past the bound sometimes) and
/// the L0 tables it can take before slowing writes (near the margin
/// sometimes), or `None` when it cannot be read; and the step's mean width.
fn steps(shards: usize) -> impl Strategy<Value = Vec<Step>> {
    let debt = prop_oneof![4 => Just(0u64), 5 => 1u64..BOUND, 1 => BOUND..3 * BOUND];
    let stall_in = prop_oneof![5 => Just(8u32), 1 => 0u32..=STALL_MARGIN + 1];
    let debt = prop_oneof![10 => (debt, stall_in).prop_map(Some), 1 => Just(None)];
    prop::collection::vec((prop::collection::vec(debt, shards), 1u64..=shards as u64), 1..60)
}

proptest! {
    #[test]
    fn the_schedule_keeps_its_promises(
        schedule in schedule(),
        (n, steps) in (1usize..6).prop_flat_map(|n| (Just(n), steps(n))),
    ) {
        let mut c = CompactionSchedule::new(CompactionScheduleConfig {
            schedule,
            debt_bound: BOUND,
            sync_width: 2.0,
        })
        .unwrap();
        let mut paused = vec![false; n];
        for (debts, width) in steps {
            let seen: Vec<Option<ShardState>> = debts
                .iter()
                .zip(&paused)
                .map(|(d, &paused)| d.map(|(debt, stall_in)| ShardState { debt, paused, stall_in }))
                .collect();
            let decisions = c.decide(&ScheduleObservation { shards: &seen, requests: 10, sub_requests: 10 * width });
            for d in &decisions {
                prop_assert!(seen[d.shard].is_some(), "a decision for an unread shard");
                prop_assert_ne!(paused[d.shard], d.paused, "a decision that changes nothing");
                paused[d.shard] = d.paused;
            }
            let read: Vec<(usize, u64)> = (0..n).filter_map(|i| debts[i].map(|(d, _)| (i, d))).collect();
            let forced = |i: usize| debts[i].is_some_and(|(d, s)| d >= BOUND || s <= STALL_MARGIN);
            for &(i, _) in &read {
                prop_assert!(!forced(i) || !paused[i], "shard {i} at its debt bound is paused");
            }
            match c.window() {
                Some(Schedule::Staggered) => {
                    let turns = read.iter().filter(|&&(i, _)| !forced(i) && !paused[i]).count();
                    prop_assert!(turns <= 1, "{turns} shards below the bound run in a staggered window");
                }
                Some(Schedule::Synchronized) => {
                    for &(i, d) in &read {
                        prop_assert!(d == 0 || !paused[i], "shard {i} has debt but sits out the window");
                    }
                }
                _ => {}
            }
            if schedule == Schedule::PerNode {
                prop_assert!(read.iter().all(|&(i, _)| !paused[i]));
            }
        }
    }
}
