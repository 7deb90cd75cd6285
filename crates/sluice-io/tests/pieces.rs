//! RCP's device bound counted in bytes: a large non-critical I/O holds the
//! device one piece at a time, so a critical read that arrives while it
//! runs waits behind one piece, not the whole I/O. Measured against the
//! same I/O with pieces off; the data must come through unchanged either way.

use std::time::{Duration, Instant};

use sluice_core::device::{CloudVolumeConfig, DeviceProfile};
use sluice_core::Ctx;
use sluice_io::{enter, DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig, TaskKind};

/// 10 MB/s and no base latency: a 1 MiB write holds the device ~105 ms,
/// a 64 KiB piece ~6.5 ms.
fn runtime(piece_kb: u64) -> Runtime {
    Runtime::new(RuntimeConfig {
        device: DeviceConfig {
            kind: DeviceKind::Emulated,
            depth: 8,
            profile: Some(DeviceProfile::CloudVolume(CloudVolumeConfig {
                iops: 100_000.0,
                mb_s: 10.0,
                base_latency_us: 0.0,
            })),
        },
        rcp: RcpConfig {
            noncritical_piece_kb: piece_kb,
            ..RcpConfig::default()
        },
    })
    .unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// A background task writes 1 MiB in one call; 15 ms in, a request reads
/// 4 KiB of another file. Returns the read's latency after checking that
/// the large write and a large background read of it round-trip.
fn critical_read_during_large_write(piece_kb: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(piece_kb);
    let small = rt.open(dir.path().join("small"), true).unwrap();
    small.write_at(&[9u8; 4096], 0).unwrap();
    let big = rt.open(dir.path().join("big"), true).unwrap();
    let bg = rt.register_background("compaction", TaskKind::Compaction);
    let writer = {
        let (big, bg) = (big.clone(), bg.clone());
        std::thread::spawn(move || {
            let _bg = bg.enter();
            big.write_at(&pattern(1 << 20), 0).unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(15));
    let latency = {
        let _req = enter(Ctx::new(1, 0));
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        assert_eq!(small.read_at(&mut buf, 0).unwrap(), 4096);
        assert_eq!(buf, [9u8; 4096]);
        start.elapsed()
    };
    writer.join().unwrap();
    let _bg = bg.enter();
    let mut back = vec![0u8; (1 << 20) + 4096];
    assert_eq!(
        big.read_at(&mut back, 0).unwrap(),
        1 << 20,
        "short at the end of the file"
    );
    assert!(
        back[..1 << 20] == pattern(1 << 20)[..],
        "the pieces wrote and read the data in place"
    );
    assert_eq!(rt.occupancy().in_device, 0);
    latency
}

#[test]
fn a_critical_read_waits_behind_one_piece_not_the_whole_io() {
    let pieces = critical_read_during_large_write(64);
    let whole = critical_read_during_large_write(0);
    eprintln!("critical read during a 1 MiB background write: pieces {pieces:?}, whole {whole:?}");
    assert!(
        pieces * 3 < whole,
        "pieces {pieces:?} is not 3x faster than whole {whole:?}"
    );
}
