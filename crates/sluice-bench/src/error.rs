//! Errors of the load generators.

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("store: {0}")]
    Kv(#[from] sluice_kv::KvError),
    #[error("network: {0}")]
    Net(#[from] std::io::Error),
    #[error("server replied with an error: {0}")]
    Server(String),
    #[error("unexpected reply from the server: {0}")]
    Protocol(String),
    #[error("invalid workload: {0}")]
    Workload(String),
    #[error("{0}")]
    Tool(String),
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;
