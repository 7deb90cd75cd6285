//! One simulation run: the TraQIOS workload on the seek disk, with a
//! `sluice-core` stage of limit 1 (the disk serves one access at a time) in
//! front of it. Transactions are generated as they arrive and forgotten as
//! they finish, and metrics are streamed, so memory grows with the
//! transactions in the system at once, not with the number simulated.

use rand_pcg::Pcg64Mcg;
use serde::Serialize;
use sluice_core::budget::SlackModel;
use sluice_core::device::SeekDisk;
use sluice_core::metrics::{LatencyHistogram, Tardiness};
use sluice_core::time::to_ms;
use sluice_core::{Ctx, Job, Nanos, PolicyOptions, PolicySpec, Stage};

use crate::engine::EventQueue;
use crate::workload::{Generator, LateDeadline, TraqiosWorkload};

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunStats {
    pub transactions: u64,
    /// Physical accesses served by the disk (simulated I/O completions).
    pub ios: u64,
    pub cache_hits: u64,
    pub avg_tardiness_ms: f64,
    pub miss_ratio: f64,
    pub mean_latency_ms: f64,
    pub p99_latency_ms: f64,
    /// Fraction of the run the disk was busy (the utilization it really had).
    pub disk_busy: f64,
    pub makespan_ms: f64,
    /// Most transactions in the system at once.
    pub peak_transactions: usize,
    /// Most accesses waiting at the disk at once.
    pub peak_queue: usize,
}

struct Active {
    ctx: Ctx,
    actual: u32,
    done: u32,
    last_cylinder: Option<u64>,
    rng: Pcg64Mcg,
}

enum Event {
    Arrival,
    /// Transaction in this slot makes its next access.
    Access(usize),
    /// The policy asked to be asked again now (it held accesses back).
    Wake,
}

struct Sim {
    disk: SeekDisk,
    stage: Stage,
    gen: Generator,
    events: EventQueue<Event>,
    active: Vec<Option<Active>>,
    free: Vec<usize>,
    in_system: usize,
    /// The access in service and when it completes (one disk, so no heap).
    serving: Option<(Nanos, usize)>,
    /// The wake-up scheduled for the policy, if any.
    wake: Option<Nanos>,
    seq: u64,
    tardiness: Tardiness,
    latency: LatencyHistogram,
    stats: RunStats,
    busy: Nanos,
    /// A late transaction's accesses are queued with their issue time as
    /// deadline ([`LateDeadline::Issue`]).
    late_at_issue: bool,
}

/// Runs `workload` under `policy` on `disk` with `seed`.
pub fn simulate(
    disk: SeekDisk,
    workload: &TraqiosWorkload,
    policy: PolicySpec,
    options: &PolicyOptions,
    seed: u64,
) -> Result<RunStats, sluice_core::PolicyError> {
    let avg_cost = workload.avg_access(&disk);
    let model = SlackModel {
        avg_cost,
        think: workload.mean_think(),
    };
    let stage = Stage::new(policy.build(options, model)?, 1).expect("limit 1 is valid");
    let gen = Generator::new(workload, avg_cost, seed);
    let sim = Sim {
        disk,
        stage,
        gen,
        events: EventQueue::default(),
        active: Vec::new(),
        free: Vec::new(),
        in_system: 0,
        serving: None,
        wake: None,
        seq: 0,
        tardiness: Tardiness::default(),
        latency: LatencyHistogram::default(),
        stats: RunStats::default(),
        busy: 0,
        late_at_issue: workload.late_deadline == LateDeadline::Issue,
    };
    Ok(sim.run())
}

impl Sim {
    fn run(mut self) -> RunStats {
        if let Some(at) = self.gen.next_arrival() {
            self.events.schedule(at, Event::Arrival);
        }
        let mut now = 0;
        loop {
            let next_event = self.events.peek_time();
            let done_at = self.serving.as_ref().map(|s| s.0);
            match (done_at, next_event) {
                (Some(d), e) if e.is_none_or(|e| d <= e) => {
                    now = d;
                    self.complete(now);
                }
                (_, Some(_)) => {
                    let (at, event) = self.events.pop().expect("peeked");
                    now = at;
                    match event {
                        Event::Arrival => self.arrive(now),
                        Event::Access(slot) => self.access(slot, now),
                        Event::Wake => {
                            if self.wake == Some(now) {
                                self.wake = None;
                            }
                            self.dispatch(now);
                        }
                    }
                }
                (_, None) => break,
            }
        }
        self.finish_stats(now)
    }

    fn arrive(&mut self, now: Nanos) {
        let t = self.gen.arrive();
        if let Some(at) = self.gen.next_arrival() {
            self.events.schedule(at, Event::Arrival);
        }
        self.stage.policy_mut().request_arrived(&t.ctx, now);
        let mut a = Active {
            ctx: t.ctx,
            actual: t.actual_ios,
            done: 0,
            last_cylinder: None,
            rng: t.rng,
        };
        let think = self.gen.think(&mut a.rng);
        let slot = match self.free.pop() {
            Some(s) => {
                self.active[s] = Some(a);
                s
            }
            None => {
                self.active.push(Some(a));
                self.active.len() - 1
            }
        };
        self.in_system += 1;
        self.stats.peak_transactions = self.stats.peak_transactions.max(self.in_system);
        self.events.schedule(now + think, Event::Access(slot));
    }

    fn access(&mut self, slot: usize, now: Nanos) {
        let gen = &self.gen;
        let a = self.active[slot].as_mut().expect("live slot");
        let Some(pos) = gen.access(a.last_cylinder, &mut a.rng) else {
            a.done += 1;
            self.stats.cache_hits += 1;
            self.after_access(slot, now);
            return;
        };
        a.last_cylinder = Some(pos);
        let mut ctx = a.ctx;
        if self.late_at_issue {
            ctx.deadline = ctx.deadline.map(|d| d.max(now));
        }
        let job = Job::new(self.seq, ctx, pos, now)
            .at_index(a.done + 1)
            .with_tag(slot as u64);
        self.seq += 1;
        self.stage.push(job, now);
        self.stats.peak_queue = self.stats.peak_queue.max(self.stage.queued());
        self.dispatch(now);
    }

    fn dispatch(&mut self, now: Nanos) {
        if self.serving.is_some() {
            return;
        }
        if let Some(job) = self.stage.dispatch(now, &self.disk) {
            let service = self.disk.access(job.pos);
            self.busy += service;
            self.serving = Some((now + service, job.tag as usize));
        } else if let Some(at) = self.stage.wake_at().filter(|&at| at > now && self.wake != Some(at)) {
            self.wake = Some(at);
            self.events.schedule(at, Event::Wake);
        }
    }

    fn complete(&mut self, now: Nanos) {
        let (_, slot) = self.serving.take().expect("an access in service");
        self.stage.complete().expect("one access in service");
        self.stats.ios += 1;
        self.active[slot].as_mut().expect("live slot").done += 1;
        self.after_access(slot, now);
        self.dispatch(now);
    }

    /// After an access: the next one after a think, or the end.
    fn after_access(&mut self, slot: usize, now: Nanos) {
        let a = self.active[slot].as_mut().expect("live slot");
        if a.done < a.actual {
            let think = self.gen.think(&mut a.rng);
            self.events.schedule(now + think, Event::Access(slot));
            return;
        }
        let ctx = a.ctx;
        self.active[slot] = None;
        self.free.push(slot);
        self.in_system -= 1;
        self.stats.transactions += 1;
        self.tardiness.record(&ctx, now);
        self.latency.record(now - ctx.arrival);
        self.stage.policy_mut().request_finished(&ctx, now);
    }

    fn finish_stats(mut self, end: Nanos) -> RunStats {
        let s = &mut self.stats;
        s.avg_tardiness_ms = to_ms(self.tardiness.average());
        s.miss_ratio = self.tardiness.miss_ratio();
        s.mean_latency_ms = to_ms(self.latency.mean());
        s.p99_latency_ms = to_ms(self.latency.quantile(0.99) as f64);
        s.makespan_ms = to_ms(end as f64);
        s.disk_busy = if end == 0 { 0.0 } else { self.busy as f64 / end as f64 };
        self.stats
    }
}
