//! The devices and files the parts read and write: the emulated SSD or a
//! real file (page cache or O_DIRECT), a runtime on either, a data file of
//! [`FILE_BYTES`], and random [`READ`]-sized offsets into it.

use std::path::Path;

use anyhow::{Context, Result};
use sluice_core::device::{DeviceProfile, SsdConfig};
use sluice_io::{AlignedBuf, DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig};

pub(crate) const FILE_BYTES: u64 = 64 << 20;
pub(crate) const READ: usize = 4096;

/// The emulated SSD, or a real file (page cache or O_DIRECT).
pub(crate) fn device(kind: DeviceKind) -> DeviceConfig {
    DeviceConfig {
        kind,
        depth: 32,
        profile: (kind == DeviceKind::Emulated).then(|| DeviceProfile::Ssd(SsdConfig::default())),
    }
}

pub(crate) fn runtime(rcp: RcpConfig, kind: DeviceKind) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        device: device(kind),
        rcp,
    })?)
}

/// A file of `FILE_BYTES` to read from. Sparse unless `on_disk`: reads
/// of a hole never reach a real disk, so the real-disk runs write it out.
pub(crate) fn data_file(path: &Path, on_disk: bool) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    if on_disk {
        let mut chunk = AlignedBuf::zeroed(1 << 20);
        chunk.fill(0x11);
        for i in 0..FILE_BYTES / chunk.len() as u64 {
            std::os::unix::fs::FileExt::write_all_at(&f, &chunk, i * chunk.len() as u64)?;
        }
        f.sync_all()?;
    } else {
        f.set_len(FILE_BYTES)?;
    }
    Ok(())
}

pub(crate) fn random_offset(state: &mut u64) -> u64 {
    // xorshift: cheap and good enough to spread reads over the file.
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % (FILE_BYTES / READ as u64)) * READ as u64
}
