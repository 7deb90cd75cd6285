//! `sluice model`: AppleS's throughput model (§4.3.1, Eq. 2) fitted to
//! throughput measured by hand, the same fit `sluice proxy` makes from its
//! own samples (`sluice_core::controller::matching_point`).
//!
//! Given three samples they are P0, P1 and P2 and the answer is the
//! matching point C. Given a sweep (more than three), the lowest P is P0,
//! the highest P2, and each P between serves in turn as the middle sample
//! P1, as in AppleS Fig. 7, which reports Eq. 2 insensitive to that choice
//! and its matching point's throughput 3.58% (mean) below the peak. The
//! throughput at a C the sweep did not measure is interpolated linearly
//! between the measured P on either side, an estimate the table marks.

use anyhow::{bail, ensure, Result};
use sluice_core::controller::matching_point::{matching_point, Sample};

/// The table for `samples` (any order): a row per middle sample, the
/// matching point it gives and, for a sweep, how far below the sweep's peak
/// that point is.
pub fn report(mut samples: Vec<Sample>) -> Result<String> {
    ensure!(
        samples.len() >= 3,
        "three samples or more are needed, got {}",
        samples.len()
    );
    samples.sort_by_key(|s| s.p);
    if let Some(w) = samples.windows(2).find(|w| w[0].p == w[1].p) {
        bail!("P = {} is given twice; give each P once", w[0].p);
    }
    Ok(table(&samples))
}

fn table(samples: &[Sample]) -> String {
    let (s0, s2) = (samples[0], samples[samples.len() - 1]);
    let middles = &samples[1..samples.len() - 1];
    let sweep = middles.len() > 1;
    let peak = *samples
        .iter()
        .max_by(|a, b| a.throughput.total_cmp(&b.throughput))
        .unwrap_or(&s0);
    let mut out = format!(
        "P0 = {} (λ {:.0}/s), P2 = {} (λ {:.0}/s)\n",
        s0.p, s0.throughput, s2.p, s2.throughput
    );
    if sweep {
        out += &format!("peak of the sweep: λ({}) = {:.0}/s\n", peak.p, peak.throughput);
    }
    let sweep_heads = if sweep { "   swept λ(C)  below peak" } else { "" };
    out += &format!(
        "{:>6} {:>10} {:>10} {:>6} {:>12}{sweep_heads}\n",
        "P1", "B", "γ", "C", "model λ(C)"
    );
    let (mut shortfalls, mut unfitted) = (Vec::new(), false);
    for &s1 in middles {
        let (c, columns, fitted) = fit_columns(s0, s1, s2);
        out += &columns;
        unfitted |= !fitted;
        if sweep {
            let (at_c, exact) = swept_throughput(samples, c);
            let below = 1.0 - at_c / peak.throughput;
            shortfalls.push(below);
            let mark = if exact { ' ' } else { '*' };
            out += &format!(" {at_c:>12.0}{mark} {:>9.1}%", below * 100.0);
        }
        out += "\n";
    }
    if sweep {
        let mean = shortfalls.iter().sum::<f64>() / shortfalls.len() as f64;
        out += &format!(
            "mean below peak over the {} choices of P1: {:.1}% (AppleS Fig. 7: 3.58%)\n\
             * interpolated between the swept P on either side of C\n",
            shortfalls.len(),
            mean * 100.0
        );
    }
    if unfitted {
        out += "no fit: no curve of Eq. 2 passes through P0, P1 and P2 (throughput grows at least \
                linearly, or dips at P1); C is the best measured of the three\n";
    }
    out
}

/// The matching point from P0, P1 and P2, with the row's model columns
/// and whether a model was fitted.
fn fit_columns(s0: Sample, s1: Sample, s2: Sample) -> (usize, String, bool) {
    let mp = matching_point(s0, s1, s2);
    let (b, gamma, at_c) = match mp.model {
        Some(m) => (
            format!("{:.4}", m.b),
            format!("{:.5}", m.gamma),
            format!("{:.0}", m.throughput(mp.p as f64)),
        ),
        None => ("-".into(), "-".into(), "no fit".into()),
    };
    let columns = format!("{:>6} {b:>10} {gamma:>10} {:>6} {at_c:>12}", s1.p, mp.p);
    (mp.p, columns, mp.model.is_some())
}

/// The sweep's throughput at `p` (sorted samples, `p` within their range),
/// and whether it was measured there rather than interpolated.
fn swept_throughput(samples: &[Sample], p: usize) -> (f64, bool) {
    let i = samples.partition_point(|s| s.p < p);
    let hi = samples[i.min(samples.len() - 1)];
    if hi.p == p || i == 0 {
        return (hi.throughput, hi.p == p);
    }
    let lo = samples[i - 1];
    let t = (p - lo.p) as f64 / (hi.p - lo.p) as f64;
    (lo.throughput + t * (hi.throughput - lo.throughput), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: usize, throughput: f64) -> Sample {
        Sample { p, throughput }
    }

    #[test]
    fn a_repeated_p_is_refused() {
        let samples = vec![s(2, 800.0), s(16, 1500.0), s(16, 1400.0), s(256, 1000.0)];
        let e = report(samples).unwrap_err().to_string();
        assert!(e.contains("P = 16 is given twice"), "{e}");
    }

    #[test]
    fn throughput_between_swept_p_is_interpolated() {
        let sweep = [s(2, 800.0), s(8, 1400.0), s(16, 1600.0), s(256, 1000.0)];
        assert_eq!(swept_throughput(&sweep, 8), (1400.0, true));
        assert_eq!(swept_throughput(&sweep, 12), (1500.0, false));
        assert_eq!(swept_throughput(&sweep, 136), (1300.0, false));
    }

    #[test]
    fn a_sweep_tries_each_middle_sample_and_measures_c_against_the_peak() {
        // The hand sweep of 2026-11-23 at 256 users (BENCHMARKS.md, "The
        // matching point against a hand sweep of P") with the model's own
        // samples of that run at 2 and 256 (their lowest).
        let sweep = [s(2, 847.0), s(8, 1349.0), s(16, 1561.0), s(32, 1389.0), s(256, 1131.0)];
        let table = report(sweep.to_vec()).unwrap();
        assert!(table.contains("peak of the sweep: λ(16) = 1561/s"), "{table}");
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .collect();
        assert_eq!(rows.len(), 3, "{table}");
        for (row, p1) in rows.iter().zip(["8", "16", "32"]) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols[0], p1, "{table}");
            let c: usize = cols[3].parse().unwrap();
            assert!((2..=256).contains(&c), "{table}");
            let below: f64 = cols.last().unwrap().trim_end_matches('%').parse().unwrap();
            assert!((0.0..100.0).contains(&below), "{table}");
        }
        assert!(table.contains("mean below peak over the 3 choices of P1"), "{table}");
    }

    #[test]
    fn three_samples_give_the_matching_point_alone() {
        let table = report(vec![s(512, 1025.0), s(2, 859.0), s(32, 1670.0)]).unwrap();
        assert!(!table.contains("no fit"), "{table}");
        assert!(!table.contains("peak"), "{table}");
        let row = table.lines().find(|l| l.trim_start().starts_with("32")).unwrap();
        // The samples docs/reproductions/apples.md cites for C = 11.
        assert_eq!(row.split_whitespace().nth(3), Some("11"), "{table}");
    }
}
