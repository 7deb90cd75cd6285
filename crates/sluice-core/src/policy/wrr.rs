//! Weighted round robin with a round quota ζ (AppleS §3.3): each tenant has
//! its own FIFO queue; in each scheduling round tenant i may issue up to
//! L_i = φ_i·ζ consecutive requests, then the turn passes to the next
//! backlogged tenant. A larger ζ gives each tenant longer runs of its own
//! requests (per-user sequentiality and locality); φ sets its share.
//!
//! Departure from the paper: AppleS assumes integer quotas. Here a turn adds
//! φ_i·ζ to the tenant's credit and each request spends 1, as in deficit
//! round robin (Shreedhar & Varghese), so fractional weights get their exact
//! long-run share; a tenant whose queue empties forfeits its leftover credit,
//! so idling never banks a burst.
//!
//! Addition: tenants may be marked strict ([`Wrr::set_strict`]). A strict
//! tenant with a request waiting is always served before every other
//! tenant (strict priority, with the same round robin among strict
//! tenants). AppleS §5.3 has no such class; it is the baseline its SLO
//! control is measured against — latency-sensitive users simply put first.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::Policy;
use crate::ctx::TenantId;
use crate::device::DeviceView;
use crate::job::Job;
use crate::time::Nanos;

#[derive(Default)]
struct TenantQueue {
    jobs: VecDeque<Job>,
    credit: f64,
    weight: f64,
    strict: bool,
}

impl TenantQueue {
    /// L_i = φ_i·ζ: what one turn adds to the credit.
    fn quantum(&self, zeta: f64) -> f64 {
        self.weight * zeta
    }
}

/// The backlogged tenants of one priority class, in round-robin order; the
/// front one has the turn.
#[derive(Default)]
struct Round {
    active: VecDeque<TenantId>,
    /// Whether the front tenant's turn has been credited already.
    turn_open: bool,
}

impl Round {
    fn leave(&mut self, tenant: TenantId) {
        if let Some(at) = self.active.iter().position(|&t| t == tenant) {
            self.active.remove(at);
            if at == 0 {
                self.turn_open = false;
            }
        }
    }

    /// The next job of this class, by deficit round robin.
    fn pop(&mut self, queues: &mut FxHashMap<TenantId, TenantQueue>, zeta: f64) -> Option<Job> {
        let mut passed = 0;
        loop {
            let tenant = *self.active.front()?;
            if passed == self.active.len() {
                self.fast_forward(queues, zeta);
                passed = 0;
            }
            let q = queues.get_mut(&tenant).expect("active tenants have queues");
            if !self.turn_open {
                q.credit += q.quantum(zeta);
                self.turn_open = true;
            }
            if q.credit >= 1.0 {
                q.credit -= 1.0;
                let job = q.jobs.pop_front();
                if q.jobs.is_empty() {
                    q.credit = 0.0;
                    self.leave(tenant);
                }
                return job;
            }
            self.active.rotate_left(1);
            self.turn_open = false;
            passed += 1;
        }
    }

    /// Every backlogged tenant is short of a whole request: skip the rounds
    /// in which nobody could issue one, instead of spinning through them.
    fn fast_forward(&self, queues: &mut FxHashMap<TenantId, TenantQueue>, zeta: f64) {
        let rounds = self
            .active
            .iter()
            .map(|t| {
                let q = &queues[t];
                ((1.0 - q.credit) / q.quantum(zeta)).ceil().max(1.0) - 1.0
            })
            .fold(f64::INFINITY, f64::min);
        for t in &self.active {
            let q = queues.get_mut(t).expect("active tenants have queues");
            q.credit += rounds * q.quantum(zeta);
        }
    }
}

pub struct Wrr {
    zeta: f64,
    queues: FxHashMap<TenantId, TenantQueue>,
    /// Strict tenants' round, then everyone else's.
    rounds: [Round; 2],
    len: usize,
    name: &'static str,
}

impl Wrr {
    /// Round robin over tenants, one job a turn: the `fair` policy.
    pub fn fair() -> Self {
        Wrr {
            name: "fair",
            ..Wrr::new(1.0)
        }
    }

    /// A scheduler with round quota `zeta` (clamped to be positive).
    pub fn new(zeta: f64) -> Self {
        Wrr {
            zeta: positive(zeta),
            queues: FxHashMap::default(),
            rounds: Default::default(),
            len: 0,
            name: "wrr",
        }
    }

    pub fn zeta(&self) -> f64 {
        self.zeta
    }

    /// Changes ζ; it applies from the next turn.
    pub fn set_zeta(&mut self, zeta: f64) {
        self.zeta = positive(zeta);
    }

    /// Puts `tenant` before all non-strict tenants (or back among them);
    /// requests already waiting move with it.
    pub fn set_strict(&mut self, tenant: TenantId, strict: bool) {
        let q = self.queues.entry(tenant).or_default();
        if q.strict == strict {
            return;
        }
        q.strict = strict;
        q.credit = 0.0;
        if !q.jobs.is_empty() {
            let to = round_of(q);
            self.rounds[1 - to].leave(tenant);
            self.rounds[to].active.push_back(tenant);
        }
    }

    /// Drops what is kept about `tenant` (its weight, credit and class) if
    /// nothing of it waits: its id may be given to a new tenant.
    pub fn forget(&mut self, tenant: TenantId) {
        if self.queues.get(&tenant).is_some_and(|q| q.jobs.is_empty()) {
            self.queues.remove(&tenant);
        }
    }

    /// Jobs waiting for `tenant`.
    pub fn queued(&self, tenant: TenantId) -> usize {
        self.queues.get(&tenant).map_or(0, |q| q.jobs.len())
    }

    /// Removes the waiting job of `tenant` whose tag is `tag` (its request
    /// gave up waiting). Returns it if it was still queued.
    pub fn cancel(&mut self, tenant: TenantId, tag: u64) -> Option<Job> {
        let q = self.queues.get_mut(&tenant)?;
        let at = q.jobs.iter().position(|j| j.tag == tag)?;
        let job = q.jobs.remove(at);
        self.len -= 1;
        if q.jobs.is_empty() {
            // An emptied queue leaves the round and loses its credit.
            q.credit = 0.0;
            self.rounds[round_of(q)].leave(tenant);
        }
        job
    }
}

/// Index into `Wrr::rounds` of the tenant's class.
fn round_of(q: &TenantQueue) -> usize {
    usize::from(!q.strict)
}

fn positive(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        f64::MIN_POSITIVE
    }
}

impl Policy for Wrr {
    fn name(&self) -> String {
        self.name.into()
    }

    fn push(&mut self, job: Job, _now: Nanos) {
        let tenant = job.ctx.tenant;
        let q = self.queues.entry(tenant).or_default();
        q.weight = positive(job.ctx.weight);
        if q.jobs.is_empty() {
            self.rounds[round_of(q)].active.push_back(tenant);
        }
        q.jobs.push_back(job);
        self.len += 1;
    }

    fn pop(&mut self, _now: Nanos, _device: &dyn DeviceView) -> Option<Job> {
        let zeta = self.zeta;
        let job = self.rounds.iter_mut().find_map(|r| r.pop(&mut self.queues, zeta))?;
        self.len -= 1;
        Some(job)
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::Ctx;
    use crate::device::FlatDevice;

    fn job(seq: u64, tenant: u32, weight: f64) -> Job {
        Job::new(seq, Ctx::new(seq, 0).with_tenant(tenant, weight), 0, 0).with_tag(seq)
    }

    fn tenants_served(p: &mut Wrr, n: usize) -> Vec<u32> {
        (0..n)
            .map_while(|_| p.pop(0, &FlatDevice::default()))
            .map(|j| j.ctx.tenant.0)
            .collect()
    }

    #[test]
    fn each_tenant_issues_its_quota_consecutively() {
        let mut p = Wrr::new(2.0);
        let mut seq = 0;
        for (tenant, weight) in [(1, 1.0), (2, 2.0)] {
            for _ in 0..8 {
                seq += 1;
                p.push(job(seq, tenant, weight), 0);
            }
        }
        // L_1 = 2, L_2 = 4 per round.
        assert_eq!(tenants_served(&mut p, 12), [1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 2, 2]);
    }

    #[test]
    fn fractional_quotas_get_their_share() {
        let mut p = Wrr::new(0.25);
        for seq in 0..400 {
            p.push(job(seq, (seq % 2) as u32, if seq % 2 == 0 { 1.0 } else { 3.0 }), 0);
        }
        let served = tenants_served(&mut p, 200);
        let heavy = served.iter().filter(|&&t| t == 1).count();
        assert!(
            (148..=152).contains(&heavy),
            "weight 3 of 4 should get ~150 of 200, got {heavy}"
        );
    }

    #[test]
    fn an_emptied_queue_forfeits_its_credit() {
        let mut p = Wrr::new(10.0);
        p.push(job(1, 1, 1.0), 0);
        assert_eq!(tenants_served(&mut p, 1), [1]);
        for seq in 2..6 {
            p.push(job(seq, 2, 1.0), 0);
        }
        p.push(job(6, 1, 1.0), 0);
        // Tenant 1 left with 9 credits unspent; it starts over behind tenant 2.
        assert_eq!(tenants_served(&mut p, 5), [2, 2, 2, 2, 1]);
    }

    #[test]
    fn a_strict_tenant_goes_before_everyone_else() {
        let mut p = Wrr::new(1.0);
        for seq in 0..4 {
            p.push(job(seq, 1, 100.0), 0);
        }
        for seq in 4..6 {
            p.push(job(seq, 2, 1.0), 0);
        }
        assert_eq!(tenants_served(&mut p, 1), [1]);
        p.set_strict(TenantId(2), true);
        assert_eq!(
            tenants_served(&mut p, 3),
            [2, 2, 1],
            "waiting requests move with the tenant"
        );
        p.push(job(6, 2, 1.0), 0);
        assert_eq!(tenants_served(&mut p, 2), [2, 1]);
        p.set_strict(TenantId(2), false);
        p.push(job(7, 2, 1.0), 0);
        assert_eq!(tenants_served(&mut p, 2), [1, 2], "back in the round behind tenant 1");
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn cancel_removes_a_waiting_job_and_an_empty_tenant() {
        let mut p = Wrr::new(1.0);
        p.push(job(1, 1, 1.0), 0);
        p.push(job(2, 2, 1.0), 0);
        assert_eq!(p.cancel(TenantId(1), 1).map(|j| j.seq), Some(1));
        assert_eq!(p.cancel(TenantId(1), 1), None);
        assert_eq!((p.len(), p.queued(TenantId(1))), (1, 0));
        assert_eq!(tenants_served(&mut p, 2), [2]);
    }
}
