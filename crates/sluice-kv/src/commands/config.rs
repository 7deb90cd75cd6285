//! `CONFIG GET` and `CONFIG SET`: the knobs of the store's background
//! tasks, which an operator or a controller that sees more than this node
//! turns while they run (flush, compaction and the expiry sweeper: a
//! byte rate and an I/O rate, 0 for none; pause; critical, which runs
//! their I/O as foreground work); `shard-slots`, the hash slots this store
//! serves behind `sluice route` (ranges such as `0-5460,16000`; empty: no
//! slots are checked), which the router sets on connecting; and,
//! read-only, the few of Redis's parameters that tools ask
//! for on connecting (`appendonly`, `appendfsync`, `save`, `databases`,
//! `maxclients`).
//!
//! A paused compaction starts no merge and holds a running one between its
//! I/Os, until L0 reaches the count at which writes stop: then it runs
//! whatever its knobs say, so that a pause left behind cannot stop writes
//! for good.
//!
//! As in Redis 7: GET takes several glob patterns (case-insensitive) and
//! answers a map (a flat list in RESP2); SET takes several parameters and
//! applies all of them or, if any is refused, none.

use std::sync::Arc;

use sluice_io::{Background, Knobs};
use sluice_resp::slot::SlotRanges;

use crate::glob::glob_match;
use crate::resp::Reply;
use crate::shared::Shared;

/// Which knob of a background task a parameter is.
#[derive(Clone, Copy)]
enum Knob {
    RateBytes,
    RateIops,
    Paused,
    Critical,
}

/// Which of the store's background tasks.
#[derive(Clone, Copy)]
enum Task {
    Flush,
    Compaction,
    Expiry,
}

/// Every task, in the order of their discriminants.
const TASKS: [Task; 3] = [Task::Flush, Task::Compaction, Task::Expiry];

/// What a parameter names.
#[derive(Clone, Copy)]
enum Parameter {
    Knob(Task, Knob),
    /// Redis's parameter, as this store answers it; it cannot be set.
    Fixed(fn(&Shared) -> String),
    /// `shard-slots`.
    ShardSlots,
}

const PARAMETERS: &[(&str, Parameter)] = &[
    ("appendfsync", Parameter::Fixed(|s| yes_no(s, "always", "no"))),
    ("appendonly", Parameter::Fixed(|s| yes_no(s, "yes", "no"))),
    ("compaction-critical", Parameter::Knob(Task::Compaction, Knob::Critical)),
    ("compaction-paused", Parameter::Knob(Task::Compaction, Knob::Paused)),
    (
        "compaction-rate-bytes",
        Parameter::Knob(Task::Compaction, Knob::RateBytes),
    ),
    (
        "compaction-rate-iops",
        Parameter::Knob(Task::Compaction, Knob::RateIops),
    ),
    ("databases", Parameter::Fixed(|_| "1".into())),
    ("expiry-critical", Parameter::Knob(Task::Expiry, Knob::Critical)),
    ("expiry-paused", Parameter::Knob(Task::Expiry, Knob::Paused)),
    ("expiry-rate-bytes", Parameter::Knob(Task::Expiry, Knob::RateBytes)),
    ("expiry-rate-iops", Parameter::Knob(Task::Expiry, Knob::RateIops)),
    ("flush-critical", Parameter::Knob(Task::Flush, Knob::Critical)),
    ("flush-paused", Parameter::Knob(Task::Flush, Knob::Paused)),
    ("flush-rate-bytes", Parameter::Knob(Task::Flush, Knob::RateBytes)),
    ("flush-rate-iops", Parameter::Knob(Task::Flush, Knob::RateIops)),
    ("maxclients", Parameter::Fixed(|s| s.options.max_clients.to_string())),
    ("save", Parameter::Fixed(|_| String::new())),
    ("shard-slots", Parameter::ShardSlots),
];

/// The WAL is synced before each write is acknowledged (`appendfsync
/// always`), unless the server was started with `--no-sync`.
fn yes_no(shared: &Shared, synced: &str, not: &str) -> String {
    if shared.db.options().sync { synced } else { not }.into()
}

fn task(shared: &Shared, task: Task) -> &Arc<Background> {
    match task {
        Task::Flush => shared.db.flush_task(),
        Task::Compaction => shared.db.compaction_task(),
        Task::Expiry => &shared.expiry_task,
    }
}

/// A knob's value as CONFIG GET shows it.
fn show(knobs: &Knobs, knob: Knob) -> String {
    let rate = |r: Option<f64>| r.map_or(0, |r| r.round() as u64).to_string();
    let flag = |b: bool| if b { "yes" } else { "no" }.to_string();
    match knob {
        Knob::RateBytes => rate(knobs.rate_bytes),
        Knob::RateIops => rate(knobs.rate_iops),
        Knob::Paused => flag(knobs.paused),
        Knob::Critical => flag(knobs.critical),
    }
}

/// Sets `knob` from `value`, or says why it cannot.
fn assign(knobs: &mut Knobs, knob: Knob, value: &[u8]) -> Result<(), &'static str> {
    let rate = || match std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok()) {
        Some(0) => Ok(None),
        Some(r) => Ok(Some(r as f64)),
        None => Err("argument couldn't be parsed into an integer"),
    };
    let flag = || match value.to_ascii_lowercase().as_slice() {
        b"yes" => Ok(true),
        b"no" => Ok(false),
        _ => Err("argument must be 'yes' or 'no'"),
    };
    match knob {
        Knob::RateBytes => knobs.rate_bytes = rate()?,
        Knob::RateIops => knobs.rate_iops = rate()?,
        Knob::Paused => knobs.paused = flag()?,
        Knob::Critical => knobs.critical = flag()?,
    }
    Ok(())
}

/// `CONFIG GET pattern...`, `CONFIG SET parameter value...`.
pub(super) fn config(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let sub = args[0].to_ascii_lowercase();
    match (sub.as_slice(), &args[1..]) {
        (b"get", patterns) if !patterns.is_empty() => get(shared, patterns),
        (b"set", pairs) if !pairs.is_empty() && pairs.len() % 2 == 0 => set(shared, pairs),
        (b"get" | b"set", _) => Reply::error(format!(
            "wrong number of arguments for 'config|{}' command",
            String::from_utf8_lossy(&sub)
        )),
        _ => Reply::error(format!(
            "unknown subcommand '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

fn get(shared: &Shared, patterns: &[Vec<u8>]) -> Reply {
    let pairs = PARAMETERS
        .iter()
        .filter(|(name, _)| {
            patterns
                .iter()
                .any(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
        })
        .map(|&(name, parameter)| {
            let value = match parameter {
                Parameter::Knob(t, knob) => show(&task(shared, t).knobs(), knob),
                Parameter::Fixed(value) => value(shared),
                Parameter::ShardSlots => shared.shard_slots().map(|s| s.to_string()).unwrap_or_default(),
            };
            (Reply::Bulk(Some(name.into())), Reply::Bulk(Some(value.into_bytes())))
        })
        .collect();
    Reply::Map(pairs)
}

fn set(shared: &Shared, pairs: &[Vec<u8>]) -> Reply {
    let refused = |name: &[u8], why: &str| {
        Reply::error(format!(
            "CONFIG SET failed (possibly related to argument '{}') - {why}",
            String::from_utf8_lossy(name)
        ))
    };
    // Every parameter is checked before any is set.
    let mut knobs = TASKS.map(|t| task(shared, t).knobs());
    let mut slots = None;
    let mut seen = Vec::new();
    for pair in pairs.chunks(2) {
        let name = pair[0].to_ascii_lowercase();
        let Some(&(known, parameter)) = PARAMETERS.iter().find(|(n, _)| n.as_bytes() == name) else {
            return Reply::error(format!(
                "Unknown option or number of arguments for CONFIG SET - '{}'",
                String::from_utf8_lossy(&pair[0])
            ));
        };
        if seen.contains(&known) {
            return refused(&pair[0], "duplicate parameter");
        }
        seen.push(known);
        match parameter {
            Parameter::Knob(t, knob) => {
                if let Err(why) = assign(&mut knobs[t as usize], knob, &pair[1]) {
                    return refused(&pair[0], why);
                }
            }
            Parameter::ShardSlots => match shard_slots(&pair[1]) {
                Ok(parsed) => slots = Some(parsed),
                Err(why) => return refused(&pair[0], &why),
            },
            Parameter::Fixed(_) => return refused(&pair[0], "can't set immutable config"),
        }
    }
    for (t, k) in TASKS.into_iter().zip(knobs) {
        task(shared, t).set_knobs(k);
    }
    if let Some(slots) = slots {
        shared.set_shard_slots(slots);
    }
    Reply::ok()
}

/// `shard-slots`' value: ranges of slots, or empty for none.
fn shard_slots(value: &[u8]) -> Result<Option<SlotRanges>, String> {
    let text =
        std::str::from_utf8(value).map_err(|_| "argument must be slot ranges such as 0-5460,16000".to_string())?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    text.parse().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_sorted_and_unique() {
        assert!(PARAMETERS.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn knobs_parse_as_redis_parameters_do() {
        let mut k = Knobs::default();
        assign(&mut k, Knob::RateBytes, b"1048576").unwrap();
        assert_eq!(
            (k.rate_bytes, show(&k, Knob::RateBytes).as_str()),
            (Some(1048576.0), "1048576")
        );
        assign(&mut k, Knob::RateBytes, b"0").unwrap();
        assert_eq!((k.rate_bytes, show(&k, Knob::RateBytes).as_str()), (None, "0"));
        assert!(assign(&mut k, Knob::RateIops, b"-5").is_err());
        assign(&mut k, Knob::Paused, b"YES").unwrap();
        assert_eq!(show(&k, Knob::Paused), "yes");
        assert_eq!(
            assign(&mut k, Knob::Critical, b"1"),
            Err("argument must be 'yes' or 'no'")
        );
    }
}
