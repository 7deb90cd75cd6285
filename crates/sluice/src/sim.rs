//! `sluice sim FILE`: runs an experiment file on all cores with a progress
//! bar, prints its tables and writes CSV, JSON and SVG charts; or, for an
//! AppleS scenario (`kind = "apples"`), runs its runs over their seeds and
//! prints their table.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sluice_sim::apples_scenario::{is_apples, ApplesScenario};
use sluice_sim::report;
use sluice_sim::sweep::run_experiment;
use sluice_sim::Experiment;

/// Run an experiment file on the deterministic simulator
#[derive(Args)]
#[command(long_about = "Run an experiment file on the deterministic simulator.\n\n\
    The file (TOML, see scenarios/README.md) sweeps one workload parameter over \
    policies and seeds, running on all cores. It prints tables of average \
    tardiness normalized to each baseline, absolute tardiness and miss ratio, \
    and writes runs.csv, summary.csv, result.json and SVG charts to the output \
    directory. The same file and seeds give byte-identical files.\n\n\
    A file with kind = \"apples\" (scenarios/apples-*.toml) is an AppleS scenario: \
    closed-loop users, the gate and the optimizer in front of a simulated \
    database, a run per [[run]] table over its seeds. It prints, per run, the \
    throughput after the warm-up and its ratio to the baseline run, U_f, V_l \
    and the P held at the end.")]
pub struct SimArgs {
    /// Experiment file (TOML), e.g. scenarios/fig4.toml
    pub file: PathBuf,
    /// Directory for CSV, JSON and SVG output [default: results/<experiment name>]
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Worker threads [default: one per core]
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Override the number of seeds per point and policy
    #[arg(long)]
    pub seeds: Option<u32>,
    /// Override the number of transactions per run (for quick looks)
    #[arg(long)]
    pub transactions: Option<u64>,
    /// Do not print the tables
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(args: SimArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    if is_apples(&text) {
        return run_apples(&args, &text);
    }
    let mut exp = Experiment::load(&args.file).with_context(|| format!("{}", args.file.display()))?;
    if let Some(seeds) = args.seeds {
        anyhow::ensure!(seeds >= 1, "--seeds must be at least 1");
        exp.seeds = seeds;
    }
    if let Some(n) = args.transactions {
        anyhow::ensure!(n >= 1, "--transactions must be at least 1");
        exp.points.iter_mut().for_each(|p| p.workload.transactions = n);
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    anyhow::ensure!(jobs >= 1, "--jobs must be at least 1");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs).build()?;
    let bar = ProgressBar::new(exp.runs() as u64).with_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} runs, {elapsed} elapsed, eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(exp.name.clone());
    let started = Instant::now();
    let result = pool.install(|| run_experiment(&exp, &|done| bar.set_position(done as u64)));
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    if !args.quiet {
        println!("{}\n", exp.title);
        print!("{}", report::tables(&result));
    }
    let out = args.out.unwrap_or_else(|| PathBuf::from("results").join(&exp.name));
    let files = report::write_all(&result, &out)?;
    let ios: u64 = result.runs.iter().map(|r| r.stats.ios).sum();
    eprintln!(
        "{} runs ({} simulated I/Os) in {:.1} s on {jobs} threads; wrote {} files to {}",
        result.runs.len(),
        ios,
        elapsed.as_secs_f64(),
        files.len(),
        out.display()
    );
    Ok(())
}

fn run_apples(args: &SimArgs, text: &str) -> Result<()> {
    anyhow::ensure!(
        args.out.is_none() && args.jobs.is_none() && args.transactions.is_none(),
        "an AppleS scenario takes --seeds and --quiet only"
    );
    let stem = args.file.file_stem().map(|s| s.to_string_lossy().into_owned());
    let mut scenario = ApplesScenario::parse(text, stem.as_deref().unwrap_or("apples"))
        .with_context(|| format!("{}", args.file.display()))?;
    if let Some(seeds) = args.seeds {
        anyhow::ensure!(seeds >= 1, "--seeds must be at least 1");
        scenario.seeds = u64::from(seeds);
    }
    let started = Instant::now();
    let results = scenario.run();
    if !args.quiet {
        println!("{}\n", scenario.title);
        print!("{}", scenario.table(&results));
    }
    eprintln!(
        "{} runs of {} seeds in {:.1} s",
        scenario.runs.len(),
        scenario.seeds,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
