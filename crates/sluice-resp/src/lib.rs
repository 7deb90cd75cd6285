//! RESP, the Redis protocol, in one place for every part of Sluice that
//! speaks it: `sluice serve` parses requests and encodes replies; the proxy
//! frames its clients' commands and its server's replies and forwards them
//! as they came; the router parses requests from its clients, encodes
//! sub-requests to its shards and frames and parses their replies; the
//! bench drivers encode commands and parse replies.
//!
//! Requests are arrays of bulk strings (what every client library sends)
//! or inline commands (what `telnet` and `redis-cli` in a pipe may send);
//! replies are every RESP2 type, and the RESP3 types a server sends after
//! `HELLO 3`.
//!
//! | file | what |
//! |---|---|
//! | `limits` | [`Limits`] and Redis's bounds they default to (bulk ≤ 512 MiB, inline line ≤ 64 KiB, 10 arguments of 16 KiB before AUTH) |
//! | `error` | [`ProtocolError`]: what is wrong, in Redis's words |
//! | `wire` | lines and lengths, read and written: what the others build on |
//! | `inline` | inline commands split as Redis splits them (quotes, escapes) |
//! | `request` | requests: [`CommandParser`] (resumable ranges, for a relay), [`RequestParser`] (owned arguments, resumable, for a server) and [`parse`] (the same, one call), [`encode_command`] |
//! | `scan` | replies framed: [`ReplyScanner`] (resumable, every RESP2 and RESP3 type), [`reply_len`], [`array_items`] |
//! | `reply` | replies as values: [`Reply`], its encoding in RESP2 and RESP3, [`parse_reply`] |
//! | [`slot`] | Redis Cluster's hash slots: a key's slot, and ranges of slots |
//! | [`request_context`] | Sluice's one extension: `SLUICE.WITH`, the request context (id, budget, tenant) a command may carry |
//!
//! Written by hand because the message boundaries are the point, and no
//! RESP crate offers what a relay needs: framing that resumes over a
//! growing buffer (a 512 MiB bulk string or a reply of a million elements
//! arrives in many reads and must not be walked again from its start each
//! time), and that is bounded (lengths are checked against limits before
//! anything is buffered or allocated, so one peer's malformed or oversized
//! input is an error for that peer alone). Malformed input is an error that
//! names what is wrong; nothing here panics on any input (property-tested
//! here, fuzzed by the targets in `fuzz/`).
//!
//! ```
//! use sluice_resp::{encode_command, parse, parse_reply, Limits, Reply};
//!
//! let mut wire = Vec::new();
//! encode_command(&["GET", "k"], &mut wire);
//! let (args, used) = parse(&wire, &Limits::default()).unwrap().unwrap();
//! assert_eq!((args, used), (vec![b"GET".to_vec(), b"k".to_vec()], wire.len()));
//!
//! let mut reply = Vec::new();
//! Reply::Array(vec![Reply::Bulk(Some(b"v".to_vec())), Reply::Bulk(None)]).encode(&mut reply);
//! assert_eq!(parse_reply(&reply[..5], &Limits::default()).unwrap(), None, "not whole yet");
//! let (back, used) = parse_reply(&reply, &Limits::default()).unwrap().unwrap();
//! assert_eq!((back, used), (Reply::Array(vec![Reply::Bulk(Some(b"v".to_vec())), Reply::Bulk(None)]), reply.len()));
//! ```

mod error;
mod inline;
mod limits;
mod reply;
mod request;
pub mod request_context;
mod scan;
pub mod slot;
mod wire;

pub use error::ProtocolError;
pub use limits::{
    Limits, MAX_ARGS, MAX_ARGS_BEFORE_AUTH, MAX_BULK_BEFORE_AUTH, MAX_BULK_LEN, MAX_CLIENTS, MAX_CLIENTS_REACHED,
    MAX_INLINE_LEN, MAX_REPLY_LINE,
};
pub use reply::{error_reply, parse_reply, Reply};
pub use request::{encode_command, parse, CommandParser, Request, RequestParser};
pub use scan::{array_items, reply_len, ReplyScanner, ScannedReply};
