//! `sluice`: the command line of Sluice, request-aware I/O scheduling for
//! databases. Each subcommand parses its flags and calls the library that
//! does the work: `sim` (experiments on the deterministic simulator,
//! `sluice_sim`), `demo` (sluice-kv under YCSB with compaction active, FIFO
//! against Sluice), `bench` (benchmarks of Sluice and the harness's
//! commands for the benchmark scripts), `model` (AppleS's throughput model
//! fitted to measured samples) and `fanout` (requests fanned out over
//! shards, in the simulator, under each shard policy), all four
//! `sluice_bench`; `serve` (the sluice-kv store over RESP, `sluice_kv`),
//! `proxy` (AppleS admission in front of PostgreSQL or Redis,
//! `sluice_proxy`), `route` (the router in front of shards,
//! `sluice_route`) and `replay` (a controller's recorded run decided
//! again, `sluice_sim`).

mod bench;
mod demo;
mod fanout;
mod fd_limit;
mod model;
mod proxy;
mod replay;
mod route;
mod serve;
mod sim;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Request-aware I/O scheduling for databases",
    long_about = "Request-aware I/O scheduling for databases.\n\n\
        Sluice carries each request's context (who sent it, its deadline, where it \
        stands) down to every point where work waits, and decides there with \
        policies from the research literature (TraQIOS, AppleS, RCP, ...).\n\n\
        Start with `sluice demo`: an LSM store under YCSB with compaction active, FIFO \
        against Sluice. `sluice sim scenarios/fig4.toml` compares EDF, SSTF, FD-SCAN, \
        SSEDV and TraQIOS on a simulated disk."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Sim(sim::SimArgs),
    /// Run a benchmark of Sluice itself and report ratios to its baseline; summarize a script's runs
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    Serve(serve::ServeArgs),
    Demo(demo::DemoArgs),
    Proxy(proxy::ProxyArgs),
    Route(route::RouteArgs),
    Model(model::ModelArgs),
    Fanout(fanout::FanoutArgs),
    Replay(replay::ReplayArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Serve(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Route(args) => route::run(args),
        Command::Model(args) => model::run(args),
        Command::Fanout(args) => fanout::run(args),
        Command::Replay(args) => replay::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
