//! A shard's gate: at most `slots` sub-requests at the shard at once, the
//! waiting ones let through in the order a sluice-core policy chooses.
//!
//! With `coop` that is request order: the sub-request of the request that
//! arrived first at the router goes first, and the sub-requests of one
//! request follow each other. It is the cooperative scheduler of Jo et al.
//! (§4.2) applied where the router meets a back end that cannot read a
//! request id (a stock Redis): the order is kept by who enters the
//! shard's pipeline next, since Redis runs the pipeline's commands in the
//! order they were written. In front of `sluice serve` the gate is wide (`slots` at least the
//! client concurrency) and the order is kept in the shard's I/O queues.
//!
//! Contract: every [`Gate::enter`] that returns holds one of `slots`
//! passes until its [`Pass`] is dropped; a pass freed goes to the waiter
//! the policy pops, never to a newcomer while someone waits. A waiter that
//! gives up (its future dropped) is skipped, and a pass granted to it in
//! that instant is handed on, so no pass is lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use sluice_core::device::FlatDevice;
use sluice_core::policy::{Policy, PolicySpec};
use sluice_core::{Ctx, Job, Nanos};
use tokio::sync::oneshot;

pub struct Gate {
    state: Mutex<State>,
    epoch: Instant,
}

struct State {
    policy: Box<dyn Policy>,
    /// Passes not held by anyone.
    free: usize,
    /// Waiters by their job's `seq`.
    waiters: HashMap<u64, oneshot::Sender<()>>,
    next_seq: u64,
}

/// One of the gate's passes, given back when dropped.
pub struct Pass {
    gate: Arc<Gate>,
}

impl Gate {
    /// A gate of `slots` passes, waiters ordered by `order`.
    pub fn new(slots: usize, order: PolicySpec) -> Arc<Gate> {
        let policy = order
            .build(&Default::default(), Default::default())
            .expect("the default options of a policy are valid");
        Arc::new(Gate {
            state: Mutex::new(State {
                policy,
                free: slots,
                waiters: HashMap::new(),
                next_seq: 0,
            }),
            epoch: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements; a panic elsewhere
        // while holding the lock leaves nothing half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// Waits for a pass for a sub-request of the request `ctx`.
    pub async fn enter(self: &Arc<Self>, ctx: Ctx) -> Pass {
        let rx = {
            let mut s = self.lock();
            if s.free > 0 && s.waiters.is_empty() {
                s.free -= 1;
                return Pass { gate: self.clone() };
            }
            let seq = s.next_seq;
            s.next_seq += 1;
            let (tx, rx) = oneshot::channel();
            s.waiters.insert(seq, tx);
            let now = self.now();
            s.policy.push(Job::new(seq, ctx, 0, now).with_tag(seq), now);
            rx
        };
        let mut waiting = Waiting {
            gate: self,
            rx: Some(rx),
        };
        let granted = waiting.rx.as_mut().expect("set above").await;
        waiting.rx = None;
        granted.expect("a waiter's sender is dropped only after it is sent to or skipped");
        Pass { gate: self.clone() }
    }

    /// A pass given back: to the next living waiter, or to the free ones.
    fn release(&self) {
        let mut s = self.lock();
        let now = self.now();
        while let Some(job) = s.policy.pop(now, &FlatDevice::default()) {
            if let Some(tx) = s.waiters.remove(&job.tag) {
                if tx.send(()).is_ok() {
                    return;
                }
            }
        }
        s.free += 1;
    }

    /// Sub-requests waiting for a pass.
    pub fn waiting(&self) -> usize {
        self.lock().waiters.len()
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.gate.release();
    }
}

/// A wait in progress; if dropped before its pass arrives, the pass it
/// may have been sent in the meantime is given back.
struct Waiting<'a> {
    gate: &'a Arc<Gate>,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.gate.release();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(id: u64) -> Ctx {
        Ctx::new(id, 0)
    }

    #[tokio::test]
    async fn waiters_go_in_request_order_under_coop() {
        let gate = Gate::new(1, PolicySpec::Coop);
        let first = gate.enter(ctx(0)).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for id in [5u64, 3, 9, 1] {
            let (gate, tx) = (gate.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let _pass = gate.enter(ctx(id)).await;
                tx.send(id).unwrap();
            }));
            tokio::task::yield_now().await;
        }
        while gate.waiting() < 4 {
            tokio::task::yield_now().await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(order, vec![1, 3, 5, 9]);
    }

    #[tokio::test]
    async fn waiters_go_in_arrival_order_under_fifo_and_a_dropped_waiter_loses_no_pass() {
        let gate = Gate::new(1, PolicySpec::Fifo);
        let first = gate.enter(ctx(0)).await;
        let gone = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter(ctx(1)).await })
        };
        while gate.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        assert!(gone.await.is_err());
        drop(first);
        // The one pass is free again: two entries in a row succeed.
        drop(gate.enter(ctx(7)).await);
        drop(gate.enter(ctx(8)).await);
        assert_eq!(gate.lock().free, 1);
    }
}
