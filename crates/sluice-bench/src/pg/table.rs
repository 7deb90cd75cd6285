//! The tables of `sluice bench pg`: per user count and target, medians over
//! the kept runs and the throughput's ratios to the baseline paired by
//! round; with tenants, each tenant's share of the throughput against its
//! share of the weights.

use std::fmt::Write as _;

use crate::harness::{median, paired_ratios, split_by_steal, Spread};
use crate::pg::record::{RunRecord, TenantTps};

/// The kept runs grouped by (users, target), in the order first run.
fn groups<'a>(kept: &[&'a RunRecord]) -> Vec<Vec<&'a RunRecord>> {
    let mut groups: Vec<Vec<&RunRecord>> = Vec::new();
    for &r in kept {
        match groups
            .iter_mut()
            .find(|g| g[0].users == r.users && g[0].target == r.target)
        {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
}

pub(crate) fn table(records: &[RunRecord], baseline: &str, max_steal: f64) -> String {
    let (kept, set_aside) = split_by_steal(records, max_steal);
    // Under a rate the throughput is the rate's: the ratio compares p99.
    let rate = records.iter().find_map(|r| r.rate);
    let compared = if rate.is_some() { "p99" } else { "tps" };
    let mut out = format!(
        "\nusers  target        tps (median)  {compared} vs {baseline:<10} (min-max)   U_f    V_l    p99 ms  failed  CPU ms/txn  switches/txn\n"
    );
    for runs in groups(&kept) {
        let (users, target) = (runs[0].users, &runs[0].target);
        let same_users: Vec<&RunRecord> = kept.iter().copied().filter(|r| r.users == users).collect();
        let ratio = Spread::of(paired_ratios(&same_users, target, baseline, |r| {
            Some(if rate.is_some() { r.p99_ms } else { r.tps })
        }));
        let col = |f: &dyn Fn(&RunRecord) -> f64| median(runs.iter().map(|r| f(r)));
        // A column only some targets have (--cpu): "-" for the others.
        let optional = |f: &dyn Fn(&RunRecord) -> Option<f64>, digits: usize| {
            let m = col(&|r| f(r).unwrap_or(f64::NAN));
            if m.is_nan() {
                "-".into()
            } else {
                format!("{m:.digits$}")
            }
        };
        let _ = writeln!(
            out,
            "{users:>5}  {target:<12} {:>12.0}  {:>10.2} ({:.2}-{:.2})          {:<5}  {:.3}  {:>7.1}  {:>6}  {:<10}  {}",
            col(&|r| r.tps),
            ratio.median,
            ratio.min,
            ratio.max,
            optional(&|r| r.unfairness, 3),
            col(&|r| r.latency_cv),
            col(&|r| r.p99_ms),
            runs.iter().map(|r| r.failed).sum::<u64>(),
            optional(&|r| r.cpu_ms_per_txn, 3),
            optional(&|r| r.switches_per_txn, 2),
        );
    }
    if let Some(rate) = rate {
        let _ = writeln!(
            out,
            "(an open load of {rate:.0} transactions/s: the rate sets the throughput and each user's share, so the ratio is p99's, U_f is \"-\", and a tenant's share of the throughput is its users' share of the rate)"
        );
    }
    if !set_aside.is_empty() {
        let _ = writeln!(
            out,
            "({} runs set aside for CPU steal above {:.0}%)",
            set_aside.len(),
            max_steal * 100.0
        );
    }
    out + &shares(&kept)
}

/// Per tenant: its users, its share of the weights and its median share of
/// the throughput, its median throughput and p99.9 (and the worst p99.9 of
/// the runs); per target, the largest relative error of any tenant's share
/// in each run (median and max over the runs).
fn shares(kept: &[&RunRecord]) -> String {
    let mut out = String::new();
    if kept.iter().all(|r| r.tenants.is_empty()) {
        return out;
    }
    out += "\nusers  target           tenant  users  weight share  throughput share      tps  p99.9 ms (max)  worst share error (median, max)\n";
    for runs in groups(kept) {
        let r = runs[0];
        let worst: Vec<f64> = runs
            .iter()
            .map(|x| share_errors(&x.tenants).into_iter().fold(0.0, f64::max))
            .collect();
        let total_weight: f64 = r.tenants.iter().map(|t| t.weight).sum();
        for (i, t) in r.tenants.iter().enumerate() {
            let share = |x: &RunRecord| x.tenants[i].tps / x.tenants.iter().map(|t| t.tps).sum::<f64>();
            let got = median(runs.iter().map(|&x| share(x)));
            let tps = median(runs.iter().map(|x| x.tenants[i].tps));
            let p999 = Spread::of(runs.iter().map(|x| x.tenants[i].p999_ms));
            let tail = if i == 0 {
                let max = worst.iter().copied().fold(0.0, f64::max);
                format!("{:.1}%, {:.1}%", median(worst.iter().copied()) * 100.0, max * 100.0)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{:>5}  {:<15}  {:<6}  {:>5}  {:>12.3}  {got:>16.3}  {tps:>7.0}  {:>7.1} ({:.1})  {tail}",
                r.users,
                r.target,
                t.name,
                t.users,
                t.weight / total_weight,
                p999.median,
                p999.max
            );
        }
    }
    out
}

/// Relative error of each tenant's throughput share against its weight share.
fn share_errors(tenants: &[TenantTps]) -> Vec<f64> {
    let total_weight: f64 = tenants.iter().map(|t| t.weight).sum();
    let total_tps: f64 = tenants.iter().map(|t| t.tps).sum();
    tenants
        .iter()
        .map(|t| ((t.tps / total_tps) / (t.weight / total_weight) - 1.0).abs())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(target: &str, rate: Option<f64>, p99_ms: f64) -> RunRecord {
        RunRecord {
            users: 8,
            round: 1,
            target: target.into(),
            rate,
            tps: 1000.0,
            unfairness: rate.is_none().then_some(0.012),
            latency_cv: 0.2,
            p50_ms: 1.0,
            p99_ms,
            p999_ms: 9.0,
            failed: 0,
            steal: 0.0,
            io_stall_worst_s: None,
            cpu_ms_per_txn: None,
            switches_per_txn: None,
            tenants: Vec::new(),
        }
    }

    #[test]
    fn closed_loops_show_u_f() {
        let text = table(
            &[record("direct", None, 5.0), record("sluice", None, 10.0)],
            "direct",
            0.1,
        );
        assert!(text.contains("0.012"), "{text}");
        assert!(text.contains("tps vs direct"), "{text}");
        let row = text.lines().find(|l| l.contains("sluice")).unwrap();
        assert!(row.contains("1.00 (1.00-1.00)"), "{row}");
        assert!(!text.contains("open load"), "{text}");
    }

    #[test]
    fn an_open_load_says_so_and_shows_no_u_f() {
        let text = table(
            &[
                record("direct", Some(1000.0), 5.0),
                record("sluice", Some(1000.0), 10.0),
            ],
            "direct",
            0.1,
        );
        assert!(!text.contains("0.012"), "{text}");
        assert!(text.contains("an open load of 1000 transactions/s"), "{text}");
        assert!(text.contains("p99 vs direct"), "{text}");
        let row = text.lines().find(|l| l.contains("sluice")).unwrap();
        assert!(row.contains("2.00 (2.00-2.00)          -  "), "{row}");
    }
}
