//! The write-ahead log: one record per write batch, appended through the
//! page cache and made durable by group commit (see `Db::commit`).
//!
//! With syncs on, a record waits in memory (the log's [`Tail`]) until a
//! sync is due: the writer that syncs writes every record appended since
//! the last in one write, then syncs once, as Redis writes its AOF buffer
//! once per pass of its event loop. A write per record cost as much as the
//! sync it waited for (a write system call per request, 8% of the server's
//! CPU under durable SET). Nothing is acknowledged before the sync, so a
//! record lost from memory in a crash was never acknowledged. Without
//! syncs a record is written at once: a process that dies keeps what it
//! acknowledged in the page cache.
//!
//! Record: `[len u32][crc32c of len u32][crc32c of body u32][body]`, body
//! `[seq u64][batch]`. The length has its own checksum so that a flipped
//! length byte is told apart from a record cut short. On replay, a record
//! cut short by the end of the file is a write the process did not finish
//! (never acknowledged: acknowledgement follows the sync) and ends the log;
//! any checksum failure is corruption and is reported with file and offset.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_io::{Runtime, SluiceFile};

use crate::batch::WriteBatch;
use crate::codec::{put_u64, Reader};
use crate::error::{KvError, Result};

const HEADER: usize = 12;

pub(crate) fn path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.wal"))
}

/// Numbers of the WAL files in `dir`, in increasing order.
pub(crate) fn numbers(dir: &Path) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".wal")?.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// The log being appended to.
pub(crate) struct Wal {
    pub(crate) number: u64,
    /// Records appended and not yet written, shared with the writers that
    /// wait for a sync (one of which writes them).
    pub(crate) tail: Arc<Tail>,
}

/// The end of a log: its file, and records appended and not yet written
/// to it.
pub(crate) struct Tail {
    file: SluiceFile,
    state: Mutex<TailState>,
}

struct TailState {
    /// Encoded records, in order.
    records: Vec<u8>,
    /// The file's length: where `records` go.
    written: u64,
    /// A write failed: the file may end in part of a record, and nothing
    /// more is written after it (the store replaces the log).
    failed: bool,
}

impl Tail {
    fn lock(&self) -> MutexGuard<'_, TailState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the records appended so far; returns the file's length
    /// after them. Callers serialize their calls (the store's sync lock),
    /// so that records reach the file in order; appends go on meanwhile.
    pub(crate) fn write_out(&self) -> Result<u64> {
        let (records, at) = {
            let mut st = self.lock();
            if st.failed {
                return Err(KvError::Background(
                    "an earlier write to the write-ahead log failed".into(),
                ));
            }
            let records = std::mem::take(&mut st.records);
            let at = st.written;
            st.written += records.len() as u64;
            (records, at)
        };
        if records.is_empty() {
            return Ok(at);
        }
        self.file
            .write_buffered(&records, at)
            .inspect_err(|_| self.lock().failed = true)?;
        Ok(at + records.len() as u64)
    }

    /// Writes the records appended so far and syncs the log; returns its
    /// durable length. Called as [`Tail::write_out`] is.
    pub(crate) fn sync(&self) -> Result<u64> {
        let end = self.write_out()?;
        self.file.sync()?;
        Ok(end)
    }
}

impl Wal {
    pub(crate) fn create(rt: &Runtime, dir: &Path, number: u64) -> Result<Wal> {
        Ok(Wal {
            number,
            tail: Arc::new(Tail {
                file: rt.open(path(dir, number), true)?,
                state: Mutex::new(TailState {
                    records: Vec::new(),
                    written: 0,
                    failed: false,
                }),
            }),
        })
    }

    /// Appends one batch, written at once unless `deferred` (then by
    /// [`Tail::write_out`]); returns the log's end after it.
    pub(crate) fn append(&self, seq: u64, batch: &WriteBatch, deferred: bool) -> Result<u64> {
        let mut tail = self.tail.lock();
        if deferred {
            encode(&mut tail.records, seq, batch);
            return Ok(tail.written + tail.records.len() as u64);
        }
        let mut rec = Vec::new();
        encode(&mut rec, seq, batch);
        if let Err(e) = self.tail.file.write_buffered(&rec, tail.written) {
            tail.failed = true;
            return Err(e.into());
        }
        tail.written += rec.len() as u64;
        Ok(tail.written)
    }
}

/// Appends the record of `batch` to `out`, encoded in place (a record per
/// write: no buffer of its own).
fn encode(out: &mut Vec<u8>, seq: u64, batch: &WriteBatch) {
    let start = out.len();
    out.resize(start + HEADER, 0);
    put_u64(out, seq);
    batch.encode(out);
    let body = &out[start + HEADER..];
    let len = (body.len() as u32).to_le_bytes();
    let body_crc = crc32c::crc32c(body).to_le_bytes();
    out[start..start + 4].copy_from_slice(&len);
    out[start + 4..start + 8].copy_from_slice(&crc32c::crc32c(&len).to_le_bytes());
    out[start + 8..start + HEADER].copy_from_slice(&body_crc);
}

/// Reads a log and hands every whole record to `apply` in order.
pub(crate) fn replay(rt: &Runtime, path: &Path, mut apply: impl FnMut(u64, WriteBatch)) -> Result<()> {
    let data = read_all(&rt.open(path, false)?)?;
    let mut at = 0usize;
    while at < data.len() {
        let corrupt = |what: &str| KvError::corruption(path, at as u64, what);
        let mut r = Reader::new(&data[at..]);
        let (Some(len), Some(len_crc), Some(crc)) = (r.take(4), r.u32(), r.u32()) else {
            break;
        };
        if crc32c::crc32c(len) != len_crc {
            return Err(corrupt("WAL record length checksum mismatch"));
        }
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(body) = r.take(len) else { break };
        if crc32c::crc32c(body) != crc {
            return Err(corrupt("WAL record checksum mismatch"));
        }
        let mut b = Reader::new(body);
        let Some((seq, batch)) = b.u64().zip(b.take(len.saturating_sub(8)).and_then(WriteBatch::decode)) else {
            return Err(corrupt("WAL record is not a write batch"));
        };
        apply(seq, batch);
        at += HEADER + len;
    }
    Ok(())
}

/// The whole file, read through the runtime.
pub(crate) fn read_all(file: &SluiceFile) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = file.read_at(&mut chunk, data.len() as u64)?;
        data.extend_from_slice(&chunk[..n]);
        if n < chunk.len() {
            return Ok(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_io::RuntimeConfig;

    fn batch(k: &str) -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put(k, "value").delete("gone");
        b
    }

    fn replayed(rt: &Runtime, p: &Path) -> Result<Vec<(u64, WriteBatch)>> {
        let mut out = Vec::new();
        replay(rt, p, |s, b| out.push((s, b)))?;
        Ok(out)
    }

    #[test]
    fn replays_whole_records_and_stops_at_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        let wal = Wal::create(&rt, dir.path(), 1).unwrap();
        wal.append(1, &batch("a"), false).unwrap();
        let end = wal.append(2, &batch("b"), false).unwrap();
        let p = path(dir.path(), 1);
        assert_eq!(replayed(&rt, &p).unwrap(), vec![(1, batch("a")), (2, batch("b"))]);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(end - 3).unwrap();
        assert_eq!(replayed(&rt, &p).unwrap(), vec![(1, batch("a"))]);
    }

    #[test]
    fn a_flipped_byte_is_corruption_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        let wal = Wal::create(&rt, dir.path(), 7).unwrap();
        let first = wal.append(1, &batch("a"), true).unwrap();
        let end = wal.append(2, &batch("b"), true).unwrap();
        let p = path(dir.path(), 7);
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            0,
            "deferred records wait in memory"
        );
        assert_eq!(wal.tail.write_out().unwrap(), end);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), end, "written in one write");
        let clean = std::fs::read(&p).unwrap();
        for i in 0..clean.len() {
            let mut bad = clean.clone();
            bad[i] ^= 0x01;
            std::fs::write(&p, &bad).unwrap();
            match replayed(&rt, &p) {
                Err(KvError::Corruption { path: at, offset, .. }) => {
                    assert_eq!(at, p);
                    assert_eq!(offset, if i < first as usize { 0 } else { first });
                }
                other => panic!("byte {i}: expected corruption, got {other:?}"),
            }
        }
    }
}
