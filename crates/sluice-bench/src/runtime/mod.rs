//! `sluice bench io`: the I/O runtime measured against its baselines.
//!
//! | part | file | compares |
//! |---|---|---|
//! | `rcp` | [`rcp`] | FIFO, a static rate limit, dispatch priority only, RCP, RCP plus the controller; foreground alone; background cost |
//! | `bound` | [`bound`] | the non-critical device bound swept (RCP §7.6, Fig. 11) |
//! | `overhead` | [`overhead`] | the runtime against a plain `pread` loop |
//! | `memory` | [`memory`] | bookkeeping per queued I/O; RSS over a long run |
//! | `uring` | [`uring`] | `pread` threads against one io_uring ring, page cache and real disk |
//!
//! What to measure is in [`config`]; the devices and files the parts use in
//! [`device`]; a configuration's result and the ratios between them in
//! [`runs`]; the workload of `rcp` and `bound` in [`workload`]; plots in
//! [`plot`].
//!
//! The emulated device's backing files go to memory (`/dev/shm`) unless
//! `--dir` says otherwise: its timing is its model's, and the host's own
//! write-back of a gigabyte of background writes to its disk stalled the
//! threads of the foreground for tens of milliseconds (run WC9 in
//! `docs/BENCHMARKS.md`), a cost no device model has.
//!
//! Configurations are interleaved within each round, rounds are repeated,
//! CPU steal is recorded per round and rounds above the threshold are set
//! aside; ratios are paired within a round and reported as median and range.

mod bound;
mod config;
mod device;
mod memory;
mod overhead;
mod plot;
mod rcp;
mod runs;
mod uring;
mod workload;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub use self::config::{IoBench, Medium, Part};

use anyhow::{ensure, Context, Result};

use crate::harness::split_by_steal;
use crate::process::status_mib;
use crate::runtime::runs::{median_of, Metrics, Ratio, Run};
use crate::steal;

/// Runs the rounds and writes runs.json and the plots to `--out`; returns
/// the tables (or JSON).
pub fn run(b: &IoBench) -> Result<String> {
    ensure!(b.repeat >= 1, "--repeat must be at least 1");
    ensure!(
        b.seconds > 0.0 && b.seconds.is_finite(),
        "--seconds must be a number > 0"
    );
    ensure!(b.background_block > 0, "--background-block must be at least 1 byte");
    ensure!(b.foreground_threads > 0, "--foreground-threads must be at least 1");
    ensure!(b.background_burst > 0, "--background-burst must be at least 1");
    ensure!(
        b.static_rate_mb > 0.0 && b.static_rate_mb.is_finite(),
        "--static-rate-mb must be a number > 0"
    );
    ensure!(
        b.background_block.is_multiple_of(sluice_io::device::DIRECT_ALIGN) || b.device == Medium::Ssd,
        "--background-block must be a multiple of {} bytes on --device disk (O_DIRECT)",
        sluice_io::device::DIRECT_ALIGN
    );
    let tmp = scratch_dir(b.dir.as_deref(), false)?;
    let modelled = match (&b.dir, b.device) {
        (None, Medium::Ssd) => scratch_dir(None, true)?,
        _ => tmp.clone(),
    };
    let mut runs = Vec::new();
    for round in 0..b.repeat {
        let dirs = [tmp.join(format!("r{round}")), modelled.join(format!("m{round}"))];
        for d in &dirs {
            std::fs::create_dir_all(d)?;
        }
        let (results, steal) = steal::during(|| round_of_parts(b, &dirs[0], &dirs[1]));
        for d in &dirs {
            std::fs::remove_dir_all(d).ok();
        }
        eprintln!("round {}/{}: steal {:.1}%", round + 1, b.repeat, steal * 100.0);
        runs.extend(results?.into_iter().map(|(config, metrics)| Run {
            round,
            config,
            steal,
            metrics,
        }));
    }
    if b.dir.is_none() {
        std::fs::remove_dir_all(&tmp).ok();
        std::fs::remove_dir_all(&modelled).ok();
    }
    let (kept, set_aside) = split_by_steal(&runs, b.max_steal);
    let text = report(b, &kept, &set_aside)?;
    write_out(b, &kept, &set_aside)?;
    Ok(text)
}

/// Every configuration of the parts asked for, once: files in `dir`, and
/// those of the RCP parts' device in `modelled`.
fn round_of_parts(b: &IoBench, dir: &Path, modelled: &Path) -> Result<Vec<(String, Metrics)>> {
    let mut results = Vec::new();
    if matches!(b.part, Part::Rcp | Part::All) {
        results.extend(rcp::round(b, modelled)?);
    }
    if b.part == Part::Bound {
        results.extend(bound::round(b, modelled)?);
    }
    if matches!(b.part, Part::Overhead | Part::All) {
        results.extend(overhead::round(b, dir)?);
    }
    if matches!(b.part, Part::Memory | Part::All) {
        results.extend(memory::round(dir)?);
    }
    if matches!(b.part, Part::Uring | Part::All) {
        results.extend(uring::round(b, dir)?);
    }
    Ok(results)
}

fn ratios(runs: &[&Run]) -> Vec<Ratio> {
    let mut all = rcp::ratios(runs);
    all.extend(bound::ratios(runs));
    all.extend(overhead::ratios(runs));
    all.extend(uring::ratios(runs));
    all.into_iter().filter(|r| r.1.is_finite()).collect()
}

/// Writes every run and the plots to `--out`.
fn write_out(b: &IoBench, kept: &[&Run], set_aside: &[&Run]) -> Result<()> {
    std::fs::create_dir_all(&b.out).with_context(|| format!("creating {}", b.out.display()))?;
    let runs = b.out.join("runs.json");
    let json = serde_json::json!({ "kept": kept, "set_aside": set_aside, "ratios": ratios(kept) });
    std::fs::write(&runs, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", runs.display()))?;
    let mut files = vec![runs];
    files.extend(plot::write(&b.out, kept)?);
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// Memory the emulated device's files need at once: one configuration's
/// 128 background files of 8 MiB, and room to spare.
const IN_MEMORY_BYTES: u64 = 2 << 30;

/// `dir`, or a fresh directory: in memory if asked and `/dev/shm` has
/// room, else in the temporary directory.
fn scratch_dir(dir: Option<&Path>, in_memory: bool) -> Result<PathBuf> {
    let shm = Path::new("/dev/shm");
    let memory = in_memory
        && dir.is_none()
        && match free_bytes(shm) {
            Some(free) if free >= IN_MEMORY_BYTES => true,
            Some(free) => {
                eprintln!(
                    "note: /dev/shm has {} MiB free, less than the {} MiB the emulated device's files need; \
                     they go to the temporary directory, where the host's write-back of them may stall the \
                     foreground (--dir chooses another place)",
                    free >> 20,
                    IN_MEMORY_BYTES >> 20
                );
                false
            }
            None => false,
        };
    let d = match dir {
        Some(d) => d.to_path_buf(),
        None if memory => shm.join(format!("sluice-bench-io-{}", std::process::id())),
        None => std::env::temp_dir().join(format!("sluice-bench-io-{}-disk", std::process::id())),
    };
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

fn report(b: &IoBench, kept: &[&Run], set_aside: &[&Run]) -> Result<String> {
    let ratios = ratios(kept);
    let peak = status_mib("self", "VmHWM:");
    if b.json {
        let out = serde_json::json!({ "kept": kept, "set_aside": set_aside, "ratios": ratios, "peak_rss_mib": peak });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&out)?));
    }
    let mut out = format!(
        "{} runs kept, {} set aside (steal > {:.0}%); medians over kept rounds\n",
        kept.len(),
        set_aside.len(),
        b.max_steal * 100.0
    );
    let configs: BTreeSet<&str> = kept.iter().map(|r| r.config.as_str()).collect();
    for c in configs {
        let first = kept
            .iter()
            .find(|r| r.config == c)
            .expect("a run of every listed config");
        let metrics: Vec<String> = first
            .metrics
            .keys()
            .filter_map(|k| Some(format!("{k} {:.1}", median_of(kept, c, k)?)))
            .collect();
        out += &format!("{c:>22}: {}\n", metrics.join(", "));
    }
    if !ratios.is_empty() {
        out += "ratios, paired by round: median (min-max)\n";
    }
    for (label, m, lo, hi) in &ratios {
        out += &format!("  {label}: {m:.3} ({lo:.3}-{hi:.3})\n");
    }
    out += &format!("peak RSS: {peak:.1} MiB\n");
    Ok(out)
}

/// Bytes free to an unprivileged writer on the file system at `path`;
/// `None` if it cannot be read (no such directory).
fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_read_where_the_directory_exists() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).is_some_and(|b| b > 0));
        assert_eq!(free_bytes(&dir.path().join("no/such/dir")), None);
    }

    #[test]
    fn a_given_directory_is_used_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("mine");
        assert_eq!(scratch_dir(Some(&d), true).unwrap(), d);
        assert!(d.is_dir());
    }
}
