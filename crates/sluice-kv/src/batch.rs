//! Atomic write batches: a batch's operations reach the WAL as one record
//! and the memtable together, so after a crash either all or none of them
//! are there.
//!
//! Encoding: `[count u32]` then per operation `[klen u32][key][tag u8]`
//! and, for a put (`tag` 1), `[vlen u32][value]`; `tag` 0 is a delete.

use crate::codec::{put_bytes, put_u32, Reader};
use crate::Value;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub(crate) ops: Vec<(Vec<u8>, Value)>,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push((key.into(), Some(value.into())));
        self
    }

    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push((key.into(), None));
        self
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.ops.len() as u32);
        for (k, v) in &self.ops {
            put_bytes(out, k);
            match v {
                Some(v) => {
                    out.push(1);
                    put_bytes(out, v);
                }
                None => out.push(0),
            }
        }
    }

    /// Decodes a whole batch; `None` if the bytes are not one.
    pub(crate) fn decode(buf: &[u8]) -> Option<WriteBatch> {
        let mut r = Reader::new(buf);
        let count = r.u32()? as usize;
        let mut ops = Vec::with_capacity(count.min(buf.len()));
        for _ in 0..count {
            let key = r.bytes()?.to_vec();
            let value = match r.take(1)?[0] {
                0 => None,
                1 => Some(r.bytes()?.to_vec()),
                _ => return None,
            };
            ops.push((key, value));
        }
        r.is_empty().then_some(WriteBatch { ops })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_truncation() {
        let mut b = WriteBatch::new();
        b.put("a", "1").delete("b").put("", "");
        let mut enc = Vec::new();
        b.encode(&mut enc);
        assert_eq!(WriteBatch::decode(&enc), Some(b));
        for cut in 0..enc.len() {
            assert_eq!(WriteBatch::decode(&enc[..cut]), None, "cut at {cut}");
        }
        enc.push(0);
        assert_eq!(WriteBatch::decode(&enc), None, "trailing bytes");
    }
}
