//! The optimizer's first minute on the simulated PostgreSQL (pgbench TPC-B's
//! measured curve, `Database::tpcb`): as a new user's first benchmark sees
//! it, a fresh proxy, 20 s of warm-up and 40 s measured, against the best
//! fixed pool of a sweep measured in the same conditions, over several
//! seeds. `cargo run --release -p sluice-sim --example first_minute`.

use sluice_core::controller::{OptimizerConfig, ParallelismMode, ZetaMode};
use sluice_sim::apples::{simulate, ApplesConfig, ApplesRun, Database};

const SEEDS: u64 = 5;
const POOLS: [usize; 6] = [8, 12, 16, 24, 32, 64];

/// Users connecting as pgbench's do through a proxy: the first 64 at
/// once, then doubling every second up to all of them.
fn ramp(users: usize) -> Vec<(f64, usize)> {
    let mut steps = vec![(0.0, users.min(64))];
    while steps.last().unwrap().1 < users {
        let (at, n) = *steps.last().unwrap();
        steps.push((at + 1.0, (2 * n).min(users)));
    }
    steps
}

fn run(users: usize, seed: u64, fixed: Option<usize>) -> ApplesRun {
    let optimizer = match fixed {
        Some(_) => OptimizerConfig {
            parallelism: ParallelismMode::Fixed,
            zeta: ZetaMode::Fixed,
            ..OptimizerConfig::default()
        },
        None => OptimizerConfig::default(),
    };
    simulate(&ApplesConfig {
        seconds: 60.0,
        warmup: 20.0,
        seed,
        users: ramp(users),
        database: Database::tpcb(),
        parallelism: fixed.unwrap_or(users),
        optimizer,
        ..ApplesConfig::default()
    })
}

fn main() {
    println!("| users | seed | model (req/s) | best pool | model / best pool | U_f | V_l | P every 4 s |");
    println!("|---|---|---|---|---|---|---|---|");
    for users in [256, 512] {
        for seed in 1..=SEEDS {
            let model = run(users, seed, None);
            let (pool, best) = POOLS
                .iter()
                .map(|&p| (p, run(users, seed, Some(p)).throughput(20, 60)))
                .fold((0, 0.0), |b, x| if x.1 > b.1 { x } else { b });
            let m = model.throughput(20, 60);
            let ps: Vec<String> = model.seconds.iter().step_by(4).map(|s| s.p.to_string()).collect();
            println!(
                "| {users} | {seed} | {m:.0} | {best:.0} (P = {pool}) | {:.3} | {:.3} | {:.3} | {} |",
                m / best,
                model.unfairness,
                model.latency_cv,
                ps.join(" ")
            );
        }
    }
}
