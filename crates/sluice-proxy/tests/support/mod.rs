//! The integration tests' harness, real servers rather than mocks:
//! private PostgreSQL 15 and Redis 7 instances, the proxy on its own runtime
//! thread, psql and self-signed certificates, and small raw-protocol clients
//! for what psql and redis-cli cannot show (cancel packets, malformed bytes,
//! RESP3 replies, a slow TLS reader).

// Each test file uses only part of the harness.
#![allow(dead_code)]

pub mod certs;
pub mod pgwire;
pub mod proxy;
pub mod psql;
pub mod respwire;
pub mod servers;
pub mod service;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The path of a program the tests need. Under CI=true a missing program
/// fails the test (scripts/test.sh installs them all); elsewhere the test is
/// skipped with a note.
pub fn require(program: &str) -> Option<PathBuf> {
    let found = if program.contains('/') {
        Some(PathBuf::from(program)).filter(|p| p.is_file())
    } else {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    };
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{program} is missing under CI=true: scripts/test.sh installs postgresql-15, postgresql-client-15, redis-server, redis-tools and chromium");
        }
        eprintln!("skipping: {program} is not installed (scripts/test.sh installs it)");
    }
    found
}

/// Runs `command` with `stdin` fed to it, and its output captured.
pub fn run_with_stdin(mut command: Command, stdin: &str) -> Output {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())
        .unwrap_or_else(|e| panic!("feeding {program}: {e}"));
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {program}: {e}"))
}

/// Polls `found` every 50 ms until it gives a value, for at most 30 s.
pub fn wait_for<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = found() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
