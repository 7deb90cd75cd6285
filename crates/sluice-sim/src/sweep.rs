//! Running an experiment: every (point, policy, seed) run on a thread pool,
//! results gathered in a fixed order so output never depends on which thread
//! finished first; then per (point, policy) summaries over the seeds and
//! ratios to the baselines.
//!
//! Seed `s` of point `x` gives the same transactions to every policy, so a
//! policy's tardiness is divided by the baseline's *on the same seed*; the
//! reported ratio is the ratio of the seed means (the paper's "averages of
//! at least 5 runs", normalized), with the spread of the per-seed ratios.

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;
use serde::Serialize;
use sluice_core::device::SeekDisk;

use crate::experiment::Experiment;
use crate::run::{simulate, RunStats};

/// One run's identity and result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Run {
    pub x: f64,
    pub policy: String,
    pub seed: u64,
    pub stats: RunStats,
}

/// A ratio to a baseline: of the means, and the range of per-seed ratios.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    pub baseline: String,
    pub ratio: f64,
    pub min: f64,
    pub max: f64,
}

/// One (point, policy): means over the seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    pub x: f64,
    pub policy: String,
    pub avg_tardiness_ms: f64,
    pub tardiness_std_ms: f64,
    pub miss_ratio: f64,
    pub mean_latency_ms: f64,
    pub p99_latency_ms: f64,
    pub disk_busy: f64,
    pub ratios: Vec<Ratio>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepResult {
    pub experiment: Experiment,
    pub cells: Vec<Cell>,
    pub runs: Vec<Run>,
}

impl SweepResult {
    pub fn cell(&self, x: f64, policy: &str) -> Option<&Cell> {
        self.cells.iter().find(|c| c.x == x && c.policy == policy)
    }

    /// The swept values in order.
    pub fn xs(&self) -> Vec<f64> {
        self.experiment.points.iter().map(|p| p.x).collect()
    }
}

/// Runs every simulation of `exp` on the current rayon pool; `progress` is
/// called with the number of runs finished after each run.
pub fn run_experiment(exp: &Experiment, progress: &(dyn Fn(usize) + Sync)) -> SweepResult {
    let disk = SeekDisk::new(exp.disk).expect("validated when the experiment was loaded");
    let jobs: Vec<(usize, usize, u64)> = (0..exp.points.len())
        .flat_map(|p| (0..exp.policies.len()).flat_map(move |q| (0..u64::from(exp.seeds)).map(move |s| (p, q, s))))
        .collect();
    let done = AtomicUsize::new(0);
    let runs: Vec<Run> = jobs
        .par_iter()
        .map(|&(p, q, s)| {
            let point = &exp.points[p];
            let policy = exp.policies[q];
            let seed = exp.seed + s;
            let stats = simulate(disk.clone(), &point.workload, policy, &exp.options, seed)
                .expect("policy options validated when the experiment was loaded");
            progress(done.fetch_add(1, Ordering::Relaxed) + 1);
            Run {
                x: point.x,
                policy: policy.to_string(),
                seed,
                stats,
            }
        })
        .collect();
    let cells = summarize(exp, &runs);
    SweepResult {
        experiment: exp.clone(),
        cells,
        runs,
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (n, s) = xs.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

fn summarize(exp: &Experiment, runs: &[Run]) -> Vec<Cell> {
    let seeds = exp.seeds as usize;
    let mut cells = Vec::new();
    for (p, point) in exp.points.iter().enumerate() {
        let block = &runs[p * exp.policies.len() * seeds..(p + 1) * exp.policies.len() * seeds];
        let of = |q: usize| &block[q * seeds..(q + 1) * seeds];
        for (q, policy) in exp.policies.iter().enumerate() {
            let mine = of(q);
            let m = |f: fn(&RunStats) -> f64| mean(mine.iter().map(|r| f(&r.stats)));
            let avg = m(|s| s.avg_tardiness_ms);
            let var = mean(mine.iter().map(|r| (r.stats.avg_tardiness_ms - avg).powi(2)));
            let ratios = exp
                .baselines
                .iter()
                .map(|b| {
                    let base = of(exp.policies.iter().position(|x| x == b).expect("baseline is a policy"));
                    ratio(b.to_string(), mine, base)
                })
                .collect();
            cells.push(Cell {
                x: point.x,
                policy: policy.to_string(),
                avg_tardiness_ms: avg,
                tardiness_std_ms: var.sqrt(),
                miss_ratio: m(|s| s.miss_ratio),
                mean_latency_ms: m(|s| s.mean_latency_ms),
                p99_latency_ms: m(|s| s.p99_latency_ms),
                disk_busy: m(|s| s.disk_busy),
                ratios,
            });
        }
    }
    cells
}

fn ratio(baseline: String, mine: &[Run], base: &[Run]) -> Ratio {
    let t = |r: &Run| r.stats.avg_tardiness_ms;
    let div = |a: f64, b: f64| {
        if b > 0.0 {
            a / b
        } else if a > 0.0 {
            f64::INFINITY
        } else {
            1.0
        }
    };
    let per_seed: Vec<f64> = mine.iter().zip(base).map(|(a, b)| div(t(a), t(b))).collect();
    Ratio {
        baseline,
        ratio: div(mean(mine.iter().map(t)), mean(base.iter().map(t))),
        min: per_seed.iter().copied().fold(f64::INFINITY, f64::min),
        max: per_seed.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}
