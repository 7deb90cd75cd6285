//! The optimizer's driver (AppleS §4.3): one task that ticks every
//! `period_ms`, takes the gate's [`Period`], hands it to sluice-core's
//! [`Optimizer`] (where every decision rule lives: P, ζ and SLO weights,
//! see `sluice_core::controller::optimizer`) and applies what it decides
//! to the gate. It also keeps what only a running proxy has: the SLO
//! targets as they change live ([`SloTargets`], from the admin port and
//! reloads) and the log of decisions the admin port shows
//! ([`DecisionLog`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_core::controller::{Knob, Optimizer, Period};
pub use sluice_core::controller::{ModelConfig, OptimizerConfig, ParallelismMode, Slo, SloMeasure, ZetaMode};
use tokio::sync::watch;

use crate::gate::Gate;

/// The latency-sensitive tenants' targets as they stand, shared by the
/// optimizer (which follows them from its next tick), the admin port and
/// reloads.
#[derive(Clone)]
pub struct SloTargets(Arc<watch::Sender<Vec<Slo>>>);

impl SloTargets {
    /// Starts from `slos`, which must be valid (see [`Slo::validate`]).
    pub fn new(slos: Vec<Slo>) -> Self {
        SloTargets(Arc::new(watch::Sender::new(slos)))
    }

    pub fn list(&self) -> Vec<Slo> {
        self.0.borrow().clone()
    }

    /// Sets `slo.tenant`'s target, replacing any it had.
    pub fn set(&self, slo: Slo) -> Result<(), String> {
        slo.validate()?;
        self.0
            .send_modify(|slos| match slos.iter_mut().find(|s| s.tenant == slo.tenant) {
                Some(s) => *s = slo,
                None => slos.push(slo),
            });
        Ok(())
    }

    /// Drops `tenant`'s target; false if it had none.
    pub fn remove(&self, tenant: &str) -> bool {
        self.0.send_if_modified(|slos| {
            let before = slos.len();
            slos.retain(|s| s.tenant != tenant);
            slos.len() != before
        })
    }

    /// Replaces every target at once (a reload).
    pub fn replace(&self, slos: Vec<Slo>) -> Result<(), String> {
        slos.iter().try_for_each(Slo::validate)?;
        self.0.send_if_modified(|old| std::mem::replace(old, slos) != *old);
        Ok(())
    }
}

/// One change a controller made (or an SLO weight the optimizer held
/// through a stall), and why.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// Seconds since the proxy started.
    pub at: f64,
    pub knob: String,
    pub value: f64,
    pub why: String,
}

/// The last decisions of every controller, newest last, on one time axis,
/// shared with the admin port.
#[derive(Clone)]
pub struct DecisionLog(Arc<Decisions>);

struct Decisions {
    start: Instant,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    recent: VecDeque<Decision>,
    /// Decisions made since the start, by knob.
    totals: BTreeMap<String, u64>,
}

impl Default for DecisionLog {
    fn default() -> Self {
        DecisionLog(Arc::new(Decisions {
            start: Instant::now(),
            entries: Mutex::default(),
        }))
    }
}

const LOG_LEN: usize = 200;

impl DecisionLog {
    /// Logs a decision made now.
    pub fn record(&self, knob: String, value: f64, why: String) {
        tracing::info!(%knob, value, %why, "decision");
        let mut log = self.0.entries.lock().unwrap_or_else(|p| p.into_inner());
        *log.totals.entry(knob.clone()).or_default() += 1;
        if log.recent.len() == LOG_LEN {
            log.recent.pop_front();
        }
        log.recent.push_back(Decision {
            at: self.uptime(),
            knob,
            value,
            why,
        });
    }

    /// Seconds since the log began, the time axis of `Decision::at`.
    pub fn uptime(&self) -> f64 {
        self.0.start.elapsed().as_secs_f64()
    }

    pub fn recent(&self) -> Vec<Decision> {
        self.0
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recent
            .iter()
            .cloned()
            .collect()
    }

    /// How many decisions each knob has had since the start.
    pub fn totals(&self) -> BTreeMap<String, u64> {
        self.0.entries.lock().unwrap_or_else(|p| p.into_inner()).totals.clone()
    }
}

/// Runs the optimizer until `shutdown` turns true.
pub async fn run(
    config: OptimizerConfig,
    gate: Gate,
    log: DecisionLog,
    slo_targets: SloTargets,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut driver = match Driver::new(config, gate, log, slo_targets.0.subscribe()) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!("optimizer not started: {e}");
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_millis(driver.optimizer.config().period_ms));
    loop {
        tokio::select! {
            _ = tick.tick() => driver.tick(),
            _ = shutdown.changed() => if *shutdown.borrow() { return },
        }
    }
}

/// The optimizer on a gate, in wall time.
struct Driver {
    optimizer: Optimizer,
    gate: Gate,
    log: DecisionLog,
    start: Instant,
    slo_targets: watch::Receiver<Vec<Slo>>,
}

impl Driver {
    fn new(
        config: OptimizerConfig,
        gate: Gate,
        log: DecisionLog,
        slo_targets: watch::Receiver<Vec<Slo>>,
    ) -> Result<Self, String> {
        let optimizer = Optimizer::new(config, 0, gate.parallelism(), gate.zeta())?;
        let mut driver = Driver {
            optimizer,
            gate,
            log,
            start: Instant::now(),
            slo_targets,
        };
        driver.follow_slo_targets()?;
        Ok(driver)
    }

    /// Takes up the targets as they stand; their tenants' percentiles are
    /// measured from now on.
    fn follow_slo_targets(&mut self) -> Result<(), String> {
        let targets = self.slo_targets.borrow_and_update().clone();
        for target in &targets {
            self.gate.track_percentiles(&target.tenant);
        }
        let gate = &self.gate;
        self.optimizer
            .follow_slo_targets(&targets, |tenant| gate.tenant(tenant).weight)
    }

    fn tick(&mut self) {
        if self.slo_targets.has_changed().unwrap_or(false) {
            if let Err(e) = self.follow_slo_targets() {
                tracing::error!("slo targets not taken up: {e}");
            }
        }
        let period: Period = self.gate.take_period();
        let now = self.start.elapsed();
        let decisions = self
            .optimizer
            .tick(now.as_nanos() as u64, self.gate.parallelism(), &period);
        for d in decisions {
            let applied = match &d.knob {
                Knob::MatchingPoint => Ok(()),
                Knob::Parallelism => self.gate.set_parallelism(d.value as usize),
                Knob::Zeta => self.gate.set_zeta(d.value),
                Knob::Weight(tenant) => self.gate.set_weight(tenant, d.value),
                Knob::Postgres(_) | Knob::PostgresCheckpoint => {
                    Err(format!("{} is steered by [postgres.background]", d.knob))
                }
            };
            match applied {
                Ok(()) => self.log.record(d.knob.to_string(), d.value, d.why),
                Err(e) => tracing::warn!("optimizer: {} = {} not applied: {e}", d.knob, d.value),
            }
        }
    }
}
