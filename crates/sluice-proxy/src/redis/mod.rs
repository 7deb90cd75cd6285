//! Redis behind the proxy (issue 5, §1–§3): RESP framing, what each
//! command means for admission, and the session that relays a client's
//! commands to its own upstream connection.

pub mod command;
pub mod resp;
pub(crate) mod session;
