//! N_i of TraQIOS (§2) for the store's requests: how many I/Os a request
//! is expected to make, learned from the store's own recent requests of
//! the same kind. The paper takes N_i from the query optimizer; a
//! key-value store has none, but each command's cost is regular: a point
//! read touches one block per level its key may be in (fewer when bloom
//! filters or the block cache answer), a range scan a number of blocks in
//! proportion to the records it returns. So each command name keeps a
//! moving average of the I/Os per *unit* of its requests (one key for a
//! point command, each key of `MGET`/`EXISTS`/`DEL`, each record a `RANGE`
//! may return), and a request's estimate is that rate times its units.
//!
//! Only requests with a deadline are estimated and learned from: without a
//! deadline a request has no slack for N to refine, and the estimates'
//! lock stays off the path of every other request.
//!
//! ```
//! use sluice_kv::io_estimate::IoEstimates;
//!
//! let est = IoEstimates::default();
//! let get = [b"GET".to_vec(), b"k".to_vec()];
//! assert_eq!(est.estimate(&get), 1, "nothing learned: one I/O a unit");
//! for _ in 0..50 {
//!     est.learn(&get, 3);
//! }
//! assert_eq!(est.estimate(&get), 3);
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

/// Weight of the newest request in the moving average: about the last ten
/// requests of a kind decide its estimate.
const ALPHA: f64 = 0.1;

/// The records a `RANGE` without a count returns (the command's default).
const RANGE_DEFAULT: usize = 100;

/// Learned I/Os per unit, by command name.
#[derive(Default)]
pub struct IoEstimates {
    rates: Mutex<HashMap<Vec<u8>, f64>>,
}

impl IoEstimates {
    /// N for the request `args` (its name first): at least 1.
    pub fn estimate(&self, args: &[Vec<u8>]) -> u32 {
        let name = name(args);
        let rate = self
            .rates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&name)
            .copied()
            .unwrap_or(1.0);
        (rate * units(&name, args) as f64)
            .ceil()
            .clamp(1.0, f64::from(u32::MAX)) as u32
    }

    /// The request `args` made `ios` I/Os.
    pub fn learn(&self, args: &[Vec<u8>], ios: u32) {
        let name = name(args);
        let per_unit = f64::from(ios) / units(&name, args) as f64;
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        // Command names come from clients: only known kinds are kept, so
        // that a flood of made-up names cannot grow the map.
        if rates.len() >= 256 && !rates.contains_key(&name) {
            return;
        }
        let rate = rates.entry(name).or_insert(per_unit);
        *rate += ALPHA * (per_unit - *rate);
    }
}

fn name(args: &[Vec<u8>]) -> Vec<u8> {
    args.first().map(|n| n.to_ascii_lowercase()).unwrap_or_default()
}

/// The units of a request `args` named `name` (lower case): records a
/// `RANGE` may return, keys of a multi-key command, else one.
fn units(name: &[u8], args: &[Vec<u8>]) -> usize {
    let rest = args.len().saturating_sub(1);
    let n = match name {
        b"range" => args
            .get(3)
            .and_then(|c| std::str::from_utf8(c).ok()?.parse().ok())
            .unwrap_or(RANGE_DEFAULT),
        b"mget" | b"exists" | b"del" | b"unlink" | b"touch" => rest,
        b"mset" => rest / 2,
        _ => 1,
    };
    n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn scans_are_estimated_by_the_records_they_may_return() {
        let est = IoEstimates::default();
        for _ in 0..100 {
            est.learn(&args(&["RANGE", "a", "z", "50"]), 5);
        }
        // 0.1 I/O a record, learned from scans of 50.
        assert_eq!(est.estimate(&args(&["range", "a", "z", "200"])), 20);
        assert_eq!(est.estimate(&args(&["RANGE", "a", "z"])), 10, "the default count");
        assert_eq!(est.estimate(&args(&["RANGE", "a", "z", "1"])), 1, "never below one");
    }

    #[test]
    fn multi_key_commands_count_their_keys_and_kinds_learn_apart() {
        let est = IoEstimates::default();
        est.learn(&args(&["MGET", "a", "b", "c", "d"]), 8);
        assert_eq!(est.estimate(&args(&["MGET", "x", "y"])), 4);
        assert_eq!(est.estimate(&args(&["GET", "x"])), 1, "GET has learned nothing");
    }

    #[test]
    fn made_up_command_names_do_not_grow_the_estimates_for_ever() {
        let est = IoEstimates::default();
        for i in 0..10_000 {
            est.learn(&args(&[&format!("cmd{i}"), "k"]), 1);
        }
        assert_eq!(est.rates.lock().unwrap().len(), 256);
    }
}
