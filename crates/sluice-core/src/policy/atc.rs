//! Apparent Tardiness Cost (Vepsäläinen & Morton, 1987; TraQIOS cites it
//! among the rules for tardiness): the weighted-tardiness rule, with each
//! request weighted by the inverse of its budget, so that once requests are
//! late, those of the tenant with the tighter SLO go first.
//!
//! At each scheduling point every pending access gets the index
//!
//! ```text
//! I = (w / C) · exp(−max(S, 0) / (m·C̄))        w = 1 / (D − A)
//! ```
//!
//! C is the access time from the current head, S the expected slack of its
//! request (TraQIOS §3.2.2, [`SlackModel::slack`]), m·C̄ the work the
//! transactions in the system still expect (TraQIOS Eq. 3's scale), and
//! D − A the request's budget: its deadline less its arrival. The highest
//! index goes first. Accesses whose slack lies far beyond the work ahead
//! all have an index of 0; they go earliest deadline first, then in the
//! order they were pushed. So under light load the rule is EDF, near the
//! deadline it weighs urgency against cost as TraQIOS does, and once late
//! it is weighted shortest-access-first.
//!
//! # Why a weight, and why 1 / budget
//!
//! A rule that reads only the deadline (EDF, TraQIOS and their budgeting
//! variants) treats a request the same when its arrival and deadline move
//! together: a tenant's budget changes when its requests are served, not
//! how late they end up. In steady state the lateness R − B then comes out
//! alike for every tenant, and with it the share of requests that miss: a
//! tenant with a 250 ms budget misses as often as one with 500 ms (run RT6
//! in `docs/BENCHMARKS.md`). For the tighter tenant to miss less, the rule
//! must read the budget as importance. Weighing tardiness by 1 / B counts
//! lateness as a fraction of the budget: 100 ms late on 250 ms costs twice
//! what it costs on 500 ms.
//!
//! # Departures from the paper
//!
//! - The look-ahead k·p̄ of the job-shop rule (k a constant near 2) is
//!   TraQIOS's m·C̄ here, so the window of slack that matters follows the
//!   load as it does in TraQIOS.
//! - The paper's weights are given per job; here they come from the budget
//!   the request already carries, so no configuration is added. A budget at
//!   or below 1 µs (a request already due when it arrives) weighs as 1 µs:
//!   the heaviest there is.
//! - Under overload the tighter tenant's late accesses always precede the
//!   looser tenant's: the looser tenant gets what the tighter one leaves.
//!   With clients that wait for their replies that share is bounded by the
//!   tighter tenant's clients; an open flood from it takes the device, as
//!   any priority does. Requests without a deadline keep their bounded wait
//!   ([`super::unstamped`]).

use super::traqios::Remaining;
use super::{take_min_by, Policy};
use crate::budget::SlackModel;
use crate::ctx::Ctx;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

/// The smallest budget a weight is computed from, ns.
const MIN_BUDGET: f64 = 1_000.0;

/// w: the inverse of the request's budget D − A in ns; 0 without a deadline.
pub fn weight(ctx: &Ctx) -> f64 {
    match ctx.deadline {
        Some(deadline) => 1.0 / (deadline as f64 - ctx.arrival as f64).max(MIN_BUDGET),
        None => 0.0,
    }
}

/// The index I for an access of cost `cost` and expected slack `slack`
/// with `lookahead` = m·C̄, all in ns.
pub fn index(weight: f64, cost: f64, slack: f64, lookahead: f64) -> f64 {
    weight / cost.max(1.0) * (-slack.max(0.0) / lookahead.max(1.0)).exp()
}

pub struct Atc {
    model: SlackModel,
    jobs: Vec<Job>,
    remaining: Remaining,
}

impl Atc {
    pub fn new(model: SlackModel) -> Self {
        Atc {
            model,
            jobs: Vec::new(),
            remaining: Remaining::default(),
        }
    }
}

impl Policy for Atc {
    fn name(&self) -> String {
        "atc".into()
    }

    fn push(&mut self, job: Job, _now: Nanos) {
        self.remaining.note(job.ctx.id, job.remaining);
        self.jobs.push(job);
    }

    fn pop(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        let lookahead = self.remaining.total().max(1) as f64 * self.model.avg_cost as f64;
        let model = self.model;
        take_min_by(&mut self.jobs, |j| {
            let cost = device.cost(j.pos) as f64;
            let i = index(weight(&j.ctx), cost, model.slack(j, now, cost), lookahead);
            (-i, j.ctx.deadline_or_max())
        })
    }

    fn len(&self) -> usize {
        self.jobs.len()
    }

    fn request_arrived(&mut self, ctx: &Ctx, _now: Nanos) {
        self.remaining.note(ctx.id, ctx.est_ios.max(1));
    }

    fn request_finished(&mut self, ctx: &Ctx, _now: Nanos) {
        self.remaining.finish(ctx.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;

    fn atc() -> Atc {
        Atc::new(SlackModel {
            avg_cost: 10 * MS,
            think: 0,
        })
    }

    /// A job of request `id` at `pos` that arrived at `arrival_ms` with a
    /// budget of `budget_ms`.
    fn budgeted(id: u64, pos: u64, arrival_ms: u64, budget_ms: u64) -> Job {
        let ctx = Ctx::new(id, arrival_ms * MS).with_deadline((arrival_ms + budget_ms) * MS);
        Job::new(id, ctx, pos, arrival_ms * MS)
    }

    #[test]
    fn once_late_the_tighter_budget_goes_first_even_with_the_later_deadline() {
        let mut p = atc();
        // At 1000 ms both are late. Request 1 (budget 500, due at 500) is
        // due earlier than request 2 (budget 250, due at 650), but 2 weighs
        // twice as much at the same cost.
        p.push(budgeted(1, 500, 0, 500), 0);
        p.push(budgeted(2, 500, 400, 250), 0);
        assert_eq!(drain(&mut p, 1000 * MS, &mut disk_at(500)), vec![2, 1]);
    }

    #[test]
    fn late_accesses_of_equal_weight_go_cheapest_first() {
        let mut p = atc();
        // Both late with the same budget: the nearer cylinder first, as SSTF.
        p.push(budgeted(1, 900, 0, 100), 0);
        p.push(budgeted(2, 520, 0, 100), 0);
        assert_eq!(drain(&mut p, 500 * MS, &mut disk_at(500)), vec![2, 1]);
    }

    #[test]
    fn with_slack_far_beyond_the_work_ahead_it_is_edf() {
        let mut p = atc();
        // Deadlines minutes away: every index underflows to 0, and the
        // earliest deadline goes first wherever the head is.
        p.push(budgeted(1, 500, 0, 600_000), 0);
        p.push(budgeted(2, 999, 0, 300_000), 0);
        p.push(budgeted(3, 0, 0, 900_000), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(500)), vec![2, 1, 3]);
    }

    #[test]
    fn a_looser_request_near_its_deadline_passes_a_fresh_tighter_one() {
        let mut p = atc();
        // At 495 ms, both at the head's cylinder (C = 4 ms). Request 1:
        // budget 500 ms, 1 ms of slack left. Request 2: budget 250 ms, just
        // arrived, 246 ms of slack. m·C̄ = 20 ms: 1's index is
        // (1/500)·e^(−1/20)/C, 2's (1/250)·e^(−246/20)/C.
        p.push(budgeted(1, 500, 0, 500), 0);
        p.push(budgeted(2, 500, 495, 250), 0);
        assert_eq!(drain(&mut p, 495 * MS, &mut disk_at(500)), vec![1, 2]);
    }

    #[test]
    fn weights_read_the_budget_and_floor_at_one_microsecond() {
        let due = Ctx::new(1, 5 * MS).with_deadline(5 * MS);
        let past = Ctx::new(2, 5 * MS).with_deadline(MS);
        assert_eq!(weight(&due), 1.0 / MIN_BUDGET);
        assert_eq!(weight(&past), 1.0 / MIN_BUDGET);
        assert_eq!(weight(&Ctx::new(3, 0)), 0.0);
        let tight = Ctx::new(4, MS).with_deadline(251 * MS);
        let loose = Ctx::new(5, MS).with_deadline(501 * MS);
        assert!((weight(&tight) / weight(&loose) - 2.0).abs() < 1e-12);
    }
}
