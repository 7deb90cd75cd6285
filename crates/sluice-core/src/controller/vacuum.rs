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
//!   rule, as the checkpoint controller's): while a vacuum runs, the limit
//!   is `busy_cost_limit` unless the foreground's rate has fallen below
//!   `light_share` of its recent peak, when it is `light_cost_limit`. The
//!   busy default is PostgreSQL's own pace (200 per 2 ms). Faster paces
//!   measured here hurt a light foreground: 1000, at 2.2 times the
//!   unpaced time, took the run's p99 to 44 ms in one of two runs, where
//!   PostgreSQL's pace kept it at 5–7 ms (VC2); 2000 and 4000, within
//!   twice the unpaced time, raised it 1.3–10 times (VC1). The write-back
//!   of what a vacuum dirties, not its reads, is what the foreground pays
//!   for, so the device's spare write bandwidth, not the foreground's
//!   rate, bounds a safe busy pace. At rest (4000 per 2 ms) a vacuum runs
//!   about 20 times faster.
//! - **No vacuum running: the ceiling.** With no vacuum to pace, the limit
//!   is `light_cost_limit`, so that the next vacuum starts its table with
//!   it. PostgreSQL 15 and earlier read the limit when a worker starts a
//!   table, and that value is the most the worker ever gets: on each
//!   configuration reload the autovacuum launcher shares the (new) limit
//!   out among the running workers, but caps each at the limit it started
//!   its table with. So a lowered limit reaches a running vacuum within a
//!   reload, and a raised one only up to its start (measured on
//!   PostgreSQL 15: a vacuum started at 4000 slowed from 35,000 pages/s
//!   to 4,400 within a second of the limit going to 200 and sped up again
//!   when it went back; one started at 200 kept 4,700 pages/s when it was
//!   raised to 4000). A vacuum that starts while the foreground works runs
//!   at the ceiling until the next interval. PostgreSQL 16 and later take
//!   any changed limit up mid-table. A worker that moves on to its next
//!   table while the limit is low starts that table low; the rule holds
//!   for the one large table that matters, not for a queue of them.
//!
//! Manual `VACUUM` is paced by `vacuum_cost_limit` and
//! `vacuum_cost_delay` (by default unpaced), which this controller leaves
//! alone.
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
    /// Cost limit while it rests, and while no vacuum runs: the ceiling a
    /// vacuum starts its table with.
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
            1 => "1 vacuum running".to_string(),
            n => format!("{n} vacuums running"),
        };
        let (limit, why) = if obs.vacuums_running == 0 {
            (
                c.light_cost_limit,
                format!("no vacuum running: the next starts its table at the ceiling (foreground at {rate:.0}/s)"),
            )
        } else if rate < c.light_share * peak {
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
    fn with_no_vacuum_running_the_next_starts_at_the_ceiling() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        let idle = VacuumObservation {
            foreground_rate: 400.0,
            vacuums_running: 0,
        };
        assert_eq!(value(&c.decide(idle), "autovacuum_vacuum_cost_limit"), Some(4000.0));
        // A vacuum starts under a working foreground: spread it.
        let started = c.decide(obs(400.0));
        assert_eq!(value(&started, "autovacuum_vacuum_cost_limit"), Some(200.0));
        assert!(started[0].why.contains("1 vacuum running"), "{}", started[0].why);
        // It ends: back to the ceiling for the next.
        let ended = c.decide(idle);
        assert_eq!(value(&ended, "autovacuum_vacuum_cost_limit"), Some(4000.0));
        assert!(ended[0].why.contains("ceiling"), "{}", ended[0].why);
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
        /// Whatever the load, the limit is one of the two configured; rest
        /// (a rate under the share of every rate seen) and an idle server
        /// always get the light one.
        #[test]
        fn the_limit_is_busy_or_light_and_rest_hurries(
            intervals in proptest::collection::vec((0.0f64..10_000.0, 0u32..3), 1..60),
        ) {
            let config = VacuumControllerConfig::default();
            let mut c = VacuumController::new(config).unwrap();
            let mut top: f64 = 0.0;
            for (i, (rate, vacuums_running)) in intervals.into_iter().enumerate() {
                let decisions = c.decide(VacuumObservation { foreground_rate: rate, vacuums_running });
                prop_assert!(decisions.len() <= 2);
                prop_assert_eq!(decisions.len() == 2, i == 0);
                let limit = c.cost_limit().unwrap();
                prop_assert!(limit == config.busy_cost_limit || limit == config.light_cost_limit);
                // The fading peak is at least top * decay^i; a rate under the
                // share of that is rest.
                top = (top * config.peak_decay).max(rate);
                if vacuums_running == 0 || rate < config.light_share * top * 0.999 {
                    prop_assert_eq!(limit, config.light_cost_limit);
                }
            }
        }
    }
}
