//! The expiry sweeper: Redis's active expiry, as the server's `expiry`
//! background task.
//!
//! A value past its deadline is invisible from that moment (lazy expiry,
//! see [`crate::keyspace`]), and compaction drops the expired strings and
//! hashes it rewrites. A key that nobody touches again, in tables that are
//! not compacted, would keep its space, and the members of a sorted set
//! and the elements of a list are never dropped by compaction. Redis
//! reclaims such keys with a cycle that samples its index of keys with a
//! deadline. This store keeps no such index (a deadline travels inside its
//! value, so that a read costs one lookup), so the sweeper walks the user
//! keys in key order, [`STEP`] entries at a time, and deletes every value
//! whose deadline has passed, a sorted set with its members and a list
//! with its elements.
//!
//! It runs as a sluice-io background task, so an operator or a controller
//! turns it as it turns flush and compaction (`CONFIG SET
//! expiry-rate-bytes`, `expiry-paused`, ...): its reads are non-critical
//! I/O, throttled by its rates and held while it is paused. It rests
//! [`STEP_PAUSE`] between steps, which bounds what a walk over values in
//! memory costs the cores (at most about 25,000 entries a second); after
//! a walk that met no value with a deadline it waits twice as long as
//! before the next, up to [`IDLE_MAX`], so a store without expiring keys
//! pays little. Its backlog is what the last whole walk reclaimed:
//! the work it expects of the next.
//!
//! A deletion takes the key's write stripe and reads the value again, so a
//! key written since the step read it is left alone. It moves no `WATCH`
//! count: the value was already invisible, so nothing a command could see
//! changes (Redis, likewise, does not abort a transaction whose watched key
//! was already expired when it was watched and is then deleted). It is
//! not synced on its own: if a crash loses it, the value comes back
//! expired and invisible, and the next walk deletes it again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_resp::Reply;

use crate::commands::delete_value;
use crate::keyspace::{decode_value, is_live, now_ms, RESERVED};
use crate::shared::Shared;
use crate::WriteBatch;

/// Entries read per step.
pub(crate) const STEP: usize = 128;
/// Rest between steps.
const STEP_PAUSE: Duration = Duration::from_millis(5);
/// Wait before the next walk after one that met values with a deadline.
const BUSY_INTERVAL: Duration = Duration::from_secs(1);
/// Longest wait between walks of a store without expiring values. A walk
/// of a large store takes far longer than this (its steps are paced); a
/// small store's walk costs little, so the wait need not be long either.
const IDLE_MAX: Duration = Duration::from_secs(16);
/// How often a paused sweeper looks at its knobs again.
const PAUSE_RECHECK: Duration = Duration::from_millis(50);

/// What one step did.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Step {
    /// Where the next step starts; `None`: the walk has reached the end.
    pub next: Option<Vec<u8>>,
    /// Values with a deadline met, expired or not.
    pub with_deadline: u64,
    /// Expired values deleted.
    pub deleted: u64,
    /// Their stored bytes.
    pub bytes: u64,
}

/// Reads up to [`STEP`] user keys from `from` on and deletes those whose
/// deadline has passed at `now` (unix ms).
pub(crate) fn step(shared: &Shared, from: &[u8], now: u64) -> Result<Step, String> {
    let entries = shared
        .db
        .scan(from, Some(&[RESERVED]), STEP)
        .map_err(|e| e.to_string())?;
    // A full step may have left keys behind; the least key after its last
    // is that key with a zero byte appended.
    let next = match entries.last() {
        Some((last, _)) if entries.len() == STEP => Some([last.as_slice(), &[0]].concat()),
        _ => None,
    };
    let mut done = Step {
        next,
        ..Step::default()
    };
    for (key, value) in &entries {
        let Some((_, _, Some(deadline))) = decode_value(value) else {
            continue;
        };
        done.with_deadline += 1;
        if is_live(Some(deadline), now) {
            continue;
        }
        if let Some(bytes) = reclaim(shared, key, now)? {
            done.deleted += 1;
            done.bytes += bytes;
        }
    }
    Ok(done)
}

/// Deletes the value at `key` if it is still expired at `now`; its stored
/// size if it was.
fn reclaim(shared: &Shared, key: &[u8], now: u64) -> Result<Option<u64>, String> {
    let _held = shared.locks.lock(shared.locks.stripes_of([key]));
    let Some(value) = shared.db.get(key).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let Some((tag, body, deadline)) = decode_value(&value) else {
        return Ok(None);
    };
    if is_live(deadline, now) {
        return Ok(None);
    }
    let mut batch = WriteBatch::new();
    delete_value(shared, key, tag, body, &mut batch).map_err(|r| match r {
        Reply::Error(e) => e,
        other => format!("{other:?}"),
    })?;
    shared.db.apply(batch).map_err(|e| e.to_string())?;
    Ok(Some(value.len() as u64))
}

/// Starts the sweeper's thread, which walks for as long as the process
/// runs.
pub(crate) fn spawn(shared: Arc<Shared>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("sluice-kv expiry".into())
        .spawn(move || sweep(&shared))
        .map(drop)
}

fn sweep(shared: &Shared) {
    let task = shared.expiry_task.clone();
    let _working = task.enter();
    // The first walk waits too, so that an operator (or a benchmark that
    // wants the device to itself) can pause the sweeper before it starts.
    let mut wait = BUSY_INTERVAL;
    loop {
        std::thread::sleep(wait);
        let (mut from, mut met, mut reclaimed) = (Vec::new(), 0, 0);
        let walked = loop {
            while task.knobs().paused && !task.knobs().critical {
                std::thread::sleep(PAUSE_RECHECK);
            }
            match step(shared, &from, now_ms()) {
                Ok(s) => {
                    met += s.with_deadline;
                    reclaimed += s.bytes;
                    shared.expired_keys.fetch_add(s.deleted, Ordering::Relaxed);
                    match s.next {
                        Some(next) => from = next,
                        None => break true,
                    }
                }
                Err(e) => {
                    tracing::warn!("expiry sweep stopped at a step: {e}; the next walk starts over");
                    break false;
                }
            }
            std::thread::sleep(STEP_PAUSE);
        };
        if walked {
            task.set_backlog(reclaimed);
        }
        wait = if walked && met > 0 {
            BUSY_INTERVAL
        } else {
            (wait * 2).min(IDLE_MAX)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{execute, Session};

    fn shared() -> (Shared, tempfile::TempDir) {
        Shared::for_test()
    }

    fn run(shared: &Shared, line: &str) -> Reply {
        let args: Vec<Vec<u8>> = line.split_whitespace().map(|w| w.as_bytes().to_vec()).collect();
        execute(shared, &mut Session::new(1, 0, true), &args)
    }

    /// Every raw entry of the store, internal ones included.
    fn stored_keys(shared: &Shared) -> Vec<Vec<u8>> {
        shared
            .db
            .scan(&[], None, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// A walk from the first key to the end at `now`, step by step.
    fn walk(shared: &Shared, now: u64) -> Step {
        let (mut from, mut total) = (Vec::new(), Step::default());
        loop {
            let s = step(shared, &from, now).unwrap();
            total.with_deadline += s.with_deadline;
            total.deleted += s.deleted;
            total.bytes += s.bytes;
            match s.next {
                Some(next) => from = next,
                None => return total,
            }
        }
    }

    #[test]
    fn expired_values_of_every_type_go_with_their_members_and_the_rest_stay() {
        let (shared, _dir) = shared();
        for line in [
            "SET s v PX 100000",
            "HSET h f v",
            "PEXPIRE h 100000",
            "ZADD z 1 m 2 n",
            "PEXPIRE z 100000",
            "RPUSH l a b c",
            "PEXPIRE l 100000",
            "SET lasting v PX 900000",
            "SET forever v",
            "ZADD kept 1 m",
        ] {
            assert!(!matches!(run(&shared, line), Reply::Error(_)), "{line}");
        }
        let before = stored_keys(&shared).len();
        // A fake clock: 200 s from now, past three deadlines, not the fourth.
        let later = now_ms() + 200_000;
        let done = walk(&shared, later);
        assert_eq!((done.with_deadline, done.deleted), (5, 4));
        assert!(done.bytes > 0);
        let left = stored_keys(&shared);
        // s, h, z with its two members twice (member and score index), and
        // l with its three elements are gone.
        assert_eq!(left.len(), before - 11, "{left:?}");
        for key in ["lasting", "forever", "kept"] {
            assert!(left.iter().any(|k| k == key.as_bytes()), "{key} kept");
        }
        assert_eq!(run(&shared, "ZCARD kept"), Reply::Integer(1));
        assert_eq!(walk(&shared, later).deleted, 0, "nothing left to reclaim");
    }

    #[test]
    fn a_walk_spans_many_steps_and_misses_no_key() {
        let (shared, _dir) = shared();
        let keys = 3 * STEP + 7;
        for i in 0..keys {
            run(&shared, &format!("SET key:{i:05} v PX 100000"));
            run(&shared, &format!("SET other:{i:05} v"));
        }
        let done = walk(&shared, now_ms() + 200_000);
        assert_eq!((done.with_deadline, done.deleted), (keys as u64, keys as u64));
        assert_eq!(
            stored_keys(&shared).len(),
            keys,
            "only the keys without a deadline are left"
        );
    }

    #[test]
    fn a_key_made_live_again_is_left_alone() {
        let (shared, _dir) = shared();
        run(&shared, "SET k v PX 100000");
        let later = now_ms() + 200_000;
        // Written again after a step read it as expired: live at `later`.
        run(&shared, "SET k fresh");
        assert_eq!(reclaim(&shared, b"k", later), Ok(None));
        assert_eq!(reclaim(&shared, b"missing", later), Ok(None));
        assert_eq!(run(&shared, "GET k"), Reply::Bulk(Some(b"fresh".to_vec())));
    }
}
