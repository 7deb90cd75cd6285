//! Applies a sluice-core [`BackgroundController`] to a runtime's background
//! tasks: reads their backlog and stall pressure, takes the foreground p99
//! the engine measured over the last interval, sets every task's byte rate
//! (the decided total, shared equally), whether their I/O runs as critical,
//! and the size of the pieces in which non-critical I/O holds the device
//! (unless the runtime splits none). The engine calls [`ControlLoop::step`]
//! on its own timescale (100 ms to 1 s is typical), from any thread.

use sluice_core::controller::{BackgroundController, BackgroundDecision, BackgroundObservation};
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

    /// One decision, applied; returns it.
    pub fn step(&mut self, foreground_p99: Option<Nanos>) -> BackgroundDecision {
        let tasks = self.runtime.background_tasks();
        let stats: Vec<_> = tasks.iter().map(|t| t.stats()).collect();
        let decision = self.controller.decide(BackgroundObservation {
            foreground_p99,
            backlog: stats.iter().map(|s| s.backlog_bytes).sum(),
            stall_pressure: stats.iter().map(|s| s.stall_pressure).fold(0.0, f64::max),
        });
        let share = decision.rate / tasks.len().max(1) as f64;
        for t in &tasks {
            let mut knobs = t.knobs();
            knobs.rate_bytes = Some(share);
            knobs.critical = decision.critical;
            t.set_knobs(knobs);
        }
        // Whole I/Os (a piece of 0) stay whole; without RCP none is split.
        let kb = self.runtime.config().rcp.noncritical_piece_kb * decision.piece_multiple as u64;
        self.runtime.set_noncritical_piece_kb(kb);
        decision
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
        let mut lp = ControlLoop::new(rt.clone(), BackgroundController::new(config).unwrap());
        assert_eq!(lp.step(Some(2_000_000)).rate, 7_000.0, "above target: 0.7 x max");
        assert_eq!(flush.knobs().rate_bytes, Some(3_500.0));
        assert_eq!(rt.noncritical_piece_kb(), 64, "RCP's piece: no pressure");
        compaction.set_backlog(1000);
        assert_eq!(lp.step(Some(2_000_000)).rate, 10_000.0, "backlog at its bound");
        assert_eq!(compaction.knobs().rate_bytes, Some(5_000.0));
        assert_eq!(rt.noncritical_piece_kb(), 8 * 64, "and the pieces grew");
    }

    #[test]
    fn a_near_write_stall_grows_the_pieces_and_its_passing_shrinks_them() {
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        let compaction = rt.register_background("compaction", TaskKind::Compaction);
        let mut lp = ControlLoop::new(rt.clone(), BackgroundController::new(Default::default()).unwrap());
        lp.step(None);
        compaction.set_stall_pressure(0.5);
        assert_eq!(lp.step(None).piece_multiple, 5);
        assert_eq!(rt.noncritical_piece_kb(), 5 * 64);
        compaction.set_stall_pressure(0.0);
        lp.step(None);
        assert_eq!(rt.noncritical_piece_kb(), 64);
    }

    #[test]
    fn a_runtime_of_whole_ios_keeps_them() {
        let mut config = RuntimeConfig::default();
        config.rcp.noncritical_piece_kb = 0;
        let rt = Runtime::new(config).unwrap();
        let compaction = rt.register_background("compaction", TaskKind::Compaction);
        let mut lp = ControlLoop::new(rt.clone(), BackgroundController::new(Default::default()).unwrap());
        compaction.set_stall_pressure(1.0);
        lp.step(None);
        assert_eq!(rt.noncritical_piece_kb(), 0);
    }
}
