//! `sluice demo`: sluice-kv under YCSB with compaction active, FIFO against
//! Sluice (the run and its report are `sluice_bench::demo`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sluice_bench::demo::Demo;
use sluice_io::RcpConfig;

/// YCSB-A on sluice-kv with compaction active: FIFO against Sluice
#[derive(Args)]
#[command(long_about = "Sluice end to end, in about two minutes.\n\n\
    sluice-kv runs on an emulated cloud volume (3000 IOPS, 125 MB/s, 1 ms per operation). \
    A store is loaded with --records records of 1 KB (10 fields of --field-length bytes); each mode opens a copy of it and at once runs YCSB-A (50% reads, 50% updates, \
    Zipfian; --workload picks another core workload) from --tenants tenants at --target-ops each while flush and compaction of the load are still running:\n\n\
    fifo: no prioritization; sluice: RCP at every layer (critical I/O first; a background \
    I/O holds the device at most --noncritical-piece-kb at a time) plus the background controller \
    (slow background work while foreground p99 is above --target-p99-ms, never let the \
    compaction backlog pass its bound, and as L0 nears the count at which writes slow down, \
    grow background pieces up to 8 times, and once writes slow down run background I/O as \
    critical); settled: sluice again, \
    without the controller, once compaction has caught up.\n\n\
    Prints throughput and latency per tenant and mode, compaction backlog and bytes \
    compacted, and writes report.html with a read latency CCDF and read p99 over time, \
    read_ccdf.csv with the CCDF's points, series.csv with every tenant's 1 s and 10 s \
    intervals, and store.csv with the store every 0.1 s (L0 tables, frozen memtables, \
    compaction backlog, bytes compacted, background piece size and rate).")]
pub struct DemoArgs {
    /// Records loaded before each run (10 fields each)
    #[arg(long, default_value_t = 30_000)]
    pub records: u64,
    /// Bytes a field (YCSB's fieldlength); larger records write more per
    /// update, so that compaction can fall behind for the whole run
    #[arg(long, default_value_t = 100)]
    pub field_length: usize,
    /// Seconds of YCSB-A per mode
    #[arg(long, default_value_t = 15.0)]
    pub seconds: f64,
    /// Tenants, each with its own client threads
    #[arg(long, default_value_t = 3)]
    pub tenants: usize,
    /// Client threads per tenant
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// YCSB core workload run by every tenant, A to F
    #[arg(long, default_value_t = 'A')]
    pub workload: char,
    /// Operations per second per tenant (YCSB's -target)
    #[arg(long, default_value_t = 400.0)]
    pub target_ops: f64,
    /// Foreground p99 target of the background controller, milliseconds
    #[arg(long, default_value_t = 20.0)]
    pub target_p99_ms: f64,
    /// Compaction backlog at which the controller runs background work at
    /// full speed whatever the latency, MiB
    #[arg(long, default_value_t = 256)]
    pub max_backlog_mb: u64,
    /// Largest piece, KiB, in which Sluice lets a background I/O hold the
    /// device while no write stall is near; the controller grows it up to
    /// 8 times as one nears (0: whole I/Os, to see what the pieces do)
    #[arg(long, default_value_t = RcpConfig::default().noncritical_piece_kb)]
    pub noncritical_piece_kb: u64,
    /// Where report.html and its plots go
    #[arg(long, default_value = "results/demo")]
    pub out: PathBuf,
    /// Directory for the stores, empty or new (default: a fresh temporary
    /// one)
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn run(a: DemoArgs) -> Result<()> {
    print!(
        "{}",
        sluice_bench::demo::run(&Demo {
            records: a.records,
            field_length: a.field_length,
            seconds: a.seconds,
            tenants: a.tenants,
            threads: a.threads,
            workload: a.workload,
            target_ops: a.target_ops,
            target_p99_ms: a.target_p99_ms,
            max_backlog_mb: a.max_backlog_mb,
            noncritical_piece_kb: a.noncritical_piece_kb,
            out: a.out,
            dir: a.dir,
        })?
    );
    Ok(())
}
