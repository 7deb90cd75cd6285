//! PostgreSQL behind the proxy: wire protocol v3 framing,
//! the CancelRequest registry, server connections and transaction pooling
//! (with the prepared statements it keeps for clients, the passwords it
//! opens backends with, and the logins it answers itself), TLS on either
//! side, the session that relays a client to its backend and the
//! ReadyForQuery that ends each of its requests (`batch`), and the steering
//! of the server's checkpoints (`background`).

pub mod auth_file;
pub mod background;
pub mod batch;
pub mod cancel;
pub(crate) mod context;
pub mod frame;
pub(crate) mod password;
pub(crate) mod pool;
pub(crate) mod prepared;
pub mod reported;
pub mod scram;
pub(crate) mod session;
pub mod sql;
pub mod tls;
pub mod upstream_tls;
pub mod verifier;

/// Lowercase hex digits of `bytes`, as PostgreSQL writes hashes.
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
