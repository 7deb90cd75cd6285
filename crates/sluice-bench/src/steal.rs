//! CPU steal, read from /proc/stat: on a shared machine the hypervisor can
//! take the CPU away, and a benchmark run during heavy steal measures the
//! neighbours, not us. Every benchmark records the steal of each run (or
//! round) and sets aside those above a threshold
//! ([`crate::harness::split_by_steal`]); the benchmark scripts read it
//! through `sluice bench steal`, which prints a [`CpuTimes`] and, given
//! one back, the fraction stolen since.

use std::fmt;
use std::str::FromStr;

/// Cumulative CPU time counters of the `cpu` line (all cores), in ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    total: u64,
    steal: u64,
}

impl CpuTimes {
    /// Reads the counters; zeros where /proc/stat is not available.
    pub fn now() -> Self {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| parse(&s))
            .unwrap_or_default()
    }

    /// Fraction of CPU time stolen between `self` and `later`.
    pub fn steal_until(&self, later: &CpuTimes) -> f64 {
        let total = later.total.saturating_sub(self.total);
        if total == 0 {
            0.0
        } else {
            later.steal.saturating_sub(self.steal) as f64 / total as f64
        }
    }
}

/// Runs `f`; returns what it returned and the fraction of CPU time stolen
/// meanwhile.
pub fn during<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let before = CpuTimes::now();
    let out = f();
    (out, before.steal_until(&CpuTimes::now()))
}

/// `STEAL/TOTAL` ticks: one word, for a script to keep and hand back.
impl fmt::Display for CpuTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.steal, self.total)
    }
}

impl FromStr for CpuTimes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a sample of `sluice bench steal` (STEAL/TOTAL ticks)");
        let (steal, total) = s.trim().split_once('/').ok_or_else(bad)?;
        Ok(CpuTimes {
            steal: steal.parse().map_err(|_| bad())?,
            total: total.parse().map_err(|_| bad())?,
        })
    }
}

fn parse(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user, so it is left out of the total.
    let total = fields.iter().take(8).sum();
    Some(CpuTimes {
        total,
        steal: *fields.get(7)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_fraction_from_two_readings() {
        let a = parse("cpu  100 0 50 800 0 0 0 50 0 0\ncpu0 1 2 3").unwrap();
        let b = parse("cpu  200 0 100 1500 0 0 0 200 0 0\n").unwrap();
        // Totals 1000 and 2000 ticks; steal grew by 150 of the 1000.
        assert!((a.steal_until(&b) - 0.15).abs() < 1e-12);
        assert!(parse("intr 1 2").is_none());
    }

    #[test]
    fn a_sample_is_one_word_that_reads_back() {
        let a = parse("cpu  100 0 50 800 0 0 0 50 0 0\n").unwrap();
        assert_eq!(a.to_string(), "50/1000");
        assert_eq!(a.to_string().parse::<CpuTimes>(), Ok(a));
        for bad in ["50", "50/x", "a/1000", ""] {
            assert!(
                bad.parse::<CpuTimes>().unwrap_err().contains("sluice bench steal"),
                "{bad}"
            );
        }
    }

    #[test]
    fn steal_during_a_closure_is_a_fraction() {
        let (out, steal) = during(|| 7);
        assert_eq!(out, 7);
        assert!((0.0..=1.0).contains(&steal));
    }
}
