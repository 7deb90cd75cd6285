//! Property tests of RCP's stages: whatever the configuration and the
//! interleaving of submissions, promotions and completions, every I/O enters
//! the device exactly once (once per piece if it yields the device between
//! pieces), the device's depth and the non-critical bound hold, and once
//! everything completes no slot is left taken.

use std::collections::HashSet;

use proptest::prelude::*;
use sluice_core::policy::fifo::Fifo;
use sluice_core::{Ctx, Job};
use sluice_io::sched::{Criticality, Location, Occupancy, Sched};
use sluice_io::RcpConfig;

#[derive(Clone, Debug)]
enum Step {
    Submit(bool),
    Promote(usize),
    Complete(usize),
    Yield(usize),
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => any::<bool>().prop_map(Step::Submit),
        1 => any::<usize>().prop_map(Step::Promote),
        2 => any::<usize>().prop_map(Step::Complete),
        1 => any::<usize>().prop_map(Step::Yield),
        1 => (0u64..20_000_000).prop_map(Step::Wait),
    ]
}

fn config() -> impl Strategy<Value = (RcpConfig, usize)> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1usize..4,
        1usize..4,
        0usize..3,
        1usize..5,
        any::<bool>(),
    )
        .prop_map(|(enabled, split, two, cs, ns, bound, depth, lifts)| {
            let config = RcpConfig {
                enabled,
                split_admission: split,
                two_queues: two,
                critical_slots: cs,
                noncritical_slots: ns,
                noncritical_device_bound: bound,
                critical_idle_ms: if lifts { 1.0 } else { 0.0 },
                ..RcpConfig::default()
            };
            (config, depth)
        })
}

proptest! {
    #[test]
    fn every_io_enters_the_device_once_and_nothing_leaks(
        (config, depth) in config(),
        steps in prop::collection::vec(step(), 1..200),
    ) {
        let bound = config.noncritical_device_bound;
        // A bound that lifts while no critical I/O is expected is checked
        // in the unit tests of `sched`.
        let bounded = config.enabled && config.two_queues && bound > 0 && config.critical_idle_ms == 0.0;
        let mut s = Sched::new(config, depth, [Box::new(Fifo::default()), Box::new(Fifo::default())]);
        let (mut now, mut next) = (0u64, 0u64);
        let mut submitted = Vec::new();
        let mut entered = HashSet::new();
        let mut in_device: Vec<u64> = Vec::new();
        let record = |ready: Vec<u64>, entered: &mut HashSet<u64>, in_device: &mut Vec<u64>| {
            for seq in ready {
                prop_assert!(entered.insert(seq), "{seq} entered twice");
                in_device.push(seq);
            }
            Ok(())
        };
        for st in steps {
            let ready = match st {
                Step::Submit(critical) => {
                    next += 1;
                    submitted.push(next);
                    let class = if critical { Criticality::Critical } else { Criticality::NonCritical };
                    s.submit(Job::new(next, Ctx::new(next, now), 0, now), class, now)
                }
                Step::Promote(i) if !submitted.is_empty() => s.promote(submitted[i % submitted.len()], now),
                Step::Complete(i) if !in_device.is_empty() => {
                    let seq = in_device.swap_remove(i % in_device.len());
                    s.complete(seq, now)
                }
                Step::Yield(i) if !in_device.is_empty() => {
                    let seq = in_device[i % in_device.len()];
                    let ready = s.yield_device(seq, now);
                    // It left the device, and may be back in `ready` already.
                    if ready.contains(&seq) || s.location(seq) != Some(Location::Device) {
                        in_device.retain(|&d| d != seq);
                        entered.remove(&seq);
                    }
                    ready
                }
                Step::Wait(dt) => { now += dt; Vec::new() }
                _ => Vec::new(),
            };
            record(ready, &mut entered, &mut in_device)?;
            let o = s.occupancy();
            prop_assert!(o.in_device <= depth);
            prop_assert_eq!(o.in_device, in_device.len());
            if bounded {
                prop_assert!(o.noncritical_in_device <= bound);
            }
        }
        // Drain: complete whatever is in the device until nothing is left.
        while let Some(seq) = in_device.pop() {
            now += 1_000_000;
            let ready = s.complete(seq, now);
            record(ready, &mut entered, &mut in_device)?;
        }
        prop_assert_eq!(entered.len(), submitted.len(), "every I/O entered the device");
        prop_assert_eq!(s.outstanding(), 0);
        let o = s.occupancy();
        prop_assert_eq!(Occupancy { promotions: 0, ..o }, Occupancy::default());
    }
}

proptest! {
    /// RCP's starvation guarantee: however busy the device is with critical
    /// I/O, a non-critical I/O enters it at the first decision after one
    /// starvation interval (10 ms): within 10 ms plus one service time.
    #[test]
    fn noncritical_io_waits_at_most_one_interval_behind_critical_io(
        services in prop::collection::vec(100_000u64..3_000_000, 50..200),
        nc_at in 0usize..20,
    ) {
        let interval = RcpConfig::default().starvation();
        let mut s = Sched::new(RcpConfig::default(), 1, [Box::new(Fifo::default()), Box::new(Fifo::default())]);
        let (mut now, mut seq) = (0u64, 0u64);
        let mut critical = |s: &mut Sched, now: u64| {
            seq += 1;
            s.submit(Job::new(seq, Ctx::new(seq, now), 0, now), Criticality::Critical, now)
        };
        let mut in_device = critical(&mut s, now);
        critical(&mut s, now);
        let nc = 1_000_000;
        let mut nc_submitted = None;
        let max_service = *services.iter().max().unwrap();
        for (i, service) in services.iter().enumerate() {
            if i == nc_at {
                s.submit(Job::new(nc, Ctx::new(nc, now), 0, now), Criticality::NonCritical, now);
                nc_submitted = Some(now);
            }
            now += service;
            let done = in_device.pop().expect("the device is never idle");
            critical(&mut s, now);
            in_device = s.complete(done, now);
            if in_device.contains(&nc) {
                let waited = now - nc_submitted.unwrap();
                prop_assert!(waited <= interval + max_service, "waited {waited} ns");
                return Ok(());
            }
        }
        let waited = now - nc_submitted.unwrap_or(now);
        prop_assert!(waited < interval + max_service, "never dispatched after {waited} ns");
    }
}
