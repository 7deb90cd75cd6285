//! Reports of a sweep: text tables, CSV, JSON and SVG line charts (average
//! tardiness normalized to each baseline, as TraQIOS plots it, plus absolute
//! tardiness and miss ratio). Nothing here depends on time or threads, so
//! the same result always gives the same bytes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::sweep::{Cell, SweepResult};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {message}")]
    Write { path: String, message: String },
}

fn write_err(path: &Path, e: impl std::fmt::Display) -> ReportError {
    ReportError::Write {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// A table with one row per swept value and one column per policy.
fn table(result: &SweepResult, heading: &str, value: impl Fn(&Cell) -> f64, decimals: usize) -> String {
    let exp = &result.experiment;
    let mut out = format!("{heading}\n");
    let width = exp
        .policies
        .iter()
        .map(|p| p.to_string().len())
        .max()
        .unwrap_or(8)
        .max(8)
        + 2;
    let _ = write!(out, "{:>18}", exp.parameter);
    for p in &exp.policies {
        let _ = write!(out, "{:>width$}", p.to_string());
    }
    out.push('\n');
    for x in result.xs() {
        let _ = write!(out, "{x:>18}");
        for p in &exp.policies {
            let v = result.cell(x, &p.to_string()).map(&value).unwrap_or(f64::NAN);
            let _ = write!(out, "{v:>width$.decimals$}");
        }
        out.push('\n');
    }
    out
}

/// The tables `sluice sim` prints: tardiness normalized to each baseline,
/// absolute tardiness and miss ratio.
pub fn tables(result: &SweepResult) -> String {
    let mut out = String::new();
    for (i, b) in result.experiment.baselines.iter().enumerate() {
        let heading = format!(
            "Average tardiness normalized to {} (lower is better)",
            b.to_string().to_uppercase()
        );
        out += &table(result, &heading, |c| c.ratios[i].ratio, 3);
        out.push('\n');
    }
    out += &table(result, "Average tardiness (ms)", |c| c.avg_tardiness_ms, 1);
    out.push('\n');
    out += &table(result, "Miss ratio", |c| c.miss_ratio, 3);
    out
}

/// Writes runs.csv, summary.csv, result.json and the SVG charts into `dir`;
/// returns the files written.
pub fn write_all(result: &SweepResult, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
    let mut files = vec![write_runs(result, dir)?, write_summary(result, dir)?];
    let json = dir.join("result.json");
    let text = serde_json::to_string_pretty(result).map_err(|e| write_err(&json, e))?;
    std::fs::write(&json, text + "\n").map_err(|e| write_err(&json, e))?;
    files.push(json);
    files.extend(write_charts(result, dir)?);
    Ok(files)
}

fn write_runs(result: &SweepResult, dir: &Path) -> Result<PathBuf, ReportError> {
    let path = dir.join("runs.csv");
    let mut w = csv::Writer::from_path(&path).map_err(|e| write_err(&path, e))?;
    let header = [
        result.experiment.parameter.as_str(),
        "policy",
        "seed",
        "transactions",
        "ios",
        "cache_hits",
        "avg_tardiness_ms",
        "miss_ratio",
        "mean_latency_ms",
        "p99_latency_ms",
        "disk_busy",
        "makespan_ms",
        "peak_transactions",
        "peak_queue",
    ];
    w.write_record(header).map_err(|e| write_err(&path, e))?;
    for r in &result.runs {
        let s = &r.stats;
        let row = [
            r.x.to_string(),
            r.policy.clone(),
            r.seed.to_string(),
            s.transactions.to_string(),
            s.ios.to_string(),
            s.cache_hits.to_string(),
            s.avg_tardiness_ms.to_string(),
            s.miss_ratio.to_string(),
            s.mean_latency_ms.to_string(),
            s.p99_latency_ms.to_string(),
            s.disk_busy.to_string(),
            s.makespan_ms.to_string(),
            s.peak_transactions.to_string(),
            s.peak_queue.to_string(),
        ];
        w.write_record(&row).map_err(|e| write_err(&path, e))?;
    }
    w.flush().map_err(|e| write_err(&path, e))?;
    Ok(path)
}

fn write_summary(result: &SweepResult, dir: &Path) -> Result<PathBuf, ReportError> {
    let path = dir.join("summary.csv");
    let mut w = csv::Writer::from_path(&path).map_err(|e| write_err(&path, e))?;
    let mut header: Vec<String> = [
        result.experiment.parameter.as_str(),
        "policy",
        "avg_tardiness_ms",
        "tardiness_std_ms",
        "miss_ratio",
        "mean_latency_ms",
        "p99_latency_ms",
        "disk_busy",
    ]
    .map(String::from)
    .to_vec();
    for b in &result.experiment.baselines {
        header.extend([format!("vs_{b}"), format!("vs_{b}_min"), format!("vs_{b}_max")]);
    }
    w.write_record(&header).map_err(|e| write_err(&path, e))?;
    for c in &result.cells {
        let mut row = vec![
            c.x.to_string(),
            c.policy.clone(),
            c.avg_tardiness_ms.to_string(),
            c.tardiness_std_ms.to_string(),
            c.miss_ratio.to_string(),
            c.mean_latency_ms.to_string(),
            c.p99_latency_ms.to_string(),
            c.disk_busy.to_string(),
        ];
        for r in &c.ratios {
            row.extend([r.ratio.to_string(), r.min.to_string(), r.max.to_string()]);
        }
        w.write_record(&row).map_err(|e| write_err(&path, e))?;
    }
    w.flush().map_err(|e| write_err(&path, e))?;
    Ok(path)
}

/// Named lines of (x, y) points.
pub type Series = Vec<(String, Vec<(f64, f64)>)>;

fn series(result: &SweepResult, value: impl Fn(&Cell) -> f64) -> Series {
    result
        .experiment
        .policies
        .iter()
        .map(|p| {
            let name = p.to_string();
            let points = result
                .cells
                .iter()
                .filter(|c| c.policy == name)
                .map(|c| (c.x, value(c)))
                .filter(|(_, y)| y.is_finite())
                .collect();
            (name, points)
        })
        .collect()
}

fn write_charts(result: &SweepResult, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let exp = &result.experiment;
    let mut files = Vec::new();
    for (i, b) in exp.baselines.iter().enumerate() {
        let path = dir.join(format!("tardiness_vs_{b}.svg"));
        let title = format!(
            "{}: tardiness normalized to {}",
            exp.title,
            b.to_string().to_uppercase()
        );
        line_chart(
            &path,
            &title,
            &exp.parameter,
            &format!("tardiness / {b}"),
            &series(result, |c| c.ratios[i].ratio),
        )?;
        files.push(path);
    }
    let path = dir.join("tardiness.svg");
    line_chart(
        &path,
        &format!("{}: average tardiness", exp.title),
        &exp.parameter,
        "ms",
        &series(result, |c| c.avg_tardiness_ms),
    )?;
    files.push(path);
    let path = dir.join("miss_ratio.svg");
    line_chart(
        &path,
        &format!("{}: miss ratio", exp.title),
        &exp.parameter,
        "miss ratio",
        &series(result, |c| c.miss_ratio),
    )?;
    files.push(path);
    Ok(files)
}

fn bounds(series: &Series) -> ((f64, f64), (f64, f64)) {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64, f64::NEG_INFINITY);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        return ((0.0, 1.0), (0.0, 1.0));
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if !y1.is_finite() || y1 <= y0 {
        y1 = y0 + 1.0;
    }
    ((x0, x1), (y0, y1 * 1.05))
}

/// An SVG line chart of `series`, each point marked, with a legend.
pub fn line_chart(path: &Path, title: &str, x_label: &str, y_label: &str, series: &Series) -> Result<(), ReportError> {
    let ((x0, x1), (y0, y1)) = bounds(series);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    let draw = |e: &dyn std::fmt::Display| write_err(path, e);
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
            .map_err(|e| draw(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
