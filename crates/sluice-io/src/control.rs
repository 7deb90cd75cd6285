//! Applies a sluice-core [`BackgroundController`] to a runtime's background
//! tasks: reads their backlog, takes the foreground p99 the engine measured
//! over the last interval, and sets every task's byte rate (the decided
//! total, shared equally). The engine calls [`ControlLoop::step`] on its own
//! timescale (100 ms to 1 s is typical), from any thread.

use sluice_core::controller::{BackgroundController, BackgroundObservation};
use sluice_core::Nanos;

use crate::runtime::Runtime;

pub struct ControlLoop {
    runtime: Runtime,
    controller: BackgroundController,
}

impl ControlLoop {
    pub fn new(runtime: Runtime, controller: BackgroundController) -> Self {
        ControlLoop { runtime, controller }
    }

    /// One decision; returns the total background rate set (bytes/s).
    pub fn step(&mut self, foreground_p99: Option<Nanos>) -> f64 {
        let tasks = self.runtime.background_tasks();
        let backlog = tasks.iter().map(|t| t.stats().backlog_bytes).sum();
        let rate = self.controller.decide(BackgroundObservation {
            foreground_p99,
            backlog,
        });
        let share = rate / tasks.len().max(1) as f64;
        for t in &tasks {
            let mut knobs = t.knobs();
            knobs.rate_bytes = Some(share);
            t.set_knobs(knobs);
        }
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RuntimeConfig, TaskKind};
    use sluice_core::controller::BackgroundControllerConfig;

    #[test]
    fn sets_every_task_from_latency_and_backlog() {
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        let flush = rt.register_background("flush", TaskKind::Flush);
        let compaction = rt.register_background("compaction", TaskKind::Compaction);
        let config = BackgroundControllerConfig {
            target_p99: 1_000_000,
            max_backlog: 1000,
            min_rate: 100.0,
            max_rate: 10_000.0,
            ..BackgroundControllerConfig::default()
        };
        let mut lp = ControlLoop::new(rt, BackgroundController::new(config).unwrap());
        assert_eq!(lp.step(Some(2_000_000)), 7_000.0, "above target: 0.7 x max");
        assert_eq!(flush.knobs().rate_bytes, Some(3_500.0));
        compaction.set_backlog(1000);
        assert_eq!(lp.step(Some(2_000_000)), 10_000.0, "backlog at its bound");
        assert_eq!(compaction.knobs().rate_bytes, Some(5_000.0));
    }
}
