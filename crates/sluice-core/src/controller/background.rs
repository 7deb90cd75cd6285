//! Sets the rate of background work (flush, compaction, checkpoint) from
//! live load, as the programmable-background-tasks paper (§VI) asks of a
//! controller with global visibility.
//!
//! Two signals, combined so that neither can starve the other:
//! - **Foreground tail latency** against a target: multiplicative decrease
//!   of the background rate while the p99 is above the target, increase
//!   while it is below (the shape of TCP's and Gradient2's limiters).
//! - **Backlog**, after ScyllaDB's backlog controllers: a floor on the rate
//!   that grows linearly from `min_rate` at no backlog to `max_rate` at
//!   `max_backlog`, so background work always gets at least the share its
//!   backlog calls for and the backlog cannot pass the bound while the
//!   device can sustain `max_rate`.
//!
//! The rate is the larger of the two, clamped to `[min_rate, max_rate]`.
//!
//! A rate alone cannot give background work more than RCP's device bound
//! lets through: a non-critical I/O holds the device one piece (64 KiB by
//! default) at a time, and a compaction that reads and writes one I/O
//! after another pays the device's latency per piece: on a volume with a
//! millisecond per operation, about 40 MB/s where whole 256 KiB reads
//! get twice that. A store whose writes outrun it piles up L0 tables
//! until its writes stop for seconds at a time. So the controller also
//! sets the piece size, from **pressure**: how near the store is to a
//! write stall (0 far, 1 where writes start to slow down), or the
//! backlog's share of `max_backlog` if that is larger. While the pressure
//! rises, pieces grow from `min_piece_multiple` times RCP's at no pressure
//! to `max_piece_multiple` times at full pressure, as SILK gives L0's
//! compaction the bandwidth it needs before writes stall rather than
//! after; a critical I/O then waits behind at most that much more.
//! Pressure that holds or falls (a bulk load's backlog, draining) keeps
//! RCP's pieces, which is where they buy the foreground its latency;
//! pressure at 1 always grows them. The rate floor follows the pressure
//! whichever way it moves.
//!
//! Larger pieces are not enough when critical I/O keeps the device busy:
//! RCP serves it first, and a store whose reads and log writes take most
//! of a volume's operations leaves its flush and compaction the gaps
//! (sluice-kv's sustained writes on the demo's cloud volume compacted at
//! 5–15 MB/s once the reads grew, against FIFO's 60 MB/s, until writes
//! stopped). At full pressure the writers are already being slowed down
//! on the background work: it is on their critical path, as it would be
//! by RCP's priority inheritance had they blocked on it rather than
//! slept, so the decision makes it **critical** until the stall pressure
//! falls below 1 (a backlog at its bound slows no writer and does not).

use serde::{Deserialize, Serialize};

use super::check_positive;

use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackgroundControllerConfig {
    /// Foreground p99 target, in nanoseconds.
    pub target_p99: Nanos,
    /// Backlog (bytes) at which background work runs at `max_rate`.
    pub max_backlog: u64,
    /// Bytes per second background work never drops below.
    pub min_rate: f64,
    /// Bytes per second background work never exceeds.
    pub max_rate: f64,
    /// Factor applied while foreground latency is above target (< 1).
    pub decrease: f64,
    /// Factor applied while it is below (> 1).
    pub increase: f64,
    /// Non-critical pieces at no pressure, as a multiple of RCP's piece.
    pub min_piece_multiple: usize,
    /// The same at full pressure (a write stall is near).
    pub max_piece_multiple: usize,
}

impl Default for BackgroundControllerConfig {
    fn default() -> Self {
        BackgroundControllerConfig {
            target_p99: 10_000_000,
            max_backlog: 256 << 20,
            min_rate: 1e6,
            max_rate: 200e6,
            decrease: 0.7,
            increase: 1.2,
            min_piece_multiple: 1,
            max_piece_multiple: 8,
        }
    }
}

/// What the controller sees at one decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackgroundObservation {
    /// Foreground p99 over the last interval; `None` if no foreground work.
    pub foreground_p99: Option<Nanos>,
    /// Work background tasks still have, bytes.
    pub backlog: u64,
    /// How near the work's owner is to stalling its writers: 0 far, 1
    /// where they start to slow down (a store's L0 between its compaction
    /// and slowdown triggers).
    pub stall_pressure: f64,
}

/// What the controller sets for the next interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackgroundDecision {
    /// Background bytes per second.
    pub rate: f64,
    /// The size of non-critical pieces, as a multiple of RCP's piece.
    pub piece_multiple: usize,
    /// Run background I/O as critical: writers wait on it.
    pub critical: bool,
}

pub struct BackgroundController {
    config: BackgroundControllerConfig,
    /// The latency loop's current rate.
    latency_rate: f64,
    /// The last pressure that differed from the one before, and whether
    /// it rose to it.
    last_pressure: Option<f64>,
    rising: bool,
}

impl BackgroundController {
    /// Rejects settings that make the loop meaningless, naming the field.
    pub fn new(config: BackgroundControllerConfig) -> Result<Self, String> {
        let c = &config;
        check_positive("min_rate", c.min_rate)?;
        if !(c.max_rate.is_finite() && c.max_rate >= c.min_rate) {
            return Err(format!("max_rate must be finite and >= min_rate, got {}", c.max_rate));
        }
        if !(c.decrease > 0.0 && c.decrease < 1.0) {
            return Err(format!("decrease must lie in (0, 1), got {}", c.decrease));
        }
        if !(c.increase.is_finite() && c.increase > 1.0) {
            return Err(format!("increase must be a finite number > 1, got {}", c.increase));
        }
        if c.max_backlog == 0 {
            return Err("max_backlog must be at least 1 byte".into());
        }
        if !(1..=c.max_piece_multiple).contains(&c.min_piece_multiple) {
            return Err(format!(
                "min_piece_multiple must lie in [1, max_piece_multiple = {}], got {}",
                c.max_piece_multiple, c.min_piece_multiple
            ));
        }
        Ok(BackgroundController {
            latency_rate: config.max_rate,
            last_pressure: None,
            rising: false,
            config,
        })
    }

    /// The pressure `obs` puts on background work, in `[0, 1]`: the
    /// nearness of a write stall or the backlog's share of `max_backlog`,
    /// whichever is larger.
    pub fn pressure(&self, obs: &BackgroundObservation) -> f64 {
        let backlog = obs.backlog as f64 / self.config.max_backlog as f64;
        // NaN (a confused reporter) counts as no pressure, not as full.
        backlog.max(obs.stall_pressure).clamp(0.0, 1.0)
    }

    /// The rate floor a pressure calls for.
    pub fn floor(&self, pressure: f64) -> f64 {
        let c = &self.config;
        c.min_rate + pressure * (c.max_rate - c.min_rate)
    }

    /// The rate and piece size for the next interval.
    pub fn decide(&mut self, obs: BackgroundObservation) -> BackgroundDecision {
        let c = self.config;
        self.latency_rate = match obs.foreground_p99 {
            Some(p99) if p99 > c.target_p99 => self.latency_rate * c.decrease,
            _ => self.latency_rate * c.increase,
        }
        .clamp(c.min_rate, c.max_rate);
        let pressure = self.pressure(&obs);
        if self.last_pressure != Some(pressure) {
            self.rising = self.last_pressure.is_some_and(|last| pressure > last);
            self.last_pressure = Some(pressure);
        }
        let growing = if self.rising || pressure >= 1.0 { pressure } else { 0.0 };
        let span = (c.max_piece_multiple - c.min_piece_multiple) as f64;
        BackgroundDecision {
            rate: self.latency_rate.max(self.floor(pressure)),
            piece_multiple: c.min_piece_multiple + (growing * span).round() as usize,
            // Writers slow down at a stall pressure of 1; a backlog at its
            // bound stops no one.
            critical: obs.stall_pressure >= 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn controller() -> BackgroundController {
        BackgroundController::new(BackgroundControllerConfig {
            target_p99: 100,
            max_backlog: 1000,
            min_rate: 10.0,
            max_rate: 1000.0,
            decrease: 0.5,
            increase: 2.0,
            min_piece_multiple: 1,
            max_piece_multiple: 9,
        })
        .unwrap()
    }

    fn obs(p99: u64, backlog: u64) -> BackgroundObservation {
        BackgroundObservation {
            foreground_p99: Some(p99),
            backlog,
            stall_pressure: 0.0,
        }
    }

    fn near_stall(p99: u64, stall_pressure: f64) -> BackgroundObservation {
        BackgroundObservation {
            stall_pressure,
            ..obs(p99, 0)
        }
    }

    #[test]
    fn slows_while_latency_is_above_target_and_recovers_below() {
        let mut c = controller();
        assert_eq!(c.decide(obs(200, 0)).rate, 500.0);
        assert_eq!(c.decide(obs(200, 0)).rate, 250.0);
        assert_eq!(c.decide(obs(50, 0)).rate, 500.0);
        for _ in 0..20 {
            c.decide(obs(500, 0));
        }
        assert_eq!(c.decide(obs(500, 0)).rate, 10.0, "never below min_rate");
    }

    #[test]
    fn backlog_sets_a_floor_whatever_the_latency() {
        let mut c = controller();
        for _ in 0..20 {
            c.decide(obs(500, 0));
        }
        // Half the bound: 10 + 0.5 * 990 = 505.
        assert_eq!(c.decide(obs(500, 500)).rate, 505.0);
        assert_eq!(c.decide(obs(500, 5000)).rate, 1000.0, "at the bound: full rate");
    }

    #[test]
    fn pieces_grow_as_a_write_stall_nears_whatever_the_latency() {
        let mut c = controller();
        let far = c.decide(near_stall(500, 0.0));
        assert_eq!(far.piece_multiple, 1, "RCP's piece with no pressure");
        let half = c.decide(near_stall(500, 0.5));
        assert_eq!((half.piece_multiple, half.rate), (5, 505.0));
        assert_eq!(
            c.decide(near_stall(500, 0.5)).piece_multiple,
            5,
            "held while it holds after a rise"
        );
        assert!(!half.critical, "writers not slowed yet");
        let at = c.decide(near_stall(500, 1.0));
        assert_eq!((at.piece_multiple, at.rate), (9, 1000.0), "at the stall: all of it");
        assert!(at.critical, "writers slowed down wait on it");
        assert_eq!(c.decide(near_stall(500, 7.0)).piece_multiple, 9, "pressure saturates");
        assert!(!c.decide(near_stall(500, 0.9)).critical, "below 1 again");
        assert!(
            !c.decide(obs(500, 5000)).critical,
            "a backlog at its bound slows no writer"
        );
    }

    #[test]
    fn falling_pressure_keeps_rcps_pieces_and_a_full_one_grows_them_at_once() {
        let mut c = controller();
        assert_eq!(
            c.decide(near_stall(50, 0.75)).piece_multiple,
            1,
            "a level seen first is no rise"
        );
        assert_eq!(c.decide(near_stall(50, 0.5)).piece_multiple, 1, "draining");
        assert_eq!(c.decide(near_stall(50, 0.5)).piece_multiple, 1);
        assert_eq!(c.decide(near_stall(50, 0.75)).piece_multiple, 7, "rising again");
        let mut fresh = controller();
        assert_eq!(fresh.decide(near_stall(50, 1.0)).piece_multiple, 9);
    }

    #[test]
    fn a_rising_backlog_grows_pieces_as_stall_pressure_does_and_a_draining_one_does_not() {
        let mut c = controller();
        c.decide(obs(50, 0));
        assert_eq!(c.decide(obs(50, 500)).piece_multiple, 5);
        assert_eq!(
            c.decide(near_stall(50, 0.25)).piece_multiple,
            1,
            "pressure fell to 0.25"
        );
        assert_eq!(c.decide(obs(50, 400)).piece_multiple, 4, "rose to 0.4");
        for _ in 0..20 {
            c.decide(obs(500, 400));
        }
        let d = c.decide(obs(500, 300));
        assert_eq!(
            (d.piece_multiple, d.rate),
            (1, 307.0),
            "draining: RCP's pieces, the floor still"
        );
    }

    #[test]
    fn nonsense_pressure_is_no_pressure() {
        let mut c = controller();
        c.decide(near_stall(50, 0.0));
        assert_eq!(c.decide(near_stall(50, f64::NAN)).piece_multiple, 1);
        assert_eq!(c.decide(near_stall(50, -3.0)).piece_multiple, 1);
    }

    proptest! {
        /// Whatever the observations, the pieces stay within their bounds,
        /// the rate within `[min_rate, max_rate]` and never below the floor
        /// the pressure calls for, and a stall at hand gets all of it, as
        /// critical I/O.
        #[test]
        fn decisions_stay_within_their_bounds(
            observations in proptest::collection::vec(
                (proptest::option::of(0u64..1_000), 0u64..3_000, -1.0f64..2.0),
                1..60,
            ),
        ) {
            let mut c = controller();
            for (p99, backlog, stall_pressure) in observations {
                let o = BackgroundObservation { foreground_p99: p99, backlog, stall_pressure };
                let floor = c.floor(c.pressure(&o));
                let d = c.decide(o);
                prop_assert!((1..=9).contains(&d.piece_multiple));
                prop_assert!((10.0..=1000.0).contains(&d.rate) && d.rate >= floor);
                prop_assert_eq!(d.critical, stall_pressure >= 1.0);
                if stall_pressure >= 1.0 {
                    prop_assert_eq!(d.piece_multiple, 9);
                }
            }
        }
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = BackgroundControllerConfig {
            decrease: 1.5,
            ..BackgroundControllerConfig::default()
        };
        assert!(BackgroundController::new(bad).err().unwrap().contains("decrease"));
        let bad = BackgroundControllerConfig {
            min_piece_multiple: 0,
            ..BackgroundControllerConfig::default()
        };
        assert!(BackgroundController::new(bad)
            .err()
            .unwrap()
            .contains("min_piece_multiple"));
    }
}
