//! Experiment files: a TOML description of a sweep over one workload
//! parameter × policy × seed, on the seek disk. Every field but `policies`
//! and `sweep` has the paper's default. See `scenarios/README.md` for the
//! format; a file that is malformed or inconsistent gets one error line
//! naming the field.
//!
//! ```toml
//! name = "fig4"
//! title = "TraQIOS Fig. 4/5: SlackFactor_max = 4"
//! seeds = 5                 # runs per point and policy (seeds seed..seed+4)
//! seed = 1
//! policies = ["edf", "sstf", "fd-scan", "ssedv", "traqios"]
//! baselines = ["edf", "sstf"]   # what tardiness is normalized to
//!
//! [sweep]
//! parameter = "utilization"     # any numeric [workload] field
//! values = [0.1, 0.2, 0.3]      # or: from = 0.1, to = 0.9, step = 0.1
//!
//! [disk]                        # sluice_core::device::SeekDiskConfig
//! b = 0.3
//!
//! [workload]                    # crate::workload::TraqiosWorkload
//! slack_factor_max = 4.0
//!
//! [options]                     # sluice_core::PolicyOptions
//! window = 100
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};
use sluice_core::device::{SeekDisk, SeekDiskConfig};
use sluice_core::{PolicyOptions, PolicySpec};
use thiserror::Error;

use crate::workload::TraqiosWorkload;

/// The most points one sweep may have.
pub const MAX_POINTS: usize = 1000;

#[derive(Debug, Error)]
pub enum ExperimentError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ExperimentError {
    ExperimentError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The swept parameter and its values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    #[serde(default = "utilization")]
    pub parameter: String,
    #[serde(default)]
    pub values: Option<Vec<f64>>,
    #[serde(default)]
    pub from: Option<f64>,
    #[serde(default)]
    pub to: Option<f64>,
    #[serde(default)]
    pub step: Option<f64>,
}

fn utilization() -> String {
    "utilization".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<String>,
    title: Option<String>,
    #[serde(default = "five")]
    seeds: u32,
    #[serde(default = "one")]
    seed: u64,
    policies: Vec<String>,
    baselines: Option<Vec<String>>,
    sweep: Sweep,
    #[serde(default)]
    disk: SeekDiskConfig,
    #[serde(default)]
    workload: TraqiosWorkload,
    #[serde(default)]
    options: PolicyOptions,
}

fn five() -> u32 {
    5
}
fn one() -> u64 {
    1
}

/// One point of the sweep: the x value and the workload it gives.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub x: f64,
    pub workload: TraqiosWorkload,
}

/// A validated experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Experiment {
    pub name: String,
    pub title: String,
    pub seeds: u32,
    pub seed: u64,
    #[serde(serialize_with = "as_names")]
    pub policies: Vec<PolicySpec>,
    #[serde(serialize_with = "as_names")]
    pub baselines: Vec<PolicySpec>,
    pub parameter: String,
    pub points: Vec<Point>,
    pub disk: SeekDiskConfig,
    pub options: PolicyOptions,
}

fn as_names<S: serde::Serializer>(specs: &[PolicySpec], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(specs.iter().map(|p| p.to_string()))
}

/// Workload fields that can be swept, and how to set them.
const SWEEPABLE: [&str; 7] = [
    "utilization",
    "slack_factor_max",
    "cache_hit",
    "sequential",
    "inaccuracy",
    "inaccuracy_correlation",
    "layout_cylinders",
];

fn set(w: &mut TraqiosWorkload, parameter: &str, x: f64) {
    match parameter {
        "utilization" => w.utilization = x,
        "slack_factor_max" => w.slack_factor_max = x,
        "cache_hit" => w.cache_hit = x,
        "sequential" => w.sequential = x,
        "inaccuracy" => w.inaccuracy = x,
        "inaccuracy_correlation" => w.inaccuracy_correlation = x,
        "layout_cylinders" => w.layout_cylinders = x.round().max(0.0) as u64,
        _ => unreachable!("parameter checked against SWEEPABLE"),
    }
}

impl Experiment {
    /// Reads and validates an experiment file.
    pub fn load(path: &Path) -> Result<Self, ExperimentError> {
        let text = std::fs::read_to_string(path).map_err(|source| ExperimentError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        Self::parse(&text, stem.as_deref().unwrap_or("experiment"))
    }

    /// Parses and validates experiment text; `default_name` names it if the
    /// text does not.
    pub fn parse(text: &str, default_name: &str) -> Result<Self, ExperimentError> {
        let file: File = toml::from_str(text).map_err(|e| syntax(text, &e))?;
        let name = file.name.unwrap_or_else(|| default_name.to_string());
        if name.is_empty() || name.contains(['/', '\\']) {
            return Err(invalid(
                "name",
                format!("must be non-empty without slashes, got `{name}`"),
            ));
        }
        let policies = policy_list("policies", &file.policies)?;
        if policies.is_empty() {
            return Err(invalid("policies", "the list is empty; name at least one policy"));
        }
        let baselines = match &file.baselines {
            Some(b) => policy_list("baselines", b)?,
            None => [PolicySpec::Edf, PolicySpec::Sstf]
                .into_iter()
                .filter(|b| policies.contains(b))
                .collect(),
        };
        if let Some(b) = baselines.iter().find(|b| !policies.contains(b)) {
            return Err(invalid("baselines", format!("`{b}` is not in `policies`")));
        }
        if file.seeds == 0 {
            return Err(invalid("seeds", "must be at least 1"));
        }
        let disk = SeekDisk::new(file.disk).map_err(|e| invalid("disk", e.to_string()))?;
        file.options.validate().map_err(|e| invalid("options", e.to_string()))?;
        file.workload
            .validate(disk.cylinders())
            .map_err(|e| invalid(format!("workload.{}", e.field), e.problem))?;
        let points = points(&file.sweep, &file.workload, disk.cylinders())?;
        Ok(Experiment {
            title: file.title.unwrap_or_else(|| name.clone()),
            name,
            seeds: file.seeds,
            seed: file.seed,
            policies,
            baselines,
            parameter: file.sweep.parameter,
            points,
            disk: file.disk,
            options: file.options,
        })
    }

    /// Number of simulation runs.
    pub fn runs(&self) -> usize {
        self.points.len() * self.policies.len() * self.seeds as usize
    }
}

fn syntax(text: &str, e: &toml::de::Error) -> ExperimentError {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
        .unwrap_or(1);
    ExperimentError::Syntax {
        line,
        message: e.message().trim().replace('\n', " "),
    }
}

fn policy_list(field: &str, names: &[String]) -> Result<Vec<PolicySpec>, ExperimentError> {
    let mut out = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let spec: PolicySpec = n
            .parse()
            .map_err(|e: sluice_core::PolicyError| invalid(format!("{field}[{i}]"), e.to_string()))?;
        if out.contains(&spec) {
            return Err(invalid(format!("{field}[{i}]"), format!("`{n}` is listed twice")));
        }
        out.push(spec);
    }
    Ok(out)
}

fn points(sweep: &Sweep, base: &TraqiosWorkload, cylinders: u64) -> Result<Vec<Point>, ExperimentError> {
    let p = sweep.parameter.as_str();
    if !SWEEPABLE.contains(&p) {
        return Err(invalid(
            "sweep.parameter",
            format!("`{p}` cannot be swept; choose one of {}", SWEEPABLE.join(", ")),
        ));
    }
    let xs = values(sweep)?;
    xs.into_iter()
        .map(|x| {
            let mut w = base.clone();
            set(&mut w, p, x);
            w.validate(cylinders).map_err(|e| {
                invalid(
                    format!("sweep ({p} = {x})"),
                    format!("workload.{}: {}", e.field, e.problem),
                )
            })?;
            Ok(Point { x, workload: w })
        })
        .collect()
}

fn values(sweep: &Sweep) -> Result<Vec<f64>, ExperimentError> {
    let xs = match (&sweep.values, sweep.from, sweep.to, sweep.step) {
        (Some(v), None, None, None) => v.clone(),
        (None, Some(from), Some(to), Some(step)) => range(from, to, step)?,
        (Some(_), ..) => return Err(invalid("sweep", "give either `values` or `from`/`to`/`step`, not both")),
        (None, ..) => return Err(invalid("sweep", "give `values`, or all of `from`, `to` and `step`")),
    };
    if xs.is_empty() {
        return Err(invalid("sweep.values", "the list is empty"));
    }
    if xs.len() > MAX_POINTS {
        return Err(invalid("sweep", format!("{} points; at most {MAX_POINTS}", xs.len())));
    }
    if let Some(x) = xs.iter().find(|x| !x.is_finite()) {
        return Err(invalid("sweep.values", format!("{x} is not a finite number")));
    }
    Ok(xs)
}

fn range(from: f64, to: f64, step: f64) -> Result<Vec<f64>, ExperimentError> {
    if !(from.is_finite() && to.is_finite()) {
        return Err(invalid("sweep.from", "`from` and `to` must be finite numbers"));
    }
    if from > to {
        return Err(invalid(
            "sweep.from",
            format!("low end {from} exceeds high end `to` = {to}"),
        ));
    }
    if !(step.is_finite() && step > 0.0) {
        return Err(invalid("sweep.step", format!("must be a number > 0, got {step}")));
    }
    let count = ((to - from) / step + 1e-9).floor() + 1.0;
    if count > MAX_POINTS as f64 {
        return Err(invalid(
            "sweep.step",
            format!("gives {count} points; at most {MAX_POINTS}"),
        ));
    }
    let n = count as usize;
    // Rounded so that 0.1 + 2 * 0.1 prints as 0.3.
    Ok((0..n).map(|i| ((from + i as f64 * step) * 1e9).round() / 1e9).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
        policies = ["edf", "sstf"]
        [sweep]
        from = 0.1
        to = 0.5
        step = 0.1
    "#;

    fn err(text: &str) -> String {
        Experiment::parse(text, "t").unwrap_err().to_string()
    }

    #[test]
    fn a_minimal_file_gets_the_papers_defaults() {
        let e = Experiment::parse(OK, "t").unwrap();
        assert_eq!(e.name, "t");
        assert_eq!(e.seeds, 5);
        assert_eq!(
            e.points.iter().map(|p| p.x).collect::<Vec<_>>(),
            vec![0.1, 0.2, 0.3, 0.4, 0.5]
        );
        assert_eq!(e.points[2].workload.utilization, 0.3);
        assert_eq!(e.points[0].workload.transactions, 5000);
        assert_eq!(e.baselines, vec![PolicySpec::Edf, PolicySpec::Sstf]);
        assert_eq!(e.runs(), 5 * 2 * 5);
    }

    #[test]
    fn unknown_field_names_the_field_and_line() {
        let e = err("policies = [\"edf\"]\nbogus = 3\n[sweep]\nvalues = [0.5]\n");
        assert!(e.contains("unknown field `bogus`") && e.starts_with("line 2"), "{e}");
        let e = err("policies = [\"edf\"]\n[sweep]\nvalues = [0.5]\n[workload]\nutilisation = 0.3\n");
        assert!(e.contains("`utilisation`") && e.starts_with("line 5"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn inconsistent_files_get_one_clear_line() {
        let cases = [
            ("policies = []\n[sweep]\nvalues = [0.5]", "policies"),
            (
                "policies = [\"edf\"]\n[sweep]\nvalues = [0.5, 1.2]",
                "utilization = 1.2",
            ),
            ("policies = [\"edf\"]\n[sweep]\nvalues = [0.0]", "must lie in (0, 1]"),
            (
                "policies = [\"edf\"]\n[sweep]\nfrom = 0.9\nto = 0.1\nstep = 0.1",
                "exceeds high end",
            ),
            ("policies = [\"edf\"]\n[sweep]\nvalues = []", "sweep.values"),
            ("policies = [\"nope\"]\n[sweep]\nvalues = [0.5]", "policies[0]"),
            (
                "policies = [\"edf\"]\n[sweep]\nvalues = [0.5]\n[workload]\nutilization = 2.0",
                "workload.utilization",
            ),
            (
                "policies = [\"edf\"]\n[sweep]\nparameter = \"think_ms\"\nvalues = [0.5]",
                "sweep.parameter",
            ),
            (
                "policies = [\"edf\"]\nbaselines = [\"sstf\"]\n[sweep]\nvalues = [0.5]",
                "baselines",
            ),
            ("policies = [\"edf\"]\nseeds = 0\n[sweep]\nvalues = [0.5]", "seeds"),
            (
                "policies = [\"edf\"]\n[sweep]\nvalues = [0.5]\n[disk]\ncylinders = 0",
                "disk",
            ),
            (
                "policies = [\"edf\"]\n[sweep]\nvalues = [0.5]\n[options.ssedv]\nalpha = 3.0",
                "alpha",
            ),
            ("policies = [\"edf\"]\n[sweep]\nvalues = [0.5]\nfrom = 0.1", "not both"),
            ("policies = [\"edf\", \"edf\"]\n[sweep]\nvalues = [0.5]", "twice"),
            ("policies = \"edf\"\n[sweep]\nvalues = [0.5]", "line 1"),
            (
                "policies = [\"edf\"]\n[sweep]\nfrom = 0.1\nto = 0.5\nstep = 0",
                "sweep.step",
            ),
            (
                "policies = [\"edf\"]\n[sweep]\nfrom = 0.0\nto = 1e300\nstep = 1e-300",
                "at most 1000",
            ),
        ];
        for (text, needle) in cases {
            let e = err(text);
            assert!(e.contains(needle), "`{e}` lacks `{needle}`");
            assert!(!e.contains('\n'), "more than one line: {e}");
        }
    }
}
