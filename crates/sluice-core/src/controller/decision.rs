//! What the optimizer's controllers decide: a knob, its value and why, for
//! the driver to apply and to log.

use std::fmt;

/// The knob a decision sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Knob {
    /// The model's matching point: shown in the log, P follows separately.
    MatchingPoint,
    Parallelism,
    Zeta,
    /// A latency-sensitive tenant's weight.
    Weight(String),
    /// A PostgreSQL setting, by its name in `pg_settings`.
    Postgres(&'static str),
    /// A `CHECKPOINT` now: a command, not a setting (its value is the
    /// recovery debt it clears, MiB).
    PostgresCheckpoint,
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Knob::MatchingPoint => f.write_str("matching_point"),
            Knob::Parallelism => f.write_str("parallelism"),
            Knob::Zeta => f.write_str("zeta"),
            Knob::Weight(tenant) => write!(f, "weight.{tenant}"),
            Knob::Postgres(setting) => write!(f, "postgres.{setting}"),
            Knob::PostgresCheckpoint => f.write_str("postgres.CHECKPOINT"),
        }
    }
}

/// One decision and why. The driver applies `Parallelism`, `Zeta`,
/// `Weight` (setting a weight to the value it has is a hold, logged) and
/// `Postgres` (through `ALTER SYSTEM`), `PostgresCheckpoint` (a
/// `CHECKPOINT`); `MatchingPoint` is for the log alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub knob: Knob,
    pub value: f64,
    pub why: String,
}
