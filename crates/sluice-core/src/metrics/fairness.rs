//! Fairness across tenants (AppleS §3.1):
//!
//! - Unfairness `U_f = max_i |N_i/φ_i - H| / H`, `H = mean_i(N_i/φ_i)`, where
//!   N_i is the work tenant i got done and φ_i its weight.
//! - Latency variability V_l: the coefficient of variation of request
//!   latency, computed per tenant and averaged across tenants.

/// Running mean and variance (Welford), constant memory.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    n: u64,
    mean: f64,
    m2: f64,
}

impl Moments {
    pub fn record(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
    /// Adds another set of samples (Chan et al.'s parallel combination).
    pub fn merge(&mut self, other: &Moments) {
        if other.n == 0 {
            return;
        }
        let n = self.n + other.n;
        let d = other.mean - self.mean;
        self.mean += d * other.n as f64 / n as f64;
        self.m2 += other.m2 + d * d * self.n as f64 * other.n as f64 / n as f64;
        self.n = n;
    }
    pub fn count(&self) -> u64 {
        self.n
    }
    pub fn mean(&self) -> f64 {
        self.mean
    }
    /// Population standard deviation.
    pub fn std_dev(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            (self.m2 / self.n as f64).sqrt()
        }
    }
    /// Coefficient of variation (0 when the mean is 0).
    pub fn cv(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            self.std_dev() / self.mean
        }
    }
}

/// What one tenant got: completed requests, its weight and its latencies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TenantStats {
    pub completed: u64,
    pub weight: f64,
    pub latency: Moments,
}

impl TenantStats {
    pub fn new(weight: f64) -> Self {
        TenantStats {
            completed: 0,
            weight,
            latency: Moments::default(),
        }
    }

    pub fn record(&mut self, latency: f64) {
        self.completed += 1;
        self.latency.record(latency);
    }

    /// Adds what the same tenant got in another interval; the weight is
    /// the newer one's.
    pub fn merge(&mut self, other: &TenantStats) {
        self.completed += other.completed;
        self.latency.merge(&other.latency);
        self.weight = other.weight;
    }
}

/// U_f over tenants; 0 for no tenants or when nobody got anything done.
pub fn unfairness(tenants: &[TenantStats]) -> f64 {
    let norm: Vec<f64> = tenants
        .iter()
        .filter(|t| t.weight > 0.0)
        .map(|t| t.completed as f64 / t.weight)
        .collect();
    if norm.is_empty() {
        return 0.0;
    }
    let h = norm.iter().sum::<f64>() / norm.len() as f64;
    if h == 0.0 {
        return 0.0;
    }
    norm.iter().map(|x| (x - h).abs() / h).fold(0.0, f64::max)
}

/// V_l: mean over tenants with at least one request of their latency CV.
pub fn latency_cv(tenants: &[TenantStats]) -> f64 {
    let cvs: Vec<f64> = tenants
        .iter()
        .filter(|t| t.latency.count() > 0)
        .map(|t| t.latency.cv())
        .collect();
    if cvs.is_empty() {
        0.0
    } else {
        cvs.iter().sum::<f64>() / cvs.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(completed: u64, weight: f64, latencies: &[f64]) -> TenantStats {
        let mut t = TenantStats::new(weight);
        for &l in latencies {
            t.latency.record(l);
        }
        t.completed = completed;
        t
    }

    #[test]
    fn merged_moments_equal_moments_of_all_samples() {
        let xs = [1.0, 4.0, 9.0, 2.5, 7.0, 3.0];
        let (mut a, mut b, mut all) = (Moments::default(), Moments::default(), Moments::default());
        for (i, &x) in xs.iter().enumerate() {
            if i < 2 {
                a.record(x)
            } else {
                b.record(x)
            }
            all.record(x);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        assert!((a.mean() - all.mean()).abs() < 1e-12 && (a.std_dev() - all.std_dev()).abs() < 1e-12);
        a.merge(&Moments::default());
        assert_eq!(a.count(), 6);
    }

    #[test]
    fn unfairness_on_a_small_example() {
        // Normalized throughputs 10, 10, 40: H = 20, max deviation 20/20 = 1.
        let t = [tenant(10, 1.0, &[]), tenant(20, 2.0, &[]), tenant(40, 1.0, &[])];
        assert!((unfairness(&t) - 1.0).abs() < 1e-12);
        // Weighted shares exactly met: U_f = 0.
        let fair = [tenant(10, 1.0, &[]), tenant(20, 2.0, &[]), tenant(40, 4.0, &[])];
        assert_eq!(unfairness(&fair), 0.0);
        assert_eq!(unfairness(&[]), 0.0);
    }

    #[test]
    fn latency_cv_averages_per_tenant_cv() {
        // Tenant 1: {1, 3}: mean 2, std 1, CV 0.5. Tenant 2: {5, 5}: CV 0.
        let t = [
            tenant(2, 1.0, &[1.0, 3.0]),
            tenant(2, 1.0, &[5.0, 5.0]),
            tenant(0, 1.0, &[]),
        ];
        assert!((latency_cv(&t) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn moments_match_the_textbook() {
        let mut m = Moments::default();
        for x in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            m.record(x);
        }
        assert_eq!(m.mean(), 5.0);
        assert!((m.std_dev() - 2.0).abs() < 1e-12);
    }
}
