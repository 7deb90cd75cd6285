//! `sluice bench ...`: benchmarks of Sluice itself, each a module of
//! `sluice_bench` driven by a subcommand here.

mod io;
mod pg;
mod redis;
mod route;
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
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Sim(a) => sim::run(a),
        BenchCommand::Io(a) => io::run(a),
        BenchCommand::Pg(a) => pg::run(a),
        BenchCommand::Redis(a) => redis::run(a),
        BenchCommand::Route(a) => route::run(a),
    }
}
