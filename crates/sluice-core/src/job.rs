//! A job: one unit of work waiting at a stage, on behalf of a request (its
//! [`Ctx`]). What the unit is depends on the stage: at an I/O stage (the
//! simulator's disk, sluice-io's dispatch) it is one physical I/O R_{i,x}
//! of TraQIOS §2, with a device position (block number B_{i,x}, a cylinder
//! on the seek disk) and its place among its request's accesses; at a
//! gate (the proxy's, the router's per-shard gate) it is a whole database
//! request or sub-request waiting to be let in, and the position and
//! access counts go unused.

use crate::ctx::Ctx;
use crate::time::Nanos;

/// One unit of work waiting at a stage: an I/O, or a request at a gate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Job {
    /// Unique per driver; ties between otherwise equal jobs break on it.
    pub seq: u64,
    pub ctx: Ctx,
    /// Device position: a cylinder for the seek disk, a block otherwise.
    pub pos: u64,
    /// 1-based index x of this access among its request's page accesses.
    pub index: u32,
    /// M_{i,x}: accesses the request is still expected to make, this one
    /// included, never below 1 (TraQIOS §3.2.2: an access beyond the
    /// estimate "will leave M_i equal to 1").
    pub remaining: u32,
    /// When the job was pushed.
    pub issued: Nanos,
    /// The driver's handle for the job (a slot, a buffer, a waiter);
    /// policies never look at it.
    pub tag: u64,
}

impl Job {
    /// A job for `ctx` at `pos`, the first access of its request.
    pub fn new(seq: u64, ctx: Ctx, pos: u64, issued: Nanos) -> Self {
        Job {
            seq,
            ctx,
            pos,
            index: 1,
            remaining: ctx.est_ios.max(1),
            issued,
            tag: 0,
        }
    }

    pub fn with_tag(mut self, tag: u64) -> Self {
        self.tag = tag;
        self
    }

    /// Sets the access index x and derives M = max(N - x + 1, 1).
    pub fn at_index(mut self, index: u32) -> Self {
        self.index = index.max(1);
        self.remaining = self.ctx.est_ios.saturating_sub(self.index - 1).max(1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_counts_this_access_and_floors_at_one() {
        let ctx = Ctx::new(1, 0).with_est_ios(3);
        assert_eq!(Job::new(0, ctx, 0, 0).remaining, 3);
        assert_eq!(Job::new(0, ctx, 0, 0).at_index(3).remaining, 1);
        assert_eq!(Job::new(0, ctx, 0, 0).at_index(7).remaining, 1);
    }
}
