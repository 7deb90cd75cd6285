//! The runtime end to end on real files: data round-trips on every device
//! kind, context reaches the I/O path, and errors name file and offset.

use sluice_core::device::{DeviceProfile, SsdConfig};
use sluice_io::{AlignedBuf, DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig};

/// A directory on the build's disk: O_DIRECT needs a real file system
/// (tmpfs refuses it).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn runtime(kind: DeviceKind) -> Runtime {
    let profile = (kind == DeviceKind::Emulated).then(|| DeviceProfile::Ssd(SsdConfig::default()));
    Runtime::new(RuntimeConfig {
        device: DeviceConfig {
            kind,
            depth: 8,
            profile,
        },
        rcp: RcpConfig::default(),
    })
    .unwrap()
}

#[test]
fn data_round_trips_on_every_device_kind() {
    let dir = scratch();
    for kind in [DeviceKind::Buffered, DeviceKind::Emulated, DeviceKind::Direct] {
        let rt = runtime(kind);
        let path = dir.path().join(format!("{kind:?}"));
        let f = rt.open(&path, true).unwrap();
        let mut data = AlignedBuf::zeroed(8192);
        data.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8);
        f.write_at(&data, 4096).unwrap();
        f.sync().unwrap();
        let mut back = AlignedBuf::zeroed(8192);
        assert_eq!(f.read_at(&mut back, 4096).unwrap(), 8192);
        assert_eq!(&back[..], &data[..], "{kind:?}");
        assert_eq!(rt.occupancy().in_device, 0);
    }
}

#[test]
fn device_errors_name_the_file_and_offset() {
    let dir = scratch();
    let rt = runtime(DeviceKind::Buffered);
    let f = rt.open(dir.path().join("f"), true).unwrap();
    let err = f.read_at(&mut [0u8; 16], u64::MAX - 8).unwrap_err().to_string();
    assert!(
        err.contains("16 bytes at offset 18446744073709551607") && err.contains("/f"),
        "{err}"
    );
    // Past what the kernel accepts, but no overflow: the device reports it.
    let err = f.read_at(&mut [0u8; 16], i64::MAX as u64 - 4).unwrap_err().to_string();
    assert!(err.contains("read of 16 bytes at offset 9223372036854775803"), "{err}");
    let err = f.write_at(&[0u8; 16], u64::MAX - 8).unwrap_err().to_string();
    assert!(err.contains("run past the largest file offset"), "{err}");
    assert_eq!(rt.occupancy().in_device, 0, "a failed I/O still leaves the device");
    let missing = rt.open(dir.path().join("no/such/file"), false).unwrap_err().to_string();
    assert!(missing.contains("no/such/file"), "{missing}");
}

#[test]
fn direct_io_rejects_misaligned_requests_by_name() {
    let dir = scratch();
    let rt = runtime(DeviceKind::Direct);
    let f = rt.open(dir.path().join("d"), true).unwrap();
    let buf = AlignedBuf::zeroed(4096);
    let err = f.write_at(&buf, 100).unwrap_err().to_string();
    assert!(
        err.contains("offset must be a multiple of 4096 bytes, got 100"),
        "{err}"
    );
    let err = f.write_at(&buf[..100], 0).unwrap_err().to_string();
    assert!(err.contains("length"), "{err}");
}

#[test]
fn the_request_context_follows_the_guard() {
    let ctx = sluice_core::Ctx::new(42, 0).with_tenant(3, 2.0);
    let guard = sluice_io::enter(ctx);
    assert_eq!(sluice_io::current_ctx().map(|c| c.tenant.0), Some(3));
    assert!(sluice_io::Task::current().is_critical(false));
    drop(guard);
    assert!(!sluice_io::Task::current().is_critical(true));
}
