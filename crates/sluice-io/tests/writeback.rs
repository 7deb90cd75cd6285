//! RCP's caching layer: a non-critical writer cannot hold more than its
//! small share of the dirty budget, a critical writer may hold its large
//! one, and sync writes everything back.

use sluice_core::Ctx;
use sluice_io::{enter, RcpConfig, Runtime, RuntimeConfig, TaskKind};

/// 1 MB of dirty budget: critical writers may leave 200 KB, non-critical 10 KB.
fn runtime(split_dirty: bool) -> Runtime {
    Runtime::new(RuntimeConfig {
        rcp: RcpConfig {
            dirty_budget_mb: 1.0,
            split_dirty,
            ..RcpConfig::default()
        },
        ..RuntimeConfig::default()
    })
    .unwrap()
}

const BLOCK: usize = 4096;

/// Writes 64 blocks buffered; returns the most dirty data seen.
fn peak_dirty(rt: &Runtime, f: &sluice_io::SluiceFile) -> u64 {
    (0..64u64)
        .map(|i| {
            f.write_buffered(&[i as u8; BLOCK], i * BLOCK as u64).unwrap();
            rt.dirty_bytes()
        })
        .max()
        .unwrap()
}

#[test]
fn noncritical_writers_are_held_to_their_share() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(true);
    let f = rt.open(dir.path().join("bg"), true).unwrap();
    let bg = rt.register_background("flush", TaskKind::Flush);
    let _g = bg.enter();
    let peak = peak_dirty(&rt, &f);
    assert!(peak <= 10_000, "non-critical dirty peaked at {peak}");
    assert!(bg.stats().bytes > 200_000, "it wrote back as it went");
}

#[test]
fn critical_writers_keep_the_large_share_and_sync_writes_back() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(true);
    let f = rt.open(dir.path().join("fg"), true).unwrap();
    let _req = enter(Ctx::new(1, 0));
    let peak = peak_dirty(&rt, &f);
    assert!(peak > 10_000 && peak <= 200_000, "critical dirty peaked at {peak}");
    f.sync().unwrap();
    assert_eq!(rt.dirty_bytes(), 0);
    let mut back = [0u8; BLOCK];
    f.read_at(&mut back, 63 * BLOCK as u64).unwrap();
    assert_eq!(back, [63u8; BLOCK]);
}

#[test]
fn without_the_split_background_writers_fill_the_large_share() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(false);
    let f = rt.open(dir.path().join("bg"), true).unwrap();
    let bg = rt.register_background("flush", TaskKind::Flush);
    let _g = bg.enter();
    let peak = peak_dirty(&rt, &f);
    assert!(peak > 100_000, "non-critical dirty peaked at only {peak}");
}
