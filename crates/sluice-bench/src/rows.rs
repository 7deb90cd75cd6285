//! Runs measured outside `sluice bench`, by the benchmark scripts around
//! pgbench, redis-benchmark and twemproxy, handed over as rows of text and
//! summarized by the [harness](crate::harness): what `sluice bench
//! summarize` reads and prints.
//!
//! The first line names the columns; every further line is one run, its
//! columns separated by white space (blank lines and lines starting with
//! `#` are skipped). `round`, `target` and `steal` (the fraction of CPU
//! time stolen during the run, as `sluice bench steal --since` prints it)
//! are required. Columns named as groups (the test, the user count) are
//! text: runs are compared only within their group. Every other column is
//! a metric, a number.

use std::fmt::Write as _;

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::harness::{markdown_table, paired_differences, paired_ratios, split_by_steal, targets, Run, Spread};

/// The runs of a rows file.
#[derive(Debug)]
pub struct Rows {
    groups: Vec<String>,
    metrics: Vec<String>,
    runs: Vec<Row>,
}

#[derive(Debug)]
struct Row {
    round: usize,
    target: String,
    group: Vec<String>,
    values: Vec<f64>,
    steal: f64,
}

impl Run for Row {
    fn round(&self) -> usize {
        self.round
    }
    fn target(&self) -> &str {
        &self.target
    }
    fn steal(&self) -> f64 {
        self.steal
    }
}

impl Rows {
    /// Reads `text`, grouping the runs by the columns named in `groups`.
    pub fn parse(text: &str, groups: &[String]) -> Result<Rows> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        let (_, header) = lines
            .next()
            .ok_or_else(|| anyhow!("no header line naming the columns"))?;
        let columns: Vec<&str> = header.split_whitespace().collect();
        let find = |name: &str| {
            columns
                .iter()
                .position(|c| *c == name)
                .ok_or_else(|| anyhow!("no column `{name}` in the header `{header}`"))
        };
        let (round, target, steal) = (find("round")?, find("target")?, find("steal")?);
        let group_at = groups.iter().map(|g| find(g)).collect::<Result<Vec<_>>>()?;
        let metric_at: Vec<usize> = (0..columns.len())
            .filter(|i| ![round, target, steal].contains(i) && !group_at.contains(i))
            .collect();
        let mut runs = Vec::new();
        for (n, line) in lines {
            let at = || format!("line {}: `{line}`", n + 1);
            let cells: Vec<&str> = line.split_whitespace().collect();
            ensure!(
                cells.len() == columns.len(),
                "{}: {} columns, the header has {}",
                at(),
                cells.len(),
                columns.len()
            );
            let number = |i: usize| {
                cells[i]
                    .parse::<f64>()
                    .with_context(|| format!("{}: {} `{}` is not a number", at(), columns[i], cells[i]))
            };
            let steal = number(steal)?;
            if !(0.0..=1.0).contains(&steal) {
                bail!("{}: steal is a fraction from 0 to 1, got {steal}", at());
            }
            runs.push(Row {
                round: cells[round]
                    .parse()
                    .with_context(|| format!("{}: round `{}` is not a whole number", at(), cells[round]))?,
                target: cells[target].to_string(),
                group: group_at.iter().map(|&i| cells[i].to_string()).collect(),
                values: metric_at.iter().map(|&i| number(i)).collect::<Result<_>>()?,
                steal,
            });
        }
        ensure!(!runs.is_empty(), "no runs under the header");
        Ok(Rows {
            groups: groups.to_vec(),
            metrics: metric_at.iter().map(|&i| columns[i].to_string()).collect(),
            runs,
        })
    }

    /// The runs set aside, then a Markdown table: per group, target and
    /// metric, the median and range over the kept runs, the ratios to
    /// `baseline` (the first target if `None`) paired by round, and with
    /// `difference_to` the differences to that target paired by round.
    pub fn summary(&self, baseline: Option<&str>, difference_to: Option<&str>, max_steal: f64) -> Result<String> {
        let all: Vec<&Row> = self.runs.iter().collect();
        let names = targets(&all);
        let baseline = baseline.unwrap_or(names[0]);
        for name in [Some(baseline), difference_to].into_iter().flatten() {
            ensure!(
                names.contains(&name),
                "no runs of `{name}`; the targets are {}",
                names.join(", ")
            );
        }
        let (kept, set_aside) = split_by_steal(&self.runs, max_steal);
        let mut out = String::new();
        for r in &set_aside {
            let group: String = r.group.iter().map(|g| format!(", {g}")).collect();
            let _ = writeln!(
                out,
                "set aside: round {}, {}{group} (steal {:.1}%)",
                r.round,
                r.target,
                r.steal * 100.0
            );
        }
        let mut header = self.groups.clone();
        header.extend(["target", "metric", "median (range)"].map(String::from));
        header.push(format!("/ {baseline}, paired by round"));
        header.push("by round".into());
        if let Some(d) = difference_to {
            header.push(format!("- {d}, paired by round"));
        }
        let mut groups: Vec<&Vec<String>> = Vec::new();
        for r in &self.runs {
            if !groups.contains(&&r.group) {
                groups.push(&r.group);
            }
        }
        let mut rows = Vec::new();
        for group in groups {
            let runs: Vec<&Row> = kept.iter().copied().filter(|r| &r.group == group).collect();
            for target in targets(&runs) {
                for (i, metric) in self.metrics.iter().enumerate() {
                    let value = |r: &Row| Some(r.values[i]);
                    let mine = runs.iter().filter(|r| r.target == target).map(|r| r.values[i]);
                    let ratios = paired_ratios(&runs, target, baseline, value);
                    let mut row = group.clone();
                    row.extend([target.to_string(), metric.clone(), spread(Spread::of(mine))]);
                    row.push(ratio(&ratios));
                    row.push(ratios.iter().map(|&x| by_round(x)).collect::<Vec<_>>().join(" "));
                    if let Some(d) = difference_to {
                        let differences = paired_differences(&runs, target, d, value);
                        row.push(if differences.is_empty() {
                            "–".into()
                        } else {
                            spread(Spread::of(differences))
                        });
                    }
                    rows.push(row);
                }
            }
        }
        out += &markdown_table(&header, &rows);
        let rounds: std::collections::BTreeSet<usize> = kept.iter().map(|r| r.round).collect();
        let steal = Spread::of(self.runs.iter().map(|r| r.steal * 100.0));
        let _ = writeln!(
            out,
            "\n{} runs in {} rounds; steal {:.1}–{:.1}%; {} set aside (steal above {:.0}%)",
            self.runs.len(),
            rounds.len(),
            steal.min,
            steal.max,
            set_aside.len(),
            max_steal * 100.0
        );
        Ok(out)
    }
}

/// A median and range of ratios, or a dash for none; a ratio to a
/// baseline of 0 has no value, and says so.
fn ratio(ratios: &[f64]) -> String {
    if ratios.is_empty() {
        return "–".into();
    }
    if ratios.iter().any(|x| !x.is_finite()) {
        return "– (the baseline is 0)".into();
    }
    let s = Spread::of(ratios.iter().copied());
    format!("{:.3} ({:.2}–{:.2})", s.median, s.min, s.max)
}

/// One round's ratio.
fn by_round(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "–".into()
    }
}

fn spread(s: Spread) -> String {
    format!("{} ({}–{})", value(s.median), value(s.min), value(s.max))
}

/// About four significant digits, whatever the metric's scale.
fn value(x: f64) -> String {
    let digits = match x.abs() {
        a if a >= 1000.0 => 0,
        a if a >= 100.0 => 1,
        a if a >= 1.0 => 2,
        _ => 3,
    };
    format!("{x:.digits$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNS: &str = "\
round target test requests/s p50_ms steal
1 direct set 100000 0.200 0.001
1 route set 90000 0.250 0.002
1 twemproxy set 95000 0.240 0.000
2 twemproxy set 100000 0.230 0.000
2 route set 110000 0.220 0.000
2 direct set 120000 0.190 0.000
# round 3: route's run was stolen from
3 direct set 100000 0.200 0.0
3 route set 10 9.000 0.5
3 twemproxy set 90000 0.250 0.0
1 route mget 8000 2.000 0.0
1 twemproxy mget 10000 1.500 0.0
";

    fn summary(baseline: Option<&str>, difference_to: Option<&str>) -> String {
        let rows = Rows::parse(RUNS, &["test".into()]).unwrap();
        rows.summary(baseline, difference_to, 0.10).unwrap()
    }

    #[test]
    fn the_summary_pairs_ratios_by_round_within_each_group() {
        let text = summary(Some("twemproxy"), Some("direct"));
        let header = "| test | target | metric | median (range) | / twemproxy, paired by round | by round | - direct, paired by round |";
        assert!(text.contains(header), "{text}");
        // route / twemproxy: 90000/95000 in round 1, 110000/100000 in round 2.
        assert!(
            text.contains("| set | route | requests/s | 110000 (90000–110000) | 1.100 (0.95–1.10) | 0.95 1.10 | -10000 (-10000–-10000) |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| set | route | p50_ms | 0.250 (0.220–0.250) | 1.042 (0.96–1.04) | 1.04 0.96 | 0.050 (0.030–0.050) |"
            ),
            "{text}"
        );
        // The baseline against itself, and a group without the floor.
        assert!(
            text.contains(
                "| set | twemproxy | requests/s | 95000 (90000–100000) | 1.000 (1.00–1.00) | 1.00 1.00 1.00 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| mget | route | requests/s | 8000 (8000–8000) | 0.800 (0.80–0.80) | 0.80 | – |"),
            "{text}"
        );
    }

    #[test]
    fn a_ratio_to_a_baseline_of_zero_says_so() {
        let runs =
            "round target checkpoints steal\n1 defaults 0 0.0\n1 steered 8 0.0\n2 defaults 0 0.0\n2 steered 0 0.0\n";
        let text = Rows::parse(runs, &[]).unwrap().summary(None, None, 0.10).unwrap();
        assert!(
            text.contains("| steered | checkpoints | 8.00 (0.000–8.00) | – (the baseline is 0) | – – |"),
            "{text}"
        );
    }

    #[test]
    fn stolen_runs_are_set_aside_and_counted() {
        let text = summary(None, None);
        assert!(
            text.starts_with("set aside: round 3, route, set (steal 50.0%)\n"),
            "{text}"
        );
        assert!(
            text.contains("| test | target | metric | median (range) | / direct, paired by round | by round |\n"),
            "{text}"
        );
        assert!(
            text.contains("11 runs in 3 rounds; steal 0.0–50.0%; 1 set aside (steal above 10%)"),
            "{text}"
        );
    }

    #[test]
    fn bad_rows_are_named_by_line() {
        let groups = ["test".to_string()];
        for (text, says) in [
            ("", "no header"),
            ("round target steal\n", "no runs"),
            ("round target x\n", "no column `steal`"),
            ("round target steal rps\n1 a 0.0\n", "line 2"),
            ("round target steal rps\n1 a 0.0 fast\n", "rps `fast` is not a number"),
            ("round target steal rps\nx a 0.0 1\n", "round `x`"),
            ("round target steal rps\n1 a 12 1\n", "steal is a fraction"),
        ] {
            let e = Rows::parse(text, &[]).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let e = Rows::parse("round target steal\n", &groups).unwrap_err().to_string();
        assert!(e.contains("no column `test`"), "{e}");
        let rows = Rows::parse("round target steal rps\n1 a 0 1\n", &[]).unwrap();
        let e = rows.summary(Some("b"), None, 0.1).unwrap_err().to_string();
        assert!(e.contains("no runs of `b`; the targets are a"), "{e}");
    }
}
