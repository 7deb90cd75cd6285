//! Redis Cluster's key space: 16384 hash slots, a key's slot the CRC16
//! (XMODEM) of the key, or of its hash tag, modulo 16384. Keys that share a
//! hash tag (`{user:1}:name`, `{user:1}:mail`) share a slot, which is how a
//! client keeps the keys of one multi-key command together.
//!
//! ```
//! use sluice_route::slot::{slot, SLOTS};
//!
//! assert_eq!(slot(b"123456789"), 0x31C3 % SLOTS);
//! assert_eq!(slot(b"{user:1}:name"), slot(b"{user:1}:mail"));
//! ```

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
}
