//! Invariants of the AppleS weighted round robin, whatever the weights,
//! quota ζ and interleaving of arrivals, cancellations and pops: each job
//! leaves exactly once, each tenant's jobs leave in arrival order, and while
//! tenants stay backlogged their normalised service N_i/L_i never drifts
//! apart by more than about one round (L_i = φ_i·ζ). A strict tenant with a
//! job waiting is always served before any other.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use sluice_core::device::FlatDevice;
use sluice_core::policy::wrr::Wrr;
use sluice_core::{Ctx, Job, Policy, TenantId};

#[derive(Clone, Debug)]
enum Op {
    Push { tenant: u8 },
    Pop,
    Cancel { tenant: u8, nth: u8 },
    Strict { tenant: u8, strict: bool },
}

fn op(tenants: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..tenants).prop_map(|tenant| Op::Push { tenant }),
        3 => Just(Op::Pop),
        1 => (0..tenants, any::<u8>()).prop_map(|(tenant, nth)| Op::Cancel { tenant, nth }),
        1 => (0..tenants, any::<bool>()).prop_map(|(tenant, strict)| Op::Strict { tenant, strict }),
    ]
}

fn job(seq: u64, tenant: u8, weight: f64) -> Job {
    Job::new(seq, Ctx::new(seq, 0).with_tenant(u32::from(tenant), weight), 0, 0).with_tag(seq)
}

proptest! {
    #[test]
    fn every_job_leaves_once_in_tenant_order_strict_first(
        weights in prop::collection::vec(0.1f64..8.0, 1..6),
        zeta in 0.05f64..16.0,
        ops in prop::collection::vec(op(5), 0..400),
    ) {
        let mut p = Wrr::new(zeta);
        let mut waiting: HashMap<u8, Vec<u64>> = HashMap::new();
        let mut left = HashSet::new();
        let mut strict = HashSet::new();
        for (seq, op) in (0u64..).zip(ops) {
            match op {
                Op::Push { tenant } => {
                    let tenant = tenant % weights.len() as u8;
                    p.push(job(seq, tenant, weights[tenant as usize]), 0);
                    waiting.entry(tenant).or_default().push(seq);
                }
                Op::Pop => {
                    if let Some(j) = p.pop(0, &FlatDevice::default()) {
                        let tenant = j.ctx.tenant.0 as u8;
                        let strict_waiting = strict.iter().any(|t| waiting.get(t).is_some_and(|q| !q.is_empty()));
                        prop_assert!(!strict_waiting || strict.contains(&tenant), "strict tenants first");
                        let q = waiting.get_mut(&tenant).unwrap();
                        prop_assert_eq!(q.remove(0), j.seq, "tenant order");
                        prop_assert!(left.insert(j.seq));
                    } else {
                        prop_assert!(waiting.values().all(Vec::is_empty));
                    }
                }
                Op::Cancel { tenant, nth } => {
                    let q = waiting.entry(tenant).or_default();
                    if !q.is_empty() {
                        let seq = q.remove(nth as usize % q.len());
                        let gone = p.cancel(TenantId(u32::from(tenant)), seq);
                        prop_assert_eq!(gone.map(|j| j.seq), Some(seq));
                        prop_assert!(left.insert(seq));
                    }
                }
                Op::Strict { tenant, strict: on } => {
                    p.set_strict(TenantId(u32::from(tenant)), on);
                    if on {
                        strict.insert(tenant);
                    } else {
                        strict.remove(&tenant);
                    }
                }
            }
            prop_assert_eq!(p.len(), waiting.values().map(Vec::len).sum::<usize>());
        }
    }

    #[test]
    fn backlogged_tenants_get_service_in_proportion_to_weight(
        weights in prop::collection::vec(0.1f64..8.0, 2..6),
        zeta in 0.05f64..16.0,
        pops in 1usize..600,
    ) {
        let mut p = Wrr::new(zeta);
        let mut seq = 0;
        for (t, &w) in weights.iter().enumerate() {
            for _ in 0..pops {
                seq += 1;
                p.push(job(seq, t as u8, w), 0);
            }
        }
        let mut served = vec![0f64; weights.len()];
        for _ in 0..pops {
            let j = p.pop(0, &FlatDevice::default()).unwrap();
            served[j.ctx.tenant.0 as usize] += 1.0;
            let norm: Vec<f64> = served.iter().zip(&weights).map(|(n, w)| n / (w * zeta)).collect();
            for i in 0..weights.len() {
                for k in 0..weights.len() {
                    let slack = 2.0 + 1.0 / (weights[i] * zeta) + 1.0 / (weights[k] * zeta);
                    prop_assert!(norm[i] - norm[k] <= slack, "tenant {} ahead of {}: {:?}", i, k, norm);
                }
            }
        }
    }
}
