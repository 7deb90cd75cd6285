//! Errors of the store. Every error names what is wrong and where: the
//! file and offset of a corrupt record, the size limit a key passed.

use std::path::PathBuf;

use sluice_io::IoError;

#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("{op} {path}: {source}")]
    Fs {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("corruption in {path} at offset {offset}: {what}")]
    Corruption { path: PathBuf, offset: u64, what: String },
    #[error("key of {len} bytes is longer than the limit of {limit} bytes")]
    KeyTooLarge { len: usize, limit: usize },
    #[error("value of {len} bytes is longer than the limit of {limit} bytes")]
    ValueTooLarge { len: usize, limit: usize },
    #[error("empty keys are not allowed")]
    EmptyKey,
    #[error("keys added to table {path} must strictly increase")]
    KeyOrder { path: PathBuf },
    #[error("invalid options: {0}")]
    Options(String),
    #[error("writes are stopped until a failed write to disk succeeds on retry: {0}")]
    Background(String),
    #[error("the data directory {dir} is in use by another open store (its LOCK file is held)")]
    InUse { dir: PathBuf },
}

impl KvError {
    pub(crate) fn corruption(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        KvError::Corruption {
            path: path.into(),
            offset,
            what: what.into(),
        }
    }

    pub(crate) fn fs(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        KvError::Fs {
            op,
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = KvError> = std::result::Result<T, E>;
