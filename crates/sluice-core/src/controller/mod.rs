//! Controllers: turn measurements into knob settings. Pure like the rest
//! of the core: the driver measures, calls `decide` on its own timescale,
//! and applies the result.
//!
//! | controller | file | source |
//! |---|---|---|
//! | background rate from foreground latency and backlog | [`background`] | programmable background tasks §VI; ScyllaDB's backlog controllers |

pub mod background;

pub use background::{BackgroundController, BackgroundControllerConfig, BackgroundObservation};
