//! The metric definitions, one implementation each, which the simulator,
//! the benchmarks and the proxy all report with: tardiness and miss ratio
//! (TraQIOS Def. 1–2), latency distributions (HdrHistogram), and per-tenant
//! throughput, unfairness U_f and latency variability V_l (AppleS §3.1);
//! and the median and range of repeated runs.

mod fairness;
mod latency;
mod spread;
mod tardiness;

pub use fairness::{latency_cv, unfairness, Moments, TenantStats};
pub use latency::LatencyHistogram;
pub use spread::{median, Spread};
pub use tardiness::Tardiness;
