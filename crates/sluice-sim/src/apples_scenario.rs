//! AppleS scenario files: named runs of [`crate::apples`] side by side,
//! each over several seeds, with ratios to a baseline run. `sluice sim`
//! runs them as it runs the TraQIOS experiments, told apart by
//! `kind = "apples"`:
//!
//! ```toml
//! kind = "apples"
//! title = "AppleS Fig. 9: the gate against every user let in"
//! seeds = 3
//! baseline = "no gate"
//!
//! [defaults]            # sluice_sim::apples::ApplesConfig, for every run
//! seconds = 40.0
//! warmup = 25.0
//! users = [[0.0, 256]]
//!
//! [[run]]
//! name = "gate"
//! parallelism = 256
//!
//! [[run]]
//! name = "no gate"
//! parallelism = 256
//! optimizer = { parallelism = "fixed", zeta = "fixed" }
//! ```
//!
//! A run's table is its own `[[run]]` entries over `[defaults]`, table by
//! table (a run's `optimizer` changes only the fields it names); a run may
//! name its own baseline (`against = "..."`) in place of the file's. Every
//! field is checked as [`ApplesConfig::validate`] checks it, and an error
//! names the run. Where the runs have tenant groups, the table also shows
//! the first group's p99 after the warm-up.

use std::fmt::Write;

use serde::Deserialize;
use sluice_core::metrics::{median, Spread};
use toml::Value;

use crate::apples::{simulate, ApplesConfig, ApplesRun};
use crate::experiment::ExperimentError;

/// A scenario file, read.
#[derive(Debug)]
pub struct ApplesScenario {
    pub name: String,
    pub title: String,
    pub seeds: u64,
    pub baseline: Option<String>,
    pub runs: Vec<ScenarioRun>,
}

/// One `[[run]]` of a scenario.
#[derive(Debug)]
pub struct ScenarioRun {
    pub name: String,
    /// The run its throughput is compared with, if any.
    pub against: Option<String>,
    pub config: ApplesConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    kind: String,
    name: Option<String>,
    title: Option<String>,
    #[serde(default = "one")]
    seeds: u64,
    baseline: Option<String>,
    #[serde(default)]
    defaults: toml::Table,
    run: Vec<toml::Table>,
}

fn one() -> u64 {
    1
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ExperimentError {
    ExperimentError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// `over` laid on `base`, table by table.
fn merged(base: &toml::Table, over: &toml::Table) -> toml::Table {
    let mut out = base.clone();
    for (key, value) in over {
        let value = match (out.get(key), value) {
            (Some(Value::Table(b)), Value::Table(o)) => Value::Table(merged(b, o)),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    out
}

/// Whether `text` is an AppleS scenario (`kind = "apples"`).
pub fn is_apples(text: &str) -> bool {
    toml::from_str::<toml::Table>(text)
        .ok()
        .and_then(|t| t.get("kind").and_then(|k| k.as_str().map(|k| k == "apples")))
        .unwrap_or(false)
}

impl ApplesScenario {
    /// Parses and checks a scenario; `default_name` names it if the text
    /// does not.
    pub fn parse(text: &str, default_name: &str) -> Result<Self, ExperimentError> {
        let file: File = toml::from_str(text).map_err(|e| invalid("file", e.message()))?;
        if file.kind != "apples" {
            return Err(invalid("kind", format!("must be \"apples\", got \"{}\"", file.kind)));
        }
        if file.seeds == 0 || file.seeds > 1000 {
            return Err(invalid("seeds", "must lie in 1..=1000"));
        }
        let mut runs = Vec::new();
        for (i, run) in file.run.iter().enumerate() {
            let mut table = merged(&file.defaults, run);
            let name = match table.remove("name") {
                Some(Value::String(n)) if !n.is_empty() => n,
                _ => return Err(invalid(format!("run {}", i + 1), "needs a name")),
            };
            if runs.iter().any(|r: &ScenarioRun| r.name == name) {
                return Err(invalid(format!("run `{name}`"), "named twice"));
            }
            let against = match table.remove("against") {
                None => file.baseline.clone(),
                Some(Value::String(a)) => Some(a),
                Some(_) => return Err(invalid(format!("run `{name}`"), "against: a run's name")),
            };
            let config: ApplesConfig = Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| invalid(format!("run `{name}`"), e.message()))?;
            config.validate().map_err(|e| invalid(format!("run `{name}`"), e))?;
            runs.push(ScenarioRun { name, against, config });
        }
        if runs.is_empty() {
            return Err(invalid("run", "name at least one [[run]]"));
        }
        for r in &runs {
            if let Some(b) = r.against.as_ref().filter(|b| !runs.iter().any(|o| o.name == **b)) {
                return Err(invalid(
                    format!("run `{}`", r.name),
                    format!("`{b}` is not a run's name"),
                ));
            }
        }
        let name = file.name.unwrap_or_else(|| default_name.to_string());
        Ok(ApplesScenario {
            title: file.title.unwrap_or_else(|| name.clone()),
            name,
            seeds: file.seeds,
            baseline: file.baseline,
            runs,
        })
    }

    /// Every run over every seed (seed `config.seed` + i), in the order of
    /// the file.
    pub fn run(&self) -> Vec<(String, Vec<ApplesRun>)> {
        self.runs
            .iter()
            .map(|r| {
                let runs = (0..self.seeds)
                    .map(|i| {
                        simulate(&ApplesConfig {
                            seed: r.config.seed + i,
                            ..r.config.clone()
                        })
                    })
                    .collect();
                (r.name.clone(), runs)
            })
            .collect()
    }

    /// The table of a run: per run, the medians over seeds of the
    /// throughput after the warm-up, U_f and V_l (and the first tenant
    /// group's p99), the P held at the end, and the throughput's ratio to
    /// the run it is compared with, paired by seed.
    pub fn table(&self, results: &[(String, Vec<ApplesRun>)]) -> String {
        let after = |r: &ApplesRun, c: &ApplesConfig| r.throughput(c.warmup as usize, c.seconds as usize);
        let groups = self.runs.iter().any(|r| !r.config.tenants.is_empty());
        let mut out = String::new();
        let group = if groups { " first group's p99 |" } else { "" };
        let _ = writeln!(
            out,
            "| run | req/s after warm-up | / its baseline (min–max) | U_f | V_l |{group} P at the end |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|{}---|", if groups { "---|" } else { "" });
        for (run, (_, seeds)) in self.runs.iter().zip(results) {
            let config = &run.config;
            let throughput: Vec<f64> = seeds.iter().map(|r| after(r, config)).collect();
            let base = run.against.as_ref().and_then(|b| {
                let i = self.runs.iter().position(|o| o.name == *b)?;
                Some((&self.runs[i].config, &results[i].1))
            });
            let ratio = base.map_or("–".into(), |(bc, br)| {
                let ratios = Spread::of(seeds.iter().zip(br).map(|(r, b)| after(r, config) / after(b, bc)));
                format!(
                    "{:.3} ({:.3}–{:.3}) against {}",
                    ratios.median,
                    ratios.min,
                    ratios.max,
                    run.against.as_deref().unwrap_or("")
                )
            });
            let p99 = if groups {
                let ms: Vec<f64> = seeds
                    .iter()
                    .map(|r| r.groups.first().map_or(0.0, |g| g.quantile(0.99) as f64 / 1e6))
                    .collect();
                format!(" {:.1} ms |", median(ms))
            } else {
                String::new()
            };
            let ps: Vec<String> = seeds.iter().map(|r| r.final_p.to_string()).collect();
            let _ = writeln!(
                out,
                "| {} | {:.0} | {ratio} | {:.3} | {:.3} |{p99} {} |",
                run.name,
                median(throughput),
                median(seeds.iter().map(|r| r.unfairness)),
                median(seeds.iter().map(|r| r.latency_cv)),
                ps.join(", ")
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIG9: &str = r#"
kind = "apples"
seeds = 2
baseline = "no gate"
[defaults]
seconds = 6.0
warmup = 3.0
users = [[0.0, 64]]
parallelism = 64
[defaults.optimizer]
zeta = "fixed"
[[run]]
name = "gate"
optimizer = { model = { settle_ms = 100, sample_ms = 300 } }
[[run]]
name = "no gate"
optimizer = { parallelism = "fixed" }
"#;

    #[test]
    fn runs_lay_their_tables_over_the_defaults() {
        let s = ApplesScenario::parse(FIG9, "fig9").unwrap();
        assert_eq!(s.name, "fig9");
        let (gate, open) = (&s.runs[0].config, &s.runs[1].config);
        assert_eq!(gate.optimizer.model.sample_ms, 300);
        assert_eq!(
            gate.optimizer.zeta,
            sluice_core::controller::ZetaMode::Fixed,
            "from the defaults"
        );
        assert_eq!(
            open.optimizer.parallelism,
            sluice_core::controller::ParallelismMode::Fixed
        );
        assert_eq!(open.seconds, 6.0);
        let results = s.run();
        let table = s.table(&results);
        assert!(table.contains("| gate |") && table.contains("| no gate |"), "{table}");
        assert!(
            table.contains("| 1.000 (1.000–1.000) against no gate |"),
            "the baseline against itself: {table}"
        );
    }

    #[test]
    fn errors_name_the_run_and_the_field() {
        let bad = |text: &str| ApplesScenario::parse(text, "x").unwrap_err().to_string();
        let with_run = |run: &str| format!("kind = \"apples\"\n[[run]]\n{run}\n");
        assert!(bad(&with_run("name = \"a\"\nseconds = -1.0")).contains("run `a`: seconds"));
        assert!(bad(&with_run("name = \"a\"\nusrs = 3")).contains("usrs"));
        assert!(bad(&with_run("seconds = 1.0")).contains("run 1: needs a name"));
        assert!(bad("kind = \"apples\"\nbaseline = \"b\"\n[[run]]\nname = \"a\"").contains("`b` is not a run's name"));
        assert!(bad(&with_run("name = \"a\"\nagainst = \"c\"")).contains("run `a`: `c` is not a run's name"));
        assert!(bad("kind = \"other\"\n[[run]]\nname = \"a\"").contains("kind"));
        assert!(is_apples("kind = \"apples\""));
        assert!(!is_apples("name = \"fig4\""));
    }

    #[test]
    fn the_scenario_files_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            if is_apples(&text) {
                ApplesScenario::parse(&text, "x").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                seen += 1;
            }
        }
        assert!(seen >= 4, "{seen} AppleS scenarios");
    }
}
