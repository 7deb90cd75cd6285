//! What the store's tasks share: the memtables, the WAL and the current
//! version under one lock ([`State`]), and the store's files, runtime and
//! signals ([`Inner`]). The writers in `db`, the flush, the compaction and
//! the recovery all build on it, none on another's file.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sluice_io::sync::{Condvar, Mutex};
use sluice_io::{Background, Runtime};

use crate::error::{KvError, Result};
use crate::manifest::Manifest;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::sstable::BlockCache;
use crate::version::Version;
use crate::wal::Wal;

pub(crate) struct State {
    pub mem: Memtable,
    /// Frozen memtables, oldest first.
    pub imm: VecDeque<Arc<Memtable>>,
    pub wal: Wal,
    pub version: Arc<Version>,
    pub next_number: u64,
    pub last_seq: u64,
    pub flushing: bool,
    pub compacting: bool,
    pub closing: bool,
    /// A failed write to disk stops writes until a retry succeeds.
    pub stopped: Option<Stopped>,
    /// The WAL failed an append or a sync: it takes no more records, and
    /// its memtable moves onto a new WAL.
    pub wal_failed: bool,
}

/// What failed: the WAL (a writer's append or sync), a flush or a
/// compaction; each is retried where it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failed {
    Wal,
    Flush,
    Compaction,
}

/// Why writes are stopped.
pub(crate) struct Stopped {
    failed: Failed,
    reason: String,
    since: Instant,
}

impl State {
    pub fn number(&mut self) -> u64 {
        self.next_number += 1;
        self.next_number - 1
    }

    /// The manifest for the current version; WALs of memtables still in
    /// memory are needed, older ones are not.
    pub fn manifest(&self) -> Manifest {
        let wal_floor = self.imm.front().map_or(self.mem.wal, |m| m.wal);
        Manifest {
            next_number: self.next_number,
            last_seq: self.last_seq,
            wal_floor,
            tables: self.version.entries(),
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        match &self.stopped {
            Some(s) => Err(KvError::Background(s.reason.clone())),
            None => Ok(()),
        }
    }

    /// Stops writes after `failed` failed with `e` (the first failure
    /// names the stop until writes resume).
    pub(crate) fn stop(&mut self, failed: Failed, e: &dyn std::fmt::Display) {
        if failed == Failed::Wal {
            self.wal_failed = true;
        }
        if self.stopped.is_none() {
            let reason = match failed {
                Failed::Wal => format!("writing the WAL failed: {e}"),
                Failed::Flush => format!("flushing a memtable failed: {e}"),
                Failed::Compaction => format!("compaction failed: {e}"),
            };
            tracing::error!("writes stopped: {reason}; retrying");
            self.stopped = Some(Stopped {
                failed,
                reason,
                since: Instant::now(),
            });
        }
    }

    /// Resumes writes stopped by one of `retried`, once nothing that
    /// failed is left to redo: the memtables of a failed WAL are flushed.
    pub(crate) fn resume(&mut self, retried: &[Failed]) {
        let Some(s) = self.stopped.as_ref().filter(|s| retried.contains(&s.failed)) else {
            return;
        };
        if s.failed != Failed::Compaction && (self.wal_failed || !self.imm.is_empty()) {
            return;
        }
        tracing::info!(
            "writes resume, stopped for {:.1?} after: {}",
            s.since.elapsed(),
            s.reason
        );
        self.stopped = None;
    }
}

pub(crate) struct Inner {
    pub dir: PathBuf,
    pub rt: Runtime,
    pub options: Options,
    pub cache: Arc<BlockCache>,
    pub state: Mutex<State>,
    /// Signalled when flush or compaction may have work.
    pub work: Condvar,
    /// Signalled when a flush or compaction finished.
    pub done: Condvar,
    /// Group commit: the (WAL number, offset) known durable.
    pub synced: Mutex<(u64, u64)>,
    pub flush_task: Arc<Background>,
    pub compaction_task: Arc<Background>,
}

impl Inner {
    /// Tells the compaction task what the levels of `v` leave it: its
    /// backlog, and how near L0 is to a write stall. After every change of
    /// the levels: a flush adds to L0, a compaction empties it.
    pub fn report_backlog(&self, v: &Version) {
        let task = &self.compaction_task;
        task.set_backlog(v.pending_bytes(&self.options));
        task.set_stall_pressure(v.stall_pressure(&self.options));
    }
}
