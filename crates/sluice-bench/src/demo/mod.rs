//! `sluice demo`: sluice-kv on an emulated cloud volume, loaded and then
//! run with YCSB-A by several tenants while flush and compaction work:
//! once with no prioritization (FIFO), once with Sluice (RCP and the
//! background controller), and with Sluice again after compaction has
//! settled (the baseline the background-tasks paper compares against).
//! Makes a side-by-side table and writes an HTML report with plots
//! ([`report`]).

mod report;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sluice_core::controller::{BackgroundController, BackgroundControllerConfig};
use sluice_core::device::{CloudVolumeConfig, DeviceProfile};
use sluice_io::{ControlLoop, DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig};
use sluice_kv::{Db, Options};

use crate::demo::report::{ModeResult, StoreSample};
use crate::driver::{load, run as run_tenants, TenantSpec, Tick};
use crate::target::Embedded;
use crate::ycsb::Workload;

/// What to run.
#[derive(Clone, Debug)]
pub struct Demo {
    /// Records loaded before each run, of 10 fields.
    pub records: u64,
    /// Bytes a field (YCSB's `fieldlength`; 100 makes records of 1 KB).
    pub field_length: usize,
    /// Seconds of YCSB per mode.
    pub seconds: f64,
    /// Tenants, each with its own client threads.
    pub tenants: usize,
    /// Client threads per tenant.
    pub threads: usize,
    /// YCSB core workload run by every tenant, A to F.
    pub workload: char,
    /// Operations per second per tenant (YCSB's -target).
    pub target_ops: f64,
    /// Foreground p99 target of the background controller, ms.
    pub target_p99_ms: f64,
    /// Compaction backlog at which the controller runs background work at
    /// full speed whatever the latency, MiB.
    pub max_backlog_mb: u64,
    /// Largest piece, KiB, in which Sluice lets a background I/O hold the
    /// device (0: whole I/Os).
    pub noncritical_piece_kb: u64,
    /// Where report.html and its plots go.
    pub out: PathBuf,
    /// Directory for the stores (default: a fresh temporary one).
    pub dir: Option<PathBuf>,
}

fn runtime(rcp: RcpConfig) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        device: DeviceConfig {
            kind: DeviceKind::Emulated,
            depth: 32,
            profile: Some(DeviceProfile::CloudVolume(CloudVolumeConfig::default())),
        },
        rcp,
    })?)
}

fn store_options() -> Options {
    Options {
        memtable_bytes: 2 << 20,
        table_bytes: 2 << 20,
        block_cache_bytes: 4 << 20,
        level_base_bytes: 8 << 20,
        sync: false,
        ..Options::default()
    }
}

fn tenants(a: &Demo) -> Result<Vec<TenantSpec>> {
    (0..a.tenants)
        .map(|i| {
            Ok(TenantSpec {
                name: format!("tenant-{}", i + 1),
                workload: workload(a, a.workload)?,
                threads: a.threads,
                weight: 1.0,
                target_ops: Some(a.target_ops),
                pipeline: 1,
            })
        })
        .collect()
}

/// Core workload `letter` over the demo's records, of its field length.
fn workload(a: &Demo, letter: char) -> Result<Workload> {
    Ok(Workload {
        field_length: a.field_length,
        ..Workload::core(letter, a.records)?
    })
}

fn controller(a: &Demo) -> Result<BackgroundController> {
    BackgroundController::new(BackgroundControllerConfig {
        target_p99: (a.target_p99_ms * 1e6) as u64,
        max_backlog: a.max_backlog_mb << 20,
        min_rate: 2e6,
        max_rate: 125e6,
        ..BackgroundControllerConfig::default()
    })
    .map_err(anyhow::Error::msg)
}

/// Runs YCSB-A against `db`; with a controller, it steps at every tick.
fn measure(
    a: &Demo,
    db: &Arc<Db>,
    rt: &Runtime,
    mode: &'static str,
    mut control: Option<ControlLoop>,
    bar: &ProgressBar,
) -> Result<ModeResult> {
    let target = Embedded {
        db: db.clone(),
        runtime: rt.clone(),
    };
    let compacted_before = db.compaction_task().stats().bytes;
    let mut store = Vec::new();
    let started = Instant::now();
    let mut on_tick = |t: Tick| {
        let rate = control.as_mut().map(|lp| lp.step(t.window_p99).rate);
        let stats = db.stats();
        store.push(StoreSample {
            t: t.elapsed,
            l0_tables: stats.levels[0].0,
            immutables: stats.immutables,
            pending_bytes: stats.pending_compaction_bytes,
            compacted_bytes: db.compaction_task().stats().bytes - compacted_before,
            piece_kb: rt.noncritical_piece_kb(),
            rate,
        });
        bar.set_position((t.elapsed * 10.0) as u64);
    };
    let results = run_tenants(&target, &tenants(a)?, a.seconds, 42, &mut on_tick)?;
    Ok(ModeResult {
        mode,
        tenants: results,
        seconds: started.elapsed().as_secs_f64(),
        backlog_end: db.stats().pending_compaction_bytes,
        compacted_bytes: db.compaction_task().stats().bytes - compacted_before,
        store,
        l0_stop: store_options().l0_stop_trigger,
    })
}

/// A progress bar for one step; where stderr is no terminal (a log, CI)
/// the bar draws nothing, so the step is named on a line of its own.
fn bar(label: &str, len: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        eprintln!("{label}");
    }
    let style = ProgressStyle::with_template("{msg:>32} [{bar:30}] {elapsed}").expect("a valid template");
    let b = ProgressBar::new(len).with_style(style.progress_chars("=> "));
    b.set_message(label.to_string());
    b
}

/// Loads a fresh store in `dir` with no prioritization and closes it.
/// Each mode then opens a copy of it ([`opened`]): loading under each mode
/// would let RCP's write stalls pace the load until compaction had caught
/// up, and loading afresh for each mode leaves L0 wherever the load's last
/// write found it (0 to 13 tables in the sustained-write variant, and 13
/// stops writes for the mode's first seconds).
fn load_once(a: &Demo, dir: &Path) -> Result<()> {
    let b = bar(&format!("loading {} records", a.records), 1);
    let rt = runtime(RcpConfig::off())?;
    let target = Embedded {
        db: Arc::new(Db::open(rt.clone(), dir, store_options())?),
        runtime: rt,
    };
    load(&target, &workload(a, 'A')?, 8, 1)?;
    b.finish();
    Ok(())
}

/// A copy of the loaded store at `loaded`, opened in `dir` with the mode's
/// runtime: every mode starts from the same on-disk state, with the load's
/// flush and compaction still to do.
fn opened(loaded: &Path, dir: &Path, rcp: RcpConfig) -> Result<(Arc<Db>, Runtime)> {
    copy_dir(loaded, dir).with_context(|| format!("copying {} to {}", loaded.display(), dir.display()))?;
    let rt = runtime(rcp)?;
    let db = Arc::new(Db::open(rt.clone(), dir, store_options())?);
    Ok((db, rt))
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Runs the three modes and writes the report; returns the table.
pub fn run(a: &Demo) -> Result<String> {
    ensure!(a.records >= 1000, "--records must be at least 1000");
    ensure!(
        (1..=100_000).contains(&a.field_length),
        "--field-length must lie in 1..=100000 bytes, got {}",
        a.field_length
    );
    ensure!(
        a.seconds >= 2.0 && a.seconds.is_finite(),
        "--seconds must be at least 2"
    );
    ensure!(
        a.tenants >= 1 && a.threads >= 1,
        "--tenants and --threads must be at least 1"
    );
    ensure!(a.target_p99_ms > 0.0, "--target-p99-ms must be > 0");
    ensure!(a.max_backlog_mb > 0, "--max-backlog-mb must be > 0");
    Workload::core(a.workload, a.records).context("--workload")?;
    ensure!(
        a.target_ops > 0.0 && a.target_ops.is_finite(),
        "--target-ops must be > 0"
    );
    let scratch = match &a.dir {
        Some(d) => {
            let used = std::fs::read_dir(d).is_ok_and(|mut entries| entries.next().is_some());
            ensure!(
                !used,
                "--dir {}: not empty; the demo loads fresh stores there, give it an empty or new directory",
                d.display()
            );
            d.clone()
        }
        None => std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id())),
    };
    let ticks = (a.seconds * 10.0) as u64;
    let mut modes = Vec::new();

    let loaded = scratch.join("loaded");
    load_once(a, &loaded)?;
    let (db, rt) = opened(&loaded, &scratch.join("fifo"), RcpConfig::off())?;
    let w = a.workload.to_ascii_uppercase();
    let b = bar(&format!("fifo: YCSB-{w}, compaction active"), ticks);
    modes.push(measure(a, &db, &rt, "fifo", None, &b)?);
    b.finish();
    drop(db);

    let rcp = RcpConfig {
        noncritical_piece_kb: a.noncritical_piece_kb,
        ..RcpConfig::default()
    };
    let (db, rt) = opened(&loaded, &scratch.join("sluice"), rcp)?;
    let b = bar(&format!("sluice: YCSB-{w}, compaction active"), ticks);
    let lp = ControlLoop::new(rt.clone(), controller(a)?);
    modes.push(measure(a, &db, &rt, "sluice", Some(lp), &b)?);
    b.finish();

    let b = bar("settling: compaction catches up", 1);
    for task in [db.flush_task(), db.compaction_task()] {
        task.set_knobs(Default::default());
    }
    // Settled runs without the controller: RCP's own pieces again, not
    // the last size the controller chose.
    rt.set_noncritical_piece_kb(a.noncritical_piece_kb);
    db.flush()?;
    db.compact()?;
    b.finish();
    let b = bar(&format!("settled: YCSB-{w}, compaction done"), ticks);
    modes.push(measure(a, &db, &rt, "settled", None, &b)?);
    b.finish();
    drop(db);
    if a.dir.is_none() {
        std::fs::remove_dir_all(&scratch).ok();
    }
    let files = report::write(&a.out, &modes).with_context(|| format!("writing {}", a.out.display()))?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(report::table(&modes))
}
