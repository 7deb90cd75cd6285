//! PostgreSQL's background controllers run together, as
//! `[postgres.background]` runs them: the checkpoint controller always, the
//! vacuum controller if configured. One interval's decisions are the
//! checkpoint controller's, then the vacuum controller's; the proxy's
//! driver and a trace's replay both decide through this type, so that the
//! order a trace records is the order a replay decides in.
//!
//! On a server whose settings cannot be changed they run *timing alone*:
//! the checkpoint controller's [`decide_timing`](CheckpointController::decide_timing),
//! a `CHECKPOINT` in a lull, and no vacuum controller.

use super::checkpoint::{CheckpointController, CheckpointControllerConfig, CheckpointObservation};
use super::decision::Decision;
use super::vacuum::{VacuumController, VacuumControllerConfig, VacuumObservation};

pub struct PostgresControllers {
    checkpoint: CheckpointController,
    vacuum: Option<VacuumController>,
    timing_alone: bool,
}

impl PostgresControllers {
    /// `Err` names the refused setting (a vacuum one as `vacuum.<field>`).
    pub fn new(checkpoint: CheckpointControllerConfig, vacuum: Option<VacuumControllerConfig>) -> Result<Self, String> {
        Ok(PostgresControllers {
            checkpoint: CheckpointController::new(checkpoint)?,
            vacuum: vacuum
                .map(VacuumController::new)
                .transpose()
                .map_err(|e| format!("vacuum.{e}"))?,
            timing_alone: false,
        })
    }

    /// The checkpoint controller timing `CHECKPOINT` alone, for a server
    /// whose settings cannot be changed.
    pub fn timing_alone(checkpoint: CheckpointControllerConfig) -> Result<Self, String> {
        Ok(PostgresControllers {
            timing_alone: true,
            ..Self::new(checkpoint, None)?
        })
    }

    /// Whether they time `CHECKPOINT` alone.
    pub fn is_timing_alone(&self) -> bool {
        self.timing_alone
    }

    /// Whether the vacuum controller runs, and so wants an observation.
    pub fn steers_vacuum(&self) -> bool {
        self.vacuum.is_some()
    }

    /// The WAL room the checkpoint controller's early start keeps, bytes
    /// ([`CheckpointController::burst_room`]); `None` when it times
    /// `CHECKPOINT` alone, which starts nothing early.
    pub fn burst_room(&self) -> Option<f64> {
        (!self.timing_alone).then(|| self.checkpoint.burst_room())
    }

    /// The interval's decisions. A vacuum observation reaches the vacuum
    /// controller if there is one; without an observation it is not asked.
    pub fn decide(&mut self, checkpoint: CheckpointObservation, vacuum: Option<VacuumObservation>) -> Vec<Decision> {
        let mut decisions = if self.timing_alone {
            self.checkpoint.decide_timing(checkpoint)
        } else {
            self.checkpoint.decide(checkpoint)
        };
        if let (Some(v), Some(observation)) = (&mut self.vacuum, vacuum) {
            decisions.extend(v.decide(observation));
        }
        decisions
    }

    /// The last decisions may not have reached PostgreSQL: the next sets
    /// every knob again.
    pub fn forget_applied(&mut self) {
        self.checkpoint.forget_applied();
        if let Some(v) = &mut self.vacuum {
            v.forget_applied();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_decisions_come_first_and_vacuum_ones_only_when_observed() {
        let mut c = PostgresControllers::new(
            CheckpointControllerConfig::default(),
            Some(VacuumControllerConfig::default()),
        )
        .unwrap();
        assert!(c.steers_vacuum());
        let observation = CheckpointObservation {
            foreground_rate: 400.0,
            wal_since_redo: 0,
            checkpoint_running: false,
            since_checkpoint_start: 0,
            wal_position: None,
            server_trigger_point: None,
        };
        let vacuum = VacuumObservation {
            foreground_rate: 400.0,
            vacuums_running: 0,
        };
        let knobs: Vec<String> = c
            .decide(observation, Some(vacuum))
            .iter()
            .map(|d| d.knob.to_string())
            .collect();
        assert_eq!(
            knobs,
            [
                "postgres.checkpoint_completion_target",
                "postgres.max_wal_size",
                "postgres.checkpoint_timeout",
                "postgres.wal_compression",
                "postgres.autovacuum_vacuum_cost_delay",
                "postgres.backend_flush_after",
                "postgres.autovacuum_vacuum_cost_limit"
            ]
        );
        c.forget_applied();
        assert_eq!(
            c.decide(observation, None).len(),
            4,
            "no observation, no vacuum decision"
        );
        assert_eq!(c.decide(observation, Some(vacuum)).len(), 3, "every vacuum knob again");
    }

    #[test]
    fn timing_alone_decides_checkpoints_and_nothing_else() {
        let mut c = PostgresControllers::timing_alone(CheckpointControllerConfig::default()).unwrap();
        assert!(c.is_timing_alone() && !c.steers_vacuum());
        let idle = CheckpointObservation {
            foreground_rate: 0.0,
            wal_since_redo: 400 << 20,
            checkpoint_running: false,
            since_checkpoint_start: 0,
            wal_position: None,
            server_trigger_point: Some(540 << 20),
        };
        let knobs: Vec<String> = c.decide(idle, None).iter().map(|d| d.knob.to_string()).collect();
        assert_eq!(knobs, ["postgres.CHECKPOINT"]);
    }

    #[test]
    fn a_refused_vacuum_setting_is_named_as_such() {
        let e = PostgresControllers::new(
            CheckpointControllerConfig::default(),
            Some(VacuumControllerConfig {
                busy_cost_limit: 0,
                ..Default::default()
            }),
        )
        .err()
        .unwrap();
        assert!(e.starts_with("vacuum.busy_cost_limit"), "{e}");
    }
}
