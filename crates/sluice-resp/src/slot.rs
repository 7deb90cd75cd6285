//! Redis Cluster's key space: 16384 hash slots, a key's slot the CRC16
//! (XMODEM) of the key, or of its hash tag, modulo 16384. Keys that share a
//! hash tag (`{user:1}:name`, `{user:1}:mail`) share a slot, which is how a
//! client keeps the keys of one multi-key command together.
//!
//! Here because two sides need the same answer: the router sends each key
//! to the shard of its slot, and a `sluice serve` shard told its slots
//! refuses a script that reaches a key of another one.
//!
//! ```
//! use sluice_resp::slot::{slot, SlotRanges, SLOTS};
//!
//! assert_eq!(slot(b"123456789"), 0x31C3 % SLOTS);
//! assert_eq!(slot(b"{user:1}:name"), slot(b"{user:1}:mail"));
//!
//! let ranges: SlotRanges = "0-99, 200".parse().unwrap();
//! assert!(ranges.contains(99) && ranges.contains(200) && !ranges.contains(100));
//! assert_eq!(ranges.to_string(), "0-99,200");
//! ```

use std::fmt;
use std::str::FromStr;

/// Hash slots of the key space.
pub const SLOTS: u16 = 16384;

const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The hash slot of `key`.
pub fn slot(key: &[u8]) -> u16 {
    CRC16.checksum(hash_tag(key)) % SLOTS
}

/// The part of `key` that is hashed: the bytes between the first `{` and
/// the first `}` after it, if there are any; otherwise the whole key (an
/// empty tag, `{}`, hashes the whole key, as in Redis).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(0) | None => key,
        Some(len) => &key[open + 1..open + 1 + len],
    }
}

/// Inclusive ranges of slots, written `"0-99,200,300-301"` (spaces around
/// the parts allowed): a shard's slots in the router's configuration, and
/// what the router tells the shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRanges(Vec<(u16, u16)>);

impl SlotRanges {
    /// The ranges, in the order written.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.0
    }

    pub fn contains(&self, slot: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }

    /// The first `at_most` ranges as [`Display`](fmt::Display) writes
    /// them, and how many more there are.
    pub fn brief(&self, at_most: usize) -> String {
        let first = SlotRanges(self.0.iter().take(at_most).copied().collect());
        match self.0.len().saturating_sub(at_most) {
            0 => first.to_string(),
            more => format!("{first} and {more} more"),
        }
    }
}

impl FromStr for SlotRanges {
    type Err = String;

    fn from_str(text: &str) -> Result<SlotRanges, String> {
        // More ranges than slots repeat some: refused before any is kept,
        // so that a long text costs no memory.
        if text.split(',').nth(SLOTS as usize).is_some() {
            return Err(format!("more than {SLOTS} ranges"));
        }
        let slot = |s: &str| -> Result<u16, String> {
            match s.trim().parse::<u16>() {
                Ok(n) if n < SLOTS => Ok(n),
                _ => Err(format!("{} is not a slot (0-{})", shown(s), SLOTS - 1)),
            }
        };
        let ranges = text
            .split(',')
            .map(|part| {
                let (lo, hi) = match part.split_once('-') {
                    Some((lo, hi)) => (slot(lo)?, slot(hi)?),
                    None => (slot(part)?, slot(part)?),
                };
                if lo > hi {
                    return Err(format!("the range {} runs backwards", shown(part)));
                }
                Ok((lo, hi))
            })
            .collect::<Result<_, _>>()?;
        Ok(SlotRanges(ranges))
    }
}

/// A part of the text, quoted, and cut short if long: the text comes from
/// the network, and an error must not echo all of it.
fn shown(part: &str) -> String {
    const AT_MOST: usize = 40;
    let part = part.trim();
    match part.char_indices().nth(AT_MOST) {
        Some((cut, _)) => format!("{:?}...", &part[..cut]),
        None => format!("{part:?}"),
    }
}

impl fmt::Display for SlotRanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.0.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            if lo == hi {
                write!(f, "{comma}{lo}")?;
            } else {
                write!(f, "{comma}{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_s() {
        // Values from `redis-cli CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b""), 0);
        assert_eq!(slot(b"{foo}bar"), 12182);
    }

    #[test]
    fn hash_tags_follow_redis_s_rules() {
        assert_eq!(hash_tag(b"{a}b"), b"a");
        assert_eq!(hash_tag(b"x{a}{b}"), b"a", "the first tag");
        assert_eq!(hash_tag(b"{}a"), b"{}a", "an empty tag hashes the whole key");
        assert_eq!(hash_tag(b"{a"), b"{a", "no closing brace");
        assert_eq!(hash_tag(b"a}{b}"), b"b");
    }

    #[test]
    fn ranges_parse_and_print_back() {
        let r: SlotRanges = " 0-5460 ,16383".parse().unwrap();
        assert_eq!(r.ranges(), &[(0, 5460), (16383, 16383)]);
        assert_eq!(r.to_string().parse::<SlotRanges>().unwrap(), r);
        assert!(r.contains(0) && r.contains(5460) && r.contains(16383) && !r.contains(5461));
        assert_eq!(r.brief(1), "0-5460 and 1 more");
        assert_eq!(r.brief(2), "0-5460,16383");
    }

    proptest::proptest! {
        /// Any text is a slot set or an error, never a panic (it arrives
        /// from the network in `CONFIG SET shard-slots`); a set prints as
        /// text that parses back to it.
        #[test]
        fn any_text_parses_or_is_refused(text in "[0-9, -]{0,24}|\\PC{0,24}") {
            if let Ok(ranges) = text.parse::<SlotRanges>() {
                proptest::prop_assert_eq!(ranges.to_string().parse::<SlotRanges>(), Ok(ranges.clone()));
                proptest::prop_assert!(ranges.ranges().iter().all(|&(lo, hi)| lo <= hi && hi < SLOTS));
            }
        }
    }

    #[test]
    fn bad_ranges_are_named() {
        let err = |text: &str| text.parse::<SlotRanges>().unwrap_err();
        assert_eq!(err("16384"), "\"16384\" is not a slot (0-16383)");
        assert_eq!(err("5-2"), "the range \"5-2\" runs backwards");
        assert_eq!(err(""), "\"\" is not a slot (0-16383)");
        assert_eq!(err("1-x"), "\"x\" is not a slot (0-16383)");
        assert_eq!(err(&"0,".repeat(16384)), "more than 16384 ranges");
        assert_eq!(
            err(&"x".repeat(100)),
            format!("\"{}\"... is not a slot (0-16383)", "x".repeat(40))
        );
        assert!("0,".repeat(16383).trim_end_matches(',').parse::<SlotRanges>().is_ok());
    }
}
