//! RCP's caching layer: a non-critical writer cannot hold more than its
//! small share of the dirty budget, a critical writer may hold its large
//! one, and sync writes everything back.

use sluice_core::device::{DeviceProfile, SsdConfig};
use sluice_core::Ctx;
use sluice_io::{enter, DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig, TaskKind};

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

/// Many background writers over their small share at once write back each
/// other's files; none may deadlock, and every byte must reach its file.
/// (On the emulated SSD, as in `sluice bench io`, where a lock-order
/// inversion between the dirty-file list and a file's ranges hung.)
#[test]
fn concurrent_writers_over_their_share_finish_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig {
        device: DeviceConfig {
            kind: DeviceKind::Emulated,
            depth: 32,
            profile: Some(DeviceProfile::Ssd(SsdConfig::default())),
        },
        ..runtime(false).config().clone()
    })
    .unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (writers, blocks) = (128u64, 64u64);
    for w in 0..writers {
        let (rt, path, done) = (rt.clone(), dir.path().join(format!("bg-{w}")), done_tx.clone());
        std::thread::spawn(move || {
            let bg = rt.register_background(format!("writer-{w}"), TaskKind::Compaction);
            let _g = bg.enter();
            let f = rt.open(&path, true).unwrap();
            for i in 0..blocks {
                f.write_buffered(&[(w + i) as u8; BLOCK], i * BLOCK as u64).unwrap();
                if i % 16 == 15 {
                    f.sync().unwrap();
                }
            }
            done.send(()).unwrap();
        });
    }
    for _ in 0..writers {
        done_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a writer did not finish within 60 s: deadlock in the caching layer");
    }
    assert_eq!(rt.dirty_bytes(), 0, "every burst was synced");
    for w in 0..writers {
        let data = std::fs::read(dir.path().join(format!("bg-{w}"))).unwrap();
        assert_eq!(data.len() as u64, blocks * BLOCK as u64);
        for i in 0..blocks {
            let block = &data[(i * BLOCK as u64) as usize..][..BLOCK];
            assert!(block.iter().all(|&b| b == (w + i) as u8), "writer {w} block {i}");
        }
    }
}

#[test]
fn adjacent_buffered_writes_are_written_back_as_one_io() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(false);
    let bg = rt.register_background("log", TaskKind::Flush);
    let _g = bg.enter();
    let f = rt.open(dir.path().join("log"), true).unwrap();
    for i in 0..64u64 {
        f.write_buffered(&[i as u8; 1000], i * 1000).unwrap();
    }
    f.sync().unwrap();
    assert_eq!(bg.stats().ios, 2, "one write-back I/O for 64 appends, one flush");
    assert_eq!(std::fs::read(dir.path().join("log")).unwrap().len(), 64_000);
}
