//! Devices: where an I/O goes once the scheduler lets it in.
//!
//! - `buffered`: a real file through the page cache.
//! - `direct`: a real file opened with `O_DIRECT`; buffers, offsets and
//!   lengths must be aligned to [`DIRECT_ALIGN`] ([`AlignedBuf`] helps).
//! - `emulated`: a real file (data is stored and read back) whose completion
//!   is held until a sluice-core [`TimingModel`] says the device would have
//!   finished. The models serve in arrival order per channel, knowing
//!   nothing of priorities, like an NCQ device (RCP §2.1); how many I/Os the
//!   device holds at once is the scheduler's `depth`.
//!
//! Each file occupies its own 1 GiB region of the emulated device's address
//! space (`file id << 30` plus the offset), so that no two files look
//! adjacent (the seek disk lays every file from its first cylinder: see
//! `SeekDiskProfile`).
//!
//! The I/O itself is a positional `pread`/`pwrite` on the calling thread:
//! no hand-off to another thread, so the runtime adds only its scheduling
//! to the plain system call. (io_uring was measured and not chosen; see the
//! crate doc.) On an emulated device `sync` costs the model's flush time and
//! does not also `fsync` the backing file.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_core::device::{Op, OpKind, TimingModel, FILE_OFFSET_BITS};
use sluice_core::Nanos;

use crate::config::{DeviceConfig, DeviceKind};
use crate::error::IoError;

/// Alignment of buffers, offsets and lengths for `O_DIRECT`.
pub const DIRECT_ALIGN: usize = 4096;

pub struct Device {
    kind: DeviceKind,
    model: Option<Mutex<Box<dyn TimingModel>>>,
    origin: Instant,
}

impl Device {
    pub fn new(config: &DeviceConfig) -> Result<Self, IoError> {
        let model = match &config.profile {
            Some(p) => Some(Mutex::new(
                p.build().map_err(|e| IoError::Config(format!("device.profile: {e}")))?,
            )),
            None => None,
        };
        Ok(Device {
            kind: config.kind,
            model,
            origin: Instant::now(),
        })
    }

    /// The same device on `model` instead of its profile's.
    #[cfg(test)]
    pub(crate) fn with_model(mut self, model: Box<dyn TimingModel>) -> Self {
        self.model = Some(Mutex::new(model));
        self
    }

    /// Whether the device runs on a timing model (`emulated`), which
    /// [`Device::start`] feeds.
    pub fn is_modelled(&self) -> bool {
        self.model.is_some()
    }

    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// Nanoseconds since the device was created: the runtime's clock.
    pub fn now(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos
    }

    pub fn open(&self, path: &Path, create: bool) -> Result<File, IoError> {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(create);
        if self.kind == DeviceKind::Direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path).map_err(|source| IoError::Open {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Checks O_DIRECT's alignment rules; other kinds accept anything.
    pub fn check_alignment(&self, path: &Path, ptr: *const u8, offset: u64, len: usize) -> Result<(), IoError> {
        if self.kind != DeviceKind::Direct {
            return Ok(());
        }
        let align = DIRECT_ALIGN as u64;
        for (what, got) in [
            ("buffer address", ptr as u64),
            ("offset", offset),
            ("length", len as u64),
        ] {
            if got % align != 0 {
                return Err(IoError::Misaligned {
                    what,
                    align: DIRECT_ALIGN,
                    got,
                    path: path.to_path_buf(),
                });
            }
        }
        Ok(())
    }

    /// Makes a range of a file's buffered writes reach the disk: on a
    /// buffered file the kernel writes it out; O_DIRECT writes are already
    /// there; on an emulated device the timing model is the device.
    pub fn write_out(&self, file: &File, offset: u64, len: u64) -> std::io::Result<()> {
        if self.kind != DeviceKind::Buffered {
            return Ok(());
        }
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        let fd = std::os::fd::AsRawFd::as_raw_fd(file);
        // SAFETY: a plain system call on a descriptor the caller's file owns.
        let rc = unsafe { libc::sync_file_range(fd, offset as i64, len as i64, flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Flushes a file to stable storage; on an emulated device the flush
    /// costs what its timing model says and the backing file need not also
    /// reach the host's disk.
    pub fn sync_data(&self, file: &File) -> std::io::Result<()> {
        match self.kind {
            DeviceKind::Emulated => Ok(()),
            _ => file.sync_data(),
        }
    }

    /// The device starts on `op` at `entered`, when the dispatch lets it
    /// in: returns when its timing model finishes it, or `None` on a real
    /// device. Called in dispatch order, so the model serves I/Os in the
    /// order the scheduler chose at any depth; a thread that wakes late to
    /// issue an I/O, or to learn of its end, leaves the device no idler: a
    /// host's wake-ups are not a device's time.
    pub fn start(&self, entered: Nanos, op: Op) -> Option<Nanos> {
        let model = self.model.as_ref()?;
        Some(model.lock().unwrap_or_else(|e| e.into_inner()).complete_at(entered, op))
    }

    /// Performs `io` (the real system call), then holds its completion
    /// until `finish`, the model's time from [`Device::start`]. Returns the
    /// result and when the device finished: `finish` on an emulated device
    /// (the thread wakes a little after it), else now.
    pub fn perform<T>(
        &self,
        finish: Option<Nanos>,
        io: impl FnOnce() -> std::io::Result<T>,
    ) -> (std::io::Result<T>, Nanos) {
        let result = io();
        let Some(done) = finish else {
            return (result, self.now());
        };
        let now = self.now();
        if done > now {
            std::thread::sleep(Duration::from_nanos(done - now));
        }
        (result, done)
    }
}

/// Device address of `offset` in file `id`.
pub fn address(file_id: u32, offset: u64) -> u64 {
    ((file_id as u64) << FILE_OFFSET_BITS).wrapping_add(offset)
}

/// The plain path without any scheduling: the real call plus the device's
/// timing. The baseline `sluice bench io` compares the runtime against.
pub fn plain_read(device: &Device, file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let op = Op {
        kind: OpKind::Read,
        offset,
        len: buf.len() as u64,
    };
    device
        .perform(device.start(device.now(), op), || file.read_at(buf, offset))
        .0
}

/// A heap buffer aligned for `O_DIRECT`.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (rounded up to the alignment).
    pub fn zeroed(len: usize) -> Self {
        let len = len.max(1).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, DIRECT_ALIGN).expect("aligned layout")
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialized bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_are_aligned_and_rounded_up() {
        let b = AlignedBuf::zeroed(100);
        assert_eq!(b.len(), DIRECT_ALIGN);
        assert_eq!(b.as_ptr() as usize % DIRECT_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
    }
}
