//! Options of a store, with RocksDB's meaning where RocksDB has the same
//! knob (`write_buffer_size`, `level0_*_trigger`, `max_bytes_for_level_base`).

use crate::error::{KvError, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// A memtable is frozen and flushed when it holds this much.
    pub memtable_bytes: usize,
    /// Frozen memtables waiting for flush before writers stop.
    pub max_immutables: usize,
    /// Target size of a table written by compaction.
    pub table_bytes: u64,
    pub block_bytes: usize,
    pub bloom_bits_per_key: usize,
    pub block_cache_bytes: usize,
    /// L0 tables that start a compaction into L1.
    pub l0_compaction_trigger: usize,
    /// L0 tables from which every write is delayed by `slowdown_delay_us`.
    pub l0_slowdown_trigger: usize,
    /// L0 tables at which writes stop until compaction catches up.
    pub l0_stop_trigger: usize,
    pub slowdown_delay_us: u64,
    /// Target size of L1; each deeper level is `level_multiplier` times more.
    pub level_base_bytes: u64,
    pub level_multiplier: u64,
    pub max_levels: usize,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
    /// Sync the WAL before a write returns (by group commit).
    pub sync: bool,
    /// Run flush and compaction on background threads. Off, they run only
    /// when the caller asks ([`crate::Db::flush`], [`crate::Db::compact`]).
    pub background: bool,
    /// The values are `sluice serve`'s, typed and with their deadlines
    /// (`keyspace.rs`): compaction drops strings and hashes whose deadline
    /// has passed, so expired keys give their space back without being
    /// read. Off for a store of raw values, which could look typed.
    pub drop_expired: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memtable_bytes: 4 << 20,
            max_immutables: 2,
            table_bytes: 2 << 20,
            block_bytes: 4096,
            bloom_bits_per_key: 10,
            block_cache_bytes: 8 << 20,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 12,
            slowdown_delay_us: 1000,
            level_base_bytes: 16 << 20,
            level_multiplier: 10,
            max_levels: 7,
            max_key_bytes: 64 << 10,
            max_value_bytes: 16 << 20,
            sync: true,
            background: true,
            drop_expired: false,
        }
    }
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        let checks = [
            (self.memtable_bytes > 0, "memtable_bytes must be > 0"),
            (self.max_immutables > 0, "max_immutables must be > 0"),
            (self.table_bytes > 0, "table_bytes must be > 0"),
            (self.block_bytes >= 64, "block_bytes must be at least 64"),
            (self.l0_compaction_trigger > 0, "l0_compaction_trigger must be > 0"),
            (
                self.l0_compaction_trigger <= self.l0_slowdown_trigger
                    && self.l0_slowdown_trigger <= self.l0_stop_trigger,
                "l0 triggers must satisfy compaction <= slowdown <= stop",
            ),
            (self.level_base_bytes > 0, "level_base_bytes must be > 0"),
            (self.level_multiplier >= 2, "level_multiplier must be at least 2"),
            (self.max_levels >= 2, "max_levels must be at least 2"),
            (self.max_key_bytes > 0, "max_key_bytes must be > 0"),
            (
                self.max_key_bytes < u32::MAX as usize && self.max_value_bytes < u32::MAX as usize,
                "max_key_bytes and max_value_bytes must be below 4 GiB",
            ),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, what)) => Err(KvError::Options(what.to_string())),
            None => Ok(()),
        }
    }

    /// Target bytes of `level` (1 and deeper).
    pub(crate) fn level_target(&self, level: usize) -> u64 {
        let exp = level.saturating_sub(1) as u32;
        self.level_base_bytes
            .saturating_mul(self.level_multiplier.saturating_pow(exp))
    }
}
