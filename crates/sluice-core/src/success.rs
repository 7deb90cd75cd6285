//! The success rate U of TraQIOS §3.2.2: the fraction of recently finished
//! transactions that met their deadline, over a window of the last `window`
//! finished transactions that had one. The paper says only "as monitored by
//! the system"; a sliding window keeps U responsive to the current load.
//! Before any transaction has finished, U is 1 (nothing has been missed).

use std::collections::VecDeque;

use crate::ctx::Ctx;
use crate::time::Nanos;

#[derive(Clone, Debug)]
pub struct SuccessRate {
    window: usize,
    recent: VecDeque<bool>,
    met: usize,
}

impl SuccessRate {
    /// A window of `window` transactions (at least 1).
    pub fn new(window: usize) -> Self {
        let window = window.max(1);
        SuccessRate {
            window,
            recent: VecDeque::with_capacity(window),
            met: 0,
        }
    }

    /// Records a finished request; requests without a deadline are ignored.
    pub fn record(&mut self, ctx: &Ctx, finish: Nanos) {
        let Some(deadline) = ctx.deadline else {
            return;
        };
        let met = finish <= deadline;
        if self.recent.len() == self.window && self.recent.pop_front() == Some(true) {
            self.met -= 1;
        }
        self.recent.push_back(met);
        self.met += usize::from(met);
    }

    /// U in [0, 1].
    pub fn rate(&self) -> f64 {
        if self.recent.is_empty() {
            1.0
        } else {
            self.met as f64 / self.recent.len() as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_forgets_old_outcomes() {
        let mut u = SuccessRate::new(3);
        assert_eq!(u.rate(), 1.0);
        let ctx = Ctx::new(1, 0).with_deadline(10);
        u.record(&ctx, 20); // miss
        u.record(&ctx, 5); // met
        assert_eq!(u.rate(), 0.5);
        u.record(&ctx, 5);
        u.record(&ctx, 5); // the miss leaves the window
        assert_eq!(u.rate(), 1.0);
        u.record(&Ctx::new(2, 0), 99); // no deadline: ignored
        assert_eq!(u.rate(), 1.0);
    }
}
