//! A controller's run as a trace: what it observed each interval, what it
//! decided, and whether the decision reached what it steers. A driver
//! records one (`trace_file` of `[postgres.background]`); replaying it
//! feeds the same observations to new controllers of the same settings,
//! which must decide the same, value for value and reason for reason. That
//! is the check that the rules a live run followed are the rules the
//! simulator and the tests run: no clock, no I/O and no hidden state in
//! between.
//!
//! A trace is JSON lines: a [`TraceHeader`] naming the controllers and
//! their settings (the checkpoint controller, and the vacuum controller if
//! the run had one), then one [`Step`] per interval.
//!
//! ```
//! use sluice_core::controller::trace::{replay, Step, TraceHeader};
//! use sluice_core::controller::{CheckpointController, CheckpointControllerConfig, CheckpointObservation};
//!
//! let config = CheckpointControllerConfig::default();
//! let mut live = CheckpointController::new(config).unwrap();
//! let steps: Vec<Step> = (0..20u64)
//!     .map(|i| {
//!         let observation = CheckpointObservation {
//!             foreground_rate: if i < 10 { 500.0 } else { 50.0 },
//!             wal_since_redo: i << 24,
//!             checkpoint_running: false,
//!             since_checkpoint_start: i * 1_000_000_000,
//!             wal_position: None,
//!             server_trigger_point: None,
//!         };
//!         Step::new(observation, None, &live.decide(observation), true)
//!     })
//!     .collect();
//! assert_eq!(replay(&TraceHeader::postgres(config, None), &steps).unwrap().steps, 20);
//! ```

use serde::{Deserialize, Serialize};

use super::checkpoint::{CheckpointControllerConfig, CheckpointObservation};
use super::decision::Decision;
use super::postgres::PostgresControllers;
use super::vacuum::{VacuumControllerConfig, VacuumObservation};

/// What a trace's header names as its controllers: PostgreSQL's
/// background controllers, the ones `[postgres.background]` runs.
pub const POSTGRES: &str = "postgres";

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    /// Which controllers: [`POSTGRES`].
    pub controller: String,
    /// The checkpoint controller's settings for the whole run.
    pub checkpoint: CheckpointControllerConfig,
    /// The vacuum controller's, if the run had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vacuum: Option<VacuumControllerConfig>,
    /// The run timed `CHECKPOINT` alone (its server's settings could not
    /// be changed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timing_alone: bool,
}

impl TraceHeader {
    pub fn postgres(checkpoint: CheckpointControllerConfig, vacuum: Option<VacuumControllerConfig>) -> Self {
        TraceHeader {
            controller: POSTGRES.into(),
            checkpoint,
            vacuum,
            timing_alone: false,
        }
    }

    /// A run that timed `CHECKPOINT` alone.
    pub fn postgres_timing_alone(checkpoint: CheckpointControllerConfig) -> Self {
        TraceHeader {
            timing_alone: true,
            ..Self::postgres(checkpoint, None)
        }
    }
}

/// A decision as a trace keeps it: the knob by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracedDecision {
    pub knob: String,
    pub value: f64,
    pub why: String,
}

impl From<&Decision> for TracedDecision {
    fn from(d: &Decision) -> Self {
        TracedDecision {
            knob: d.knob.to_string(),
            value: d.value,
            why: d.why.clone(),
        }
    }
}

/// One interval: what each controller observed, and what they decided,
/// the checkpoint controller's decisions first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub observation: CheckpointObservation,
    /// The vacuum controller's observation, if the run had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vacuum: Option<VacuumObservation>,
    pub decided: Vec<TracedDecision>,
    /// Whether the decisions reached PostgreSQL; if not, the driver told
    /// the controllers to forget what they had applied, and so does a
    /// replay.
    pub applied: bool,
}

impl Step {
    pub fn new(
        observation: CheckpointObservation,
        vacuum: Option<VacuumObservation>,
        decided: &[Decision],
        applied: bool,
    ) -> Self {
        Step {
            observation,
            vacuum,
            decided: decided.iter().map(TracedDecision::from).collect(),
            applied,
        }
    }
}

/// A replay that decided as the trace did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replayed {
    pub steps: usize,
    pub decisions: usize,
}

/// Why a replay did not decide as the trace did.
#[derive(Clone, Debug, PartialEq)]
pub enum Divergence {
    /// The trace's settings are ones the controller refuses.
    Settings(String),
    /// A step with a vacuum observation where the header names no vacuum
    /// controller, or without one where it does; by its index from 0.
    Unmatched { step: usize },
    /// The first step whose decisions differ, by its index from 0.
    Step {
        step: usize,
        recorded: Vec<TracedDecision>,
        replayed: Vec<TracedDecision>,
    },
}

/// Runs new controllers of the header's settings over the recorded steps;
/// `Err` at the first step whose decisions differ from the recorded ones.
pub fn replay(header: &TraceHeader, steps: &[Step]) -> Result<Replayed, Divergence> {
    let controllers = if header.timing_alone {
        PostgresControllers::timing_alone(header.checkpoint)
    } else {
        PostgresControllers::new(header.checkpoint, header.vacuum)
    };
    let mut controllers = controllers.map_err(Divergence::Settings)?;
    let mut decisions = 0;
    for (i, step) in steps.iter().enumerate() {
        if step.vacuum.is_some() != controllers.steers_vacuum() {
            return Err(Divergence::Unmatched { step: i });
        }
        let replayed: Vec<TracedDecision> = controllers
            .decide(step.observation, step.vacuum)
            .iter()
            .map(TracedDecision::from)
            .collect();
        if replayed != step.decided {
            return Err(Divergence::Step {
                step: i,
                recorded: step.decided.clone(),
                replayed,
            });
        }
        if !step.applied {
            controllers.forget_applied();
        }
        decisions += replayed.len();
    }
    Ok(Replayed {
        steps: steps.len(),
        decisions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    /// The vacuum paced alone, so that its limit follows the load.
    fn header(checkpoint: CheckpointControllerConfig) -> TraceHeader {
        let vacuum = VacuumControllerConfig {
            flush_after_kib: 0,
            ..Default::default()
        };
        TraceHeader::postgres(checkpoint, Some(vacuum))
    }

    /// A live run: a busy foreground, a burst, rest, and a failed apply;
    /// a vacuum runs through the burst and into the rest.
    fn recorded(header: &TraceHeader) -> Vec<Step> {
        let mut live = PostgresControllers::new(header.checkpoint, header.vacuum).unwrap();
        (0..200u64)
            .map(|i| {
                let foreground_rate = match i {
                    0..=59 => 400.0 + (i % 7) as f64,
                    60..=79 => 900.0,
                    80..=139 => 400.0,
                    _ => 30.0,
                };
                let observation = CheckpointObservation {
                    foreground_rate,
                    wal_since_redo: (i % 90) << 23,
                    checkpoint_running: i % 90 > 40,
                    since_checkpoint_start: (i % 90) * SECOND,
                    wal_position: None,
                    server_trigger_point: None,
                };
                let vacuum_observation = live.steers_vacuum().then(|| VacuumObservation {
                    foreground_rate,
                    vacuums_running: u32::from((50..160).contains(&i)),
                });
                let decided = live.decide(observation, vacuum_observation);
                let applied = i != 100;
                if !applied {
                    live.forget_applied();
                }
                Step::new(observation, vacuum_observation, &decided, applied)
            })
            .collect()
    }

    #[test]
    fn a_recorded_run_replays_decision_for_decision() {
        let header = header(CheckpointControllerConfig {
            max_recovery_wal_mib: 512,
            ..Default::default()
        });
        let steps = recorded(&header);
        let done = replay(&header, &steps).unwrap();
        assert_eq!(done.steps, 200);
        assert!(done.decisions > 3, "the run changed settings: {done:?}");
        let vacuum_decisions = steps
            .iter()
            .flat_map(|s| &s.decided)
            .filter(|d| d.knob == "postgres.autovacuum_vacuum_cost_limit")
            .count();
        // The ceiling; spread when the vacuum starts (50); hurry when the
        // burst ends (80); spread once its peak fades; the failed apply's
        // repeat (101); hurry at rest (140).
        assert_eq!(vacuum_decisions, 6);

        let flushing = TraceHeader::postgres(header.checkpoint, Some(VacuumControllerConfig::default()));
        let steps = recorded(&flushing);
        assert_eq!(replay(&flushing, &steps).unwrap().steps, 200);
        let flush_decisions: Vec<(usize, f64)> = steps
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.decided.iter().map(move |d| (i, d)))
            .filter(|(_, d)| d.knob == "postgres.backend_flush_after")
            .map(|(i, d)| (i, d.value))
            .collect();
        // Flushing before the vacuum starts under load, sent again after
        // the failed apply at 100; left to the kernel once it ends at rest.
        assert_eq!(flush_decisions, [(0, 256.0), (101, 256.0), (160, 0.0)]);
    }

    #[test]
    fn a_trace_without_vacuum_replays_the_checkpoints_alone() {
        let header = TraceHeader::postgres(CheckpointControllerConfig::default(), None);
        let steps = recorded(&header);
        assert!(steps.iter().all(|s| s.vacuum.is_none()));
        assert_eq!(replay(&header, &steps).unwrap().steps, 200);
        let with_vacuum = self::header(header.checkpoint);
        assert_eq!(
            replay(&with_vacuum, &steps),
            Err(Divergence::Unmatched { step: 0 }),
            "a vacuum controller with no vacuum observations"
        );
    }

    #[test]
    fn a_replay_under_other_settings_or_inputs_names_where_it_parts() {
        let header = header(CheckpointControllerConfig::default());
        let steps = recorded(&header);
        let other = TraceHeader {
            checkpoint: CheckpointControllerConfig {
                busy_completion_target: 0.8,
                ..header.checkpoint
            },
            ..header.clone()
        };
        let Err(Divergence::Step {
            step,
            recorded,
            replayed,
        }) = replay(&other, &steps)
        else {
            panic!("other settings decide otherwise");
        };
        assert_eq!(step, 0, "the first decision sets every knob");
        assert_ne!(recorded, replayed);

        let mut changed = steps.clone();
        changed[150].observation.foreground_rate = 5000.0;
        assert_eq!(step_of(replay(&header, &changed)), 150);

        let mut vacuum_changed = steps.clone();
        vacuum_changed[30].vacuum.as_mut().unwrap().vacuums_running = 1;
        assert_eq!(step_of(replay(&header, &vacuum_changed)), 30);

        let refused = TraceHeader {
            checkpoint: CheckpointControllerConfig {
                timeout_s: 1,
                ..header.checkpoint
            },
            ..header.clone()
        };
        let Err(Divergence::Settings(e)) = replay(&refused, &steps) else {
            panic!("settings PostgreSQL refuses are named");
        };
        assert!(e.contains("timeout_s"), "{e}");
        let refused = TraceHeader {
            vacuum: Some(VacuumControllerConfig {
                busy_cost_limit: 0,
                ..Default::default()
            }),
            ..header
        };
        let Err(Divergence::Settings(e)) = replay(&refused, &steps) else {
            panic!("vacuum settings PostgreSQL refuses are named");
        };
        assert!(e.contains("vacuum.busy_cost_limit"), "{e}");
    }

    #[test]
    fn a_trace_that_timed_checkpoints_alone_replays_so() {
        let header = TraceHeader::postgres_timing_alone(CheckpointControllerConfig::default());
        let mut live = PostgresControllers::timing_alone(header.checkpoint).unwrap();
        let steps: Vec<Step> = (0..60u64)
            .map(|i| {
                let observation = CheckpointObservation {
                    foreground_rate: if i < 30 { 400.0 } else { 20.0 },
                    wal_since_redo: (i % 40) << 24,
                    checkpoint_running: false,
                    since_checkpoint_start: i * SECOND,
                    wal_position: None,
                    server_trigger_point: Some(540 << 20),
                };
                Step::new(observation, None, &live.decide(observation, None), true)
            })
            .collect();
        let checkpoints: Vec<usize> = (0..steps.len()).filter(|&i| !steps[i].decided.is_empty()).collect();
        // Due from 270 MiB (16 MiB a step: step 17 of each 40), in the lull
        // from step 30.
        let expected: Vec<usize> = (30..40).chain(57..60).collect();
        assert_eq!(checkpoints, expected);
        assert_eq!(replay(&header, &steps).unwrap().steps, 60);
        let text = serde_json::to_string(&header).unwrap();
        assert!(text.contains("timing_alone"), "{text}");
        assert_eq!(serde_json::from_str::<TraceHeader>(&text).unwrap(), header);
        let steered = TraceHeader::postgres(header.checkpoint, None);
        assert!(!serde_json::to_string(&steered).unwrap().contains("timing_alone"));
        assert_eq!(step_of(replay(&steered, &steps)), 0, "steering decides otherwise");
    }

    #[test]
    fn a_failed_apply_is_replayed_too() {
        let header = header(CheckpointControllerConfig::default());
        let mut steps = recorded(&header);
        // Without the forget, the step after the failed one would not set
        // every knob again, as it was recorded doing.
        steps[100].applied = true;
        assert_eq!(step_of(replay(&header, &steps)), 101);
    }

    fn step_of(r: Result<Replayed, Divergence>) -> usize {
        match r {
            Err(Divergence::Step { step, .. }) => step,
            other => panic!("expected a divergence, got {other:?}"),
        }
    }

    #[test]
    fn a_trace_survives_json_exactly() {
        let header = header(CheckpointControllerConfig::default());
        let text = serde_json::to_string(&header).unwrap();
        assert_eq!(serde_json::from_str::<TraceHeader>(&text).unwrap(), header);
        for step in &recorded(&header) {
            let text = serde_json::to_string(step).unwrap();
            assert_eq!(&serde_json::from_str::<Step>(&text).unwrap(), step);
        }
    }
}
