//! Transactions as Redis has them: `MULTI` starts queueing the
//! connection's commands (each answered `QUEUED`), `EXEC` runs them as
//! one, `DISCARD` drops them; `WATCH` makes the next `EXEC` run nothing
//! (a nil reply) if a watched key may have been written since.
//!
//! `EXEC` holds every key stripe while it runs, so no other write starts
//! or is under way, and its commands' writes reach the store in one batch
//! ([`super::store::atomically`]): other clients read all of them or none,
//! and a crash keeps all of them or none. Commands that only read run
//! beside it and see the store before or after it, never between.
//!
//! As in Redis, a command refused while queueing (unknown, or the wrong
//! number of arguments) discards the whole transaction at `EXEC`
//! (`EXECABORT`), while a command that fails when it runs (a wrong type,
//! a value that is not a number) fails alone and the others take effect.
//!
//! A transaction holds at most [`MAX_QUEUED_BYTES`] of queued commands
//! (its writes travel as one batch, in memory and in one WAL record); the
//! command that would pass the bound is refused, naming it, and with it
//! the transaction.
//!
//! A watched key that expires before `EXEC` aborts it too, as in Redis.
//!
//! Departure from Redis: a watched key counts as written when a write was
//! made holding its stripe (see [`crate::keyspace::KeyLocks`]): a write to
//! another key of the same stripe, or one the store refused, also aborts
//! the transaction, which the client retries as after any conflict.

use crate::keyspace::KeyLocks;
use crate::resp::Reply;

/// The most bytes of arguments a transaction may queue.
pub(crate) const MAX_QUEUED_BYTES: usize = 64 << 20;

/// One connection's transaction state.
#[derive(Default)]
pub(crate) struct Transaction {
    /// The commands queued since `MULTI`; `None` outside one.
    queued: Option<Vec<Vec<Vec<u8>>>>,
    /// Bytes of their arguments.
    bytes: usize,
    /// A command was refused while queueing.
    refused: bool,
    /// Stripes of the watched keys and their counts when watched.
    watched: Vec<(usize, u64)>,
    /// The earliest deadline (unix ms) of a watched key that was live
    /// when watched: once past, the key has changed (it expired), and
    /// EXEC aborts, as in Redis.
    expires: Option<u64>,
}

/// What `EXEC` runs: the queued commands, and what decides whether to
/// run them (the watched stripes' counts, the watched keys' earliest
/// deadline).
pub(crate) enum Exec {
    Run(Vec<Vec<Vec<u8>>>, Vec<(usize, u64)>, Option<u64>),
    Answer(Reply),
}

impl Transaction {
    /// Whether commands are queued rather than run.
    pub fn queueing(&self) -> bool {
        self.queued.is_some()
    }

    /// How many commands are queued, inside `MULTI`.
    pub fn queued(&self) -> Option<usize> {
        self.queued.as_ref().map(Vec::len)
    }

    /// A command was refused; inside `MULTI`, that dooms the transaction.
    pub fn refused(&mut self) {
        self.refused |= self.queueing();
    }

    /// Queues `args`, unless that would take the queue past `limit` bytes.
    pub fn queue(&mut self, args: &[Vec<u8>], limit: usize) -> Reply {
        let bytes = self.bytes + args.iter().map(Vec::len).sum::<usize>();
        if bytes > limit {
            self.refused = true;
            return Reply::error(format!(
                "the transaction would queue more than {limit} bytes of commands; it is discarded at EXEC"
            ));
        }
        self.bytes = bytes;
        if let Some(q) = &mut self.queued {
            q.push(args.to_vec());
        }
        Reply::Simple("QUEUED".into())
    }

    pub fn multi(&mut self) -> Reply {
        if self.queueing() {
            return Reply::error("MULTI calls can not be nested");
        }
        self.queued = Some(Vec::new());
        Reply::ok()
    }

    pub fn discard(&mut self) -> Reply {
        if !self.queueing() {
            return Reply::error("DISCARD without MULTI");
        }
        *self = Transaction::default();
        Reply::ok()
    }

    /// Watches `keys`; `deadline` reads a key's deadline (unix ms) if it
    /// is live and has one. A key is read after its count, so that a write
    /// in between moves the count.
    pub fn watch(
        &mut self,
        locks: &KeyLocks,
        keys: &[Vec<u8>],
        deadline: impl Fn(&[u8]) -> Result<Option<u64>, Reply>,
    ) -> Reply {
        if self.queueing() {
            return Reply::error("WATCH inside MULTI is not allowed");
        }
        for k in keys {
            self.watched.push(locks.watch(k));
            match deadline(k) {
                Ok(Some(d)) => self.expires = Some(self.expires.map_or(d, |e| e.min(d))),
                Ok(None) => {}
                Err(refusal) => return refusal,
            }
        }
        Reply::ok()
    }

    pub fn unwatch(&mut self) -> Reply {
        self.watched.clear();
        self.expires = None;
        Reply::ok()
    }

    /// Ends the transaction for `EXEC`: what to run, or the answer.
    pub fn exec(&mut self) -> Exec {
        let Some(queued) = self.queued.take() else {
            return Exec::Answer(Reply::error("EXEC without MULTI"));
        };
        let done = std::mem::take(self);
        if done.refused {
            return Exec::Answer(Reply::Error(
                "EXECABORT Transaction discarded because of previous errors.".into(),
            ));
        }
        Exec::Run(queued, done.watched, done.expires)
    }
}

/// Whether a command runs at once inside `MULTI` rather than being queued.
pub(crate) fn runs_at_once(name: &str) -> bool {
    matches!(name, "multi" | "exec" | "discard" | "watch" | "quit")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_queue_past_its_bound_is_refused_and_dooms_the_transaction() {
        let mut t = Transaction::default();
        t.multi();
        assert_eq!(t.queue(&args(&["SET", "k", "v"]), 8), Reply::Simple("QUEUED".into()));
        let refused = t.queue(&args(&["SET", "k", "v"]), 8);
        assert!(
            matches!(&refused, Reply::Error(e) if e.contains("more than 8 bytes")),
            "{refused:?}"
        );
        assert!(matches!(t.exec(), Exec::Answer(Reply::Error(e)) if e.starts_with("EXECABORT")));
        assert!(!t.queueing(), "EXEC ends the transaction either way");
    }

    #[test]
    fn exec_hands_over_the_queue_and_what_was_watched() {
        let locks = KeyLocks::new(16);
        let mut t = Transaction::default();
        assert_eq!(t.watch(&locks, &args(&["k"]), |_| Ok(Some(9))), Reply::ok());
        assert_eq!(t.watch(&locks, &args(&["j"]), |_| Ok(Some(5))), Reply::ok());
        assert_eq!(t.watch(&locks, &args(&["i"]), |_| Ok(None)), Reply::ok());
        t.multi();
        t.queue(&args(&["GET", "k"]), MAX_QUEUED_BYTES);
        match t.exec() {
            Exec::Run(queued, watched, expires) => {
                assert_eq!(queued, vec![args(&["GET", "k"])]);
                assert_eq!(watched, ["k", "j", "i"].map(|k| locks.watch(k.as_bytes())));
                assert_eq!(expires, Some(5), "the earliest deadline");
            }
            Exec::Answer(r) => panic!("{r:?}"),
        }
        assert!(matches!(t.exec(), Exec::Answer(Reply::Error(e)) if e == "ERR EXEC without MULTI"));
    }
}
