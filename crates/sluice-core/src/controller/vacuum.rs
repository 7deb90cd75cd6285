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
//! A second lever is where the vacuum's writes go. A vacuum dirties pages
//! faster than the disk takes them, and the kernel writes them back in one
//! burst half a minute later, inside the foreground's next requests. With
//! `backend_flush_after` set, PostgreSQL asks the kernel to write a
//! backend's dirty pages every that many kB (`sync_file_range`), so the
//! vacuum's writes go to the disk as it makes them. Measured (VF1, VF2):
//! unpaced with 256 kB, the foreground's p99 was 1.02 (1.01–1.13) of its
//! own without a vacuum, and the vacuum took 1.44 (0.83–1.51) of the
//! unpaced time; unpaced alone it was 1.22 (1.09–1.28), and at
//! PostgreSQL's pace the vacuum took 7–8 times as long. A pace on top of
//! it only slows the vacuum: at 4000 per 2 ms with 256 kB it took 2.5
//! times the unpaced time (VF3).
//!
//! What a worker starts a table with is what counts. PostgreSQL 15 and
//! earlier read the delay and `backend_flush_after` when a worker starts a
//! table, and the cost limit read then is the most the worker ever gets:
//! on each configuration reload the autovacuum launcher shares the (new)
//! limit out among the running workers, but caps each at the limit it
//! started its table with, so a lowered limit reaches a running vacuum
//! within a reload, and a raised one only up to its start (measured on
//! PostgreSQL 15: a vacuum started at 4000 slowed from 35,000 pages/s to
//! 4,400 within a second of the limit going to 200 and sped up again when
//! it went back; one started at 200 kept 4,700 pages/s when it was raised
//! to 4000). A vacuum started unpaced (delay 0) keeps no cost account and
//! cannot be slowed at all. PostgreSQL 16 and later take every change up
//! mid-table.
//!
//! This controller owns the delay, the cost limit and
//! `backend_flush_after`:
//!
//! - **No vacuum running, the foreground working: the next starts
//!   unpaced, its writes flushed as it goes** (delay 0,
//!   `backend_flush_after = flush_after_kib`): the measured mechanism
//!   above. It runs so to its end: nothing it started with can be changed,
//!   and nothing needs to be.
//! - **No vacuum running, the foreground resting (or `flush_after_kib =
//!   0`): the next starts paced at the ceiling** (`cost_delay_ms`,
//!   `light_cost_limit`, `backend_flush_after = 0`, the kernel's
//!   write-back): fast, and slowable should the foreground come back.
//! - **A paced vacuum running: spread while the foreground works, hurry
//!   while it rests** (SILK's rule, as the checkpoint controller's): the
//!   limit is `busy_cost_limit` unless the foreground's rate has fallen
//!   below `light_share` of its recent peak, when it is
//!   `light_cost_limit`. The busy default is PostgreSQL's own pace (200 per
//!   2 ms): faster paces hurt a light foreground when the kernel writes
//!   back (1000, at 2.2 times the unpaced time, took the run's p99 to
//!   44 ms in one of two runs, where PostgreSQL's pace kept it at 5–7 ms,
//!   VC2; 2000 and 4000, within twice the unpaced time, raised it 1.3–10
//!   times, VC1). At rest (4000 per 2 ms) a vacuum runs about 20 times
//!   faster.
//!
//! A worker that moves on to its next table while the limit is low starts
//! that table low; the rule holds for the one large table that matters,
//! not for a queue of them. `backend_flush_after` applies to every backend,
//! not only the vacuum's: the foreground's own evictions are flushed as
//! they go too (in VF1 and VF2 its p99 stayed at its own).
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

/// PostgreSQL's largest `backend_flush_after`, kB (256 pages of 8 kB).
pub const MAX_FLUSH_AFTER_KIB: u32 = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VacuumControllerConfig {
    /// Cost limit of a paced vacuum while the foreground works.
    pub busy_cost_limit: u32,
    /// Cost limit of a paced vacuum while the foreground rests, and while
    /// no vacuum runs: the ceiling a vacuum starts its table with.
    pub light_cost_limit: u32,
    /// `autovacuum_vacuum_cost_delay` of a paced vacuum, ms: the sleep each
    /// limit's worth of cost earns.
    pub cost_delay_ms: f64,
    /// The foreground rests below this share of its recent peak rate.
    pub light_share: f64,
    /// How much of the peak rate survives each interval.
    pub peak_decay: f64,
    /// `backend_flush_after`, kB, for a vacuum that starts while the
    /// foreground works, which then starts unpaced; 0 leaves the setting
    /// alone and paces every vacuum.
    pub flush_after_kib: u32,
}

impl Default for VacuumControllerConfig {
    fn default() -> Self {
        VacuumControllerConfig {
            busy_cost_limit: 200,
            light_cost_limit: 4000,
            cost_delay_ms: 2.0,
            light_share: 0.5,
            peak_decay: 0.99,
            flush_after_kib: 256,
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
        check_range("peak_decay", self.peak_decay, 0.0, 1.0)?;
        if self.flush_after_kib > MAX_FLUSH_AFTER_KIB {
            return Err(format!(
                "flush_after_kib must lie in [0, {MAX_FLUSH_AFTER_KIB}] (PostgreSQL's backend_flush_after), got {}",
                self.flush_after_kib
            ));
        }
        Ok(())
    }

    /// Whether `backend_flush_after` is steered.
    pub fn steers_flush(&self) -> bool {
        self.flush_after_kib > 0
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
    /// What PostgreSQL was last told; `None` before the first decision, so
    /// that it sets every knob.
    applied: Option<VacuumSettings>,
    /// The last settings may not have reached PostgreSQL: the next
    /// decision sends every knob, what running vacuums started with too.
    resend: bool,
    peak: FadingPeak,
}

/// The settings as PostgreSQL takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VacuumSettings {
    /// `autovacuum_vacuum_cost_delay`, ms.
    pub cost_delay_ms: f64,
    pub cost_limit: u32,
    /// `backend_flush_after`, kB; `None` until decided, and always if not
    /// steered.
    pub flush_after_kib: Option<u32>,
}

impl VacuumSettings {
    /// Each setting by its name in `pg_settings`, in the order they are
    /// decided; `None` for one not decided.
    fn knobs(&self) -> [(&'static str, Option<f64>); 3] {
        [
            ("autovacuum_vacuum_cost_delay", Some(self.cost_delay_ms)),
            ("backend_flush_after", self.flush_after_kib.map(f64::from)),
            ("autovacuum_vacuum_cost_limit", Some(f64::from(self.cost_limit))),
        ]
    }
}

impl VacuumController {
    pub fn new(config: VacuumControllerConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(VacuumController {
            config,
            applied: None,
            resend: false,
            peak: FadingPeak::default(),
        })
    }

    /// The settings for the next interval: a decision for each that
    /// changed (every one at the first call), with its reason.
    pub fn decide(&mut self, obs: VacuumObservation) -> Vec<Decision> {
        let c = self.config;
        let (rate, peak) = self.peak.observe(obs.foreground_rate, c.peak_decay);
        let rests = rate < c.light_share * peak;
        let running = match obs.vacuums_running {
            1 => "1 vacuum running".to_string(),
            n => format!("{n} vacuums running"),
        };
        let before = if std::mem::take(&mut self.resend) {
            None
        } else {
            self.applied
        };
        let (next, why) = if obs.vacuums_running == 0 {
            if c.steers_flush() && !rests {
                (
                    VacuumSettings {
                        cost_delay_ms: 0.0,
                        cost_limit: c.light_cost_limit,
                        flush_after_kib: Some(c.flush_after_kib),
                    },
                    format!(
                        "no vacuum running, foreground at {rate:.0}/s: the next starts unpaced, \
                         its writes handed to the disk every {} kB as it goes",
                        c.flush_after_kib
                    ),
                )
            } else {
                let writes = if c.steers_flush() {
                    format!(", its writes left to the kernel's write-back (foreground at {rate:.0}/s, resting)")
                } else {
                    format!(" (foreground at {rate:.0}/s)")
                };
                (
                    VacuumSettings {
                        cost_delay_ms: c.cost_delay_ms,
                        cost_limit: c.light_cost_limit,
                        flush_after_kib: c.steers_flush().then_some(0),
                    },
                    format!("no vacuum running: the next starts its table paced at the ceiling{writes}"),
                )
            }
        } else {
            // What the running vacuums started with stays (it changes only
            // while none runs); a first decision paces the next at the
            // configured delay.
            let kept = self.applied.unwrap_or(VacuumSettings {
                cost_delay_ms: c.cost_delay_ms,
                cost_limit: c.light_cost_limit,
                flush_after_kib: None,
            });
            let started_flushed = kept.flush_after_kib.is_some_and(|kib| kib > 0);
            let (cost_limit, why) = if started_flushed {
                (
                    kept.cost_limit,
                    format!("foreground at {rate:.0}/s: the vacuum runs unpaced, its writes going to the disk as it goes ({running})"),
                )
            } else if rests {
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
            (VacuumSettings { cost_limit, ..kept }, why)
        };
        self.applied = Some(next);
        let told = before.map(|b| b.knobs());
        let mut decisions = Vec::new();
        for (i, (setting, value)) in next.knobs().into_iter().enumerate() {
            let Some(value) = value else { continue };
            if told.is_none_or(|t| t[i].1 != Some(value)) {
                decisions.push(Decision {
                    knob: Knob::Postgres(setting),
                    value,
                    why: why.clone(),
                });
            }
        }
        decisions
    }

    /// What PostgreSQL was last told.
    pub fn settings(&self) -> Option<VacuumSettings> {
        self.applied
    }

    /// The last settings may not have reached PostgreSQL: the next
    /// decision sets them again, keeping what running vacuums started with.
    pub fn forget_applied(&mut self) {
        self.resend = true;
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

    /// The pace alone, as without `backend_flush_after`.
    fn paced() -> VacuumController {
        VacuumController::new(VacuumControllerConfig {
            flush_after_kib: 0,
            ..Default::default()
        })
        .unwrap()
    }

    fn limit(c: &VacuumController) -> u32 {
        c.settings().unwrap().cost_limit
    }

    fn idle(rate: f64) -> VacuumObservation {
        VacuumObservation {
            foreground_rate: rate,
            vacuums_running: 0,
        }
    }

    #[test]
    fn first_decision_sets_both_then_only_changes() {
        let mut c = paced();
        let first = c.decide(obs(400.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_delay"), Some(2.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_limit"), Some(200.0));
        assert_eq!(value(&first, "backend_flush_after"), None, "not steered");
        assert!(c.decide(obs(390.0)).is_empty(), "nothing changed");
    }

    #[test]
    fn rest_hurries_vacuums_and_work_spreads_them_again() {
        let mut c = paced();
        c.decide(obs(400.0));
        let rest = c.decide(obs(100.0));
        assert_eq!(value(&rest, "autovacuum_vacuum_cost_limit"), Some(4000.0));
        assert!(rest[0].why.contains("hurry"), "{}", rest[0].why);
        let back = c.decide(obs(400.0));
        assert_eq!(value(&back, "autovacuum_vacuum_cost_limit"), Some(200.0));
    }

    #[test]
    fn with_no_vacuum_running_the_next_starts_at_the_ceiling() {
        let mut c = paced();
        assert_eq!(
            value(&c.decide(idle(400.0)), "autovacuum_vacuum_cost_limit"),
            Some(4000.0)
        );
        // A vacuum starts under a working foreground: spread it.
        let started = c.decide(obs(400.0));
        assert_eq!(value(&started, "autovacuum_vacuum_cost_limit"), Some(200.0));
        assert!(started[0].why.contains("1 vacuum running"), "{}", started[0].why);
        // It ends: back to the ceiling for the next.
        let ended = c.decide(idle(400.0));
        assert_eq!(value(&ended, "autovacuum_vacuum_cost_limit"), Some(4000.0));
        assert!(ended[0].why.contains("ceiling"), "{}", ended[0].why);
    }

    #[test]
    fn under_load_the_next_vacuum_starts_unpaced_and_flushing_and_runs_so() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        let first = c.decide(idle(400.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_delay"), Some(0.0));
        assert_eq!(value(&first, "backend_flush_after"), Some(256.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_limit"), Some(4000.0));
        assert!(
            first[0].why.contains("unpaced") && first[0].why.contains("every 256 kB"),
            "{}",
            first[0].why
        );
        assert!(
            c.decide(obs(400.0)).is_empty(),
            "started unpaced and flushing: nothing changes"
        );
        assert!(c.decide(obs(100.0)).is_empty(), "not at rest either");
        // It ends; the foreground rests: the next starts paced at the
        // ceiling, its writes left to the kernel.
        let rest = c.decide(idle(100.0));
        assert_eq!(value(&rest, "autovacuum_vacuum_cost_delay"), Some(2.0));
        assert_eq!(value(&rest, "backend_flush_after"), Some(0.0));
        assert_eq!(
            value(&rest, "autovacuum_vacuum_cost_limit"),
            None,
            "the ceiling already"
        );
        assert!(rest[0].why.contains("kernel's write-back"), "{}", rest[0].why);
        // One starts so; the foreground comes back while it runs: it keeps
        // what it started with, and is spread.
        assert!(c.decide(obs(100.0)).is_empty());
        let back = c.decide(obs(400.0));
        assert_eq!(value(&back, "autovacuum_vacuum_cost_limit"), Some(200.0));
        assert_eq!(back.len(), 1, "nothing it started with changes mid-table");
        // It ends under load: unpaced and flushing again for the next.
        let ended = c.decide(idle(400.0));
        assert_eq!(value(&ended, "autovacuum_vacuum_cost_delay"), Some(0.0));
        assert_eq!(value(&ended, "backend_flush_after"), Some(256.0));
        assert_eq!(value(&ended, "autovacuum_vacuum_cost_limit"), Some(4000.0));
    }

    #[test]
    fn a_vacuum_running_at_the_first_decision_is_paced() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        let first = c.decide(obs(400.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_delay"), Some(2.0));
        assert_eq!(value(&first, "autovacuum_vacuum_cost_limit"), Some(200.0));
        assert_eq!(
            value(&first, "backend_flush_after"),
            None,
            "unknown what it started with"
        );
        assert_eq!(c.settings().unwrap().flush_after_kib, None);
    }

    #[test]
    fn a_lasting_drop_becomes_the_new_normal() {
        let mut c = paced();
        c.decide(obs(1000.0));
        assert_eq!(limit(&c), 200);
        c.decide(obs(300.0));
        assert_eq!(limit(&c), 4000, "at first, 300/s is rest");
        // 1000 * 0.99^n < 600 after 51 intervals.
        for _ in 0..60 {
            c.decide(obs(300.0));
        }
        assert_eq!(limit(&c), 200, "the peak faded: 300/s is work now");
    }

    #[test]
    fn a_failed_apply_sets_every_knob_again() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        c.decide(idle(400.0));
        c.forget_applied();
        assert_eq!(c.decide(idle(400.0)).len(), 3);
        assert!(c.decide(idle(400.0)).is_empty(), "once");
    }

    #[test]
    fn a_failed_apply_mid_vacuum_keeps_what_it_started_with() {
        let mut c = VacuumController::new(VacuumControllerConfig::default()).unwrap();
        c.decide(idle(400.0));
        c.decide(obs(400.0));
        c.forget_applied();
        let again = c.decide(obs(400.0));
        assert_eq!(
            value(&again, "autovacuum_vacuum_cost_delay"),
            Some(0.0),
            "still unpaced"
        );
        assert_eq!(value(&again, "backend_flush_after"), Some(256.0));
        assert_eq!(value(&again, "autovacuum_vacuum_cost_limit"), Some(4000.0));
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
        assert!(bad(|c| c.flush_after_kib = 4096).contains("backend_flush_after"));
    }

    proptest! {
        /// Whatever the load, the limit is one of the two configured, and
        /// rest (a rate under the share of every rate seen) and an idle
        /// server always get the light one; what a vacuum starts with (the
        /// delay, `backend_flush_after`) changes only while none runs,
        /// after the first decision; and a vacuum that started unpaced and
        /// flushing keeps both to its end.
        #[test]
        fn the_limit_is_busy_or_light_and_a_start_is_kept(
            intervals in proptest::collection::vec((0.0f64..10_000.0, 0u32..3), 1..60),
            flush_after_kib in prop_oneof![Just(0u32), Just(256u32)],
        ) {
            let config = VacuumControllerConfig { flush_after_kib, ..Default::default() };
            let mut c = VacuumController::new(config).unwrap();
            let mut top: f64 = 0.0;
            let mut started_flushed = false;
            let mut running = 0;
            for (i, (rate, vacuums_running)) in intervals.into_iter().enumerate() {
                if running == 0 && vacuums_running > 0 {
                    started_flushed = c.settings().is_some_and(|s| s.flush_after_kib.is_some_and(|k| k > 0));
                }
                running = vacuums_running;
                let decisions = c.decide(VacuumObservation { foreground_rate: rate, vacuums_running });
                prop_assert!(decisions.len() <= 3);
                let start_changed = decisions.iter().any(|d| {
                    d.knob == Knob::Postgres("autovacuum_vacuum_cost_delay") || d.knob == Knob::Postgres("backend_flush_after")
                });
                prop_assert!(!start_changed || vacuums_running == 0 || i == 0);
                prop_assert!(flush_after_kib > 0 || value(&decisions, "backend_flush_after").is_none());
                let now = c.settings().unwrap();
                prop_assert!(now.cost_limit == config.busy_cost_limit || now.cost_limit == config.light_cost_limit);
                if vacuums_running > 0 && started_flushed {
                    prop_assert_eq!(now.cost_delay_ms, 0.0);
                    prop_assert_eq!(now.flush_after_kib, Some(flush_after_kib));
                }
                // The fading peak is at least top * decay^i; a rate under the
                // share of that is rest.
                top = (top * config.peak_decay).max(rate);
                if vacuums_running == 0 || rate < config.light_share * top * 0.999 || started_flushed {
                    prop_assert_eq!(now.cost_limit, config.light_cost_limit);
                }
            }
        }
    }
}
