//! A full disk: a child process whose files may not grow past a limit
//! (RLIMIT_FSIZE, so writes fail with EFBIG as they would with ENOSPC)
//! writes until the store refuses; the refusal must be an error returned
//! to the writer, not a crash, and after a restart without the limit every
//! acknowledged write is there and the store takes writes again.

use std::process::{Command, Stdio};

use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options};

const DIR_VAR: &str = "SLUICE_KV_FULL_DIR";
/// Below the memtable size, so the WAL is the file that fills up, in the
/// middle of a record.
const LIMIT: u64 = 128 << 10;

fn options() -> Options {
    Options::default()
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

fn limit_file_size(bytes: u64) {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: plain system calls on this process; SIGXFSZ is ignored so
    // that writes past the limit fail with EFBIG instead of killing us.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
}

#[test]
#[ignore = "the child process of a_full_disk_is_an_error_to_writers_and_loses_nothing"]
fn child_fills_the_disk() {
    let Ok(dir) = std::env::var(DIR_VAR) else { return };
    limit_file_size(LIMIT);
    let db = Db::open(Runtime::new(RuntimeConfig::default()).unwrap(), dir, options()).unwrap();
    for i in 0.. {
        match db.put(&key(i), &[b'v'; 200]) {
            Ok(()) => println!("ack {i}"),
            Err(e) => {
                println!("refused {i}: {e}");
                let again = db.put(b"another", b"write");
                println!("then: {}", again.map_or_else(|e| e.to_string(), |()| "accepted".into()));
                return;
            }
        }
    }
}

#[test]
fn a_full_disk_is_an_error_to_writers_and_loses_nothing() {
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
    assert!(out.status.success(), "the child crashed: {text}");
    let refused = text
        .lines()
        .find(|l| l.contains("refused"))
        .expect("the store never refused a write");
    assert!(refused.contains("File too large"), "{refused}");
    let then = text.lines().find(|l| l.contains("then:")).unwrap();
    assert!(
        !then.contains("accepted"),
        "a write after the failure was accepted: {then}"
    );
    let acked: Vec<u64> = text
        .lines()
        .filter_map(|l| l.rsplit("ack ").next()?.trim().parse().ok())
        .collect();
    assert!(acked.len() > 100, "only {} writes before the disk filled", acked.len());
    assert!(
        std::fs::read_dir(dir.path()).unwrap().any(|e| {
            let e = e.unwrap();
            e.path().extension().is_some_and(|x| x == "wal") && e.metadata().unwrap().len() == LIMIT
        }),
        "the WAL was not filled to the limit (a record cut in the middle)"
    );
    let db = Db::open(Runtime::new(RuntimeConfig::default()).unwrap(), dir.path(), options()).unwrap();
    for &i in &acked {
        assert_eq!(db.get(&key(i)).unwrap(), Some(vec![b'v'; 200]), "key {i} lost");
    }
    db.put(b"after", b"restart").unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b"restart".to_vec()));
}
