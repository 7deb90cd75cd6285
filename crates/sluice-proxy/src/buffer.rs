//! Read buffers: how much a session asks of the kernel per read, and how
//! little an idle one keeps.

use bytes::BytesMut;

/// Bytes asked of the kernel per read.
pub(crate) const READ_SIZE: usize = 16 * 1024;

/// What a session's empty read buffer is cut back to: more than a
/// statement and its answer usually take, and far less than `READ_SIZE`.
const IDLE_READ_SIZE: usize = 2 * 1024;

/// Makes room in a session's `buf` for its next read. An empty buffer is
/// cut back to `IDLE_READ_SIZE`, so that a session waiting on its client or
/// server holds that much and not the largest read it ever made; one that
/// holds part of a message gets `READ_SIZE` more. With every read buffer
/// at `READ_SIZE`, 5,000 idle PostgreSQL clients cost 6.5 KiB more each,
/// and their heap grew further each time as many came again
/// (docs/BENCHMARKS.md, "Idle PostgreSQL clients").
///
/// An empty buffer with half of `IDLE_READ_SIZE` or more left is read into
/// as it is: making room moves its start back, a call that costs more than
/// the read it would serve (docs/BENCHMARKS.md, "Polled when woken").
pub(crate) fn room_to_read(buf: &mut BytesMut) {
    if !buf.is_empty() {
        buf.reserve(READ_SIZE);
    } else if buf.capacity() > IDLE_READ_SIZE {
        *buf = BytesMut::with_capacity(IDLE_READ_SIZE);
    } else if buf.capacity() < IDLE_READ_SIZE / 2 {
        buf.reserve(IDLE_READ_SIZE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_buffer_is_cut_back_and_a_partial_message_gets_a_full_read() {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        room_to_read(&mut buf);
        assert_eq!(buf.capacity(), IDLE_READ_SIZE, "an empty buffer after a large read");
        buf.extend_from_slice(&[0; IDLE_READ_SIZE]);
        room_to_read(&mut buf);
        assert!(
            buf.capacity() - buf.len() >= READ_SIZE,
            "a full buffer is given a full read"
        );
        let mut small = BytesMut::new();
        room_to_read(&mut small);
        assert!(small.capacity() >= IDLE_READ_SIZE, "a new buffer is given room");
    }
}
