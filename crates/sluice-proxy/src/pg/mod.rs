//! PostgreSQL behind the proxy (issue 5, §1–§3): wire protocol v3 framing,
//! the CancelRequest registry, server connections and transaction pooling
//! (with the prepared statements it keeps for clients), and the session that relays a client to its backend.

pub mod cancel;
pub mod frame;
pub(crate) mod pool;
pub(crate) mod prepared;
pub(crate) mod session;
pub mod tls;
