//! The benchmark harness: what every benchmark does with its runs once they
//! are measured, in one place for `sluice bench` and, through `sluice bench
//! summarize` ([`crate::rows`]), for the benchmark scripts.
//!
//! A run is one measurement of one target; a round measures every target
//! once, interleaved, so that a change in the machine's conditions falls on
//! all targets alike. Runs whose CPU steal ([`crate::steal`]) exceeds a
//! threshold are set aside ([`split_by_steal`]); the others give each
//! target's median and range ([`Spread`]) and its ratios to a baseline
//! paired by round ([`paired_ratios`]): each run against the baseline's run
//! of the same round, not medians against medians.

use std::collections::BTreeSet;

use anyhow::{anyhow, Context, Result};
pub use sluice_core::metrics::{median, Spread};

/// One measurement of one target in one round.
pub trait Run {
    fn round(&self) -> usize;
    /// What was measured: a server, a proxy, a policy, a configuration.
    fn target(&self) -> &str;
    /// The fraction of CPU time stolen while it ran.
    fn steal(&self) -> f64;
}

/// The runs kept, and those set aside for CPU steal above `max_steal`.
pub fn split_by_steal<R: Run>(runs: &[R], max_steal: f64) -> (Vec<&R>, Vec<&R>) {
    runs.iter().partition(|r| r.steal() <= max_steal)
}

/// `value` of `target`'s run over that of `baseline`'s run in the same
/// round, for every round in which both have one, in round order.
pub fn paired_ratios<R: Run>(runs: &[&R], target: &str, baseline: &str, value: impl Fn(&R) -> Option<f64>) -> Vec<f64> {
    pairs(runs, target, baseline, value).map(|(t, b)| t / b).collect()
}

/// `value` of `target`'s run less that of `baseline`'s run in the same
/// round, for every round in which both have one, in round order.
pub fn paired_differences<R: Run>(
    runs: &[&R],
    target: &str,
    baseline: &str,
    value: impl Fn(&R) -> Option<f64>,
) -> Vec<f64> {
    pairs(runs, target, baseline, value).map(|(t, b)| t - b).collect()
}

fn pairs<'a, R: Run>(
    runs: &'a [&'a R],
    target: &'a str,
    baseline: &'a str,
    value: impl Fn(&R) -> Option<f64> + 'a,
) -> impl Iterator<Item = (f64, f64)> + 'a {
    let rounds: BTreeSet<usize> = runs.iter().map(|r| r.round()).collect();
    let at = move |round: usize, name: &str| {
        runs.iter()
            .find(|r| r.round() == round && r.target() == name)
            .and_then(|r| value(r))
    };
    rounds
        .into_iter()
        .filter_map(move |round| Some((at(round, target)?, at(round, baseline)?)))
}

/// The targets of `runs` in the order they first ran.
pub fn targets<'a, R: Run>(runs: &[&'a R]) -> Vec<&'a str> {
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        if !names.contains(&r.target()) {
            names.push(r.target());
        }
    }
    names
}

/// A `NAME=HOST:PORT` target of `--targets`.
pub fn parse_target(spec: &str) -> Result<(String, String, u16)> {
    let (name, addr) = spec
        .split_once('=')
        .ok_or_else(|| anyhow!("--targets wants NAME=HOST:PORT, got `{spec}`"))?;
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("target `{name}`: `{addr}` is not HOST:PORT"))?;
    let port = port
        .parse()
        .with_context(|| format!("target `{name}`: bad port `{port}`"))?;
    Ok((name.to_string(), host.to_string(), port))
}

/// A Markdown table: the header, its rule and a line per row.
pub fn markdown_table(header: &[String], rows: &[Vec<String>]) -> String {
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let mut out = line(header);
    out += &format!("|{}\n", "---|".repeat(header.len()));
    for row in rows {
        out += &line(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R(usize, &'static str, f64, f64);

    impl Run for R {
        fn round(&self) -> usize {
            self.0
        }
        fn target(&self) -> &str {
            self.1
        }
        fn steal(&self) -> f64 {
            self.3
        }
    }

    #[test]
    fn runs_above_the_steal_threshold_are_set_aside() {
        let runs = [R(1, "a", 1.0, 0.0), R(1, "b", 1.0, 0.2), R(2, "a", 1.0, 0.1)];
        let (kept, aside) = split_by_steal(&runs, 0.1);
        assert_eq!(kept.len(), 2, "a run at the threshold is kept");
        assert_eq!(aside[0].target(), "b");
    }

    #[test]
    fn ratios_pair_each_run_with_the_baseline_of_its_round() {
        let runs = [
            R(2, "a", 10.0, 0.0),
            R(1, "a", 4.0, 0.0),
            R(1, "b", 2.0, 0.0),
            R(2, "b", 20.0, 0.0),
            R(3, "b", 7.0, 0.0),
        ];
        let refs: Vec<&R> = runs.iter().collect();
        let value = |r: &R| Some(r.2);
        assert_eq!(
            paired_ratios(&refs, "b", "a", value),
            [0.5, 2.0],
            "round 3 has no baseline"
        );
        assert_eq!(paired_differences(&refs, "b", "a", value), [-2.0, 10.0]);
        assert_eq!(targets(&refs), ["a", "b"]);
        let only_round_1 = |r: &R| (r.0 == 1).then_some(r.2);
        assert_eq!(paired_ratios(&refs, "b", "a", only_round_1), [0.5]);
    }

    #[test]
    fn targets_parse_and_bad_ones_are_named() {
        assert_eq!(
            parse_target("sluice=127.0.0.1:6432").unwrap(),
            ("sluice".into(), "127.0.0.1".into(), 6432)
        );
        assert_eq!(parse_target("local=/tmp:5432").unwrap().1, "/tmp");
        for (bad, says) in [
            ("x", "NAME=HOST:PORT"),
            ("x=host", "not HOST:PORT"),
            ("x=h:p", "bad port"),
        ] {
            let e = parse_target(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_markdown_table_has_a_rule_under_its_header() {
        let t = markdown_table(&["a".into(), "b".into()], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
