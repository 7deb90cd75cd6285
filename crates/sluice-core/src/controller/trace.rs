//! A controller's run as a trace: what it observed each interval, what it
//! decided, and whether the decision reached what it steers. A driver
//! records one (`trace_file` of `[postgres.background]`); replaying it
//! feeds the same observations to a new controller of the same settings,
//! which must decide the same, value for value and reason for reason. That
//! is the check that the rules a live run followed are the rules the
//! simulator and the tests run: no clock, no I/O and no hidden state in
//! between.
//!
//! A trace is JSON lines: a [`TraceHeader`] naming the controller and its
//! settings, then one [`CheckpointStep`] per interval.
//!
//! ```
//! use sluice_core::controller::trace::{replay_checkpoints, CheckpointStep};
//! use sluice_core::controller::{CheckpointController, CheckpointControllerConfig, CheckpointObservation};
//!
//! let config = CheckpointControllerConfig::default();
//! let mut live = CheckpointController::new(config).unwrap();
//! let steps: Vec<CheckpointStep> = (0..20u64)
//!     .map(|i| {
//!         let observation = CheckpointObservation {
//!             foreground_rate: if i < 10 { 500.0 } else { 50.0 },
//!             wal_since_redo: i << 24,
//!             checkpoint_running: false,
//!             since_checkpoint_start: i * 1_000_000_000,
//!         };
//!         CheckpointStep::new(observation, &live.decide(observation), true)
//!     })
//!     .collect();
//! assert_eq!(replay_checkpoints(config, &steps).unwrap().steps, 20);
//! ```

use serde::{Deserialize, Serialize};

use super::checkpoint::{CheckpointController, CheckpointControllerConfig, CheckpointObservation};
use super::decision::Decision;

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    /// Which controller: `"checkpoint"`.
    pub controller: String,
    /// Its settings for the whole run.
    pub checkpoint: CheckpointControllerConfig,
}

impl TraceHeader {
    pub fn checkpoint(config: CheckpointControllerConfig) -> Self {
        TraceHeader {
            controller: "checkpoint".into(),
            checkpoint: config,
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

/// One interval of the checkpoint controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointStep {
    pub observation: CheckpointObservation,
    pub decided: Vec<TracedDecision>,
    /// Whether the decisions reached PostgreSQL; if not, the driver told
    /// the controller to forget what it had applied, and so does a replay.
    pub applied: bool,
}

impl CheckpointStep {
    pub fn new(observation: CheckpointObservation, decided: &[Decision], applied: bool) -> Self {
        CheckpointStep {
            observation,
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
    /// The first step whose decisions differ, by its index from 0.
    Step {
        step: usize,
        recorded: Vec<TracedDecision>,
        replayed: Vec<TracedDecision>,
    },
}

/// Runs a new checkpoint controller of `config` over the recorded steps;
/// `Err` at the first step whose decisions differ from the recorded ones.
pub fn replay_checkpoints(
    config: CheckpointControllerConfig,
    steps: &[CheckpointStep],
) -> Result<Replayed, Divergence> {
    let mut controller = CheckpointController::new(config).map_err(Divergence::Settings)?;
    let mut decisions = 0;
    for (i, step) in steps.iter().enumerate() {
        let replayed: Vec<TracedDecision> = controller
            .decide(step.observation)
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
            controller.forget_applied();
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

    /// A live run: a busy foreground, a burst, rest, and a failed apply.
    fn recorded(config: CheckpointControllerConfig) -> Vec<CheckpointStep> {
        let mut live = CheckpointController::new(config).unwrap();
        (0..200u64)
            .map(|i| {
                let observation = CheckpointObservation {
                    foreground_rate: match i {
                        0..=59 => 400.0 + (i % 7) as f64,
                        60..=79 => 900.0,
                        80..=139 => 400.0,
                        _ => 30.0,
                    },
                    wal_since_redo: (i % 90) << 23,
                    checkpoint_running: i % 90 > 40,
                    since_checkpoint_start: (i % 90) * SECOND,
                };
                let decided = live.decide(observation);
                let applied = i != 100;
                if !applied {
                    live.forget_applied();
                }
                CheckpointStep::new(observation, &decided, applied)
            })
            .collect()
    }

    #[test]
    fn a_recorded_run_replays_decision_for_decision() {
        let config = CheckpointControllerConfig {
            max_recovery_wal_mib: 512,
            ..Default::default()
        };
        let steps = recorded(config);
        let done = replay_checkpoints(config, &steps).unwrap();
        assert_eq!(done.steps, 200);
        assert!(done.decisions > 3, "the run changed settings: {done:?}");
    }

    #[test]
    fn a_replay_under_other_settings_or_inputs_names_where_it_parts() {
        let config = CheckpointControllerConfig::default();
        let steps = recorded(config);
        let other = CheckpointControllerConfig {
            busy_completion_target: 0.8,
            ..config
        };
        let Err(Divergence::Step {
            step,
            recorded,
            replayed,
        }) = replay_checkpoints(other, &steps)
        else {
            panic!("other settings decide otherwise");
        };
        assert_eq!(step, 0, "the first decision sets every knob");
        assert_ne!(recorded, replayed);

        let mut changed = steps.clone();
        changed[150].observation.foreground_rate = 5000.0;
        assert_eq!(step_of(replay_checkpoints(config, &changed)), 150);

        let refused = CheckpointControllerConfig { timeout_s: 1, ..config };
        let Err(Divergence::Settings(e)) = replay_checkpoints(refused, &steps) else {
            panic!("settings PostgreSQL refuses are named");
        };
        assert!(e.contains("timeout_s"), "{e}");
    }

    #[test]
    fn a_failed_apply_is_replayed_too() {
        let config = CheckpointControllerConfig::default();
        let mut steps = recorded(config);
        // Without the forget, the step after the failed one would not set
        // every knob again, as it was recorded doing.
        steps[100].applied = true;
        assert_eq!(step_of(replay_checkpoints(config, &steps)), 101);
    }

    fn step_of(r: Result<Replayed, Divergence>) -> usize {
        match r {
            Err(Divergence::Step { step, .. }) => step,
            other => panic!("expected a divergence, got {other:?}"),
        }
    }

    #[test]
    fn a_step_survives_json_exactly() {
        let steps = recorded(CheckpointControllerConfig::default());
        for step in &steps {
            let text = serde_json::to_string(step).unwrap();
            assert_eq!(&serde_json::from_str::<CheckpointStep>(&text).unwrap(), step);
        }
    }
}
