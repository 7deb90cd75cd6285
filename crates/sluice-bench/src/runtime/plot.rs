//! SVG plots of the kept rounds' medians: the schemes as points of
//! foreground p99.9 against background throughput, and the device-bound
//! sweep as RCP Fig. 11 draws it (throughput and latency against the bound).

use std::path::{Path, PathBuf};

use anyhow::Result;
use sluice_sim::report::{line_chart, Series};

use crate::runtime::runs::{median_of, Run};
use crate::runtime::{bound, rcp};

pub(crate) fn write(out: &Path, kept: &[&Run]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let schemes: Series = rcp::SCHEMES
        .iter()
        .filter_map(|&s| {
            let point = (median_of(kept, s, "bg_mb_s")?, median_of(kept, s, "fg_p999_us")?);
            Some((s.to_string(), vec![point]))
        })
        .collect();
    if !schemes.is_empty() {
        let path = out.join("schemes.svg");
        line_chart(
            &path,
            "Foreground p99.9 against background throughput",
            "background MB/s",
            "foreground p99.9 (us)",
            &schemes,
        )?;
        files.push(path);
    }
    for (metric, label, file) in [
        ("bg_mb_s", "background MB/s", "bound_throughput.svg"),
        ("fg_mean_us", "foreground mean latency (us)", "bound_latency.svg"),
    ] {
        let points: Vec<(f64, f64)> = bound::BOUNDS
            .iter()
            .filter_map(|&b| Some((b as f64, median_of(kept, &bound::name(b), metric)?)))
            .collect();
        if points.is_empty() {
            continue;
        }
        let path = out.join(file);
        let title = format!("{label} against the non-critical device bound (RCP Fig. 11)");
        line_chart(
            &path,
            &title,
            "non-critical I/Os at the device",
            label,
            &vec![(label.to_string(), points)],
        )?;
        files.push(path);
    }
    Ok(files)
}
