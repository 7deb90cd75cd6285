//! When each shard compacts, decided by one controller that sees every
//! shard's compaction debt and how widely requests fan out over the shards
//! (programmable background tasks §VI; Dean and Barroso, "The Tail at
//! Scale", on synchronizing disruptions across servers).
//!
//! A request split over k shards finishes with its slowest part, so it is
//! slowed when any of its k shards is compacting. Left to themselves
//! (`per-node`), shards compact whenever their own debt calls for it, at
//! unrelated times, and a request that touches all n shards meets a
//! compaction about n times as often as one that touches a single shard.
//! The controller instead holds each shard's compaction paused outside the
//! windows it opens, in one of two schedules:
//!
//! - **synchronized**: a window opens once every shard has debt, and they
//!   all compact in it together (a shard whose debt comes back while the
//!   window lasts joins it). A wide request is slowed during one window
//!   instead of during n.
//! - **staggered**: one shard at a time, the one with the most debt. A
//!   narrow request meets a compaction as often as under `per-node`, and
//!   the load that compaction puts on a host the shards share stays flat.
//! - **auto** chooses between the two at the start of each window, from
//!   the mean number of shards a request touches: synchronized from
//!   `sync_width` on. Under staggered a request of width k meets a
//!   compacting shard with probability about k·c (c: each shard's share of
//!   time spent compacting); under synchronized about s·c, where s ≥ 1 is
//!   how much longer a window lasts when every shard compacts at once
//!   (shards on one host share its CPU and disk). The default, 2, assumes
//!   s < 2. Before the first request there is no width, and no window.
//!
//! Whatever the schedule, a shard compacts once its debt reaches
//! `debt_bound`, or once its L0 is within [`STALL_MARGIN`] tables of the
//! count at which it slows writes: the bound on debt always wins.
//!
//! The controller decides and nothing else: the driver (the router) reads
//! each shard's debt and whether its compaction is paused, calls
//! [`CompactionSchedule::decide`] on its own interval, and sets each
//! decision's `compaction-paused`. Decisions are made against the state
//! observed, not the state last decided, so a shard that restarted
//! unpaused, or that an operator changed, is put back in line.
//!
//! ```
//! use sluice_core::controller::compaction_schedule::*;
//!
//! let mut c = CompactionSchedule::new(CompactionScheduleConfig {
//!     schedule: Schedule::Synchronized,
//!     ..CompactionScheduleConfig::default()
//! })
//! .unwrap();
//! let shard = |debt| Some(ShardState { debt, paused: false, stall_in: 8 });
//! // Only one shard has debt: every compaction waits for the window.
//! let first = c.decide(&ScheduleObservation { shards: &[shard(4 << 20), shard(0)], requests: 10, sub_requests: 20 });
//! assert!(first.iter().all(|d| d.paused));
//! // Both have debt: the window opens on both at once.
//! let paused = |debt| Some(ShardState { debt, paused: true, stall_in: 8 });
//! let next = c.decide(&ScheduleObservation { shards: &[paused(4 << 20), paused(1 << 20)], requests: 10, sub_requests: 20 });
//! assert_eq!(next.len(), 2);
//! assert!(next.iter().all(|d| !d.paused && d.why == Why::Window));
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use super::check_positive;

/// How shards' compactions are placed in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// Every shard compacts when it wants: the controller keeps none paused.
    PerNode,
    Synchronized,
    Staggered,
    /// Synchronized or staggered, chosen at each window from the fan-out.
    Auto,
}

impl Schedule {
    pub const NAMES: &'static str = "per-node, synchronized, staggered or auto";
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Schedule::PerNode => "per-node",
            Schedule::Synchronized => "synchronized",
            Schedule::Staggered => "staggered",
            Schedule::Auto => "auto",
        })
    }
}

impl std::str::FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "per-node" => Ok(Schedule::PerNode),
            "synchronized" => Ok(Schedule::Synchronized),
            "staggered" => Ok(Schedule::Staggered),
            "auto" => Ok(Schedule::Auto),
            _ => Err(format!("unknown schedule '{s}': expected {}", Schedule::NAMES)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionScheduleConfig {
    pub schedule: Schedule,
    /// Debt (bytes) from which a shard compacts whatever the schedule.
    pub debt_bound: u64,
    /// Mean shards per request from which `auto` synchronizes.
    pub sync_width: f64,
}

impl Default for CompactionScheduleConfig {
    fn default() -> Self {
        CompactionScheduleConfig {
            schedule: Schedule::Auto,
            // Six of sluice-kv's 4 MiB L0 tables: two below the eight at
            // which it starts to slow writes.
            debt_bound: 24 << 20,
            sync_width: 2.0,
        }
    }
}

/// A shard as the driver found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardState {
    /// Compaction debt: bytes its levels hold beyond their targets.
    pub debt: u64,
    /// Whether its compaction is paused now.
    pub paused: bool,
    /// L0 tables it can still take before it slows writes.
    pub stall_in: u32,
}

/// A shard this close to slowing writes (in L0 tables, each a flush away)
/// compacts whatever the schedule: the driver reads it only every
/// interval, and a compaction takes a while to bring L0 down.
pub const STALL_MARGIN: u32 = 2;

/// What the controller sees at one decision.
#[derive(Clone, Copy, Debug)]
pub struct ScheduleObservation<'a> {
    /// Each shard, in a fixed order; `None` for one that could not be read.
    pub shards: &'a [Option<ShardState>],
    /// Requests the router finished since the last decision.
    pub requests: u64,
    /// Sub-requests it sent for them: with `requests`, the mean width.
    pub sub_requests: u64,
}

/// Why a shard's compaction is paused or resumed (a metric's label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// `per-node`: the shard decides for itself.
    PerNode,
    /// A synchronized window opened or the shard joined one.
    Window,
    /// A staggered window: this shard's turn.
    Turn,
    /// The debt bound.
    DebtBound,
    /// Outside any window the schedule has open.
    Outside,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::PerNode => "per_node",
            Why::Window => "window",
            Why::Turn => "turn",
            Why::DebtBound => "debt_bound",
            Why::Outside => "outside",
        })
    }
}

/// One shard's knob to set.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PauseDecision {
    /// Its index in [`ScheduleObservation::shards`].
    pub shard: usize,
    pub paused: bool,
    pub why: Why,
    /// The figures behind it, for the log.
    pub detail: String,
}

/// Weight of the newest interval in the mean width: about ten intervals.
const WIDTH_WEIGHT: f64 = 0.1;

pub struct CompactionSchedule {
    config: CompactionScheduleConfig,
    /// Mean shards per request, smoothed; `None` before the first request.
    width: Option<f64>,
    /// The running window's schedule (synchronized or staggered).
    window: Option<Schedule>,
    /// Shards the running window has opened whose debt is not yet paid.
    open: Vec<bool>,
}

impl CompactionSchedule {
    /// Rejects settings that make the schedule meaningless, naming the field.
    pub fn new(config: CompactionScheduleConfig) -> Result<Self, String> {
        check_positive("sync_width", config.sync_width)?;
        if config.debt_bound == 0 {
            return Err("debt_bound must be at least 1 byte".into());
        }
        Ok(CompactionSchedule {
            config,
            width: None,
            window: None,
            open: Vec::new(),
        })
    }

    pub fn config(&self) -> &CompactionScheduleConfig {
        &self.config
    }

    /// Mean shards per request as the controller weighs it.
    pub fn width(&self) -> Option<f64> {
        self.width
    }

    /// The running window's schedule, if one runs.
    pub fn window(&self) -> Option<Schedule> {
        self.window
    }

    /// The knobs to change, one decision per shard whose observed state
    /// differs from what the schedule wants; none for unread shards.
    pub fn decide(&mut self, obs: &ScheduleObservation) -> Vec<PauseDecision> {
        if obs.requests > 0 {
            let w = obs.sub_requests as f64 / obs.requests as f64;
            self.width = Some(self.width.map_or(w, |m| m + WIDTH_WEIGHT * (w - m)));
        }
        self.open.resize(obs.shards.len(), false);
        let debt = |i: usize| obs.shards[i].map(|s| s.debt);
        let want: Vec<(bool, Why, String)> = if self.config.schedule == Schedule::PerNode {
            self.window = None;
            (0..obs.shards.len())
                .map(|_| (false, Why::PerNode, "the shard compacts when it wants".into()))
                .collect()
        } else {
            self.advance(obs);
            let turn = if self.window == Some(Schedule::Staggered) {
                Why::Turn
            } else {
                Why::Window
            };
            (0..obs.shards.len())
                .map(|i| match obs.shards[i].and_then(|s| self.bound(s)) {
                    Some(detail) => (false, Why::DebtBound, detail),
                    None if self.open[i] => (false, turn, self.because(debt(i))),
                    None => (
                        true,
                        Why::Outside,
                        format!("no window for it; debt {}", mib(debt(i).unwrap_or(0))),
                    ),
                })
                .collect()
        };
        want.into_iter()
            .enumerate()
            .filter_map(|(shard, (paused, why, detail))| {
                let now = obs.shards[shard]?;
                (now.paused != paused).then_some(PauseDecision {
                    shard,
                    paused,
                    why,
                    detail,
                })
            })
            .collect()
    }

    /// Closes the window's shards whose debt is paid, ends it when none is
    /// left, and opens the next if its schedule says so.
    fn advance(&mut self, obs: &ScheduleObservation) {
        let debt = |i: usize| obs.shards[i].map_or(0, |s| s.debt);
        let n = obs.shards.len();
        for i in 0..n {
            // An unread shard stays as it was: its debt is unknown.
            if obs.shards[i].is_some() && debt(i) == 0 {
                self.open[i] = false;
            }
        }
        if !self.open.contains(&true) {
            self.window = None;
        }
        let read: Vec<usize> = (0..n).filter(|&i| obs.shards[i].is_some()).collect();
        // Before its first request, `auto` has no width to choose by: it
        // opens no window (the debt bound still holds), since a window's
        // schedule is kept until the window ends.
        let schedule = self.window.unwrap_or(match (self.config.schedule, self.width) {
            (Schedule::Auto, None) => return,
            (Schedule::Auto, Some(w)) if w >= self.config.sync_width => Schedule::Synchronized,
            (Schedule::Auto, Some(_)) => Schedule::Staggered,
            (s, _) => s,
        });
        match schedule {
            Schedule::Synchronized => {
                let every = !read.is_empty() && read.iter().all(|&i| debt(i) > 0);
                let forced = read
                    .iter()
                    .any(|&i| obs.shards[i].and_then(|s| self.bound(s)).is_some());
                // Once a window runs, or one shard's debt forces its
                // compaction, every shard with debt compacts with it.
                if self.window.is_some() || every || forced {
                    for &i in &read {
                        self.open[i] |= debt(i) > 0;
                    }
                }
                if self.open.contains(&true) {
                    self.window = Some(Schedule::Synchronized);
                }
            }
            Schedule::Staggered => {
                if self.window.is_none() {
                    if let Some(&i) = read.iter().filter(|&&i| debt(i) > 0).max_by_key(|&&i| (debt(i), n - i)) {
                        self.open[i] = true;
                        self.window = Some(Schedule::Staggered);
                    }
                }
            }
            Schedule::PerNode | Schedule::Auto => {}
        }
    }

    /// Why the debt bound makes `s` compact whatever the schedule, if it
    /// does.
    fn bound(&self, s: ShardState) -> Option<String> {
        let bound = self.config.debt_bound;
        if s.debt >= bound {
            Some(format!("debt {} ≥ bound {}", mib(s.debt), mib(bound)))
        } else if s.stall_in <= STALL_MARGIN {
            Some(format!("{} L0 tables from slowing writes", s.stall_in))
        } else {
            None
        }
    }

    fn because(&self, debt: Option<u64>) -> String {
        let width = self
            .width
            .map_or("no requests yet".into(), |w| format!("mean width {w:.1}"));
        let schedule = self.window.map_or("no".into(), |s| s.to_string());
        format!("{schedule} window; debt {}; {width}", mib(debt.unwrap_or(0)))
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn schedule(s: Schedule) -> CompactionSchedule {
        CompactionSchedule::new(CompactionScheduleConfig {
            schedule: s,
            debt_bound: 24 * MB,
            sync_width: 2.0,
        })
        .unwrap()
    }

    /// Applies the decisions to `shards`, as the driver would.
    fn step(c: &mut CompactionSchedule, shards: &mut [ShardState], width: u64) -> Vec<PauseDecision> {
        let seen: Vec<Option<ShardState>> = shards.iter().copied().map(Some).collect();
        let d = c.decide(&ScheduleObservation {
            shards: &seen,
            requests: 100,
            sub_requests: 100 * width,
        });
        for x in &d {
            shards[x.shard].paused = x.paused;
        }
        d
    }

    fn shards(debts: &[u64]) -> Vec<ShardState> {
        debts
            .iter()
            .map(|&debt| ShardState {
                debt,
                paused: false,
                stall_in: 8,
            })
            .collect()
    }

    fn running(shards: &[ShardState]) -> Vec<bool> {
        shards.iter().map(|s| !s.paused).collect()
    }

    #[test]
    fn per_node_never_pauses_and_resumes_what_was_paused() {
        let mut c = schedule(Schedule::PerNode);
        let mut s = shards(&[30 * MB, 0, 4 * MB]);
        assert!(step(&mut c, &mut s, 3).is_empty());
        s[1].paused = true;
        let d = step(&mut c, &mut s, 3);
        assert_eq!(
            (d.len(), d[0].shard, d[0].paused, d[0].why),
            (1, 1, false, Why::PerNode)
        );
    }

    #[test]
    fn synchronized_waits_for_every_shard_then_opens_them_together() {
        let mut c = schedule(Schedule::Synchronized);
        let mut s = shards(&[4 * MB, 0, 4 * MB]);
        step(&mut c, &mut s, 3);
        assert_eq!(running(&s), [false, false, false]);
        s[1].debt = 4 * MB;
        let d = step(&mut c, &mut s, 3);
        assert!(d.iter().all(|d| d.why == Why::Window));
        assert_eq!(running(&s), [true, true, true]);
        // A shard that is done pauses; the window lasts while others work.
        s[0].debt = 0;
        step(&mut c, &mut s, 3);
        assert_eq!(running(&s), [false, true, true]);
        assert_eq!(c.window(), Some(Schedule::Synchronized));
        // Its debt comes back while the window lasts: it joins.
        s[0].debt = 4 * MB;
        step(&mut c, &mut s, 3);
        assert_eq!(running(&s), [true, true, true]);
        for x in &mut s {
            x.debt = 0;
        }
        step(&mut c, &mut s, 3);
        assert_eq!(running(&s), [false, false, false]);
        assert_eq!(c.window(), None);
        // The next window waits for every shard again.
        s[2].debt = 4 * MB;
        step(&mut c, &mut s, 3);
        assert_eq!(running(&s), [false, false, false]);
    }

    #[test]
    fn one_shard_at_its_debt_bound_brings_the_others_with_debt_into_the_window() {
        let mut c = schedule(Schedule::Synchronized);
        let mut s = shards(&[24 * MB, 4 * MB, 0]);
        s.iter_mut().for_each(|s| s.paused = true);
        let d = step(&mut c, &mut s, 3);
        assert_eq!(running(&s), [true, true, false]);
        assert_eq!(d.iter().find(|d| d.shard == 0).unwrap().why, Why::DebtBound);
    }

    #[test]
    fn a_shard_near_slowing_writes_compacts_whatever_its_debt() {
        let mut c = schedule(Schedule::Synchronized);
        let mut s = shards(&[4 * MB, 0]);
        s[0].paused = true;
        s[0].stall_in = STALL_MARGIN + 1;
        step(&mut c, &mut s, 2);
        assert_eq!(running(&s), [false, false]);
        s[0].stall_in = STALL_MARGIN;
        let d = step(&mut c, &mut s, 2);
        assert_eq!(running(&s), [true, false]);
        assert_eq!(
            (d[0].why, d[0].detail.as_str()),
            (Why::DebtBound, "2 L0 tables from slowing writes")
        );
    }

    #[test]
    fn staggered_runs_one_shard_at_a_time_most_debt_first() {
        let mut c = schedule(Schedule::Staggered);
        let mut s = shards(&[4 * MB, 8 * MB, 6 * MB]);
        step(&mut c, &mut s, 1);
        assert_eq!(running(&s), [false, true, false]);
        // Its turn lasts until its debt is paid, whatever the others owe.
        s[0].debt = 20 * MB;
        step(&mut c, &mut s, 1);
        assert_eq!(running(&s), [false, true, false]);
        s[1].debt = 0;
        step(&mut c, &mut s, 1);
        assert_eq!(running(&s), [true, false, false]);
        // The debt bound is not kept waiting for a turn.
        s[2].debt = 30 * MB;
        let d = step(&mut c, &mut s, 1);
        assert_eq!(running(&s), [true, false, true]);
        assert_eq!(d[0].why, Why::DebtBound);
    }

    #[test]
    fn auto_synchronizes_wide_requests_and_staggers_narrow_ones() {
        let mut wide = schedule(Schedule::Auto);
        let mut s = shards(&[4 * MB, 4 * MB]);
        step(&mut wide, &mut s, 2);
        assert_eq!(wide.window(), Some(Schedule::Synchronized));
        assert_eq!(running(&s), [true, true]);
        let mut narrow = schedule(Schedule::Auto);
        let mut s = shards(&[4 * MB, 4 * MB]);
        step(&mut narrow, &mut s, 1);
        assert_eq!(narrow.window(), Some(Schedule::Staggered));
        assert_eq!(running(&s), [true, false]);
    }

    #[test]
    fn auto_waits_for_a_request_before_it_opens_a_window() {
        let mut c = schedule(Schedule::Auto);
        let mut s = shards(&[4 * MB, 4 * MB]);
        let seen: Vec<Option<ShardState>> = s.iter().copied().map(Some).collect();
        let idle = ScheduleObservation {
            shards: &seen,
            requests: 0,
            sub_requests: 0,
        };
        assert!(c.decide(&idle).iter().all(|d| d.paused && d.why == Why::Outside));
        assert_eq!(c.window(), None);
        step(&mut c, &mut s, 2);
        assert_eq!(
            c.window(),
            Some(Schedule::Synchronized),
            "a wide request came: synchronized"
        );
    }

    #[test]
    fn auto_keeps_a_window_schedule_until_it_ends() {
        let mut c = schedule(Schedule::Auto);
        let mut s = shards(&[4 * MB, 8 * MB]);
        step(&mut c, &mut s, 1);
        assert_eq!(c.window(), Some(Schedule::Staggered));
        // The width rises past 2 during the window: it stays staggered.
        for _ in 0..30 {
            step(&mut c, &mut s, 3);
        }
        assert_eq!(c.window(), Some(Schedule::Staggered));
        assert_eq!(running(&s), [false, true]);
        s[1].debt = 0;
        step(&mut c, &mut s, 3);
        assert_eq!(c.window(), None, "shard 0 alone has debt: a synchronized window waits");
        s[1].debt = 4 * MB;
        step(&mut c, &mut s, 3);
        assert_eq!(c.window(), Some(Schedule::Synchronized));
    }

    #[test]
    fn an_unread_shard_is_left_alone_and_does_not_hold_a_window() {
        let mut c = schedule(Schedule::Synchronized);
        let seen = [
            Some(ShardState {
                debt: 4 * MB,
                paused: true,
                stall_in: 8,
            }),
            None,
        ];
        let d = c.decide(&ScheduleObservation {
            shards: &seen,
            requests: 0,
            sub_requests: 0,
        });
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].shard, d[0].paused), (0, false));
    }

    #[test]
    fn a_restarted_shard_found_running_outside_a_window_is_paused() {
        let mut c = schedule(Schedule::Staggered);
        let mut s = shards(&[0, 0]);
        let d = step(&mut c, &mut s, 1);
        assert_eq!(d.len(), 2);
        assert!(d.iter().all(|d| d.paused && d.why == Why::Outside));
        assert!(step(&mut c, &mut s, 1).is_empty(), "nothing to change: nothing decided");
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |c| CompactionSchedule::new(c).err().unwrap();
        let d = CompactionScheduleConfig::default();
        assert!(bad(CompactionScheduleConfig { sync_width: 0.0, ..d }).contains("sync_width"));
        assert!(bad(CompactionScheduleConfig { debt_bound: 0, ..d }).contains("debt_bound"));
        assert!("nightly"
            .parse::<Schedule>()
            .unwrap_err()
            .contains("per-node, synchronized"));
        for s in [
            Schedule::PerNode,
            Schedule::Synchronized,
            Schedule::Staggered,
            Schedule::Auto,
        ] {
            assert_eq!(s.to_string().parse::<Schedule>(), Ok(s));
        }
    }
}
