//! `sluice proxy`: per-tenant admission control and fair scheduling (AppleS)
//! in front of unmodified PostgreSQL and Redis.

pub mod gate;
