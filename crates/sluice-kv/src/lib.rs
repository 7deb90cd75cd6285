//! # sluice-kv: an LSM key-value store on sluice-io
//!
//! Every I/O goes through [`sluice_io`] with the context of the request
//! that caused it: client operations are foreground work; flush and
//! compaction are registered background tasks whose knobs can be turned
//! while they run (programmable background tasks §VI). A writer stopped by
//! a write stall waits on the worker whose work stops it (the flush for
//! frozen memtables, the compaction for L0), so a critical writer raises
//! that worker's I/O to critical by RCP's inheritance, and closing the
//! store runs a paused step through to its end.
//!
//! | piece | file |
//! |---|---|
//! | write path, write stalls, group commit, reads, scans; writes stopped by a failed write to disk and resumed | `db.rs` |
//! | what the writers, flush, compaction and recovery share: memtables, WAL, version under one lock | `state.rs` |
//! | write-ahead log, replay | `wal.rs` |
//! | atomic batches | `batch.rs` |
//! | memtable | `memtable.rs` |
//! | SSTables: blocks, bloom filter, index, footer, block cache | `sstable/` |
//! | versions (the tables of each level) | `version.rs` |
//! | flush | `flush.rs` |
//! | leveled compaction | `compaction.rs` |
//! | manifest | `manifest.rs` |
//! | opening: manifest, WAL replay | `recovery.rs` |
//! | merging sorted sources | `merge.rs` |
//! | the RESP protocol (its own crate, `sluice-resp`, shared with the proxy, the router and the bench drivers) | `resp` |
//! | the request context a command may carry (`SLUICE.WITH`) | `sluice_resp::request_context` |
//! | the server of `sluice serve`: every connection on one poller, a bounded pool of workers that wait on it and run the ready connections' commands, group commit across connections (the map is in `server.rs`); its bounds against hostile clients; what its connections share; its commands (the command table in `commands.rs`, typed reads and writes in `commands/value.rs`, the store as commands reach it in `commands/store.rs`, MULTI/EXEC/WATCH in `commands/transaction.rs`, lists in `commands/list.rs`, Lua scripts in `commands/script.rs`, CLIENT in `commands/client.rs`, a connection's state in `commands/session.rs`); SCAN's cursors | `server.rs`, `poller.rs`, `connection.rs`, `request.rs`, `committer.rs`, `shared.rs`, `commands.rs`, `commands/`, `cursors.rs` |
//! | strings, hashes, sorted sets and their deadlines over flat keys | `keyspace.rs` |
//! | the expiry sweeper: values past their deadline deleted by the `expiry` background task | `sweeper.rs` |
//!
//! The YCSB drivers are in `sluice-bench`; `sluice demo` runs them on this
//! store.

mod batch;
mod blocked;
mod codec;
mod commands;
mod committer;
mod compaction;
mod connection;
mod cursors;
mod db;
pub mod error;
mod flush;
mod glob;
pub mod io_estimate;
mod keyspace;
mod manifest;
mod memtable;
pub mod merge;
mod options;
mod poller;
mod pubsub;
mod recovery;
mod request;
pub mod server;
mod shared;
pub mod sstable;
mod state;
mod sweeper;
mod turns;
mod version;
mod wal;

pub use batch::WriteBatch;
pub use db::{Db, Stats, Unsynced};
pub use error::{KvError, Result};
pub use options::Options;
pub use server::{Server, ServerOptions};
pub use shared::{cores, default_workers};
/// The protocol `sluice serve` speaks, re-exported for its callers.
pub use sluice_resp as resp;

/// The stored form of the Redis string `value`, as `sluice serve` writes
/// it: for tools that lay out a store for it offline (`sluice bench
/// deadline --via serve` places each record on a cylinder of its own).
pub fn string_value(value: &[u8]) -> Vec<u8> {
    keyspace::tagged(keyspace::Tag::String, value)
}

/// A value as the store keeps it: `None` is a deletion (tombstone).
pub type Value = Option<Vec<u8>>;
