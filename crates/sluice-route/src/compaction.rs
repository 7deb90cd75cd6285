//! The router steers its shards' compactions (`[compaction]`): every
//! `interval_ms` it reads each `sluice serve` shard's compaction debt and
//! whether its compaction is paused (`INFO store background`), gives them
//! with the mean width of the requests it split meanwhile to sluice-core's
//! [`CompactionSchedule`], and sets `compaction-paused` (`CONFIG SET`) on
//! the shards it names. The decisions, with their reasons, go to a bounded
//! log and to counters that the admin port shows.
//!
//! The router sees what no shard does: how many shards each request waits
//! for. That is what decides whether the shards should compact together
//! (a request over every shard is then slowed once, not once per shard)
//! or one after another; the module doc of [`CompactionSchedule`] has the
//! rule.
//!
//! A paused compaction is never the store's only guard: once its L0
//! reaches the count at which writes stop, sluice-kv compacts whatever the
//! knob says. Still, a schedule should not outlive its router:
//! [`Steering::resume_all`] resumes every shard's compaction, and `sluice
//! route` calls it when it stops.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_core::controller::compaction_schedule::{
    CompactionSchedule, PauseDecision, Schedule, ScheduleObservation, ShardState, Why,
};
use sluice_resp::Reply;

use crate::config::CompactionConfig;
use crate::shard::Shard;

/// Decisions kept for `/stats`.
const LOG: usize = 200;

/// The steering's state, shared by its loop and the admin port.
pub struct Steering {
    config: CompactionConfig,
    inner: Mutex<Inner>,
}

struct Inner {
    schedule: CompactionSchedule,
    /// The router's request counts at the last decision.
    requests: u64,
    sub_requests: u64,
    /// Each shard as last read.
    seen: Vec<Option<ShardState>>,
    /// Why each shard could not be read at the last decision, if it
    /// could not: a warning is logged when this changes, not every
    /// interval.
    unread: Vec<Option<String>>,
    log: VecDeque<Logged>,
    /// Decisions by shard, reason and direction.
    totals: BTreeMap<(String, Why, bool), u64>,
}

/// One decision as the log keeps it.
#[derive(Clone, Debug, Serialize)]
pub struct Logged {
    /// Milliseconds since the router started.
    pub at_ms: u64,
    pub shard: String,
    pub paused: bool,
    pub why: Why,
    pub detail: String,
}

/// What `/stats` and `/metrics` show.
#[derive(Debug, Serialize)]
pub struct SteeringSnapshot {
    pub schedule: Schedule,
    /// The running window's schedule, if one runs.
    pub window: Option<Schedule>,
    /// Mean shards per request, as the schedule weighs it.
    pub width: Option<f64>,
    pub shards: Vec<ShardSteering>,
    pub decisions: Vec<Logged>,
    /// Decisions since start: shard, reason, paused, count.
    pub totals: Vec<(String, Why, bool, u64)>,
}

#[derive(Debug, Serialize)]
pub struct ShardSteering {
    pub name: String,
    /// `None` if the shard could not be read at the last decision.
    pub debt_bytes: Option<u64>,
    pub paused: Option<bool>,
}

impl Steering {
    /// The configuration was validated with the router's.
    pub fn new(config: CompactionConfig) -> Result<Steering, String> {
        let schedule = CompactionSchedule::new(config.schedule())?;
        Ok(Steering {
            config,
            inner: Mutex::new(Inner {
                schedule,
                requests: 0,
                sub_requests: 0,
                seen: Vec::new(),
                unread: Vec::new(),
                log: VecDeque::new(),
                totals: BTreeMap::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the schedule while the router runs; the next decision puts
    /// every shard in line with it.
    pub fn set_schedule(&self, schedule: Schedule) {
        let config = CompactionConfig {
            schedule,
            ..self.config.clone()
        };
        let mut inner = self.lock();
        // The settings were checked at start; only the schedule differs.
        if let Ok(s) = CompactionSchedule::new(config.schedule()) {
            inner.schedule = s;
        }
    }

    /// How often the router calls [`Steering::step`].
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.config.interval_ms)
    }

    /// One decision: read the `shards`, decide with the router's request
    /// counts so far (`requests`, `sub_requests`), apply, log at `uptime`.
    pub async fn step(&self, shards: &[Arc<Shard>], requests: u64, sub_requests: u64, uptime: Duration) {
        let mut reads = Vec::with_capacity(shards.len());
        for shard in shards {
            reads.push(match shard.control(&[&b"INFO"[..], b"store", b"background"]).await {
                Ok(Reply::Bulk(Some(text))) => read_state(&String::from_utf8_lossy(&text)),
                Ok(other) => Err(format!("answered INFO with {other:?}")),
                Err(e) => Err(e.to_string()),
            });
        }
        self.note_unread(shards, &reads);
        let seen: Vec<Option<ShardState>> = reads.into_iter().map(Result::ok).collect();
        let decisions = {
            let mut inner = self.lock();
            let obs = ScheduleObservation {
                shards: &seen,
                requests: requests.saturating_sub(inner.requests),
                sub_requests: sub_requests.saturating_sub(inner.sub_requests),
            };
            let decisions = inner.schedule.decide(&obs);
            (inner.requests, inner.sub_requests) = (requests, sub_requests);
            inner.seen = seen;
            decisions
        };
        for d in decisions {
            let shard = &shards[d.shard];
            let value: &[u8] = if d.paused { b"yes" } else { b"no" };
            match shard.control(&[b"CONFIG", b"SET", b"compaction-paused", value]).await {
                Ok(Reply::Simple(_)) => self.record(uptime, &shard.name, d),
                Ok(other) => tracing::warn!(
                    "compaction steering: shard {} refused CONFIG SET: {other:?}",
                    shard.name
                ),
                Err(e) => tracing::warn!("compaction steering: {e}"),
            }
        }
    }

    /// Logs a shard that can no longer be read, and one that can again.
    fn note_unread(&self, shards: &[Arc<Shard>], reads: &[Result<ShardState, String>]) {
        let mut inner = self.lock();
        inner.unread.resize(shards.len(), None);
        for (i, (shard, read)) in shards.iter().zip(reads).enumerate() {
            match (read, &inner.unread[i]) {
                (Err(e), None) => tracing::warn!("compaction steering: shard {}: {e}; it is left as it is", shard.name),
                (Ok(_), Some(_)) => tracing::warn!("compaction steering: shard {} can be read again", shard.name),
                _ => {}
            }
            inner.unread[i] = read.as_ref().err().cloned();
        }
    }

    fn record(&self, uptime: Duration, shard: &str, d: PauseDecision) {
        tracing::info!(
            "compaction steering: shard {shard} {} ({}: {})",
            if d.paused { "paused" } else { "resumed" },
            d.why,
            d.detail
        );
        let mut inner = self.lock();
        if let Some(Some(s)) = inner.seen.get_mut(d.shard) {
            s.paused = d.paused;
        }
        *inner.totals.entry((shard.to_string(), d.why, d.paused)).or_default() += 1;
        if inner.log.len() == LOG {
            inner.log.pop_front();
        }
        inner.log.push_back(Logged {
            at_ms: uptime.as_millis() as u64,
            shard: shard.to_string(),
            paused: d.paused,
            why: d.why,
            detail: d.detail,
        });
    }

    /// Resumes every shard's compaction, waiting at most `within` in all:
    /// the router leaves no shard paused behind it.
    pub async fn resume_all(shards: &[Arc<Shard>], within: Duration) {
        let deadline = Instant::now() + within;
        for shard in shards {
            let resume = shard.control(&[b"CONFIG", b"SET", b"compaction-paused", b"no"]);
            match tokio::time::timeout_at(deadline.into(), resume).await {
                Ok(Ok(Reply::Simple(_))) => {}
                Ok(Ok(other)) => tracing::warn!("shard {} refused to resume compaction: {other:?}", shard.name),
                Ok(Err(e)) => tracing::warn!("resuming compaction: {e}"),
                Err(_) => tracing::warn!("resuming compaction: shard {} did not answer in time", shard.name),
            }
        }
    }

    /// Decisions applied since start.
    pub fn applied(&self) -> u64 {
        self.lock().totals.values().sum()
    }

    /// The state as of the last decision; `names` are the shards', in
    /// order.
    pub fn snapshot(&self, names: Vec<String>) -> SteeringSnapshot {
        let inner = self.lock();
        SteeringSnapshot {
            schedule: inner.schedule.config().schedule,
            window: inner.schedule.window(),
            width: inner.schedule.width(),
            shards: names
                .into_iter()
                .enumerate()
                .map(|(i, name)| {
                    let s = inner.seen.get(i).copied().flatten();
                    ShardSteering {
                        name,
                        debt_bytes: s.map(|s| s.debt),
                        paused: s.map(|s| s.paused),
                    }
                })
                .collect(),
            decisions: inner.log.iter().cloned().collect(),
            totals: inner
                .totals
                .iter()
                .map(|((shard, why, paused), n)| (shard.clone(), *why, *paused, *n))
                .collect(),
        }
    }
}

/// A shard's debt (`pending_compaction_bytes`), knob (`paused=` on the
/// `compaction:` line) and room in L0 (`l0_slowdown_tables` less
/// `level0:tables=`) from its INFO text.
fn read_state(info: &str) -> Result<ShardState, String> {
    let field = |prefix: &str| info.lines().find_map(|l| l.strip_prefix(prefix));
    let number = |name: &str, text: Option<&str>| -> Result<u64, String> {
        text.ok_or(format!("no {name} in its INFO: is it sluice serve?"))?
            .trim()
            .parse()
            .map_err(|e| format!("{name}: {e}"))
    };
    let debt = number("pending_compaction_bytes", field("pending_compaction_bytes:"))?;
    let paused = field("compaction:")
        .and_then(|l| l.split(',').find_map(|kv| kv.strip_prefix("paused=")))
        .ok_or("no compaction task in its INFO")?;
    let tables = field("level0:tables=").and_then(|l| l.split(',').next());
    let tables = number("level0 tables", tables)?;
    let slowdown = number("l0_slowdown_tables", field("l0_slowdown_tables:"))?;
    Ok(ShardState {
        debt,
        paused: paused.trim() == "true",
        stall_in: slowdown.saturating_sub(tables).try_into().unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_state_is_read_from_its_info() {
        let info =
            "# Store\r\nlevel0:tables=5,bytes=1\r\nl0_slowdown_tables:8\r\npending_compaction_bytes:16777216\r\n\
                    # Background\r\nflush:bytes=0,ios=0,backlog_bytes=0,rate_bytes=unlimited,paused=false\r\n\
                    compaction:bytes=5,ios=1,backlog_bytes=0,rate_bytes=unlimited,paused=true\r\n";
        assert_eq!(
            read_state(info),
            Ok(ShardState {
                debt: 16 << 20,
                paused: true,
                stall_in: 3
            })
        );
        let refused = |text: &str| read_state(text).unwrap_err();
        assert!(refused("redis_version:7.0.15\r\n").contains("sluice serve"));
        assert!(refused("pending_compaction_bytes:x\r\n").contains("pending_compaction_bytes"));
        assert!(refused("pending_compaction_bytes:1\r\n").contains("compaction task"));
        assert!(refused(&info.replace("l0_slowdown_tables:8\r\n", "")).contains("l0_slowdown_tables"));
    }
}
