//! The manifest: which tables make up each level, the next file number,
//! the last sequence number, and the oldest WAL still needed. Departure
//! from LevelDB: instead of a log of version edits, the whole (small)
//! manifest is rewritten on every change to `MANIFEST.tmp`, synced, and
//! renamed over `MANIFEST`, then the directory is synced; a crash leaves
//! the old or the new one, never a mix.
//!
//! Format: `[magic u64][crc32c of body u32][len u32][body]`, body
//! `[next_number u64][last_seq u64][wal_floor u64][tables u32]` then per
//! table `[level u32][number u64][size u64][entries u64][smallest][largest]`
//! (byte strings length-prefixed).

use std::path::Path;

use sluice_io::Runtime;

use crate::codec::{put_bytes, put_u32, put_u64, Reader};
use crate::error::{KvError, Result};
use crate::sstable::TableMeta;
use crate::wal::read_all;

const MAGIC: u64 = 0x534c_5549_4345_4d46;
const NAME: &str = "MANIFEST";

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TableEntry {
    pub level: usize,
    pub number: u64,
    pub meta: TableMeta,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Manifest {
    pub next_number: u64,
    pub last_seq: u64,
    /// WALs numbered below this hold only flushed writes.
    pub wal_floor: u64,
    pub tables: Vec<TableEntry>,
}

impl Manifest {
    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        put_u64(&mut body, self.next_number);
        put_u64(&mut body, self.last_seq);
        put_u64(&mut body, self.wal_floor);
        put_u32(&mut body, self.tables.len() as u32);
        for t in &self.tables {
            put_u32(&mut body, t.level as u32);
            put_u64(&mut body, t.number);
            put_u64(&mut body, t.meta.size);
            put_u64(&mut body, t.meta.entries);
            put_bytes(&mut body, &t.meta.smallest);
            put_bytes(&mut body, &t.meta.largest);
        }
        let mut out = Vec::with_capacity(body.len() + 16);
        put_u64(&mut out, MAGIC);
        put_u32(&mut out, crc32c::crc32c(&body));
        put_u32(&mut out, body.len() as u32);
        out.extend_from_slice(&body);
        out
    }

    fn decode(buf: &[u8]) -> Option<Manifest> {
        let mut r = Reader::new(buf);
        let (magic, crc, len) = (r.u64()?, r.u32()?, r.u32()? as usize);
        let body = r.take(len)?;
        if magic != MAGIC || crc32c::crc32c(body) != crc || !r.is_empty() {
            return None;
        }
        let mut r = Reader::new(body);
        let mut m = Manifest {
            next_number: r.u64()?,
            last_seq: r.u64()?,
            wal_floor: r.u64()?,
            tables: Vec::new(),
        };
        for _ in 0..r.u32()? {
            let (level, number) = (r.u32()? as usize, r.u64()?);
            let (size, entries) = (r.u64()?, r.u64()?);
            let (smallest, largest) = (r.bytes()?.to_vec(), r.bytes()?.to_vec());
            let meta = TableMeta {
                size,
                entries,
                smallest,
                largest,
            };
            m.tables.push(TableEntry { level, number, meta });
        }
        r.is_empty().then_some(m)
    }

    /// The manifest in `dir`, or `None` for a new store.
    pub(crate) fn load(rt: &Runtime, dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(NAME);
        if !path.exists() {
            return Ok(None);
        }
        let data = read_all(&rt.open(&path, false)?)?;
        Manifest::decode(&data)
            .map(Some)
            .ok_or_else(|| KvError::corruption(&path, 0, "manifest is not valid (magic, checksum or layout)"))
    }

    /// Replaces the manifest in `dir` atomically and durably.
    pub(crate) fn store(&self, rt: &Runtime, dir: &Path) -> Result<()> {
        let tmp = dir.join(format!("{NAME}.tmp"));
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(KvError::fs("removing", &tmp, e)),
            _ => {}
        }
        let f = rt.open(&tmp, true)?;
        f.write_buffered(&self.encode(), 0)?;
        f.sync()?;
        let path = dir.join(NAME);
        std::fs::rename(&tmp, &path).map_err(|e| KvError::fs("renaming into", &path, e))?;
        sync_dir(dir)
    }
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| KvError::fs("syncing directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_io::RuntimeConfig;

    fn sample() -> Manifest {
        Manifest {
            next_number: 9,
            last_seq: 1234,
            wal_floor: 7,
            tables: vec![TableEntry {
                level: 1,
                number: 5,
                meta: TableMeta {
                    size: 4096,
                    entries: 10,
                    smallest: b"a".to_vec(),
                    largest: b"z".to_vec(),
                },
            }],
        }
    }

    #[test]
    fn stores_loads_and_detects_any_flipped_byte() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        assert_eq!(Manifest::load(&rt, dir.path()).unwrap(), None);
        sample().store(&rt, dir.path()).unwrap();
        assert_eq!(Manifest::load(&rt, dir.path()).unwrap(), Some(sample()));
        let clean = sample().encode();
        for i in 0..clean.len() {
            let mut bad = clean.clone();
            bad[i] ^= 0x10;
            assert_eq!(Manifest::decode(&bad), None, "byte {i}");
        }
    }
}
