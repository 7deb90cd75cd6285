//! Two tenants of 16 closed-loop clients each share one server in virtual
//! time, one with half the other's budget, under two loads: each tenant
//! alone fits in the server (think time 20 ms), or the tighter one alone
//! would nearly fill it (12 ms); together they overload it. The deadline-only rules (EDF, TraQIOS) share the
//! misses out alike; `atc`, which weighs tardiness by 1 / budget, lets the
//! tighter tenant miss less while the looser one still gets served; FIFO,
//! blind to budgets, makes the tighter one miss more.

use sluice_core::budget::SlackModel;
use sluice_core::device::FlatDevice;
use sluice_core::{Ctx, Job, Policy, PolicyOptions, PolicySpec};

const MS: f64 = 1e6;
const CLIENTS_PER_TENANT: usize = 16;
const BUDGETS_MS: [f64; 2] = [20.0, 40.0];
const SERVICE_MS: f64 = 1.0;
const REQUESTS: usize = 40_000;

/// splitmix64: a seeded stream of uniform numbers for the test's draws.
struct Draws(u64);

impl Draws {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
}

/// Runs closed-loop clients of both tenants, thinking `think_ms` on average
/// between requests, against one server that serves a job at a time in
/// the policy's order; returns each tenant's miss ratio and number of
/// requests served.
fn run(policy: &str, think_ms: f64, seed: u64) -> [(f64, usize); 2] {
    let model = SlackModel {
        avg_cost: (SERVICE_MS * MS) as u64,
        think: 0,
    };
    let mut policy: Box<dyn Policy> = policy
        .parse::<PolicySpec>()
        .unwrap()
        .build(&PolicyOptions::default(), model)
        .unwrap();
    let device = FlatDevice { cost: model.avg_cost };
    let mut draws = Draws(seed);
    let clients = 2 * CLIENTS_PER_TENANT;
    let mut next_at: Vec<Option<f64>> = (0..clients).map(|_| Some(draws.exp(think_ms * MS))).collect();
    let (mut now, mut seq) = (0.0f64, 0u64);
    let mut served = [0usize; 2];
    let mut missed = [0usize; 2];
    while served.iter().sum::<usize>() < REQUESTS {
        if policy.is_empty() {
            now = now.max(next_at.iter().flatten().cloned().fold(f64::INFINITY, f64::min));
        }
        for (client, at) in next_at.iter_mut().enumerate() {
            if let Some(arrival) = at.filter(|&a| a <= now) {
                let tenant = client % 2;
                let ctx = Ctx::new(client as u64 + seq * clients as u64, arrival as u64)
                    .with_deadline((arrival + BUDGETS_MS[tenant] * MS) as u64);
                policy.request_arrived(&ctx, now as u64);
                policy.push(Job::new(seq, ctx, 0, now as u64).with_tag(client as u64), now as u64);
                seq += 1;
                *at = None;
            }
        }
        let job = policy.pop(now as u64, &device).expect("a job was pushed");
        now += draws.exp(SERVICE_MS * MS);
        policy.request_finished(&job.ctx, now as u64);
        let client = job.tag as usize;
        served[client % 2] += 1;
        missed[client % 2] += usize::from(now > job.ctx.deadline.unwrap() as f64);
        next_at[client] = Some(now + draws.exp(think_ms * MS));
    }
    [0, 1].map(|t| (missed[t] as f64 / served[t] as f64, served[t]))
}

#[test]
fn deadline_only_rules_share_the_misses_out_alike() {
    for policy in ["edf", "traqios"] {
        let [(tight, _), (loose, _)] = run(policy, 12.0, 7);
        assert!(
            tight > 0.1 && loose > 0.1,
            "{policy}: the load makes both miss: {tight:.3} {loose:.3}"
        );
        assert!(
            (tight - loose).abs() < 0.25 * loose,
            "{policy}: tight {tight:.3} against loose {loose:.3}"
        );
    }
}

#[test]
fn atc_lets_the_tighter_budget_miss_less_and_still_serves_the_looser() {
    for think_ms in [12.0, 20.0] {
        for seed in [7, 8, 9] {
            let [(tight, tight_served), (loose, loose_served)] = run("atc", think_ms, seed);
            let [(edf_tight, _), (edf_loose, _)] = run("edf", think_ms, seed);
            let case = format!("think {think_ms} ms, seed {seed}");
            assert!(tight < 0.7 * loose, "{case}: tight {tight:.4} against loose {loose:.4}");
            assert!(
                tight < edf_tight,
                "{case}: atc's tight {tight:.4} against edf's {edf_tight:.4}"
            );
            assert!(
                loose > edf_loose,
                "{case}: the looser pays: {loose:.4} against edf's {edf_loose:.4}"
            );
            assert!(
                loose_served > tight_served / 2,
                "{case}: the looser tenant is served: {loose_served} against {tight_served}"
            );
        }
    }
}

#[test]
fn fifo_is_blind_to_budgets() {
    let [(tight, _), (loose, _)] = run("fifo", 20.0, 7);
    assert!(tight > 2.0 * loose, "tight {tight:.3} against loose {loose:.3}");
}
