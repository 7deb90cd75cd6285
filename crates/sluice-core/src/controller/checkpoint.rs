//! Paces PostgreSQL's checkpoints from live load: the programmable
//! background tasks paper's PostgreSQL case (§V-B), where a small WAL
//! budget with a low completion target (128 MiB, 0.1) raised p99 by 62%
//! because checkpoints came often and wrote in bursts.
//!
//! PostgreSQL already has the mechanism; what it lacks is a policy that
//! sees the load. Its checkpointer starts a checkpoint when the WAL since
//! the last redo point reaches `max_wal_size / (1 + completion_target)`
//! (the *trigger point*, `CheckPointSegments` in its source) or when
//! `checkpoint_timeout` has passed since the last one started, and paces
//! the checkpoint's writes to finish once `completion_target` of the
//! trigger point's WAL has been written since it started. The WAL since
//! the redo point (the *recovery debt*: what a crash makes PostgreSQL
//! replay) therefore peaks at `trigger · (1 + completion_target)`, which is
//! `max_wal_size`. PostgreSQL counts all of this in whole WAL segments
//! (16 MiB unless the server was made otherwise), rounding the trigger
//! point down: `max_wal_size = 127MB` with target 0.9 is 7 segments, a
//! trigger point of 3 (48 MiB) where 127 / 1.9 is 67 MiB. So the
//! controller chooses the trigger point in segments and `max_wal_size` as
//! the whole segments that give it.
//!
//! This controller owns four settings and keeps one invariant:
//!
//! - **The debt bound always wins.** The trigger point stays at the most
//!   whole segments whose `(1 + busy_completion_target)` fits in
//!   `max_recovery_wal_mib`, whatever the completion target:
//!   `max_wal_size` moves with the target as `trigger · (1 + target)`
//!   (rounded up to whole segments, which PostgreSQL's rounding down takes
//!   back to the same trigger point), so the debt peaks at most at
//!   `max_recovery_wal_mib`, and a checkpoint started under one target and
//!   finished under another keeps the bound. While the debt is above the
//!   bound (PostgreSQL fell behind), the checkpoint runs at the light
//!   target, whatever the load. The price: a checkpoint starts after at
//!   most `1 / (1 + busy_completion_target)` of the bound, where
//!   PostgreSQL with the same bound and a low target waits for most of it,
//!   so checkpoints come more often, and each puts full-page images in the
//!   WAL (docs/reproductions/background-tasks.md measures both).
//! - **Spread while the foreground works, hurry while it rests** (SILK's
//!   rule, opportunistic background work): the completion target is
//!   `busy_completion_target` unless the foreground's rate has fallen
//!   below `light_share` of its recent peak, when it is
//!   `light_completion_target` and a running checkpoint finishes sooner.
//!   PostgreSQL's checkpointer takes up a changed target mid-checkpoint.
//! - **Start before a burst forces it.** A checkpoint forced by WAL volume
//!   tends to fall in a burst, where WAL is written fastest and the
//!   foreground can least afford the writes. The controller measures the
//!   WAL each burst writes (a burst: the rate above `burst_ratio` times its
//!   slow average outside bursts, for no longer than that average's span;
//!   the WAL: from PostgreSQL's insert position) and keeps the largest,
//!   fading by `burst_decay` each interval. Outside a burst, once
//!   the WAL left before PostgreSQL's call for the next checkpoint is less
//!   than [`BURST_ROOM_MARGIN`] times that burst (or `min_burst_room_mib`,
//!   which holds room before any burst is seen), the debt has passed
//!   `early_share` of the trigger point (a floor: checkpoints never come
//!   more often than that), and `MIN_TIMEOUT_S` have passed since the
//!   last checkpoint started, the controller lowers `checkpoint_timeout`
//!   to that elapsed time: PostgreSQL then starts a *timed* checkpoint,
//!   paced like any other, at once. `CHECKPOINT`, the only command that
//!   starts one, writes without pacing. Once the checkpoint runs, the
//!   timeout goes back to `timeout_s`. Under a flat load no burst is seen
//!   and checkpoints come by WAL volume at the trigger point, paced the
//!   same: an early start there would only add checkpoints, each with
//!   its full-page images, and protect nothing. The early start needs
//!   room: WAL between one checkpoint's end and PostgreSQL's call for the
//!   next ([`CheckpointControllerConfig::idle_window`]). Under a small
//!   bound a busy target near PostgreSQL's 0.9 leaves none (128 MiB: a
//!   checkpoint ends after 3.6 segments, the next is called for after 3
//!   to 4), and checkpoints run back to back, each forced by WAL volume
//!   wherever the last ended, bursts included;
//!   [`CheckpointControllerConfig::crowding`] names such settings and the
//!   largest busy target that leaves room. A lower busy target writes
//!   each checkpoint faster but can raise the trigger point (128 MiB
//!   under 0.5: 5 segments, 1.5 to 2.5 of them idle), so the room must
//!   exceed what a burst writes for no burst to force one.
//! - **Fewer full-page images** (`compress_full_pages`, on by default).
//!   The first change of each page after a checkpoint puts the whole page
//!   in the WAL, so under a bound on recovery debt checkpoints feed
//!   themselves: each one's full-page images fill the WAL budget sooner
//!   and bring the next one. The controller turns on `wal_compression`
//!   (the driver picks the server's fastest method: lz4, then zstd, then
//!   pglz). This is a setting, not a rule on the load: its cost is CPU in
//!   the backends, proportional to the full-page images it compresses, so
//!   it costs little exactly where it saves little, and switching it with
//!   the load would only move the WAL rate the other rules observe.
//!   PostgreSQL's own default leaves it off.
//!
//! A server whose settings cannot be changed (a managed PostgreSQL that
//! forbids `ALTER SYSTEM`) leaves one lever: `CHECKPOINT`, at a moment of
//! the controller's choosing. [`CheckpointController::decide_timing`] asks
//! for one when no checkpoint runs, the foreground rests (under
//! `light_share` of its recent peak, or idle), and the debt has passed
//! `early_share` of the server's own trigger point: the checkpoint
//! PostgreSQL would start soon, moved into a lull. Rest, not merely the
//! absence of a burst as for the early start above, since `CHECKPOINT`
//! writes unpaced, as fast as the disk takes it. The debt bound is then
//! the server's own `max_wal_size`.
//!
//! Pure, like the rest of the core: the driver observes PostgreSQL and the
//! foreground, calls [`CheckpointController::decide`] (or `decide_timing`)
//! once per interval, and applies what it returns.

use serde::{Deserialize, Serialize};

use super::{check_range, Decision, FadingPeak, Knob, SlowAverage};
use crate::time::Nanos;

/// PostgreSQL's smallest `checkpoint_timeout`, in seconds.
pub const MIN_TIMEOUT_S: u64 = 30;

/// The early start keeps this many times the largest recent burst's WAL
/// before PostgreSQL's call: the bursts of one load differ (by a tenth and
/// more between runs of the checkpoint benchmark), and a burst a little
/// larger than the last must not force a checkpoint.
pub const BURST_ROOM_MARGIN: f64 = 1.5;

const MIB: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointControllerConfig {
    /// The bound on recovery debt (WAL since the last redo point), MiB.
    pub max_recovery_wal_mib: u64,
    /// Completion target while the foreground works: writes spread thin.
    pub busy_completion_target: f64,
    /// Completion target while it rests, or while the debt is above the
    /// bound: a running checkpoint finishes sooner.
    pub light_completion_target: f64,
    /// The foreground rests below this share of its recent peak rate.
    pub light_share: f64,
    /// A burst: the rate above this multiple of its slow average.
    pub burst_ratio: f64,
    /// Share of the trigger point before which no checkpoint starts early,
    /// however large the bursts (a floor on the early start's debt);
    /// timing `CHECKPOINT` alone, the share of the server's trigger point
    /// past which a lull brings one.
    pub early_share: f64,
    /// How much of the largest burst's WAL survives each interval (0.999:
    /// half after about 700 intervals), so that bursts that stop coming
    /// stop starting checkpoints early.
    pub burst_decay: f64,
    /// The least WAL room kept before PostgreSQL's call for a checkpoint,
    /// bursts seen or not, MiB (0: the room follows the bursts seen).
    pub min_burst_room_mib: u64,
    /// Weight of each observation in the slow average of the rate (an
    /// exponential average over about `1 / baseline_weight` busy
    /// intervals; idle ones and a burst's are left out). A rise above
    /// `burst_ratio` that outlasts that many intervals is a new level, not
    /// a burst.
    pub baseline_weight: f64,
    /// How much of the peak rate survives each interval (the peak fades so
    /// that a lasting drop in load stops counting as rest).
    pub peak_decay: f64,
    /// `checkpoint_timeout` while no early start is wanted, seconds.
    pub timeout_s: u64,
    /// Compress full-page images in the WAL (`wal_compression`).
    pub compress_full_pages: bool,
    /// The server's WAL segment size, MiB (`initdb --wal-segsize`; 16
    /// unless the server was made otherwise). The driver checks it against
    /// the server before it steers.
    pub wal_segment_mib: u64,
}

impl Default for CheckpointControllerConfig {
    fn default() -> Self {
        CheckpointControllerConfig {
            max_recovery_wal_mib: 1024,
            busy_completion_target: 0.9,
            light_completion_target: 0.5,
            light_share: 0.5,
            burst_ratio: 1.2,
            early_share: 0.5,
            burst_decay: 0.999,
            min_burst_room_mib: 0,
            baseline_weight: 0.02,
            peak_decay: 0.99,
            timeout_s: 300,
            compress_full_pages: true,
            wal_segment_mib: 16,
        }
    }
}

impl CheckpointControllerConfig {
    /// Rejects settings PostgreSQL would refuse or that make the rules
    /// meaningless, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        check_range("busy_completion_target", self.busy_completion_target, 0.0, 1.0)?;
        check_range(
            "light_completion_target",
            self.light_completion_target,
            0.0,
            self.busy_completion_target,
        )
        .map_err(|e| format!("{e} (it may not exceed busy_completion_target)"))?;
        check_range("light_share", self.light_share, 0.0, 1.0)?;
        check_range("burst_ratio", self.burst_ratio, 1.0, f64::MAX)?;
        check_range("early_share", self.early_share, 0.0, 1.0)?;
        check_range("burst_decay", self.burst_decay, 0.0, 1.0)?;
        check_range("baseline_weight", self.baseline_weight, f64::MIN_POSITIVE, 1.0)?;
        check_range("peak_decay", self.peak_decay, 0.0, 1.0)?;
        if !(MIN_TIMEOUT_S..=86_400).contains(&self.timeout_s) {
            return Err(format!(
                "timeout_s must lie in [{MIN_TIMEOUT_S}, 86400] (PostgreSQL's checkpoint_timeout), got {}",
                self.timeout_s
            ));
        }
        if !(self.wal_segment_mib.is_power_of_two() && self.wal_segment_mib <= 1024) {
            return Err(format!(
                "wal_segment_mib must be a power of two from 1 to 1024 (PostgreSQL's WAL segment sizes), got {}",
                self.wal_segment_mib
            ));
        }
        if self.bound_segments() < 2 {
            return Err(format!(
                "max_recovery_wal_mib of {} is under two WAL segments of {} MiB, PostgreSQL's least max_wal_size",
                self.max_recovery_wal_mib, self.wal_segment_mib
            ));
        }
        // PostgreSQL's least max_wal_size (two segments) can hold a trigger
        // point of one segment only under a positive target.
        for target in [self.busy_completion_target, self.light_completion_target] {
            let segments = self.max_wal_size(target) / self.segment();
            if ((segments as f64 / (1.0 + target)) as u64) != self.trigger_segments() {
                return Err(format!(
                    "max_recovery_wal_mib of {} is too small for completion target {target}: \
                     PostgreSQL's least max_wal_size would start checkpoints later than the bound allows",
                    self.max_recovery_wal_mib
                ));
            }
        }
        Ok(())
    }

    /// The WAL since the redo point at which PostgreSQL starts a
    /// checkpoint, the same under every completion target, bytes.
    pub fn trigger_point(&self) -> f64 {
        (self.trigger_segments() * self.segment()) as f64
    }

    /// The trigger point in segments (PostgreSQL's `CheckPointSegments`):
    /// the most whose debt peak, `1 + busy_completion_target` of it, fits
    /// in the bound.
    pub fn trigger_segments(&self) -> u64 {
        ((self.bound_segments() as f64 / (1.0 + self.busy_completion_target)) as u64).max(1)
    }

    /// The bound on recovery debt, bytes.
    pub fn bound(&self) -> u64 {
        self.max_recovery_wal_mib.saturating_mul(MIB)
    }

    /// `max_wal_size` that keeps the trigger point under `target`, in whole
    /// segments: the fewest from which PostgreSQL's
    /// `(int) (segments / (1 + target))` gives the trigger point back,
    /// computed here in the same floating point.
    pub fn max_wal_size(&self, target: f64) -> u64 {
        let trigger = self.trigger_segments();
        let mut segments = ((trigger as f64) * (1.0 + target)).ceil() as u64;
        while (((segments as f64) / (1.0 + target)) as u64) < trigger {
            segments += 1;
        }
        segments.max(2) * self.segment()
    }

    /// The least WAL between the end of a checkpoint paced under `target`
    /// and PostgreSQL's call for the next one, bytes; negative when the
    /// call comes first, and the next checkpoint then starts the moment
    /// this one ends. PostgreSQL calls for a checkpoint when a backend
    /// finishes the WAL segment `trigger - 1` past the one holding the
    /// redo point (`XLogCheckpointNeeded`), so after between `trigger - 1`
    /// and `trigger` segments, by where in its segment the redo point fell;
    /// a checkpoint paced under `target` ends once `target · trigger`
    /// segments have been written since it began. This window is all the
    /// room the early start has: a burst that writes more than it starts
    /// a checkpoint by WAL volume, inside the burst.
    pub fn idle_window(&self, target: f64) -> f64 {
        self.earliest_call() - target * self.trigger_point()
    }

    /// The least WAL since the redo point at which PostgreSQL calls for a
    /// checkpoint, bytes: `trigger - 1` segments (see
    /// [`CheckpointControllerConfig::idle_window`]); the early start counts
    /// its room to it.
    pub fn earliest_call(&self) -> f64 {
        self.trigger_point() - self.segment() as f64
    }

    /// Why checkpoints under these settings leave the early start no room
    /// (an idle window under one segment), with the largest busy target
    /// that leaves it one; `None` when they leave room. Settings that
    /// crowd are valid (the bound holds, writes spread), so this is a
    /// warning for the operator, not a refusal.
    pub fn crowding(&self) -> Option<String> {
        let segment = self.segment() as f64;
        let window = self.idle_window(self.busy_completion_target);
        if window >= segment {
            return None;
        }
        let roomy = (1..100)
            .rev()
            .map(|hundredths| hundredths as f64 / 100.0)
            .find(|&busy| {
                let c = CheckpointControllerConfig {
                    busy_completion_target: busy,
                    ..*self
                };
                c.idle_window(busy) >= segment
            });
        let advice = match roomy {
            Some(busy) => format!("busy_completion_target = {busy} or less leaves one segment"),
            None => "no busy target leaves one segment under this bound".to_string(),
        };
        let window = window / MIB as f64;
        let (room, early) = if window < 0.0 {
            (
                "no WAL".to_string(),
                format!(" (the call can come {:.1} MiB before the end)", -window),
            )
        } else {
            (format!("as little as {window:.1} MiB of WAL"), String::new())
        };
        Some(format!(
            "busy_completion_target {} under a bound of {} MiB leaves {room} between one checkpoint's end and \
             PostgreSQL's call for the next{early}, with a trigger point of {} segments of {} MiB: checkpoints \
             run back to back, each started by WAL volume wherever the last one ended, and the early \
             start has no room; {advice}",
            self.busy_completion_target,
            self.max_recovery_wal_mib,
            self.trigger_segments(),
            self.wal_segment_mib,
        ))
    }

    fn segment(&self) -> u64 {
        self.wal_segment_mib * MIB
    }

    fn bound_segments(&self) -> u64 {
        self.max_recovery_wal_mib / self.wal_segment_mib.max(1)
    }
}

/// What the driver observes each interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointObservation {
    /// Foreground requests per second over the interval.
    pub foreground_rate: f64,
    /// WAL written since the last completed checkpoint's redo point, bytes.
    pub wal_since_redo: u64,
    /// A checkpoint is running.
    pub checkpoint_running: bool,
    /// Time since the last checkpoint started.
    pub since_checkpoint_start: Nanos,
    /// PostgreSQL's WAL insert position (`pg_current_wal_lsn()`), bytes:
    /// the WAL a burst writes is measured by it. `None` where it is not
    /// observed, and no burst is then measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_position: Option<u64>,
    /// The server's own trigger point (`max_wal_size / (1 +
    /// checkpoint_completion_target)`), bytes: observed where the
    /// controller times `CHECKPOINT` alone, and `None` where it sets them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_trigger_point: Option<u64>,
}

/// The settings, as PostgreSQL takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckpointSettings {
    pub completion_target: f64,
    /// Bytes, a whole number of MiB.
    pub max_wal_size: u64,
    pub timeout_s: u64,
    /// `wal_compression` on; `false` where the controller leaves it alone.
    pub compress_full_pages: bool,
}

pub struct CheckpointController {
    config: CheckpointControllerConfig,
    /// What PostgreSQL was last told; `None` before the first decision, so
    /// that it sets them all.
    applied: Option<CheckpointSettings>,
    /// Slow average of the foreground rate outside bursts.
    baseline: SlowAverage,
    /// Intervals in a row above `burst_ratio` times the average.
    above_for: u64,
    /// Recent peak of the foreground rate.
    peak: FadingPeak,
    /// The WAL insert position last observed.
    position: Option<u64>,
    /// WAL written since the burst under way began, bytes (0 outside one).
    burst_wal: u64,
    /// The largest burst's WAL, fading, bytes.
    largest_burst: f64,
}

impl CheckpointController {
    pub fn new(config: CheckpointControllerConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(CheckpointController {
            config,
            applied: None,
            baseline: SlowAverage::default(),
            above_for: 0,
            peak: FadingPeak::default(),
            position: None,
            burst_wal: 0,
            largest_burst: 0.0,
        })
    }

    pub fn config(&self) -> &CheckpointControllerConfig {
        &self.config
    }

    /// The settings for the next interval; returns a decision for each one
    /// that changed (all of them at the first call), with its reason.
    pub fn decide(&mut self, obs: CheckpointObservation) -> Vec<Decision> {
        let c = self.config;
        let (rate, peak) = self.peak.observe(obs.foreground_rate, c.peak_decay);
        // A burst is measured against the level it rises above, so its own
        // intervals stay out of that level: averaged in, a burst a quarter
        // of the time lifts the level by a twelfth, and a burst 1.33 times
        // the base rate then hovers at `burst_ratio`, seen one second and
        // missed the next. A rise that outlasts the average's span is the
        // load's new level, taken in from then on.
        let above = rate > c.burst_ratio * self.baseline.level().unwrap_or(rate);
        self.above_for = if above { self.above_for + 1 } else { 0 };
        let burst = above && (self.above_for as f64) <= 1.0 / c.baseline_weight;
        if !burst {
            self.baseline.observe(rate, c.baseline_weight);
        }
        let baseline = self.baseline.level().unwrap_or(rate);
        let resting = rate < c.light_share * peak;
        let indebted = obs.wal_since_redo > c.bound();

        let (completion_target, target_why) = if indebted {
            (
                c.light_completion_target,
                format!(
                    "recovery debt {} MiB is above the bound of {} MiB: the checkpoint hurries",
                    obs.wal_since_redo / MIB,
                    c.max_recovery_wal_mib
                ),
            )
        } else if resting {
            (
                c.light_completion_target,
                format!(
                    "foreground at {rate:.0}/s, under {:.0}% of its recent peak {:.0}/s: checkpoints hurry",
                    c.light_share * 100.0,
                    peak
                ),
            )
        } else {
            (
                c.busy_completion_target,
                format!("foreground at {rate:.0}/s (recent peak {peak:.0}/s): checkpoint writes spread"),
            )
        };

        let room_needed = self.measure_burst(obs.wal_position, burst, above);
        // Past PostgreSQL's earliest call the room is none, and without a
        // burst to keep room for, PostgreSQL starts the checkpoint by WAL
        // volume.
        let room = (c.earliest_call() - obs.wal_since_redo as f64).max(0.0);
        // Whole seconds, rounded down: PostgreSQL compares whole seconds
        // since the checkpoint began, and a timeout above them (30.7 s
        // rounded up to 31) starts nothing, the next interval's neither.
        let elapsed_s = obs.since_checkpoint_start / 1_000_000_000;
        let early = !obs.checkpoint_running
            && !burst
            && room < room_needed
            && obs.wal_since_redo as f64 >= c.early_share * c.trigger_point()
            && elapsed_s >= MIN_TIMEOUT_S
            && elapsed_s < c.timeout_s;
        let (timeout_s, timeout_why) = if early {
            (
                elapsed_s,
                format!(
                    "debt {} MiB leaves {:.1} MiB before PostgreSQL's call for a checkpoint, under the {:.1} MiB \
                     a burst needs, outside a burst (foreground {rate:.0}/s, average {baseline:.0}/s): \
                     a paced checkpoint starts now",
                    obs.wal_since_redo / MIB,
                    room / MIB as f64,
                    room_needed / MIB as f64,
                ),
            )
        } else {
            (c.timeout_s, "no early checkpoint wanted".to_string())
        };

        let next = CheckpointSettings {
            completion_target,
            max_wal_size: c.max_wal_size(completion_target),
            timeout_s,
            compress_full_pages: c.compress_full_pages,
        };
        let before = self.applied.replace(next);
        let changed = |f: fn(&CheckpointSettings) -> f64| before.is_none_or(|b| f(&b) != f(&next));
        let mut decisions = Vec::new();
        if changed(|s| s.completion_target) {
            decisions.push(Decision {
                knob: Knob::Postgres("checkpoint_completion_target"),
                value: next.completion_target,
                why: target_why.clone(),
            });
        }
        if changed(|s| s.max_wal_size as f64) {
            decisions.push(Decision {
                knob: Knob::Postgres("max_wal_size"),
                value: (next.max_wal_size / MIB) as f64,
                why: format!(
                    "keeps the trigger point at {} MiB under completion target {}: debt peaks at most at {} MiB",
                    c.trigger_point() as u64 / MIB,
                    next.completion_target,
                    c.max_recovery_wal_mib
                ),
            });
        }
        if changed(|s| s.timeout_s as f64) {
            decisions.push(Decision {
                knob: Knob::Postgres("checkpoint_timeout"),
                value: next.timeout_s as f64,
                why: timeout_why,
            });
        }
        if next.compress_full_pages && changed(|s| f64::from(u8::from(s.compress_full_pages))) {
            decisions.push(Decision {
                knob: Knob::Postgres("wal_compression"),
                value: 1.0,
                why: "full-page images compressed: each checkpoint's fill less of the WAL budget, \
                      so checkpoints come less often"
                    .to_string(),
            });
        }
        decisions
    }

    /// Counts the WAL written since the last observation into the burst
    /// under way, folds a burst that ended into the largest (and drops one
    /// that turned out a new level, `above` still), and returns the room
    /// the early start keeps, bytes.
    fn measure_burst(&mut self, position: Option<u64>, burst: bool, above: bool) -> f64 {
        let c = self.config;
        // A position that went back (another server behind the same
        // address, a restore) measures nothing.
        let written = match (self.position, position) {
            (Some(before), Some(now)) => now.saturating_sub(before),
            _ => 0,
        };
        self.position = position;
        self.largest_burst *= c.burst_decay;
        if burst {
            self.burst_wal = self.burst_wal.saturating_add(written);
        } else {
            if !above {
                self.largest_burst = self.largest_burst.max(self.burst_wal as f64);
            }
            self.burst_wal = 0;
        }
        self.burst_room()
    }

    /// The WAL the early start keeps before PostgreSQL's call for a
    /// checkpoint, bytes: [`BURST_ROOM_MARGIN`] times the largest recent
    /// burst's, or `min_burst_room_mib` if more.
    pub fn burst_room(&self) -> f64 {
        (BURST_ROOM_MARGIN * self.largest_burst).max(self.config.min_burst_room_mib.saturating_mul(MIB) as f64)
    }

    /// A `CHECKPOINT` now, or nothing, for a server whose settings cannot
    /// be changed: see the module's doc. Without the server's trigger point
    /// in the observation, nothing.
    pub fn decide_timing(&mut self, obs: CheckpointObservation) -> Vec<Decision> {
        let c = self.config;
        let (rate, peak) = self.peak.observe(obs.foreground_rate, c.peak_decay);
        // An idle foreground (a peak of zero) rests too: no one waits.
        let resting = rate < c.light_share * peak || rate == 0.0;
        let Some(trigger) = obs.server_trigger_point else {
            return Vec::new();
        };
        let due = obs.wal_since_redo as f64 >= c.early_share * trigger as f64;
        if obs.checkpoint_running || !resting || !due {
            return Vec::new();
        }
        vec![Decision {
            knob: Knob::PostgresCheckpoint,
            value: (obs.wal_since_redo / MIB) as f64,
            why: format!(
                "debt {} MiB passed {:.0}% of the server's trigger point {} MiB while the foreground rests \
                 ({rate:.0}/s, recent peak {peak:.0}/s): its next checkpoint now, in the lull",
                obs.wal_since_redo / MIB,
                c.early_share * 100.0,
                trigger / MIB
            ),
        }]
    }

    /// What PostgreSQL was last told.
    pub fn settings(&self) -> Option<CheckpointSettings> {
        self.applied
    }

    /// The last settings may not have reached PostgreSQL: the next
    /// decision sets them all again.
    pub fn forget_applied(&mut self) {
        self.applied = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECOND: Nanos = 1_000_000_000;

    fn controller() -> CheckpointController {
        CheckpointController::new(CheckpointControllerConfig {
            max_recovery_wal_mib: 190,
            ..CheckpointControllerConfig::default()
        })
        .unwrap()
    }

    fn obs(rate: f64, debt_mib: u64, running: bool, since_s: u64) -> CheckpointObservation {
        CheckpointObservation {
            foreground_rate: rate,
            wal_since_redo: debt_mib * MIB,
            checkpoint_running: running,
            since_checkpoint_start: since_s * SECOND,
            wal_position: None,
            server_trigger_point: None,
        }
    }

    /// As [`obs`], with PostgreSQL's WAL insert position.
    fn at(rate: f64, debt_mib: u64, since_s: u64, position_mib: u64) -> CheckpointObservation {
        CheckpointObservation {
            wal_position: Some(position_mib * MIB),
            ..obs(rate, debt_mib, false, since_s)
        }
    }

    /// As [`controller`], keeping 24 MiB of room before any burst is seen:
    /// under its trigger point of 80 MiB (called for after 64 to 80) an
    /// early start once the debt passes 40 MiB.
    fn eager() -> CheckpointController {
        CheckpointController::new(CheckpointControllerConfig {
            min_burst_room_mib: 24,
            ..*controller().config()
        })
        .unwrap()
    }

    /// The room `c` keeps is `mib`, within a tenth of a MiB.
    fn assert_room(c: &CheckpointController, mib: f64) {
        let room = c.burst_room() / MIB as f64;
        assert!((room - mib).abs() < 0.1, "room {room} MiB, not {mib}");
    }

    /// As [`obs`], on a server whose own trigger point is 100 MiB.
    fn timed(rate: f64, debt_mib: u64, running: bool) -> CheckpointObservation {
        CheckpointObservation {
            server_trigger_point: Some(100 * MIB),
            ..obs(rate, debt_mib, running, 60)
        }
    }

    fn value(decisions: &[Decision], setting: &'static str) -> Option<f64> {
        decisions
            .iter()
            .find(|d| d.knob == Knob::Postgres(setting))
            .map(|d| d.value)
    }

    #[test]
    fn first_decision_sets_all_four_then_only_changes() {
        let mut c = controller();
        let first = c.decide(obs(400.0, 0, false, 0));
        // 190 MiB is 11 segments; 11 / 1.9 = 5.8, a trigger point of 5
        // (80 MiB), which 10 segments (160 MiB) give under 0.9.
        assert_eq!(value(&first, "checkpoint_completion_target"), Some(0.9));
        assert_eq!(value(&first, "max_wal_size"), Some(160.0));
        assert_eq!(value(&first, "checkpoint_timeout"), Some(300.0));
        assert_eq!(value(&first, "wal_compression"), Some(1.0));
        assert!(c.decide(obs(400.0, 1, false, 1)).is_empty(), "nothing changed");
        c.forget_applied();
        assert_eq!(c.decide(obs(400.0, 1, false, 2)).len(), 4, "all four again");
    }

    #[test]
    fn compression_left_alone_when_configured_off() {
        let mut c = CheckpointController::new(CheckpointControllerConfig {
            compress_full_pages: false,
            ..CheckpointControllerConfig::default()
        })
        .unwrap();
        let first = c.decide(obs(400.0, 0, false, 0));
        assert_eq!(first.len(), 3);
        assert_eq!(value(&first, "wal_compression"), None);
    }

    #[test]
    fn rest_hurries_the_checkpoint_and_keeps_the_trigger_point() {
        let mut c = controller();
        c.decide(obs(400.0, 0, true, 0));
        let rest = c.decide(obs(100.0, 20, true, 1));
        assert_eq!(value(&rest, "checkpoint_completion_target"), Some(0.5));
        // 5 segments * 1.5 = 7.5, so 8 (128 MiB): the trigger point stays
        // at 80 MiB.
        assert_eq!(value(&rest, "max_wal_size"), Some(128.0));
        let back = c.decide(obs(400.0, 20, true, 2));
        assert_eq!(value(&back, "checkpoint_completion_target"), Some(0.9));
    }

    #[test]
    fn debt_above_the_bound_hurries_even_under_load() {
        let mut c = controller();
        c.decide(obs(400.0, 0, true, 0));
        let d = c.decide(obs(400.0, 200, true, 60));
        assert_eq!(value(&d, "checkpoint_completion_target"), Some(0.5));
        assert!(d[0].why.contains("above the bound"), "{}", d[0].why);
    }

    #[test]
    fn early_start_outside_a_burst_and_only_then() {
        let mut c = controller();
        // A steady 1 MiB of WAL per interval, then a burst that writes 2
        // MiB in each of its 10 intervals: 20 MiB, so 30 MiB of room kept.
        for i in 0..100 {
            c.decide(at(400.0, 10, 10, i));
        }
        for i in 0..10 {
            let d = c.decide(at(600.0, 60, 45, 101 + 2 * i));
            assert_eq!(value(&d, "checkpoint_timeout"), None, "in the burst");
        }
        // Back to the usual rate, with 4 MiB left before the call at 64:
        // start now, 46 s after the last start.
        let d = c.decide(at(400.0, 60, 46, 120));
        assert_eq!(value(&d, "checkpoint_timeout"), Some(46.0));
        assert!(d[0].why.contains("under the 30.0 MiB a burst needs"), "{}", d[0].why);
        // Running: the timeout goes back.
        assert_eq!(
            value(&c.decide(obs(400.0, 61, true, 0)), "checkpoint_timeout"),
            Some(300.0)
        );
    }

    #[test]
    fn a_flat_load_starts_no_checkpoint_early() {
        let mut c = controller();
        // Up to the trigger point, past PostgreSQL's earliest call: its
        // own checkpoint, by WAL volume.
        for i in 0..=80 {
            let d = c.decide(at(400.0, i, 30 + i, i));
            assert_eq!(value(&d, "checkpoint_timeout"), if i == 0 { Some(300.0) } else { None });
        }
    }

    #[test]
    fn the_room_follows_the_bursts_seen_and_fades() {
        let mut c = controller();
        for i in 0..100 {
            c.decide(at(400.0, 10, 10, i));
        }
        // A small burst: 2 MiB, 3 MiB of room.
        c.decide(at(600.0, 20, 20, 101));
        assert!(c.decide(at(400.0, 50, 50, 102)).is_empty(), "14 MiB left");
        assert_eq!(
            value(&c.decide(at(400.0, 62, 51, 103)), "checkpoint_timeout"),
            Some(51.0)
        );
        c.decide(obs(400.0, 0, true, 0));
        // 3 MiB fades under 1 MiB in 1,100 intervals (0.999 each): 1.5
        // MiB of room needed, 2 left.
        for i in 0..1100 {
            c.decide(at(400.0, 10, 10, 104 + i));
        }
        assert!(c.decide(at(400.0, 62, 60, 1204)).is_empty(), "the burst is forgotten");
    }

    #[test]
    fn the_floor_holds_however_large_the_bursts() {
        let mut c = controller();
        for i in 0..100 {
            c.decide(at(400.0, 10, 10, i));
        }
        c.decide(at(600.0, 10, 20, 200));
        assert!(
            c.decide(at(400.0, 39, 50, 201)).is_empty(),
            "under early_share of the trigger point"
        );
        assert_eq!(
            value(&c.decide(at(400.0, 40, 51, 202)), "checkpoint_timeout"),
            Some(51.0)
        );
    }

    #[test]
    fn a_burst_a_quarter_of_the_time_is_seen_in_each_of_its_intervals() {
        let mut c = controller();
        // 30 intervals at 590/s and 1 MiB each, then 10 at 760-810/s and 2
        // MiB each: averaged in, the bursts would lift the level to about
        // 640, and 760 would not pass 1.2 times it.
        let mut position = 0;
        for _ in 0..10 {
            for _ in 0..30 {
                position += 1;
                c.decide(at(590.0, 10, 10, position));
            }
            for i in 0..10 {
                position += 2;
                c.decide(at(if i % 2 == 0 { 760.0 } else { 810.0 }, 10, 10, position));
            }
        }
        c.decide(at(590.0, 10, 10, position + 1));
        assert_room(&c, 30.0);
    }

    #[test]
    fn a_lasting_rise_is_a_new_level_not_a_burst() {
        let mut c = controller();
        for i in 0..100 {
            c.decide(at(400.0, 10, 10, i));
        }
        // Past the average's span (50 intervals) the rise is the load; the
        // WAL written while it looked like a burst is not kept for one.
        for i in 0..200 {
            c.decide(at(600.0, 10, 10, 100 + 2 * i));
        }
        assert_eq!(c.burst_room(), 0.0);
        // And a burst above the new level is one again.
        for i in 0..5 {
            c.decide(at(800.0, 10, 10, 500 + 2 * i));
        }
        c.decide(at(600.0, 10, 10, 511));
        assert_room(&c, 15.0);
    }

    #[test]
    fn load_after_idle_time_is_no_burst() {
        let mut c = eager();
        // An hour with no foreground, then a steady one: its first seconds
        // are its level, not a burst above an average of zero.
        for s in 0..3600 {
            c.decide(obs(0.0, 0, false, s));
        }
        for s in 1..30 {
            let d = c.decide(obs(1300.0, 20, false, s));
            assert_eq!(
                value(&d, "checkpoint_timeout"),
                None,
                "debt under half the trigger point"
            );
        }
        let d = c.decide(obs(1300.0, 60, false, 31));
        assert_eq!(value(&d, "checkpoint_timeout"), Some(31.0));
    }

    #[test]
    fn no_early_start_before_postgres_allows_one() {
        let mut c = eager();
        c.decide(obs(400.0, 0, false, 0));
        assert!(
            c.decide(obs(400.0, 60, false, 29)).is_empty(),
            "29 s is under PostgreSQL's least timeout"
        );
        assert_eq!(
            value(&c.decide(obs(400.0, 60, false, 30)), "checkpoint_timeout"),
            Some(30.0)
        );
    }

    #[test]
    fn an_early_start_asks_for_no_more_than_the_whole_seconds_elapsed() {
        let mut c = eager();
        c.decide(obs(400.0, 0, false, 0));
        let later = CheckpointObservation {
            since_checkpoint_start: 31 * SECOND + 700_000_000,
            ..obs(400.0, 60, false, 0)
        };
        assert_eq!(value(&c.decide(later), "checkpoint_timeout"), Some(31.0));
    }

    #[test]
    fn timing_alone_checkpoints_in_a_lull_once_the_debt_is_due() {
        let mut c = controller();
        assert!(
            c.decide_timing(timed(400.0, 80, false)).is_empty(),
            "the foreground works"
        );
        assert!(c.decide_timing(timed(100.0, 40, false)).is_empty(), "rest, but not due");
        assert!(c.decide_timing(timed(100.0, 80, true)).is_empty(), "one runs already");
        let now = c.decide_timing(timed(100.0, 80, false));
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].knob, Knob::PostgresCheckpoint);
        assert_eq!(now[0].value, 80.0);
        assert!(now[0].why.contains("trigger point 100 MiB"), "{}", now[0].why);
        assert!(
            c.decide_timing(obs(100.0, 80, false, 60)).is_empty(),
            "no trigger point observed"
        );
        assert!(c.settings().is_none(), "no setting is ever decided");
    }

    #[test]
    fn timing_alone_takes_an_idle_foreground_for_a_lull() {
        let mut c = controller();
        assert_eq!(c.decide_timing(timed(0.0, 60, false)).len(), 1);
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |f: fn(&mut CheckpointControllerConfig)| {
            let mut c = CheckpointControllerConfig::default();
            f(&mut c);
            CheckpointController::new(c).err().unwrap()
        };
        assert!(bad(|c| c.light_completion_target = 0.95).contains("light_completion_target"));
        assert!(bad(|c| c.timeout_s = 5).contains("timeout_s"));
        assert!(bad(|c| c.max_recovery_wal_mib = 31).contains("max_recovery_wal_mib"));
        assert!(bad(|c| c.wal_segment_mib = 10).contains("wal_segment_mib"));
        assert!(bad(|c| {
            c.max_recovery_wal_mib = 32;
            c.light_completion_target = 0.0;
        })
        .contains("too small for completion target 0"));
        assert!(bad(|c| c.burst_ratio = f64::NAN).contains("burst_ratio"));
        assert!(bad(|c| c.burst_decay = 1.5).contains("burst_decay"));
    }

    #[test]
    fn a_busy_target_that_leaves_the_early_start_no_room_is_named() {
        let tight = CheckpointControllerConfig {
            max_recovery_wal_mib: 128,
            ..CheckpointControllerConfig::default()
        };
        // A trigger point of 4 segments, called for after 3 to 4; a
        // checkpoint under 0.9 ends after 3.6: no room, at worst 0.6
        // segments too few.
        assert!((tight.idle_window(0.9) + 0.6 * 16.0 * MIB as f64).abs() < 1.0);
        let why = tight.crowding().unwrap();
        assert!(why.contains("leaves no WAL"), "{why}");
        assert!(why.contains("9.6 MiB before the end"), "{why}");
        assert!(why.contains("busy_completion_target = 0.6 or less"), "{why}");
        // Under 0.5 the trigger point is 5 segments: 1.5 to 2.5 of them
        // between one checkpoint's end and the call for the next.
        let roomy = CheckpointControllerConfig {
            busy_completion_target: 0.5,
            light_completion_target: 0.3,
            ..tight
        };
        assert_eq!(roomy.trigger_segments(), 5);
        assert_eq!(roomy.idle_window(0.5), 1.5 * 16.0 * MIB as f64);
        assert_eq!(roomy.crowding(), None);
        assert_eq!(CheckpointControllerConfig::default().crowding(), None);
    }

    #[test]
    fn the_trigger_point_is_whole_segments_as_postgres_counts_them() {
        let config = CheckpointControllerConfig {
            max_recovery_wal_mib: 128,
            ..CheckpointControllerConfig::default()
        };
        // 8 segments / 1.9 = 4.2: a trigger point of 4 (64 MiB), which
        // max_wal_size = 128MB gives; 127MB (7 segments) would give 3.
        assert_eq!(config.trigger_segments(), 4);
        assert_eq!(config.max_wal_size(0.9), 128 * MIB);
        assert_eq!(config.max_wal_size(0.5), 96 * MIB);
    }

    proptest! {
        /// A load with no burst (each interval's rate within `burst_ratio`
        /// of its average) starts no checkpoint early, and under any load
        /// an early start comes exactly where no burst runs, the floor is
        /// passed and the room left is under the room kept.
        #[test]
        fn early_starts_need_a_burst_and_the_floor(
            rate in 1.0f64..10_000.0,
            wiggle in proptest::collection::vec(0.95f64..1.05, 1..200),
            wal_mib in 1u64..8,
            surges in proptest::collection::vec((1.0f64..3.0, 1u64..100), 1..100),
        ) {
            let config = *controller().config();
            let mut c = controller();
            for (i, w) in wiggle.iter().enumerate() {
                let i = i as u64;
                let debt = (i * wal_mib).min(100);
                let d = c.decide(at(rate * w, debt, 30 + i, i * wal_mib));
                prop_assert!(i == 0 || d.is_empty(), "flat load, debt {} MiB: {:?}", debt, d);
            }
            let mut c = controller();
            let mut early = false;
            for (i, &(surge, debt)) in surges.iter().enumerate() {
                let i = i as u64;
                // Outside a checkpoint since the last early start, so that
                // each interval may start one.
                if early {
                    c.decide(CheckpointObservation { checkpoint_running: true, ..at(rate, 0, 0, i * 40 * wal_mib) });
                }
                let d = c.decide(at(rate * surge, debt, 30 + i, i * 40 * wal_mib));
                early = value(&d, "checkpoint_timeout").is_some_and(|t| t < 300.0);
                let floor = debt as f64 * MIB as f64 >= config.early_share * config.trigger_point();
                let room = (config.earliest_call() - (debt * MIB) as f64).max(0.0);
                if early {
                    prop_assert!(floor, "early under the floor, debt {} MiB", debt);
                    prop_assert!(room < c.burst_room(), "early with room {} of {}", room, c.burst_room());
                }
            }
        }

        /// Whatever the load and the order of targets, PostgreSQL's own
        /// trigger point (in whole segments, rounded down) under each
        /// decided max_wal_size is the controller's, and a checkpoint
        /// started there and paced under any later target ends within the
        /// debt bound.
        #[test]
        fn debt_peaks_within_the_bound(
            bound_mib in 32u64..65_536,
            segment_log2 in 0u32..7,
            busy in 0.1f64..=1.0,
            light_share in 0.0f64..=1.0,
            rates in proptest::collection::vec(0.0f64..10_000.0, 1..50),
        ) {
            let config = CheckpointControllerConfig {
                max_recovery_wal_mib: bound_mib,
                busy_completion_target: busy,
                light_completion_target: busy * light_share,
                wal_segment_mib: 1 << segment_log2,
                ..CheckpointControllerConfig::default()
            };
            prop_assume!(config.validate().is_ok());
            let segment = config.wal_segment_mib * MIB;
            let mut c = CheckpointController::new(config).unwrap();
            for rate in rates {
                c.decide(obs(rate, 0, true, 0));
                let s = c.settings().unwrap();
                prop_assert_eq!(s.max_wal_size % segment, 0);
                // As PostgreSQL's CalculateCheckpointSegments computes it.
                let trigger = (((s.max_wal_size / segment) as f64 / (1.0 + s.completion_target)) as u64).max(1);
                prop_assert_eq!(trigger, config.trigger_segments());
                let peak = (trigger * segment) as f64 * (1.0 + busy);
                prop_assert!(peak <= (bound_mib * MIB) as f64 + 1.0, "peak {} over the bound", peak);
            }
        }
    }
}
