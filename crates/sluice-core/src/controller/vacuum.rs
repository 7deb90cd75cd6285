//! Paces PostgreSQL's autovacuum from live load: the programmable
//! background tasks paper's rule (§VI: background work set from what the
//! foreground leaves) applied to PostgreSQL's other large background job.
//!
//! PostgreSQL already has the mechanism, cost-based delay: a vacuum sums a
//! cost for each page it touches (a hit in shared buffers, a read, a page
//! it dirties) and sleeps `autovacuum_vacuum_cost_delay` whenever the sum
//! reaches `autovacuum_vacuum_cost_limit`. Its defaults (2 ms, 200) hold
//! every vacuum to one pace whatever the load. On this project's machine
//! (docs/reproductions/background-tasks.md, run VC1) a vacuum of pgbench's
//! accounts table at scale 100 dirties the whole 1.3 GB table and writes
//! 750 MB of WAL: unpaced it takes 4 s, and the kernel's writeback of its
//! pages in the half-minute after raised a light foreground's p99 2.6–4.8
//! times in VC1 (in VC2 the disk was so noisy that runs with no vacuum
//! were as slow); at PostgreSQL's pace it takes 39–47 s. What is missing
//! is a policy that sees the load.
//!
//! This controller owns the cost limit (and sets the delay once):
//!
//! - **Spread while the foreground works, hurry while it rests** (SILK's
//!   rule, as the checkpoint controller's): the limit is `busy_cost_limit`
//!   unless the foreground's rate has fallen below `light_share` of its
//!   recent peak, when it is `light_cost_limit`. The busy default is
//!   PostgreSQL's own pace (200 per 2 ms). Faster paces measured here hurt
//!   a light foreground: 1000, at 2.2 times the unpaced time, took the
//!   run's p99 to 44 ms in one of two runs, where PostgreSQL's pace kept
//!   it at 5–7 ms (VC2); 2000 and 4000, within twice the unpaced time,
//!   raised it 1.3–10 times (VC1). The write-back of what a vacuum
//!   dirties, not its reads, is what the foreground pays for, so the
//!   device's spare write bandwidth, not the foreground's rate, bounds a
//!   safe busy pace. At rest (4000 per 2 ms) a vacuum runs about 20 times
//!   faster.
//!
//! Where the setting reaches a vacuum depends on the server: PostgreSQL 16
//! and later take a changed limit up mid-table; PostgreSQL 15 and earlier
//! read it when a worker starts a table, so a vacuum of one large table
//! keeps the pace of the moment it started. Manual `VACUUM` is paced by
//! `vacuum_cost_limit` and `vacuum_cost_delay` (by default unpaced), which
//! this controller leaves alone.
//!
//! Pure, like the rest of the core: the driver observes the foreground,
//! calls [`VacuumController::decide`] once per interval, and applies the
//! changed settings it returns.

use serde::{Deserialize, Serialize};

use super::{check_range, Decision, FadingPeak, Knob};

/// PostgreSQL's range for `autovacuum_vacuum_cost_limit`.
pub const COST_LIMITS: std::ops::RangeInclusive<u32> = 1..=10_000;

/// PostgreSQL's largest `autovacuum_vacuum_cost_delay`, ms.
pub const MAX_COST_DELAY_MS: f64 = 100.0;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VacuumControllerConfig {
    /// Cost limit while the foreground works.
    pub busy_cost_limit: u32,
    /// Cost limit while it rests: vacuums that start then run sooner.
    pub light_cost_limit: u32,
    /// `autovacuum_vacuum_cost_delay`, ms: the sleep each limit's worth of
    /// cost earns.
    pub cost_delay_ms: f64,
    /// The foreground rests below this share of its recent peak rate.
    pub light_share: f64,
    /// How much of the peak rate survives each interval.
    pub peak_decay: f64,
}

impl Default for VacuumControllerConfig {
    fn default() -> Self {
        VacuumControllerConfig {
            busy_cost_limit: 200,
            light_cost_limit: 4000,
            cost_delay_ms: 2.0,
            light_share: 0.5,
            peak_decay: 0.99,
        }
    }
}

impl VacuumControllerConfig {
    /// Rejects settings PostgreSQL would refuse or that make the rule
    /// meaningless, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("busy_cost_limit", self.busy_cost_limit),
            ("light_cost_limit", self.light_cost_limit),
        ] {
            if !COST_LIMITS.contains(&v) {
                return Err(format!(
                    "{name} must lie in [{}, {}] (PostgreSQL's autovacuum_vacuum_cost_limit), got {v}",
                    COST_LIMITS.start(),
                    COST_LIMITS.end()
                ));
            }
        }
        if self.light_cost_limit < self.busy_cost_limit {
            return Err(format!(
                "light_cost_limit ({}) may not be below busy_cost_limit ({}): rest would slow vacuums down",
                self.light_cost_limit, self.busy_cost_limit
            ));
        }
        check_range("cost_delay_ms", self.cost_delay_ms, 0.0, MAX_COST_DELAY_MS)?;
        check_range("light_share", self.light_share, 0.0, 1.0)?;
        check_range("peak_decay", self.peak_decay, 0.0, 1.0)
    }
}

/// What the driver observes each interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VacuumObservation {
    /// Foreground requests per second over the interval.
    pub foreground_rate: f64,
    /// Vacuums running on the server (`pg_stat_progress_vacuum`).
    pub vacuums_running: u32,
}

pub struct VacuumController {
    config: VacuumControllerConfig,
    /// The cost limit PostgreSQL was last told; `None` before the first
    /// decision, so that it sets the delay too.
    applied: Option<u32>,
    peak: FadingPeak,
}

impl VacuumController {
    pub fn new(config: VacuumControllerConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(VacuumController {
            config,
            applied: None,
            peak: FadingPeak::default(),
        })
    }

    /// The settings for the next interval: a decision for each that
    /// changed (the delay and the limit at the first call), with its
    /// reason.
    pub fn decide(&mut self, obs: VacuumObservation) -> Vec<Decision> {
        let c = self.config;
        let (rate, peak) = self.peak.observe(obs.foreground_rate, c.peak_decay);
        let running = match obs.vacuums_running {
            0 => "no vacuum running".to_string(),
            1 => "1 vacuum running".to_string(),
            n => format!("{n} vacuums running"),
        };
        let (limit, why) = if rate < c.light_share * peak {
            (
                c.light_cost_limit,
                format!(
                    "foreground at {rate:.0}/s, under {:.0}% of its recent peak {peak:.0}/s: vacuums hurry ({running})",
                    c.light_share * 100.0
                ),
            )
        } else {
            (
                c.busy_cost_limit,
                format!("foreground at {rate:.0}/s (recent peak {peak:.0}/s): vacuums spread ({running})"),
            )
        };
        let before = self.applied.replace(limit);
        let mut decisions = Vec::new();
        if before.is_none() {
            decisions.push(Decision {
                knob: Knob::Postgres("autovacuum_vacuum_cost_delay"),
                value: c.cost_delay_ms,
                why: format!(
                    "each {} to {} cost units a vacuum spends earn a sleep of {} ms",
                    c.busy_cost_limit, c.light_cost_limit, c.cost_delay_ms
                ),
            });
        }
        if before != Some(limit) {
            decisions.push(Decision {
                knob: Knob::Postgres("autovacuum_vacuum_cost_limit"),
                value: f64::from(limit),
                why,
            });
        }
        decisions
    }

    /// The cost limit PostgreSQL was last told.
    pub fn cost_limit(&self) -> Option<u32> {
        self.applied
    }

    /// The last settings may not have reached PostgreSQL: the next
    /// decision sets both again.
    pub fn forget_applied(&mut self) {
        self.applied = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn obs(rate: f64) -> VacuumObservation {
        VacuumObservation {
            foreground_rate: rate,
            vacuums_running: 1,
        }
    }

    fn value(decisions: &[Decision], setting: &'static str) -> Option<f64> {
        decisions
            .iter()
            .find(|d| d.knob == Knob::Postgres(setting))
            .map(|d| d.value)
    }

    #[test]
    fn first_decision_sets_both_then_only_changes() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        let first = c.decide(obs(400.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_delay"), Some(2.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_limit"), Some(200.0));
        assert!(c.decide(obs(390.0)).is_empty(), "nothing changed");
    }

    #[test]
    fn rest_hurries_vacuums_and_work_spreads_them_again() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        c.decide(obs(400.0));
        let rest = c.decide(obs(100.0));
        assert_eq!(value(&rest, "autovacuum_vacuum_cost_limit"), Some(4000.0));
        assert!(rest[0].why.contains("hurry"), "{}", rest[0].why);
        let back = c.decide(obs(400.0));
        assert_eq!(value(&back, "autovacuum_vacuum_cost_limit"), Some(200.0));
    }

    #[test]
    fn a_lasting_drop_becomes_the_new_normal() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        c.decide(obs(1000.0));
        assert_eq!(c.cost_limit(), Some(200));
        c.decide(obs(300.0));
        assert_eq!(c.cost_limit(), Some(4000), "at first, 300/s is rest");
        // 1000 * 0.99^n < 600 after 51 intervals.
        for _ in 0..60 {
            c.decide(obs(300.0));
        }
        assert_eq!(c.cost_limit(), Some(200), "the peak faded: 300/s is work now");
    }

    #[test]
    fn a_failed_apply_sets_both_again() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        c.decide(obs(400.0));
        c.forget_applied();
        assert_eq!(c.decide(obs(400.0)).len(), 2);
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |f: fn(&mut VacuumControllerConfig)| {
            let mut c = VacuumControllerConfig::default();
            f(&mut c);
            VacuumController::new(c).err().unwrap()
        };
        assert!(bad(|c| c.busy_cost_limit = 0).contains("busy_cost_limit"));
        assert!(bad(|c| c.light_cost_limit = 20_000).contains("light_cost_limit"));
        assert!(bad(|c| c.light_cost_limit = 100).contains("below busy_cost_limit"));
        assert!(bad(|c| c.cost_delay_ms = f64::NAN).contains("cost_delay_ms"));
        assert!(bad(|c| c.light_share = 1.5).contains("light_share"));
    }

    proptest! {
        /// Whatever the load, the limit is one of the two configured, and
        /// rest (a rate under the share of every rate seen) always gets the
        /// light one.
        #[test]
        fn the_limit_is_busy_or_light_and_rest_hurries(
            rates in proptest::collection::vec(0.0f64..10_000.0, 1..60),
        ) {
            let config = VacuumControllerConfig::default();
            let mut c = VacuumController::new(config).unwrap();
            let mut top: f64 = 0.0;
            for (i, rate) in rates.into_iter().enumerate() {
                let decisions = c.decide(obs(rate));
                prop_assert!(decisions.len() <= 2);
                prop_assert_eq!(decisions.len() == 2, i == 0);
                let limit = c.cost_limit().unwrap();
                prop_assert!(limit == config.busy_cost_limit || limit == config.light_cost_limit);
                // The fading peak is at least top * decay^i; a rate under the
                // share of that is rest.
                top = (top * config.peak_decay).max(rate);
                if rate < config.light_share * top * 0.999 {
                    prop_assert_eq!(limit, config.light_cost_limit);
                }
            }
        }
    }
}
