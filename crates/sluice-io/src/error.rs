//! Errors of the runtime. A device error reaches the caller with the file
//! and offset it happened at; nothing is retried or dropped silently.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum IoError {
    #[error("{op} of {len} bytes at offset {offset} of {path}: {source}")]
    Device {
        op: &'static str,
        path: PathBuf,
        offset: u64,
        len: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("opening {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("O_DIRECT {what} must be a multiple of {align} bytes, got {got} ({path})")]
    Misaligned {
        what: &'static str,
        align: usize,
        got: u64,
        path: PathBuf,
    },
    #[error("{len} bytes at offset {offset} of {path} run past the largest file offset")]
    Range { path: PathBuf, offset: u64, len: usize },
    #[error("invalid runtime configuration: {0}")]
    Config(String),
}
