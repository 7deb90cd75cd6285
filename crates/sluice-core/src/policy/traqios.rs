//! TraQIOS (Sharaf, Labrinidis, Chrysanthis & Amza, SIGMOD 2009): SLA-aware
//! I/O scheduling that blends SSTF and EDF through slack.
//!
//! At each scheduling point every pending access R_{i,x} gets the priority
//! of Eq. 3 (Eq. 1 for single-access transactions) and the highest is
//! served:
//!
//! ```text
//! P = 1/C                      if S <= 0
//! P = (1/C) (1 - S / (k·C̄ - C))  if 0 < S <= k·C̄ - C
//! P = 0                        if S > k·C̄ - C
//! ```
//!
//! C is the access time from the current head, C̄ the average access time,
//! and S the slack the access advertises: the expected slack S_i of §3.2.2
//! ([`SlackModel::slack`]) scaled by slack budgeting ([`Budgeting`]: Exp is
//! Eq. 2 with the success rate U of recently finished transactions, All and
//! Uniform are the alternatives of §5.3).
//!
//! Choices the paper leaves open, each selectable ([`TraqiosOptions`]):
//! - `scale`: k is m, the expected remaining accesses of all transactions in
//!   the system (Eq. 3, the default), or n, the pending accesses (Eq. 1).
//!   m counts each transaction by its latest known M, updated when it
//!   arrives and when it issues an access.
//! - `tie_break`: many accesses can share priority 0 (slack beyond the
//!   scale); they go cheapest first (`cost`, the default: none of them is in
//!   danger, so serve efficiently) or least advertised slack first (`slack`).
//!   Remaining ties go to the job pushed first.
//! - U is measured over a window of the last finished transactions
//!   ([`crate::success::SuccessRate`]), 1 before any has finished.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{take_min_by, Policy};
use crate::budget::{Budgeting, SlackModel};
use crate::ctx::{Ctx, RequestId};
use crate::device::DeviceView;
use crate::job::Job;
use crate::success::SuccessRate;
use crate::time::Nanos;

/// What multiplies C̄ in the priority function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Scale {
    /// m: expected remaining accesses of all transactions in the system (Eq. 3).
    #[default]
    Remaining,
    /// n: accesses pending at the scheduler (Eq. 1).
    Pending,
}

/// How accesses of equal priority are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TieBreak {
    #[default]
    Cost,
    Slack,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TraqiosOptions {
    pub scale: Scale,
    pub tie_break: TieBreak,
}

/// The priority of Eq. 1 / Eq. 3 for an access of cost `cost` advertising
/// slack `slack`, where `span` is k·C̄ − C. All in the same time unit.
pub fn priority(cost: f64, slack: f64, span: f64) -> f64 {
    let top = 1.0 / cost.max(1.0);
    if slack <= 0.0 {
        top
    } else if slack <= span {
        top * (1.0 - slack / span)
    } else {
        0.0
    }
}

/// What TraQIOS reads of the transactions in the system: m of Eq. 3, the
/// expected remaining accesses of all of them, each counted by its latest
/// known M (updated when it arrives and when it issues an access, dropped
/// when it finishes); and the success rate U of those that finished.
pub(crate) struct InSystem {
    per_request: HashMap<RequestId, u32>,
    remaining: u64,
    success: SuccessRate,
}

impl InSystem {
    /// U measured over the last `window` finished transactions.
    pub(crate) fn new(window: usize) -> Self {
        InSystem {
            per_request: HashMap::new(),
            remaining: 0,
            success: SuccessRate::new(window),
        }
    }

    /// The transaction of `job` issued it: its M is now the job's.
    pub(crate) fn issued(&mut self, job: &Job) {
        self.note(job.ctx.id, job.remaining);
    }

    pub(crate) fn arrived(&mut self, ctx: &Ctx) {
        self.note(ctx.id, ctx.est_ios.max(1));
    }

    pub(crate) fn finished(&mut self, ctx: &Ctx, now: Nanos) {
        if let Some(m) = self.per_request.remove(&ctx.id) {
            self.remaining -= u64::from(m);
        }
        self.success.record(ctx, now);
    }

    fn note(&mut self, id: RequestId, m: u32) {
        let old = self.per_request.insert(id, m).unwrap_or(0);
        self.remaining = self.remaining + u64::from(m) - u64::from(old);
    }

    /// m.
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining
    }

    /// U, 1 before any transaction has finished.
    pub(crate) fn success_rate(&self) -> f64 {
        self.success.rate()
    }
}

pub struct Traqios {
    budget: Budgeting,
    options: TraqiosOptions,
    model: SlackModel,
    jobs: Vec<Job>,
    system: InSystem,
}

impl Traqios {
    pub fn new(budget: Budgeting, options: &TraqiosOptions, window: usize, model: SlackModel) -> Self {
        Traqios {
            budget,
            options: *options,
            model,
            jobs: Vec::new(),
            system: InSystem::new(window),
        }
    }

    /// k in k·C̄: m or n by the configured scale (at least 1).
    fn scale(&self) -> f64 {
        let k = match self.options.scale {
            Scale::Remaining => self.system.remaining(),
            Scale::Pending => self.jobs.len() as u64,
        };
        k.max(1) as f64
    }
}

impl Policy for Traqios {
    fn name(&self) -> String {
        match self.budget {
            Budgeting::Exp => "traqios".into(),
            Budgeting::All => "traqios-all".into(),
            Budgeting::Uniform => "traqios-uniform".into(),
        }
    }

    fn push(&mut self, job: Job, _now: Nanos) {
        self.system.issued(&job);
        self.jobs.push(job);
    }

    fn pop(&mut self, now: Nanos, device: &dyn DeviceView) -> Option<Job> {
        let u = self.system.success_rate();
        let k_cbar = self.scale() * self.model.avg_cost as f64;
        let (model, budget, tie) = (self.model, self.budget, self.options.tie_break);
        take_min_by(&mut self.jobs, |j| {
            let cost = device.cost(j.pos) as f64;
            let slack = budget.share(j.remaining, u) * model.slack(j, now, cost);
            let p = priority(cost, slack, k_cbar - cost);
            let tie = match tie {
                TieBreak::Cost => cost,
                TieBreak::Slack => slack,
            };
            (-p, tie)
        })
    }

    fn len(&self) -> usize {
        self.jobs.len()
    }

    fn request_arrived(&mut self, ctx: &Ctx, _now: Nanos) {
        self.system.arrived(ctx);
    }

    fn request_finished(&mut self, ctx: &Ctx, now: Nanos) {
        self.system.finished(ctx, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;

    #[test]
    fn priority_regions_of_eq1() {
        let c = 5.0;
        let span = 3.0 * 10.0 - c; // n = 3, C̄ = 10
                                   // Negative or zero slack: SSTF's 1/C.
        assert_eq!(priority(c, -4.0, span), 0.2);
        assert_eq!(priority(c, 0.0, span), 0.2);
        // Linear region: (1/5)(1 - 5/25) = 0.16.
        assert!((priority(c, 5.0, span) - 0.16).abs() < 1e-12);
        // At the edge and beyond: 0.
        assert!(priority(c, span, span).abs() < 1e-12);
        assert_eq!(priority(c, span + 1.0, span), 0.0);
        // An empty linear region (k·C̄ < C): any positive slack gives 0.
        assert_eq!(priority(c, 0.5, -1.0), 0.0);
        assert_eq!(priority(c, -0.5, -1.0), 0.2);
    }

    fn traqios(budget: Budgeting, scale: Scale) -> Traqios {
        let model = SlackModel {
            avg_cost: 10 * MS,
            think: 0,
        };
        let options = TraqiosOptions {
            scale,
            tie_break: TieBreak::Cost,
        };
        Traqios::new(budget, &options, 10, model)
    }

    #[test]
    fn tardy_requests_go_sstf_first() {
        let mut p = traqios(Budgeting::Exp, Scale::Pending);
        // Head at 500; both deadlines passed: the nearer goes first.
        p.push(job(1, 900, 1), 0);
        p.push(job(2, 520, 1), 0);
        assert_eq!(drain(&mut p, 50 * MS, &mut disk_at(500)), vec![2, 1]);
    }

    #[test]
    fn slack_lets_an_urgent_far_request_pass() {
        let mut p = traqios(Budgeting::Exp, Scale::Pending);
        // Head at 500. Job 1 at cylinder 500 costs 4 ms and has 100 ms of
        // deadline: slack 96 ms > 2*10 - 4, so priority 0. Job 2 at 900
        // costs 4 + 0.3*20 = 10 ms, deadline 12 ms: slack 2 ms,
        // priority (1/10)(1 - 2/10) > 0. EDF-like: job 2 first.
        p.push(job(1, 500, 100), 0);
        p.push(job(2, 900, 12), 0);
        assert_eq!(drain(&mut p, 0, &mut disk_at(500)), vec![2, 1]);
    }

    #[test]
    fn budgeting_and_the_success_rate_change_the_advertised_slack() {
        // n = 2 pending, C̄ = 10 ms, head at 500.
        // Job A: first of 4 accesses, cylinder 500 (cost 4 ms), deadline
        // 74 ms: S = 74 - 4 - 3*10 = 40 ms, span 2*10 - 4 = 16 ms.
        // Job B: single access, cylinder 900 (cost 10 ms), deadline 15 ms:
        // S = 5 ms, span 10 ms, priority (1/10)(1 - 5/10) = 0.05/ms.
        let run = |budget, miss_first: bool| {
            let mut p = traqios(budget, Scale::Pending);
            if miss_first {
                p.request_finished(&Ctx::new(9, 0).with_deadline(1), 2); // U = 0
            }
            let a = Ctx::new(1, 0).with_deadline(74 * MS).with_est_ios(4);
            p.push(Job::new(1, a, 500, 0), 0);
            p.push(job(2, 900, 15), 0);
            p.pop(0, &disk_at(500)).unwrap().ctx.id.0
        };
        // All: A advertises 40 ms > 16 -> priority 0, so B goes first.
        assert_eq!(run(Budgeting::All, false), 2);
        // Uniform: A advertises 10 ms -> (1/4)(1 - 10/16) = 0.094/ms > 0.05.
        assert_eq!(run(Budgeting::Uniform, false), 1);
        // Exp is All at U = 1 and Uniform at U = 0.
        assert_eq!(run(Budgeting::Exp, false), 2);
        assert_eq!(run(Budgeting::Exp, true), 1);
    }

    #[test]
    fn scale_m_counts_remaining_accesses_of_transactions_in_the_system() {
        let mut p = traqios(Budgeting::Exp, Scale::Remaining);
        let a = Ctx::new(1, 0).with_est_ios(30);
        let b = Ctx::new(2, 0).with_est_ios(5);
        p.request_arrived(&a, 0);
        p.request_arrived(&b, 0);
        assert_eq!(p.system.remaining(), 35);
        p.push(Job::new(7, a, 0, 0).at_index(11), 0); // M = 20
        assert_eq!(p.system.remaining(), 25);
        p.request_finished(&b, 0);
        assert_eq!(p.system.remaining(), 20);
        assert_eq!(p.scale(), 20.0);
    }
}
