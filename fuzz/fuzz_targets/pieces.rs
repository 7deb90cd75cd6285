//! The property both Redis targets check: what a scanner finds in a buffer
//! must not depend on how the buffer arrives. The first input byte picks a
//! piece size of 1–16 bytes; the rest is the buffer.

use std::fmt::Debug;

use sluice_resp::Limits;

/// Small limits, so that the inputs reach them.
pub const LIMITS: Limits = Limits {
    max_args: 8,
    max_bulk: 64,
    max_inline: 128,
    unauthenticated: false,
};

/// Runs `scan(buf, step)` on the whole buffer and in pieces and compares.
pub fn same_whole_and_in_pieces<T: PartialEq + Debug>(data: &[u8], scan: impl Fn(&[u8], usize) -> T) {
    let Some((&step, buf)) = data.split_first() else { return };
    let whole = scan(buf, buf.len().max(1));
    let pieces = scan(buf, usize::from(step % 16) + 1);
    assert_eq!(whole, pieces);
}
