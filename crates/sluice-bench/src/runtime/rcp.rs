//! Part `rcp`: the schemes of RCP §7.6 side by side on one device, under
//! the [`workload`](crate::runtime::workload) of foreground requests against
//! saturating background writers:
//!
//! | scheme | what it is | RCP's name |
//! |---|---|---|
//! | `fifo` | one FIFO path, no notion of criticality | CFQ without classes |
//! | `static-rate` | `fifo` plus a fixed background rate limit (RocksDB's rate limiter, HBase's throttle) | — |
//! | `dispatch-only` | critical first at dispatch and nothing else: one slot pool, no device bound, no split dirty budget, no inheritance | CFQ-IDLE |
//! | `rcp` | every layer and inheritance | RCP |
//! | `rcp+controller` | `rcp` with the background controller setting the rate from foreground p99 | — |
//!
//! Beside them: the foreground alone, the background alone (under RCP and
//! under FIFO), and the background with a light foreground (one thread,
//! 5 ms think time) for what the device bound leaves background work: it
//! lifts while no critical I/O is expected (sluice-io's `sched`), so the
//! background alone should run near FIFO's speed. The light foreground
//! alone is its baseline: what the lifted bound costs its tail.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use sluice_core::controller::BackgroundControllerConfig;
use sluice_io::RcpConfig;

use crate::runtime::config::IoBench;
use crate::runtime::device::runtime;
use crate::runtime::runs::{ratio, Metrics, Ratio, Run};
use crate::runtime::workload::{self, Governor, Load};

/// The schemes compared, in the order of the table above.
pub(crate) const SCHEMES: [&str; 5] = ["fifo", "static-rate", "dispatch-only", "rcp", "rcp+controller"];

/// One configuration of a round.
pub(crate) struct Config {
    pub name: String,
    pub rcp: RcpConfig,
    pub governor: Governor,
    pub load: Load,
}

pub(crate) fn heavy(b: &IoBench) -> Load {
    Load {
        readers: b.foreground_threads,
        think: Some(Duration::from_micros(b.think_us)),
        writers: b.background_threads,
        block: b.background_block,
        burst: b.background_burst,
    }
}

/// One foreground thread with 5 ms think time, as in RCP §7.6.
pub(crate) fn light(b: &IoBench) -> Load {
    Load {
        readers: 1,
        think: Some(Duration::from_millis(5)),
        ..heavy(b)
    }
}

/// Priority at dispatch only, as an idle I/O class in the kernel gives.
fn dispatch_only() -> RcpConfig {
    RcpConfig {
        split_dirty: false,
        split_admission: false,
        noncritical_device_bound: 0,
        inheritance: false,
        ..RcpConfig::default()
    }
}

fn controller(b: &IoBench) -> BackgroundControllerConfig {
    BackgroundControllerConfig {
        target_p99: b.target_p99_us * 1000,
        min_rate: 1e6,
        max_rate: 2e9,
        ..BackgroundControllerConfig::default()
    }
}

pub(crate) fn config(name: impl Into<String>, rcp: RcpConfig, governor: Governor, load: Load) -> Config {
    Config {
        name: name.into(),
        rcp,
        governor,
        load,
    }
}

/// Runs each configuration once, in a sub-directory of its own.
pub(crate) fn run_all(b: &IoBench, dir: &Path, list: Vec<Config>) -> Result<Vec<(String, Metrics)>> {
    list.into_iter()
        .map(|c| {
            let sub = dir.join(&c.name);
            std::fs::create_dir_all(&sub)?;
            let rt = runtime(c.rcp, b.device.kind())?;
            let metrics = workload::run(&rt, &sub, c.load, c.governor, b.seconds)?;
            // A gigabyte of background files each: in memory, one at a time.
            std::fs::remove_dir_all(&sub).ok();
            Ok((c.name, metrics))
        })
        .collect()
}

pub(crate) fn round(b: &IoBench, dir: &Path) -> Result<Vec<(String, Metrics)>> {
    let (heavy, light) = (heavy(b), light(b));
    let rcp = || {
        let default = RcpConfig::default();
        RcpConfig {
            noncritical_lifted_bound: b.lifted_bound.unwrap_or(default.noncritical_lifted_bound),
            ..default
        }
    };
    let (off, none) = (RcpConfig::off, Governor::None);
    let static_rate = Governor::StaticRate(b.static_rate_mb * 1e6);
    let alone = Load { writers: 0, ..heavy };
    let bg_alone = Load { readers: 0, ..heavy };
    run_all(
        b,
        dir,
        vec![
            config("fg-alone", rcp(), none, alone),
            config("fifo", off(), none, heavy),
            config("static-rate", off(), static_rate, heavy),
            config("dispatch-only", dispatch_only(), none, heavy),
            config("rcp", rcp(), none, heavy),
            config("rcp+controller", rcp(), Governor::Controller(controller(b)), heavy),
            config("bg-alone-rcp", rcp(), none, bg_alone),
            config("bg+light-fg-rcp", rcp(), none, light),
            config("light-fg-alone", rcp(), none, Load { writers: 0, ..light }),
            config("bg-alone-fifo", off(), none, bg_alone),
        ],
    )
}

pub(crate) fn ratios(runs: &[&Run]) -> Vec<Ratio> {
    let mut out = vec![
        ratio(
            runs,
            "fg p99.9: rcp / fg-alone (target <= 2)",
            "rcp",
            "fg-alone",
            "fg_p999_us",
        ),
        ratio(runs, "fg p99.9: fifo / rcp (target >= 10)", "fifo", "rcp", "fg_p999_us"),
        ratio(
            runs,
            "bg MB/s: light fg / bg-alone, rcp (target >= 0.5)",
            "bg+light-fg-rcp",
            "bg-alone-rcp",
            "bg_mb_s",
        ),
        ratio(
            runs,
            "fg p99.9: light fg with bg / light fg alone, rcp",
            "bg+light-fg-rcp",
            "light-fg-alone",
            "fg_p999_us",
        ),
        ratio(
            runs,
            "bg MB/s: bg-alone rcp / bg-alone fifo (target >= 0.8)",
            "bg-alone-rcp",
            "bg-alone-fifo",
            "bg_mb_s",
        ),
        ratio(
            runs,
            "bg MB/s: light fg rcp / bg-alone fifo (target >= 0.5)",
            "bg+light-fg-rcp",
            "bg-alone-fifo",
            "bg_mb_s",
        ),
    ];
    for scheme in SCHEMES.iter().filter(|&&s| s != "rcp") {
        if *scheme != "fifo" {
            out.push(ratio(
                runs,
                &format!("fg p99.9: {scheme} / rcp"),
                scheme,
                "rcp",
                "fg_p999_us",
            ));
        }
        out.push(ratio(
            runs,
            &format!("bg MB/s: {scheme} / rcp"),
            scheme,
            "rcp",
            "bg_mb_s",
        ));
    }
    out
}
