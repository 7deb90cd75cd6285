//! The timing model an emulated device consults: given an operation and the
//! time it reaches the device, when would the device have finished it?
//! One implementation per model serves both the simulator (virtual time) and
//! `sluice-io`'s emulated devices (wall time), so that a figure measured in
//! one can be checked in the other.
//!
//! Every model serves operations in the order they reach it (first come,
//! first served per channel), like a device whose internal queue knows
//! nothing of priorities: that is what makes unbounded non-critical
//! dispatch hurt critical I/O (RCP §2.1).

use thiserror::Error;

use crate::time::Nanos;

/// Read or write, as the models cost them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    /// A flush of the device's volatile cache (fsync).
    Flush,
}

/// One operation as a timing model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    /// Byte offset on the device.
    pub offset: u64,
    /// Bytes transferred.
    pub len: u64,
}

/// A device's timing: completion time of an operation that reaches the
/// device at `now`. Calls come in about the order of `now` (a driver that
/// reports when an operation was dispatched may report one a little
/// earlier than the last); an operation never starts before the device is
/// free of those it already has.
pub trait TimingModel: Send {
    fn complete_at(&mut self, now: Nanos, op: Op) -> Nanos;
}

#[derive(Debug, Error, PartialEq)]
pub enum ProfileError {
    #[error("{field} must be {what}, got {got}")]
    Invalid {
        field: &'static str,
        what: &'static str,
        got: String,
    },
    #[error(transparent)]
    SeekDisk(#[from] super::SeekDiskError),
}

impl ProfileError {
    pub(crate) fn invalid(field: &'static str, what: &'static str, got: impl ToString) -> Self {
        ProfileError::Invalid {
            field,
            what,
            got: got.to_string(),
        }
    }
}

/// Checks that a parameter is a finite number above zero.
pub(crate) fn positive(field: &'static str, v: f64) -> Result<f64, ProfileError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(ProfileError::invalid(field, "a finite number > 0", v))
    }
}
