//! Time as the core sees it: integer nanoseconds from an origin the driver
//! chooses (virtual time in the simulator, a start instant in the runtime).
//! Integers keep event order exact and simulations byte-reproducible.

/// A point in time or a duration, in nanoseconds.
pub type Nanos = u64;

/// Nanoseconds in one millisecond.
pub const NANOS_PER_MS: f64 = 1_000_000.0;

/// Milliseconds (as the papers state parameters) to nanoseconds, rounded.
pub fn from_ms(ms: f64) -> Nanos {
    (ms * NANOS_PER_MS).round().max(0.0) as Nanos
}

/// Nanoseconds to milliseconds, for reports.
pub fn to_ms(ns: impl Into<f64>) -> f64 {
    ns.into() / NANOS_PER_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_round_trip() {
        assert_eq!(from_ms(9.4), 9_400_000);
        assert_eq!(from_ms(-1.0), 0);
        assert!((to_ms(2_500_000u32) - 2.5).abs() < 1e-12);
    }
}
