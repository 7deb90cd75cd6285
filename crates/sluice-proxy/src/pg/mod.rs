//! PostgreSQL behind the proxy (issue 5, §1–§3): wire protocol v3 framing,
//! the CancelRequest registry, and the session that relays a client to its
//! own backend connection.

pub mod cancel;
pub mod frame;
pub(crate) mod session;
pub mod tls;
