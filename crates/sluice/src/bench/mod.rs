//! `sluice bench ...`: benchmarks of Sluice itself, each a module of
//! `sluice_bench` driven by a subcommand here; and the harness's commands
//! for the benchmark scripts ([`script`]).

mod deadline;
mod io;
mod pg;
mod redis;
mod route;
mod script;
mod sim;

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    Sim(sim::SimArgs),
    Io(io::IoArgs),
    Pg(pg::PgArgs),
    Redis(redis::RedisArgs),
    Route(route::RouteArgs),
    Deadline(deadline::DeadlineArgs),
    Summarize(script::SummarizeArgs),
    Steal(script::StealArgs),
    Cpu(script::CpuArgs),
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Sim(a) => sim::run(a),
        BenchCommand::Io(a) => io::run(a),
        BenchCommand::Pg(a) => pg::run(a),
        BenchCommand::Redis(a) => redis::run(a),
        BenchCommand::Route(a) => route::run(a),
        BenchCommand::Deadline(a) => deadline::run(a),
        BenchCommand::Summarize(a) => script::summarize(a),
        BenchCommand::Steal(a) => script::steal(a),
        BenchCommand::Cpu(a) => script::cpu(a),
    }
}
