//! The transaction workload of TraQIOS §4 and Table 1.
//!
//! A transaction T_i arrives by a Poisson process, has N_i accesses (uniform
//! over `ios`), and alternates processing ("think") time, uniform over
//! `think_ms`, with accesses: K_0, R_1, K_1, R_2, ..., R_N; it finishes when
//! its last access is served. Its deadline is
//! `D_i = A_i + N_i·C̄ + SlackFactor_i·N_i·C̄` with `SlackFactor_i` uniform
//! over [0, `slack_factor_max`] (§4).
//!
//! - Utilization: the disk's offered load at random access order,
//!   `ρ = λ·E[N]·C̄`, so the arrival rate is `λ = ρ / (E[N]·C̄)` with E[N]
//!   the mean of `ios` and C̄ the disk's average access time. Cache hits,
//!   sequential access and a small layout lower the real load below ρ, as
//!   the paper's Fig. 10 reads them ("increasing the cache hit rate is
//!   equivalent to reducing the disk utilization").
//! - Cache (`cache_hit`, p_h): each access is a hit with probability p_h and
//!   is served from memory in no time; it still counts against M.
//! - Sequential access (`sequential`, p_s): an access falls on the
//!   transaction's previous cylinder with probability p_s, else uniformly on
//!   the layout.
//! - Layout (`layout_cylinders`): data occupies cylinders [0, L). C̄, "the
//!   expected time needed for the head to travel between two arbitrary
//!   blocks" (§3.2.1), is then taken over the data's cylinders by default
//!   (`c_bar_over = "layout"`), so deadlines and utilization follow the data;
//!   `"disk"` keeps the whole disk's C̄ (Table 1's 9.4 ms) whatever the layout.
//! - Inaccuracy (`inaccuracy`, p_l, §5.7): the optimizer's estimate is
//!   `N_est = round(N·(1 + e))`, at least 1, with e in [-p_l, p_l]; the
//!   deadline uses the actual N (the SLA does not change with the estimate's
//!   error), the policies see only N_est. With `inaccuracy_correlation` ρ_e
//!   = 0, e is uniform; otherwise `e ∝ ρ_e·z_N + sqrt(1-ρ_e²)·z_u` with z_N
//!   the standardized length and z_u a standardized uniform, scaled so that
//!   |e| <= p_l: its correlation with N is ρ_e (§5.7 uses -0.5).

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use sluice_core::device::SeekDisk;
use sluice_core::time::from_ms;
use sluice_core::{Ctx, Nanos};

/// Table 1's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraqiosWorkload {
    /// Number of transactions simulated.
    pub transactions: u64,
    /// Accesses per transaction: uniform over [low, high].
    pub ios: [u32; 2],
    /// Processing time after each access, ms: uniform over [low, high].
    pub think_ms: [f64; 2],
    /// Disk utilization ρ in (0, 1].
    pub utilization: f64,
    /// SlackFactor_max.
    pub slack_factor_max: f64,
    /// Cache-hit probability p_h in [0, 1).
    pub cache_hit: f64,
    /// Sequential-access probability p_s in [0, 1].
    pub sequential: f64,
    /// Cylinders the database occupies.
    pub layout_cylinders: u64,
    /// Inaccuracy p_l of the I/O estimate, in [0, 1).
    pub inaccuracy: f64,
    /// Correlation of the estimate's error with transaction length, [-1, 1].
    pub inaccuracy_correlation: f64,
    /// Over which cylinders C̄ is computed.
    pub c_bar_over: CBarOver,
    /// The deadline an access of a transaction already past its own is
    /// queued with.
    pub late_deadline: LateDeadline,
}

/// The deadline an access of a late transaction is queued with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LateDeadline {
    /// The transaction's, however long past (TraQIOS's model, and a
    /// request in the store's own process).
    #[default]
    Kept,
    /// Its issue time: a request context sent over the wire carries the
    /// time left, never a negative one, so the store that receives a late
    /// access sets its deadline to its arrival (`SLUICE.WITH`).
    Issue,
}

/// Over which cylinders the average access time C̄ is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CBarOver {
    /// The cylinders the database occupies.
    #[default]
    Layout,
    /// The whole disk.
    Disk,
}

impl Default for TraqiosWorkload {
    fn default() -> Self {
        TraqiosWorkload {
            transactions: 5000,
            ios: [1, 1000],
            think_ms: [0.0, 1.0],
            utilization: 0.5,
            slack_factor_max: 4.0,
            cache_hit: 0.0,
            sequential: 0.0,
            layout_cylinders: 1000,
            inaccuracy: 0.0,
            inaccuracy_correlation: 0.0,
            c_bar_over: CBarOver::Layout,
            late_deadline: LateDeadline::Kept,
        }
    }
}

/// A workload field that is out of range: the field and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub field: &'static str,
    pub problem: String,
}

fn check(ok: bool, field: &'static str, problem: impl FnOnce() -> String) -> Result<(), Invalid> {
    if ok {
        Ok(())
    } else {
        Err(Invalid {
            field,
            problem: problem(),
        })
    }
}

fn unit(field: &'static str, x: f64, hi_open: bool) -> Result<(), Invalid> {
    let ok = x.is_finite() && x >= 0.0 && if hi_open { x < 1.0 } else { x <= 1.0 };
    let range = if hi_open { "[0, 1)" } else { "[0, 1]" };
    check(ok, field, || format!("must lie in {range}, got {x}"))
}

impl TraqiosWorkload {
    /// Checks every field; `cylinders` is the disk's size.
    pub fn validate(&self, cylinders: u64) -> Result<(), Invalid> {
        check(self.transactions >= 1, "transactions", || "must be at least 1".into())?;
        let [lo, hi] = self.ios;
        check(lo >= 1, "ios", || format!("low end must be at least 1, got {lo}"))?;
        check(lo <= hi, "ios", || format!("low end {lo} exceeds high end {hi}"))?;
        let [tlo, thi] = self.think_ms;
        check(tlo.is_finite() && thi.is_finite() && tlo >= 0.0, "think_ms", || {
            format!("must be finite and >= 0, got [{tlo}, {thi}]")
        })?;
        check(tlo <= thi, "think_ms", || {
            format!("low end {tlo} exceeds high end {thi}")
        })?;
        let u = self.utilization;
        check(u.is_finite() && u > 0.0 && u <= 1.0, "utilization", || {
            format!("must lie in (0, 1], got {u}")
        })?;
        let sf = self.slack_factor_max;
        check(sf.is_finite() && sf >= 0.0, "slack_factor_max", || {
            format!("must be >= 0, got {sf}")
        })?;
        unit("cache_hit", self.cache_hit, true)?;
        unit("sequential", self.sequential, false)?;
        unit("inaccuracy", self.inaccuracy, true)?;
        let rho = self.inaccuracy_correlation;
        check(
            rho.is_finite() && (-1.0..=1.0).contains(&rho),
            "inaccuracy_correlation",
            || format!("must lie in [-1, 1], got {rho}"),
        )?;
        let l = self.layout_cylinders;
        check(l >= 1 && l <= cylinders, "layout_cylinders", || {
            format!("must lie in [1, disk.cylinders = {cylinders}], got {l}")
        })
    }

    /// C̄ of `disk` for this workload (see [`CBarOver`]).
    pub fn avg_access(&self, disk: &SeekDisk) -> Nanos {
        match self.c_bar_over {
            CBarOver::Layout => disk.avg_access_over(self.layout_cylinders),
            CBarOver::Disk => disk.avg_access(),
        }
    }

    /// E[N]: mean accesses per transaction.
    pub fn mean_ios(&self) -> f64 {
        (f64::from(self.ios[0]) + f64::from(self.ios[1])) / 2.0
    }

    /// Mean processing time per access (K̄), the estimate policies use.
    pub fn mean_think(&self) -> Nanos {
        from_ms((self.think_ms[0] + self.think_ms[1]) / 2.0)
    }

    /// Arrival rate per ns giving utilization ρ on a disk with mean access
    /// time `avg_access`.
    pub fn arrival_rate(&self, avg_access: Nanos) -> f64 {
        self.utilization / (self.mean_ios() * avg_access as f64)
    }
}

/// A transaction as it enters the system.
#[derive(Clone, Debug)]
pub struct Transaction {
    pub ctx: Ctx,
    /// Accesses it will really make (N_i).
    pub actual_ios: u32,
    /// Its own random stream for think times, hits and cylinders.
    pub rng: Pcg64Mcg,
}

/// Draws transactions one at a time, so memory does not grow with their
/// number.
pub struct Generator {
    params: TraqiosWorkload,
    avg_access: Nanos,
    rate: f64,
    seed: u64,
    arrivals: Pcg64Mcg,
    next_id: u64,
    next_at: Nanos,
}

/// SplitMix64: decorrelates the per-transaction seeds.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Generator {
    pub fn new(params: &TraqiosWorkload, avg_access: Nanos, seed: u64) -> Self {
        let mut g = Generator {
            params: params.clone(),
            avg_access,
            rate: params.arrival_rate(avg_access),
            seed,
            arrivals: Pcg64Mcg::seed_from_u64(mix(seed)),
            next_id: 0,
            next_at: 0,
        };
        g.next_at = g.gap();
        g
    }

    fn gap(&mut self) -> Nanos {
        let u: f64 = self.arrivals.gen();
        (-(1.0 - u).ln() / self.rate).round() as Nanos
    }

    /// When the next transaction arrives, if any is left.
    pub fn next_arrival(&self) -> Option<Nanos> {
        (self.next_id < self.params.transactions).then_some(self.next_at)
    }

    /// The transaction arriving at [`Self::next_arrival`].
    pub fn arrive(&mut self) -> Transaction {
        let p = &self.params;
        let at = self.next_at;
        let id = self.next_id;
        let mut rng = Pcg64Mcg::seed_from_u64(mix(self.seed ^ mix(id + 1)));
        let n = rng.gen_range(p.ios[0]..=p.ios[1]);
        let sf = rng.gen::<f64>() * p.slack_factor_max;
        let work = f64::from(n) * self.avg_access as f64;
        let deadline = at + (work * (1.0 + sf)).round() as Nanos;
        let est = self.estimate(n, &mut rng);
        self.next_id += 1;
        self.next_at = at + self.gap();
        Transaction {
            ctx: Ctx::new(id, at).with_deadline(deadline).with_est_ios(est),
            actual_ios: n,
            rng,
        }
    }

    /// The optimizer's estimate of `n` (see the module doc).
    fn estimate(&self, n: u32, rng: &mut Pcg64Mcg) -> u32 {
        let p = &self.params;
        // Drawn even when unused, so that the transaction's later draws (think
        // times, cylinders) are the same at every inaccuracy.
        let u: f64 = rng.gen();
        if p.inaccuracy == 0.0 {
            return n;
        }
        let sqrt3 = 3f64.sqrt();
        let width = f64::from(p.ios[1] - p.ios[0]);
        let z_n = if width > 0.0 {
            (f64::from(n) - p.mean_ios()) / (width / 12f64.sqrt())
        } else {
            0.0
        };
        let z_u = (u - 0.5) * 12f64.sqrt();
        let rho = p.inaccuracy_correlation;
        let side = (1.0 - rho * rho).sqrt();
        let raw = (rho * z_n + side * z_u) / (sqrt3 * (rho.abs() + side));
        let e = p.inaccuracy * raw.clamp(-1.0, 1.0);
        (f64::from(n) * (1.0 + e)).round().max(1.0) as u32
    }

    /// Processing time before the next access.
    pub fn think(&self, rng: &mut Pcg64Mcg) -> Nanos {
        let [lo, hi] = self.params.think_ms;
        from_ms(lo + rng.gen::<f64>() * (hi - lo))
    }

    /// The next access of a transaction whose previous one fell on
    /// `previous`: `None` for a buffer-pool hit, else its cylinder. Every
    /// driver of the workload draws through here, so that one seed gives
    /// the same accesses in virtual and in wall time.
    pub fn access(&self, previous: Option<u64>, rng: &mut Pcg64Mcg) -> Option<u64> {
        if self.hit(rng) {
            None
        } else {
            Some(self.cylinder(previous, rng))
        }
    }

    /// Whether the next access is a buffer-pool hit.
    fn hit(&self, rng: &mut Pcg64Mcg) -> bool {
        self.params.cache_hit > 0.0 && rng.gen::<f64>() < self.params.cache_hit
    }

    /// The cylinder of the next access, given the previous one (if any).
    fn cylinder(&self, previous: Option<u64>, rng: &mut Pcg64Mcg) -> u64 {
        if let Some(prev) = previous {
            if self.params.sequential > 0.0 && rng.gen::<f64>() < self.params.sequential {
                return prev;
            }
        }
        rng.gen_range(0..self.params.layout_cylinders)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C_BAR: Nanos = 9_477_000;

    #[test]
    fn deadline_follows_section_4() {
        let w = TraqiosWorkload {
            slack_factor_max: 0.0,
            ..Default::default()
        };
        let mut g = Generator::new(&w, C_BAR, 7);
        let t = g.arrive();
        let expected = t.ctx.arrival + u64::from(t.actual_ios) * C_BAR;
        assert_eq!(t.ctx.deadline, Some(expected));
        assert_eq!(t.ctx.est_ios, t.actual_ios);
    }

    #[test]
    fn arrival_rate_gives_the_utilization() {
        let w = TraqiosWorkload {
            utilization: 0.5,
            transactions: 20_000,
            ..Default::default()
        };
        let mut g = Generator::new(&w, C_BAR, 1);
        let (mut work, mut last) = (0.0, 0);
        while g.next_arrival().is_some() {
            let t = g.arrive();
            work += f64::from(t.actual_ios) * C_BAR as f64;
            last = t.ctx.arrival;
        }
        let rho = work / last as f64;
        assert!((rho - 0.5).abs() < 0.02, "offered load {rho}");
    }

    #[test]
    fn inaccuracy_stays_in_bounds_and_correlates() {
        for rho in [0.0, -0.5] {
            let w = TraqiosWorkload {
                inaccuracy: 0.5,
                inaccuracy_correlation: rho,
                ..Default::default()
            };
            let mut g = Generator::new(&w, C_BAR, 3);
            let (mut xs, mut es) = (Vec::new(), Vec::new());
            for _ in 0..5000 {
                let t = g.arrive();
                let n = f64::from(t.actual_ios);
                let e = f64::from(t.ctx.est_ios) / n - 1.0;
                assert!(e.abs() <= 0.5 + 0.5 / n + 1e-9, "error {e} beyond p_l");
                xs.push(n);
                es.push(e);
            }
            let corr = correlation(&xs, &es);
            assert!((corr - rho).abs() < 0.06, "wanted {rho}, got {corr}");
        }
    }

    fn correlation(x: &[f64], y: &[f64]) -> f64 {
        let n = x.len() as f64;
        let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
        let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
        let vx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
        let vy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
        cov / (vx * vy).sqrt()
    }

    #[test]
    fn inaccuracy_changes_only_the_estimate() {
        let exact = TraqiosWorkload::default();
        let rough = TraqiosWorkload {
            inaccuracy: 0.4,
            ..Default::default()
        };
        let (mut a, mut b) = (Generator::new(&exact, C_BAR, 5), Generator::new(&rough, C_BAR, 5));
        let mut differ = 0;
        for _ in 0..100 {
            let (mut ta, mut tb) = (a.arrive(), b.arrive());
            assert_eq!((ta.ctx.deadline, ta.actual_ios), (tb.ctx.deadline, tb.actual_ios));
            assert_eq!(a.think(&mut ta.rng), b.think(&mut tb.rng));
            differ += usize::from(ta.ctx.est_ios != tb.ctx.est_ios);
        }
        assert!(differ > 50, "estimates differ in {differ} of 100");
    }

    #[test]
    fn same_seed_same_transactions() {
        let w = TraqiosWorkload::default();
        let (mut a, mut b) = (Generator::new(&w, C_BAR, 5), Generator::new(&w, C_BAR, 5));
        for _ in 0..100 {
            let (mut ta, mut tb) = (a.arrive(), b.arrive());
            assert_eq!(ta.ctx, tb.ctx);
            assert_eq!(a.cylinder(None, &mut ta.rng), b.cylinder(None, &mut tb.rng));
        }
    }

    #[test]
    fn validation_names_the_field() {
        let bad = TraqiosWorkload {
            utilization: 1.5,
            ..Default::default()
        };
        assert_eq!(bad.validate(1000).unwrap_err().field, "utilization");
        let bad = TraqiosWorkload {
            ios: [10, 5],
            ..Default::default()
        };
        let err = bad.validate(1000).unwrap_err();
        assert_eq!(err.field, "ios");
        assert!(err.problem.contains("exceeds"));
        let bad = TraqiosWorkload {
            layout_cylinders: 2000,
            ..Default::default()
        };
        assert_eq!(bad.validate(1000).unwrap_err().field, "layout_cylinders");
    }
}
