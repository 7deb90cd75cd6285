//! Redis behind the proxy (issue 5, §1–§3): RESP framing, what each
//! command means for admission, the shared upstream connections that carry
//! the commands of clients still in the default session state, and the
//! session that relays a client's commands to its own upstream connection
//! from its first stateful command on.

pub mod command;
pub(crate) mod mux;
pub mod resp;
pub(crate) mod session;
pub(crate) mod shared;
