//! A full disk: a child process whose files may not grow past a limit
//! (RLIMIT_FSIZE, so writes fail with EFBIG as they would with ENOSPC)
//! writes until the store refuses; the refusal must be an error returned
//! to the writer, not a crash; writes stay refused while the disk is full
//! and resume once space returns (the limit is lifted), without a
//! restart; and after a restart every acknowledged write is there.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_io::{Knobs, Runtime, RuntimeConfig};
use sluice_kv::{Db, Options};

const DIR_VAR: &str = "SLUICE_KV_FULL_DIR";
/// Below the memtable size, so the WAL is the file that fills up, in the
/// middle of a record.
const LIMIT: u64 = 128 << 10;
/// Writes acknowledged after space returns.
const AFTER: u64 = 100;

fn options() -> Options {
    Options::default()
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

/// Files of this process may not grow past `bytes` (the hard limit stays,
/// so that the limit can be lifted again).
fn limit_file_size(bytes: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on this process; SIGXFSZ is ignored so
    // that writes past the limit fail with EFBIG instead of killing us.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        lim.rlim_cur = bytes.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
}

fn outcome(r: sluice_kv::Result<()>) -> String {
    r.map_or_else(|e| e.to_string(), |()| "accepted".into())
}

#[test]
#[ignore = "the child process of a_full_disk_refuses_writes_until_space_returns_and_loses_nothing"]
fn child_fills_the_disk() {
    let Ok(dir) = std::env::var(DIR_VAR) else { return };
    tracing_subscriber::fmt()
        .with_env_filter("sluice_kv=debug")
        .with_writer(std::io::stdout)
        .with_ansi(false)
        .init();
    let db = Db::open(Runtime::new(RuntimeConfig::default()).unwrap(), &dir, options()).unwrap();
    // The flush that retries the failed WAL's memtable is held until the
    // test has seen writes refused, and then until nothing can be written.
    let flush = db.flush_task();
    flush.set_knobs(Knobs {
        paused: true,
        ..flush.knobs()
    });
    limit_file_size(LIMIT);
    let mut i = 0;
    loop {
        match db.put(&key(i), &[b'v'; 200]) {
            Ok(()) => println!("ack {i}"),
            Err(e) => {
                println!("refused {i}: {e}");
                break;
            }
        }
        i += 1;
    }
    let full_wal = std::fs::read_dir(&dir).unwrap().any(|e| {
        let e = e.unwrap();
        e.path().extension().is_some_and(|x| x == "wal") && e.metadata().unwrap().len() == LIMIT
    });
    println!("wal filled to the limit: {full_wal}");
    println!("then: {}", outcome(db.put(b"another", b"write")));
    limit_file_size(0);
    flush.set_knobs(Knobs {
        paused: false,
        ..flush.knobs()
    });
    // Time for the flush to fail and be retried; nothing can succeed.
    std::thread::sleep(Duration::from_millis(300));
    println!("while full: {}", outcome(db.put(b"another", b"write")));
    limit_file_size(u64::MAX);
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = db.put(&key(i), &[b'v'; 200]) {
        assert!(
            Instant::now() < deadline,
            "writes did not resume once space returned: {e}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("resumed at {i}");
    println!("ack {i}");
    for i in i + 1..=i + AFTER {
        db.put(&key(i), &[b'v'; 200]).unwrap();
        println!("ack {i}");
    }
}

#[test]
fn a_full_disk_refuses_writes_until_space_returns_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_fills_the_disk",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(DIR_VAR, dir.path())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the child failed: {text}");
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in: {text}"))
    };
    let refused = line("refused");
    assert!(refused.contains("File too large"), "{refused}");
    assert!(
        line("wal filled to the limit").ends_with("true"),
        "the WAL was not filled to the limit (a record cut in the middle)"
    );
    for refusal in [line("then:"), line("while full:")] {
        assert!(
            refusal.contains("writes are stopped") && refusal.contains("File too large"),
            "a write while the disk was full was not refused clearly: {refusal}"
        );
    }
    line("writes stopped: writing the WAL failed");
    line("failed: buffered write");
    line("writes resume");
    line("resumed at");
    let acked: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ack ")?.trim().parse().ok())
        .collect();
    assert!(
        acked.len() > 100 + AFTER as usize,
        "only {} writes acknowledged",
        acked.len()
    );
    let db = Db::open(Runtime::new(RuntimeConfig::default()).unwrap(), dir.path(), options()).unwrap();
    for &i in &acked {
        assert_eq!(db.get(&key(i)).unwrap(), Some(vec![b'v'; 200]), "key {i} lost");
    }
    db.put(b"after", b"restart").unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b"restart".to_vec()));
}
