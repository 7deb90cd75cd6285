//! How the server lays Redis's strings, hashes and sorted sets over the
//! store's flat keys (after Kvrocks' encoding on RocksDB, simplified):
//!
//! - Every value the server stores starts with a type tag, so that a
//!   command on the wrong type gets Redis's `WRONGTYPE` error.
//! - A string is its tag and its bytes under the user's key.
//! - A hash is one value: its fields and values, length-prefixed. YCSB's
//!   records (10 fields of 100 bytes) are read and written whole, so one
//!   value per record is one store operation per request; a field update
//!   rewrites the record, which is fine at these sizes.
//! - A sorted set is a small value under the user's key (tag, version,
//!   cardinality) plus two store entries per member under the reserved
//!   prefix `0xFF`: member → score, and (score, member) → nothing, the
//!   index `ZRANGEBYSCORE` scans. One set can hold every key of a YCSB run
//!   (its `_indices` set) without rewriting a large value per insert.
//!
//! - A list is a small value under the user key (tag, version, the
//!   positions of its first element and of one past its last) plus one
//!   store entry per element under `0xFF`, keyed by position: pushing or
//!   popping at either end, reading by index and reading a range are one
//!   operation each, as in Kvrocks. Removing or inserting inside a list
//!   (LREM, LINSERT) moves the elements on the shorter side of the point.
//!   (The blocking pops are pops that wait: `crate::blocked`.)
//! - A set is a header like a sorted set's (tag, version, cardinality)
//!   plus one empty store entry per member under `0xFF`, keyed by a hash
//!   of the member and then the member itself. Membership is one lookup;
//!   and because members lie in hash order, a point in the hash space is
//!   a position in the set: SSCAN's cursor is that number, as Redis's is
//!   a position in its hash table, and a random point is where SPOP and
//!   SRANDMEMBER start to read in a large set (`commands/set.rs`).
//! - A stream is a header (tag, version, length, last ID) plus one store
//!   entry per stream entry under `0xFF`, keyed by its ID (milliseconds
//!   and sequence, big-endian), its fields length-prefixed as a hash's: a
//!   range of IDs is a range of keys. As in Redis, a stream emptied by
//!   XDEL or XTRIM stays, with its last ID.
//! - A value that expires starts with `x` and its deadline (unix time in
//!   milliseconds, 8 bytes big-endian) before its tag: the expiry is read
//!   with the value, so a read never costs a second lookup, and a value
//!   past its deadline is invisible to every command from that moment
//!   (Redis's lazy expiry). Its space comes back when compaction rewrites
//!   it (strings and hashes) or when the expiry sweeper reaches it
//!   (`crate::sweeper`, Redis's active expiry), whichever is first.
//!
//! The version is fresh for each new set, sorted set or list, so entries of an
//! earlier one at the same key are never read as the new one's. Entries
//! leave the store with their header: `DEL` and the expiry sweeper delete
//! them with it, and a write that puts another value in its place (`SET`
//! over a set, a new list where one expired) deletes them in the same
//! batch (`commands/delete.rs`). Departure from Kvrocks, which leaves them
//! to a compaction filter that looks up each entry's header: entry keys
//! here carry the version and not the user key, so that filter has
//! nothing to look up, and the write that replaces a header reads it
//! anyway in most cases. A plain `SET` does not read its key, so it reads
//! it only once the store may hold a set or a list.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_io::sync::{Mutex, MutexGuard};

/// First byte of every internal key; user keys may not start with it.
pub const RESERVED: u8 = 0xFF;

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    String = b's' as isize,
    Hash = b'h' as isize,
    Zset = b'z' as isize,
    List = b'l' as isize,
    /// `S`: `s` is a string's.
    Set = b'S' as isize,
    /// `t`: `x` marks a value with a deadline.
    Stream = b't' as isize,
}

impl Tag {
    /// The type's name, as TYPE answers it and SCAN's TYPE option names it.
    pub fn name(self) -> &'static str {
        match self {
            Tag::String => "string",
            Tag::Hash => "hash",
            Tag::Zset => "zset",
            Tag::List => "list",
            Tag::Set => "set",
            Tag::Stream => "stream",
        }
    }
}

/// `body` behind `tag`, as the value to store.
pub fn tagged(tag: Tag, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len() + 1);
    v.push(tag as u8);
    v.extend_from_slice(body);
    v
}

/// A stored value's type and body; `None` for bytes the server did not
/// write (no tag), which commands report rather than misread.
pub fn untag(value: &[u8]) -> Option<(Tag, &[u8])> {
    let tag = match value.first()? {
        b's' => Tag::String,
        b'h' => Tag::Hash,
        b'z' => Tag::Zset,
        b'l' => Tag::List,
        b'S' => Tag::Set,
        b't' => Tag::Stream,
        _ => return None,
    };
    Some((tag, &value[1..]))
}

/// First byte of a value with a deadline (see the module doc).
const EXPIRING: u8 = b'x';

/// When a value expires: unix time in milliseconds, or never.
pub type Deadline = Option<u64>;

/// `tagged` (a value as `tagged` makes it) with `deadline` in front.
pub fn with_deadline(tagged: Vec<u8>, deadline: Deadline) -> Vec<u8> {
    let Some(at) = deadline else {
        return tagged;
    };
    let mut v = Vec::with_capacity(9 + tagged.len());
    v.push(EXPIRING);
    v.extend_from_slice(&at.to_be_bytes());
    v.extend_from_slice(&tagged);
    v
}

/// A stored value's type, body and deadline; `None` for bytes the server
/// did not write.
pub fn decode_value(value: &[u8]) -> Option<(Tag, &[u8], Deadline)> {
    let (deadline, tagged) = match value {
        [EXPIRING, rest @ ..] if rest.len() > 8 => (Some(u64::from_be_bytes(rest[..8].try_into().ok()?)), &rest[8..]),
        _ => (None, value),
    };
    let (tag, body) = untag(tagged)?;
    Some((tag, body, deadline))
}

/// Whether a value with `deadline` is visible at `now` (unix ms): up to
/// and including its deadline, as in Redis.
pub fn is_live(deadline: Deadline, now: u64) -> bool {
    deadline.is_none_or(|at| now <= at)
}

/// Whether compaction may drop the entry `key` → `value` at `now`: a
/// string or a hash whose deadline has passed. A sorted set or a list is
/// never dropped here: its members or elements are entries of their own,
/// which the expiry sweeper, or the write that replaces it, deletes with
/// it (see the module doc).
pub fn expired_entry(key: &[u8], value: &[u8], now: u64) -> bool {
    key.first() != Some(&RESERVED)
        && matches!(decode_value(value), Some((Tag::String | Tag::Hash, _, deadline)) if !is_live(deadline, now))
}

/// The time deadlines are measured in: unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Refuses user keys in the internal key space.
pub fn check_user_key(key: &[u8]) -> Result<(), String> {
    if key.first() == Some(&RESERVED) {
        return Err("keys starting with byte 0xff are reserved by sluice".into());
    }
    Ok(())
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn take_bytes<'a>(body: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_le_bytes(body.get(..4)?.try_into().ok()?) as usize;
    let b = body.get(4..4 + len)?;
    *body = &body[4 + len..];
    Some(b)
}

/// A hash's fields in stored order.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

pub fn encode_hash(fields: &Fields) -> Vec<u8> {
    let mut out = vec![Tag::Hash as u8];
    encode_fields(&mut out, fields);
    out
}

/// Fields and values, length-prefixed: a hash's body, a stream entry's
/// value.
pub fn encode_fields(out: &mut Vec<u8>, fields: &[(Vec<u8>, Vec<u8>)]) {
    for (f, v) in fields {
        put_bytes(out, f);
        put_bytes(out, v);
    }
}

/// The fields of a hash body or a stream entry; `None` if it is damaged.
pub fn decode_hash(mut body: &[u8]) -> Option<Fields> {
    let mut fields = Vec::new();
    while !body.is_empty() {
        let f = take_bytes(&mut body)?.to_vec();
        let v = take_bytes(&mut body)?.to_vec();
        fields.push((f, v));
    }
    Some(fields)
}

/// A sorted set's header: the version its entries are keyed by, and how
/// many members it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZsetMeta {
    pub version: u64,
    pub card: u64,
}

impl ZsetMeta {
    /// A new, empty set.
    pub fn fresh() -> Self {
        ZsetMeta {
            version: fresh_version(),
            card: 0,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![Tag::Zset as u8];
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.card.to_be_bytes());
        out
    }

    pub fn decode(body: &[u8]) -> Option<Self> {
        Some(ZsetMeta {
            version: u64::from_be_bytes(body.get(..8)?.try_into().ok()?),
            card: u64::from_be_bytes(body.get(8..16)?.try_into().ok()?),
        })
    }

    /// Key of `member`'s score.
    pub fn member_key(&self, member: &[u8]) -> Vec<u8> {
        let mut k = self.prefix(b'm');
        k.extend_from_slice(member);
        k
    }

    /// Key of the index entry (score, member).
    pub fn score_key(&self, score: f64, member: &[u8]) -> Vec<u8> {
        let mut k = self.score_bound(score, false);
        k.extend_from_slice(member);
        k
    }

    /// Where index entries with scores >= `score` (> `score` if
    /// `exclusive`) begin.
    pub fn score_bound(&self, score: f64, exclusive: bool) -> Vec<u8> {
        let bits = u64::from_be_bytes(sortable(score)).saturating_add(u64::from(exclusive));
        let mut k = self.prefix(b's');
        k.extend_from_slice(&bits.to_be_bytes());
        k
    }

    /// The (score, member) of an index key of this set.
    pub fn parse_score_key(&self, key: &[u8]) -> Option<(f64, Vec<u8>)> {
        let rest = key.strip_prefix(self.prefix(b's').as_slice())?;
        let bits = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        Some((unsortable(bits), rest[8..].to_vec()))
    }

    /// One past every key of this set's `kind` of entries, and before
    /// those of any set of a later version.
    pub fn end_of(&self, kind: u8) -> Vec<u8> {
        match self.version.checked_add(1) {
            Some(next) => ZsetMeta { version: next, card: 0 }.prefix(kind),
            None => vec![RESERVED, b'z', kind + 1],
        }
    }

    pub fn prefix(&self, kind: u8) -> Vec<u8> {
        let mut k = vec![RESERVED, b'z', kind];
        k.extend_from_slice(&self.version.to_be_bytes());
        k
    }
}

/// A set's header: the version its members are keyed by, and how many
/// there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetMeta {
    pub version: u64,
    pub card: u64,
}

impl SetMeta {
    /// A new, empty set.
    pub fn fresh() -> Self {
        SetMeta {
            version: fresh_version(),
            card: 0,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![Tag::Set as u8];
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.card.to_be_bytes());
        out
    }

    pub fn decode(body: &[u8]) -> Option<Self> {
        Some(SetMeta {
            version: u64::from_be_bytes(body.get(..8)?.try_into().ok()?),
            card: u64::from_be_bytes(body.get(8..16)?.try_into().ok()?),
        })
    }

    /// Key of `member`'s entry: where its hash puts it.
    pub fn member_key(&self, member: &[u8]) -> Vec<u8> {
        let mut k = self.position(member_hash(member));
        k.extend_from_slice(member);
        k
    }

    /// Where the members whose hashes are `hash` or more begin.
    pub fn position(&self, hash: u64) -> Vec<u8> {
        let mut k = self.prefix();
        k.extend_from_slice(&hash.to_be_bytes());
        k
    }

    /// The hash and the member of an entry key of this set.
    pub fn parse_member_key(&self, key: &[u8]) -> Option<(u64, Vec<u8>)> {
        let rest = key.strip_prefix(self.prefix().as_slice())?;
        let hash = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        Some((hash, rest[8..].to_vec()))
    }

    /// Where this set's members begin.
    pub fn prefix(&self) -> Vec<u8> {
        let mut k = vec![RESERVED, b'S'];
        k.extend_from_slice(&self.version.to_be_bytes());
        k
    }

    /// One past every member of this set, and before those of any set of a
    /// later version.
    pub fn end(&self) -> Vec<u8> {
        match self.version.checked_add(1) {
            Some(next) => SetMeta { version: next, card: 0 }.prefix(),
            None => vec![RESERVED, b'S' + 1],
        }
    }
}

/// A stream entry's ID: milliseconds, then a sequence number.
pub type StreamId = (u64, u64);

/// A stream's header: the version its entries are keyed by, how many
/// there are, and the last ID given (which new IDs must exceed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamMeta {
    pub version: u64,
    pub len: u64,
    pub last: StreamId,
}

impl StreamMeta {
    /// A new, empty stream.
    pub fn fresh() -> Self {
        StreamMeta {
            version: fresh_version(),
            len: 0,
            last: (0, 0),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![Tag::Stream as u8];
        for n in [self.version, self.len, self.last.0, self.last.1] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out
    }

    pub fn decode(body: &[u8]) -> Option<Self> {
        let n = |i: usize| Some(u64::from_be_bytes(body.get(8 * i..8 * i + 8)?.try_into().ok()?));
        Some(StreamMeta {
            version: n(0)?,
            len: n(1)?,
            last: (n(2)?, n(3)?),
        })
    }

    /// Key of the entry `id`.
    pub fn entry_key(&self, id: StreamId) -> Vec<u8> {
        let mut k = self.prefix();
        k.extend_from_slice(&id.0.to_be_bytes());
        k.extend_from_slice(&id.1.to_be_bytes());
        k
    }

    /// The ID of an entry key of this stream.
    pub fn parse_entry_key(&self, key: &[u8]) -> Option<StreamId> {
        let rest = key.strip_prefix(self.prefix().as_slice())?;
        let n = |i: usize| Some(u64::from_be_bytes(rest.get(8 * i..8 * i + 8)?.try_into().ok()?));
        Some((n(0)?, n(1)?))
    }

    /// Where this stream's entries begin.
    pub fn prefix(&self) -> Vec<u8> {
        let mut k = vec![RESERVED, b't'];
        k.extend_from_slice(&self.version.to_be_bytes());
        k
    }

    /// One past every entry of this stream, and before those of any
    /// stream of a later version.
    pub fn end(&self) -> Vec<u8> {
        match self.version.checked_add(1) {
            Some(next) => StreamMeta {
                version: next,
                len: 0,
                last: (0, 0),
            }
            .prefix(),
            None => vec![RESERVED, b't' + 1],
        }
    }
}

/// Where a member lies in its set: SipHash-1-3 with fixed keys, a hash
/// its crate promises not to change, since the position is on disk.
pub fn member_hash(member: &[u8]) -> u64 {
    use siphasher::sip::SipHasher13;
    let mut h = SipHasher13::new_with_keys(0x736c_7569_6365, 0x7365_7473);
    h.write(member);
    h.finish()
}

/// A version no earlier set or list of this process or, as long as the
/// clock moves forward, of an earlier one has used.
fn fresh_version() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut cur = NEXT.load(Ordering::Relaxed);
    loop {
        let next = now.max(cur + 1);
        match NEXT.compare_exchange(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => cur = seen,
        }
    }
}

/// A list's header: the version its elements are keyed by, and the
/// positions of its first element and of one past its last. Positions
/// start in the middle of the `u64` range, so that pushes at either end
/// never run out in practice (2^63 of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListMeta {
    pub version: u64,
    pub head: u64,
    pub tail: u64,
}

impl ListMeta {
    /// A new, empty list.
    pub fn fresh() -> Self {
        ListMeta {
            version: fresh_version(),
            head: 1 << 63,
            tail: 1 << 63,
        }
    }

    pub fn len(&self) -> u64 {
        self.tail - self.head
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![Tag::List as u8];
        for n in [self.version, self.head, self.tail] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out
    }

    pub fn decode(body: &[u8]) -> Option<Self> {
        let n = |i: usize| Some(u64::from_be_bytes(body.get(8 * i..8 * i + 8)?.try_into().ok()?));
        let meta = ListMeta {
            version: n(0)?,
            head: n(1)?,
            tail: n(2)?,
        };
        (meta.head <= meta.tail).then_some(meta)
    }

    /// Key of the element at `position` (head..tail).
    pub fn element_key(&self, position: u64) -> Vec<u8> {
        let mut k = self.prefix();
        k.extend_from_slice(&position.to_be_bytes());
        k
    }

    /// Where this list's elements begin.
    pub fn prefix(&self) -> Vec<u8> {
        let mut k = vec![RESERVED, b'l'];
        k.extend_from_slice(&self.version.to_be_bytes());
        k
    }
}

/// Big-endian bytes that sort as the scores do (IEEE 754 with the sign
/// flipped for positives and every bit flipped for negatives).
fn sortable(score: f64) -> [u8; 8] {
    let bits = score.to_bits();
    let key = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    key.to_be_bytes()
}

fn unsortable(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 { key & !(1 << 63) } else { !key })
}

/// Per-key write locks, striped: a read-modify-write of a hash or sorted
/// set, and any write that could race with one, holds its key's stripe.
/// sluice-io's mutex, so that a request waiting for a stripe raises its
/// holder (RCP §4.2.1).
///
/// Each stripe counts the writes made while holding it, so that `WATCH`
/// can tell whether a key may have changed: a count that moved means a
/// write to one of the stripe's keys (1 in the number of stripes: another
/// key). That aborts a watching transaction, as an optimistic lock may;
/// none is missed, since every write holds its key's stripe. A command
/// that writes nothing (GETDEL of a missing key, SET NX of a present one)
/// moves no count, as it touches no watched key in Redis.
pub struct KeyLocks {
    stripes: Vec<Mutex<u64>>,
}

/// Stripes held for a write.
pub struct Held<'a>(Vec<MutexGuard<'a, u64>>);

impl Held<'_> {
    /// Moves the stripes' counts: the holder wrote to their keys.
    pub fn wrote(&mut self) {
        for count in &mut self.0 {
            **count += 1;
        }
    }
}

/// Every stripe, held by a transaction while it runs: no other write can
/// start until it is let go.
pub struct AllHeld<'a>(Vec<MutexGuard<'a, u64>>);

impl AllHeld<'_> {
    /// The count of `stripe`.
    pub fn count(&self, stripe: usize) -> u64 {
        *self.0[stripe]
    }

    /// Moves the counts of `stripes`: the transaction wrote to their keys.
    pub fn wrote(&mut self, stripes: &[usize]) {
        for &s in stripes {
            *self.0[s] += 1;
        }
    }
}

impl KeyLocks {
    pub fn new(stripes: usize) -> Self {
        KeyLocks {
            stripes: (0..stripes.max(1)).map(|_| Mutex::new(0)).collect(),
        }
    }

    fn stripe(&self, key: &[u8]) -> usize {
        let mut h = rustc_hash::FxHasher::default();
        key.hash(&mut h);
        (h.finish() % self.stripes.len() as u64) as usize
    }

    /// The stripes of `keys`, in stripe order, each once.
    pub fn stripes_of<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) -> Vec<usize> {
        let mut ids: Vec<usize> = keys.into_iter().map(|k| self.stripe(k)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Locks `stripes`, given in stripe order ([`KeyLocks::stripes_of`])
    /// so that two writers of overlapping keys cannot deadlock.
    pub fn lock(&self, stripes: Vec<usize>) -> Held<'_> {
        Held(stripes.into_iter().map(|i| self.stripes[i].lock()).collect())
    }

    /// Locks every stripe, in order.
    pub fn lock_all(&self) -> AllHeld<'_> {
        AllHeld(self.stripes.iter().map(|s| s.lock()).collect())
    }

    /// The stripe of `key` and its count now.
    pub fn watch(&self, key: &[u8]) -> (usize, u64) {
        let stripe = self.stripe(key);
        (stripe, *self.stripes[stripe].lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scores_sort_as_their_bytes() {
        let scores = [
            f64::NEG_INFINITY,
            -1e9,
            -1.5,
            -0.0,
            0.0,
            1e-9,
            2.0,
            1e300,
            f64::INFINITY,
        ];
        for w in scores.windows(2) {
            assert!(sortable(w[0]) <= sortable(w[1]), "{} !<= {}", w[0], w[1]);
            assert_eq!(unsortable(u64::from_be_bytes(sortable(w[0]))).to_bits(), w[0].to_bits());
        }
    }

    #[test]
    fn index_keys_round_trip_and_stay_inside_their_set() {
        let m = ZsetMeta { version: 7, card: 0 };
        let k = m.score_key(-3.25, b"member");
        assert_eq!(m.parse_score_key(&k), Some((-3.25, b"member".to_vec())));
        assert!(k.as_slice() >= m.prefix(b's').as_slice() && k.as_slice() < m.end_of(b's').as_slice());
        let other = ZsetMeta { version: 8, card: 0 };
        assert_eq!(other.parse_score_key(&k), None);
        for kind in [b'm', b's'] {
            assert!(
                other.prefix(kind).as_slice() >= m.end_of(kind).as_slice(),
                "a later set's entries lie past this set's end"
            );
        }
        let last = ZsetMeta {
            version: u64::MAX,
            card: 0,
        };
        assert!(last.end_of(b'm').as_slice() > last.member_key(b"\xff\xff").as_slice());
        assert_eq!(ZsetMeta::decode(&m.encode()[1..]), Some(m));
        assert!(ZsetMeta::fresh().version < ZsetMeta::fresh().version);
        assert!(
            m.score_bound(-3.25, true).as_slice() > k.as_slice(),
            "exclusive: after every member"
        );
        assert!(m.score_bound(-3.25, false).as_slice() < k.as_slice());
    }

    #[test]
    fn set_members_lie_in_hash_order_inside_their_set() {
        let m = SetMeta { version: 7, card: 0 };
        let k = m.member_key(b"member");
        assert_eq!(
            m.parse_member_key(&k),
            Some((member_hash(b"member"), b"member".to_vec()))
        );
        assert!(k.as_slice() >= m.position(member_hash(b"member")).as_slice());
        assert!(k.as_slice() >= m.prefix().as_slice() && k.as_slice() < m.end().as_slice());
        let other = SetMeta { version: 8, card: 0 };
        assert_eq!(other.parse_member_key(&k), None);
        assert!(other.prefix().as_slice() >= m.end().as_slice());
        let last = SetMeta {
            version: u64::MAX,
            card: 0,
        };
        assert!(last.end().as_slice() > last.position(u64::MAX).as_slice());
        assert_eq!(SetMeta::decode(&m.encode()[1..]), Some(m));
        // On disk: a member's hash never changes.
        assert_eq!(member_hash(b"member"), 14_012_760_665_837_294_768);
    }

    #[test]
    fn stream_entries_lie_in_id_order_inside_their_stream() {
        let m = StreamMeta {
            version: 7,
            len: 2,
            last: (5, 1),
        };
        let (a, b, c) = (m.entry_key((5, 0)), m.entry_key((5, 1)), m.entry_key((6, 0)));
        assert!(a < b && b < c, "IDs sort as their keys");
        assert_eq!(m.parse_entry_key(&b), Some((5, 1)));
        assert!(c.as_slice() < m.end().as_slice() && a.as_slice() > m.prefix().as_slice());
        assert!(m.entry_key((u64::MAX, u64::MAX)).as_slice() < m.end().as_slice());
        assert_eq!(StreamMeta::decode(&m.encode()[1..]), Some(m));
        assert_eq!(untag(&m.encode()).map(|(t, _)| t), Some(Tag::Stream));
    }

    #[test]
    fn deadlines_travel_with_values() {
        let v = with_deadline(tagged(Tag::String, b"body"), Some(1_000));
        assert_eq!(decode_value(&v), Some((Tag::String, &b"body"[..], Some(1_000))));
        let plain = tagged(Tag::Hash, b"x");
        assert_eq!(with_deadline(plain.clone(), None), plain);
        assert_eq!(decode_value(&plain), Some((Tag::Hash, &b"x"[..], None)));
        assert_eq!(decode_value(b"x1234567"), None, "too short for a deadline and a tag");
        assert!(is_live(Some(1_000), 1_000) && !is_live(Some(1_000), 1_001) && is_live(None, u64::MAX));
    }

    #[test]
    fn damaged_values_are_told_apart() {
        assert_eq!(untag(b"x123"), None);
        assert_eq!(untag(b""), None);
        assert_eq!(decode_hash(&[1, 0, 0]), None);
        assert_eq!(ZsetMeta::decode(b"short"), None);
        assert!(check_user_key(b"\xffz").is_err() && check_user_key(b"k").is_ok());
    }

    proptest! {
        #[test]
        fn hashes_round_trip(fields in prop::collection::vec((any::<Vec<u8>>(), any::<Vec<u8>>()), 0..8)) {
            let v = encode_hash(&fields);
            let (tag, body) = untag(&v).unwrap();
            prop_assert_eq!(tag, Tag::Hash);
            prop_assert_eq!(decode_hash(body), Some(fields));
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(body in any::<Vec<u8>>()) {
            let _ = decode_hash(&body);
            let _ = ZsetMeta::decode(&body);
            let _ = SetMeta::decode(&body);
            let _ = StreamMeta::decode(&body);
            let _ = SetMeta { version: 1, card: 0 }.parse_member_key(&body);
            let _ = ZsetMeta { version: 1, card: 0 }.parse_score_key(&body);
        }
    }
}
