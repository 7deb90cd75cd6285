//! The router's configuration (TOML). Shards are either listed with their
//! slot ranges, or found by asking a Redis Cluster for its slot map:
//!
//! Every setting, with its default, in `docs/route.example.toml`.
//!
//! ```toml
//! listen = "127.0.0.1:6390"
//! admin = "127.0.0.1:6391"        # HTTP: /stats (JSON) and /metrics (Prometheus); optional
//!
//! [[shard]]
//! name = "a"
//! addr = "127.0.0.1:7001"
//! slots = "0-8191"                # ranges, comma-separated; every slot exactly once
//! kind = "sluice"                 # sends SLUICE.WITH; "redis": the bare command
//!
//! [[shard]]
//! name = "b"
//! addr = "127.0.0.1:7002"
//! slots = "8192-16383"
//!
//! [pool]
//! size = 64                       # connections per shard, at most
//! order = "coop"                  # who goes first when more wait: "coop" (request order) or "fifo"
//!
//! [[tenant]]                      # a client that names itself "gold" (CLIENT SETNAME, HELLO ... SETNAME)
//! name = "gold"
//! budget_ms = 20.0                # each of its requests has this long: the shards' deadline policies see it
//!
//! [compaction]                    # optional: the router decides when the shards compact
//! schedule = "auto"               # "synchronized", "staggered", "auto" (from the fan-out) or "per-node"
//! ```
//!
//! or, in front of a Redis Cluster, `[cluster] seeds = ["127.0.0.1:7000"]`
//! in place of the shards.
//!
//! ```
//! let config = sluice_route::config::Config::from_toml(r#"
//!     listen = "127.0.0.1:0"
//!     [[shard]]
//!     name = "a"
//!     addr = "127.0.0.1:7001"
//!     slots = "0-16383"
//! "#).unwrap();
//! assert_eq!(config.pool.size, 64);
//! ```

use std::str::FromStr;

use serde::Deserialize;
use sluice_core::controller::compaction_schedule::{CompactionSchedule, CompactionScheduleConfig, Schedule};
use sluice_core::policy::PolicySpec;

use sluice_resp::slot::{SlotRanges, SLOTS};

/// Why a configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    #[error("{0}")]
    Invalid(String),
}

fn invalid<T>(what: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid(what.into()))
}

/// What a shard understands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardKind {
    /// `sluice serve`: each sub-request is sent inside `SLUICE.WITH`, so
    /// the shard's I/O scheduler sees the request's id, budget and tenant.
    #[default]
    Sluice,
    /// Any Redis-protocol server: the bare command; request order is kept
    /// at the router, by the order in which sub-requests enter the shard's
    /// pipeline.
    Redis,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    pub name: String,
    pub addr: String,
    /// Slot ranges, e.g. `"0-5460"` or `"0-99,200-299"`.
    pub slots: String,
    #[serde(default)]
    pub kind: ShardKind,
    /// The shard's password, sent with `AUTH` on every new connection.
    pub password: Option<String>,
}

impl ShardConfig {
    /// Its `slots`, parsed.
    pub fn ranges(&self) -> Result<SlotRanges, ConfigError> {
        self.slots
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("shard {:?}: {e}", self.name)))
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Nodes asked for the slot map (`CLUSTER SLOTS`), in turn.
    pub seeds: Vec<String>,
    pub password: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Sub-requests at a shard at once; for `sluice serve`, also its
    /// connections, at most. `sluice serve` runs a connection's commands
    /// one at a time, so a shard has as many sub-requests to order as the
    /// router has connections to it: at least the client concurrency it
    /// must carry. A Redis shard gets one pipelined connection whatever
    /// this is.
    pub size: usize,
    /// Which waiting sub-request goes to the shard first when `size` are
    /// there already: `coop` (lowest request id, the request order of the
    /// cooperative scheduler) or `fifo`.
    pub order: String,
    pub connect_timeout_ms: u64,
    /// A shard that has not answered a sub-request in this long is
    /// reported as failing for that request.
    pub reply_timeout_ms: u64,
    /// Time budget of every request, sent with its sub-requests; none if
    /// unset.
    pub budget_ms: Option<f64>,
    /// Clients watching keys (from WATCH to EXEC) on one shard at once:
    /// each holds a connection to the shard of its own, where the shard
    /// keeps its watch. One more WATCH is refused, naming this bound. The
    /// router's open-file budget holds these beside the pools, so a large
    /// bound takes places from clients where the limit is low.
    pub max_watching: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            size: 64,
            order: "coop".into(),
            connect_timeout_ms: 1000,
            reply_timeout_ms: 30_000,
            budget_ms: None,
            max_watching: 64,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub listen: String,
    pub admin: Option<String>,
    #[serde(default, rename = "shard")]
    pub shards: Vec<ShardConfig>,
    pub cluster: Option<ClusterConfig>,
    #[serde(default)]
    pub pool: PoolConfig,
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<TenantConfig>,
    /// Largest request a client may send, in MiB (Redis's
    /// `proto-max-bulk-len` is 512); a transaction, sent whole to its shard
    /// at EXEC, is one request.
    #[serde(default = "default_max_request_mb")]
    pub max_request_mb: usize,
    /// Clients connected at once; one more is told
    /// "-ERR max number of clients reached" and closed, as redis-server
    /// does at `maxclients` (whose default this is). 0: no limit.
    #[serde(default = "default_max_clients")]
    pub max_clients: usize,
    /// The router steers its shards' compactions; absent, each shard
    /// compacts when it wants.
    pub compaction: Option<CompactionConfig>,
}

/// `[compaction]`: when the `sluice serve` shards compact, decided by the
/// router from every shard's debt and the width of the requests it splits
/// (sluice-core's compaction schedule).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionConfig {
    pub schedule: Schedule,
    /// How often the shards are read and the schedule decides.
    pub interval_ms: u64,
    /// Debt (MiB) from which a shard compacts whatever the schedule.
    pub debt_bound_mb: u64,
    /// Mean shards per request from which `auto` synchronizes.
    pub sync_width: f64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        let core = CompactionScheduleConfig::default();
        CompactionConfig {
            schedule: core.schedule,
            interval_ms: 250,
            debt_bound_mb: core.debt_bound >> 20,
            sync_width: core.sync_width,
        }
    }
}

impl CompactionConfig {
    /// The controller's settings.
    pub fn schedule(&self) -> CompactionScheduleConfig {
        CompactionScheduleConfig {
            schedule: self.schedule,
            debt_bound: self.debt_bound_mb << 20,
            sync_width: self.sync_width,
        }
    }
}

fn default_max_request_mb() -> usize {
    512
}

fn default_max_clients() -> usize {
    sluice_resp::MAX_CLIENTS
}

/// A tenant: the clients that give themselves its name, and the time
/// budget of each of their requests (TraQIOS's SLA deadline: the shards
/// order their I/O by it under `edf` or `traqios`). Its name is sent with
/// its sub-requests to `sluice serve` shards, which count its work apart.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    /// Time budget of each request; `pool.budget_ms` if unset.
    pub budget_ms: Option<f64>,
}

/// The largest `max_request_mb` accepted: 4 GiB, far above any request a
/// client should send, and far below what overflows when counted in bytes.
const MAX_REQUEST_MB: usize = 4096;

impl Config {
    /// Listening on `listen`, with no shards yet and every other setting
    /// at its default.
    pub fn new(listen: impl Into<String>) -> Config {
        Config {
            listen: listen.into(),
            admin: None,
            shards: Vec::new(),
            cluster: None,
            pool: PoolConfig::default(),
            tenants: Vec::new(),
            max_request_mb: default_max_request_mb(),
            max_clients: default_max_clients(),
            compaction: None,
        }
    }

    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        match (&self.cluster, self.shards.is_empty()) {
            (Some(_), false) => return invalid("give either [[shard]] entries or [cluster], not both"),
            (None, true) => return invalid("no shards: give [[shard]] entries or [cluster] seeds"),
            (Some(c), true) if c.seeds.is_empty() => return invalid("cluster.seeds is empty"),
            _ => {}
        }
        if self.pool.size == 0 {
            return invalid("pool.size must be at least 1");
        }
        if self.pool.connect_timeout_ms == 0 || self.pool.reply_timeout_ms == 0 {
            return invalid("pool.connect_timeout_ms and pool.reply_timeout_ms must be at least 1");
        }
        if !(1..=MAX_REQUEST_MB).contains(&self.max_request_mb) {
            return invalid(format!(
                "max_request_mb must lie in 1..={MAX_REQUEST_MB}, not {}",
                self.max_request_mb
            ));
        }
        self.order()?;
        if let Some(c) = &self.compaction {
            self.check_compaction(c)?;
        }
        let budgets = std::iter::once(("pool.budget_ms".to_string(), self.pool.budget_ms)).chain(
            self.tenants
                .iter()
                .map(|t| (format!("tenant {:?}: budget_ms", t.name), t.budget_ms)),
        );
        for (field, budget) in budgets {
            if let Some(b) = budget {
                if !(b > 0.0 && b.is_finite()) {
                    return invalid(format!("{field} must be a positive number of milliseconds, not {b}"));
                }
            }
        }
        for (i, t) in self.tenants.iter().enumerate() {
            if t.name.is_empty() || t.name.len() > 64 || !t.name.bytes().all(|b| b.is_ascii_graphic()) {
                return invalid(format!(
                    "tenant {:?}: a name is 1 to 64 printable ASCII characters without spaces",
                    t.name
                ));
            }
            if self.tenants[..i].iter().any(|u| u.name == t.name) {
                return invalid(format!("tenant {:?} is given twice", t.name));
            }
        }
        self.slot_owners().map(drop)
    }

    /// `[compaction]` steers `sluice serve` shards only: Redis has no such knob.
    fn check_compaction(&self, c: &CompactionConfig) -> Result<(), ConfigError> {
        if self.cluster.is_some() {
            return invalid(
                "[compaction] steers sluice serve shards; a Redis Cluster's nodes have no compaction to steer",
            );
        }
        if let Some(s) = self.shards.iter().find(|s| s.kind != ShardKind::Sluice) {
            return invalid(format!(
                "[compaction] steers sluice serve shards; shard {:?} is kind = \"redis\"",
                s.name
            ));
        }
        if !(10..=60_000).contains(&c.interval_ms) {
            return invalid(format!(
                "compaction.interval_ms must lie in 10..=60000, not {}",
                c.interval_ms
            ));
        }
        if !(1..=1 << 20).contains(&c.debt_bound_mb) {
            return invalid(format!(
                "compaction.debt_bound_mb must lie in 1..=1048576, not {}",
                c.debt_bound_mb
            ));
        }
        CompactionSchedule::new(c.schedule())
            .map(drop)
            .map_err(|e| ConfigError::Invalid(format!("compaction.{e}")))
    }

    /// The policy that orders waiting sub-requests at each shard.
    pub fn order(&self) -> Result<PolicySpec, ConfigError> {
        match PolicySpec::from_str(&self.pool.order) {
            Ok(spec @ (PolicySpec::Coop | PolicySpec::Fifo)) => Ok(spec),
            _ => invalid(format!(
                "pool.order must be \"coop\" or \"fifo\", not {:?}",
                self.pool.order
            )),
        }
    }

    /// For each slot, the index of its shard in `shards`: every slot
    /// exactly once. Empty in cluster mode.
    pub fn slot_owners(&self) -> Result<Vec<u16>, ConfigError> {
        if self.shards.is_empty() {
            return Ok(Vec::new());
        }
        let mut owner: Vec<Option<u16>> = vec![None; SLOTS as usize];
        for (i, shard) in self.shards.iter().enumerate() {
            if self.shards[..i].iter().any(|s| s.name == shard.name) {
                return invalid(format!("two shards are named {:?}", shard.name));
            }
            let ranges = shard.ranges()?;
            for &(lo, hi) in ranges.ranges() {
                for s in lo..=hi {
                    if let Some(other) = owner[s as usize] {
                        return invalid(format!(
                            "slot {s} is given to both shard {:?} and shard {:?}",
                            self.shards[other as usize].name, shard.name
                        ));
                    }
                    owner[s as usize] = Some(i as u16);
                }
            }
        }
        let missing: Vec<usize> = owner
            .iter()
            .enumerate()
            .filter(|(_, o)| o.is_none())
            .map(|(s, _)| s)
            .collect();
        if let Some(&first) = missing.first() {
            return invalid(format!(
                "{} slots have no shard (the first is slot {first}): every slot 0-{} needs one",
                missing.len(),
                SLOTS - 1
            ));
        }
        Ok(owner.into_iter().map(|o| o.unwrap_or_default()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_shards(a: &str, b: &str) -> String {
        format!(
            "listen = \"127.0.0.1:0\"\n[[shard]]\nname = \"a\"\naddr = \"x:1\"\nslots = \"{a}\"\n[[shard]]\nname = \"b\"\naddr = \"x:2\"\nslots = \"{b}\"\n"
        )
    }

    #[test]
    fn slots_are_covered_exactly_once() {
        let config = Config::from_toml(&two_shards("0-8191", "8192-16383")).unwrap();
        let owners = config.slot_owners().unwrap();
        assert_eq!((owners[0], owners[8191], owners[8192], owners[16383]), (0, 0, 1, 1));
        let e = Config::from_toml(&two_shards("0-8191", "8191-16383"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("slot 8191 is given to both shard \"a\" and shard \"b\""),
            "{e}"
        );
        let e = Config::from_toml(&two_shards("0-100", "200-16383"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("99 slots have no shard (the first is slot 101)"), "{e}");
        let e = Config::from_toml(&two_shards("0-16384", "1")).unwrap_err().to_string();
        assert!(e.contains("\"16384\" is not a slot"), "{e}");
        let e = Config::from_toml(&two_shards("9-3", "1")).unwrap_err().to_string();
        assert!(e.contains("runs backwards"), "{e}");
    }

    #[test]
    fn the_documented_example_parses() {
        let text = include_str!("../../../docs/route.example.toml");
        let config = Config::from_toml(text).unwrap();
        assert_eq!((config.shards.len(), config.pool.size), (2, 64));
        assert_eq!(config.admin.as_deref(), Some("127.0.0.1:6391"));
        assert!(config.compaction.is_none(), "steering is opt-in");
        // The commented [compaction] block, taken in, gives the defaults.
        let (head, block) = text.split_at(text.find("# [compaction]").unwrap());
        let block: String = block
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(setting) if setting.starts_with('[') || setting.contains(" = ") => setting,
                _ => "",
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let c = Config::from_toml(&format!("{head}{block}"))
            .unwrap()
            .compaction
            .unwrap();
        let d = CompactionConfig::default();
        assert_eq!(
            (c.schedule, c.interval_ms, c.debt_bound_mb, c.sync_width),
            (d.schedule, d.interval_ms, d.debt_bound_mb, d.sync_width)
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let base = two_shards("0-8191", "8192-16383");
        for (extra, what) in [
            ("[pool]\nsize = 0\n", "pool.size"),
            ("[pool]\norder = \"edf\"\n", "pool.order"),
            ("[pool]\nbudget_ms = -1.0\n", "pool.budget_ms"),
            (
                "[[tenant]]\nname = \"gold\"\nbudget_ms = 0.0\n",
                "tenant \"gold\": budget_ms",
            ),
            ("[[tenant]]\nname = \"a b\"\n", "tenant \"a b\""),
            ("[[tenant]]\nname = \"x\"\n[[tenant]]\nname = \"x\"\n", "given twice"),
            ("[cluster]\nseeds = [\"x:1\"]\n", "not both"),
            ("[pool]\nsise = 3\n", "unknown field `sise`"),
            ("[pool]\nreply_timeout_ms = 0\n", "pool.reply_timeout_ms"),
            ("max_request_mb = 0\n", "max_request_mb must lie in 1..=4096"),
        ] {
            // A top-level key goes before the tables, a table after them.
            let text = if extra.starts_with('[') {
                format!("{base}{extra}")
            } else {
                format!("{extra}{base}")
            };
            let e = Config::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(what), "{e} for {extra}");
        }
        let e = Config::from_toml("listen = \"x:1\"").unwrap_err().to_string();
        assert!(e.contains("no shards"), "{e}");
    }
}
