//! Crash safety: a child process writes synced batches of two keys (as a
//! server's MULTI/EXEC does) and acknowledges each on stdout; the parent
//! kills it with SIGKILL at a random moment (mid write, mid flush, mid
//! compaction), reopens the store, and finds every acknowledged batch, and
//! of the batch the kill cut short, both keys or neither. Many runs on one
//! directory, so recovery also runs on stores that earlier crashes left
//! behind.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options, WriteBatch};

const RUNS: usize = 100;
const DIR_VAR: &str = "SLUICE_KV_CRASH_DIR";
const START_VAR: &str = "SLUICE_KV_CRASH_START";

fn options(background: bool) -> Options {
    Options {
        memtable_bytes: 16 << 10,
        table_bytes: 16 << 10,
        block_bytes: 1024,
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: 4,
        l0_stop_trigger: 6,
        level_base_bytes: 64 << 10,
        level_multiplier: 4,
        background,
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

/// The other key of batch `i`.
fn twin(i: u64) -> Vec<u8> {
    format!("twin-{i:08}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 97) as usize)).into_bytes()
}

/// The child: writes keys from START on until it is killed.
#[test]
#[ignore = "the child process of kill_at_random_moments_loses_no_acknowledged_write"]
fn child_writer() {
    let (Ok(dir), Ok(start)) = (std::env::var(DIR_VAR), std::env::var(START_VAR)) else {
        return;
    };
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Db::open(rt, dir, options(true)).unwrap();
    let mut out = std::io::stdout().lock();
    for i in start.parse::<u64>().unwrap().. {
        let mut batch = WriteBatch::new();
        batch.put(key(i), value(i)).put(twin(i), value(i));
        db.write(batch).unwrap();
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
    }
}

/// Keys acknowledged in `output`: whole lines only (a line cut by the
/// kill may hold a number's prefix).
fn acknowledged(output: &str) -> Vec<u64> {
    output
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| l.trim_end().rsplit("ack ").next()?.parse().ok())
        .collect()
}

fn run_child(dir: &Path, start: u64, run_for: Duration) -> Vec<u64> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writer",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(DIR_VAR, dir)
        .env(START_VAR, start.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(run_for);
    child.kill().unwrap();
    child.wait().unwrap();
    let mut output = String::new();
    child.stdout.take().unwrap().read_to_string(&mut output).unwrap();
    acknowledged(&output)
}

#[test]
fn kill_at_random_moments_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let (mut next, mut rng, mut total) = (0u64, 0x853c49e6748fea9bu64, 0);
    for run in 0..RUNS {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let run_for = Duration::from_millis(20 + (rng >> 33) % 120);
        let acked = run_child(dir.path(), next, run_for);
        let db = Db::open(rt.clone(), dir.path(), options(false)).unwrap();
        for &i in &acked {
            assert_eq!(db.get(&key(i)).unwrap(), Some(value(i)), "run {run}: key {i} lost");
            assert_eq!(db.get(&twin(i)).unwrap(), Some(value(i)), "run {run}: twin {i} lost");
        }
        total += acked.len();
        next = acked.last().map_or(next, |&i| i + 1);
        // The batch in flight when the child died (and the next, should the
        // acknowledgement itself have been cut): whole or absent.
        let in_flight = next;
        for i in in_flight..in_flight + 2 {
            let (k, t) = (db.get(&key(i)).unwrap(), db.get(&twin(i)).unwrap());
            assert_eq!(k, t, "run {run}: batch {i} torn by the crash");
            if k.is_some() {
                next = i + 1;
            }
        }
    }
    assert!(total > RUNS, "the children acknowledged only {total} writes");
}
