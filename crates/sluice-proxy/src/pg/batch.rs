//! Which ReadyForQuery answers what a client sent.
//!
//! A request through the proxy ends at the ReadyForQuery that answers the
//! last batch its client sent; a batch ends at a Sync, a Query or a
//! FunctionCall, and PostgreSQL answers each with one ReadyForQuery but
//! for two exceptions, which [`Batches`] follows as PostgreSQL's
//! `PostgresMain` does:
//!
//! - After an extended-protocol message (Parse, Bind, Describe, Execute,
//!   Close) fails, the server skips every message up to the next Sync,
//!   Query and FunctionCall included, and answers that Sync alone. Which
//!   message an ErrorResponse answers is told by position: each
//!   extended-protocol message is answered by one message that completes
//!   it (ParseComplete, BindComplete, CloseComplete, RowDescription or
//!   NoData, CommandComplete, PortalSuspended, EmptyQueryResponse) or by
//!   the ErrorResponse, in the order sent. So an ErrorResponse that
//!   arrives before every extended-protocol message sent ahead of the
//!   oldest unanswered Query is answered belongs to one of them, and that
//!   Query is skipped; one that arrives after is the Query's own, and a
//!   ReadyForQuery follows it.
//! - Syncs sent while the server reads a `COPY FROM STDIN` (libpq sends
//!   one right after the Execute of such a COPY) are ignored. The copy
//!   ends at the client's CopyDone or CopyFail (sent even before the
//!   CopyInResponse came: pgx sends its data without waiting), or at the
//!   server's ErrorResponse; after one that fails a copy started by an Execute, the
//!   server skips up to the next Sync as after any failed Execute. Which
//!   Syncs the server read before it failed the copy is not told: every
//!   Sync sent since the copy's Execute counts as ignored, so a client that
//!   sends a Sync after data the server rejects, before the error reaches
//!   it (libpq waits for the error), finds its request waiting for one
//!   more Sync, its slot parked meanwhile; so does one that sends a COPY
//!   by the extended protocol, its data, CopyDone and another Sync before
//!   the CopyInResponse comes (no driver known here does: pgx, pgjdbc and
//!   Npgsql copy by a simple Query, libpq waits).
//!
//! What is counted is what goes to the server: under transaction pooling
//! the proxy adds messages of its own (see `pg::prepared` and
//! `pg::reported`), a Sync and a Query among them, whose answers the
//! client never sees.
//!
//! ```
//! # use sluice_proxy::pg::batch::Batches;
//! let mut batches = Batches::default();
//! // Parse, then a Query and a Sync in the same batch: the Parse fails.
//! for tag in [b'P', b'Q', b'S'] {
//!     batches.sent(tag);
//! }
//! batches.failed(0);
//! // The Query is skipped: the one ReadyForQuery answers everything.
//! assert!(batches.ready());
//! ```

use std::collections::VecDeque;
use std::mem;

/// The batches a client sent that the server has not answered yet, and the
/// extended-protocol messages sent since the last one ended.
#[derive(Debug, Default)]
pub struct Batches {
    /// The messages ending a batch, sent and not yet answered, oldest
    /// first.
    ends: VecDeque<End>,
    /// Extended-protocol messages sent since the last batch ended.
    open: u32,
    /// An extended-protocol message failed with no Sync sent after it: the
    /// server skips what it is sent until the client's next Sync.
    skipping: bool,
    /// The server reads a COPY FROM STDIN (it sent CopyInResponse), until
    /// the client's CopyDone or CopyFail.
    copy_in: bool,
    /// Syncs sent since the client's last Execute: if that Execute started
    /// a copy-in, the server ignores them.
    syncs_since_execute: u32,
    /// The client sent CopyDone or CopyFail with no copy-in known since its
    /// last Query, FunctionCall or Execute: a copy whose CopyInResponse
    /// comes now is over already (pgx sends its data without waiting).
    ended_early: bool,
}

/// What an ErrorResponse means for the batches sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    /// Queries and FunctionCalls the server skips: no ReadyForQuery answers
    /// them.
    pub skipped: u32,
    /// Syncs sent during the copy-in the error ended: the server ignored
    /// them.
    pub ignored: u32,
}

/// A message that ends a batch.
#[derive(Debug, Clone, Copy)]
struct End {
    /// A Sync, the client's or the proxy's: it ends the server's skipping.
    sync: bool,
    /// Extended-protocol messages sent between the end before it and it.
    after: u32,
}

impl Batches {
    /// The client sent a message with `tag` to the server; returns how many
    /// Syncs sent earlier turned out to be ignored by a copy-in that this
    /// message ends (the prepared statements count them too).
    pub fn sent(&mut self, tag: u8) -> u32 {
        if matches!(tag, b'Q' | b'F' | b'E') {
            self.ended_early = false;
        }
        match tag {
            b'S' => {
                self.skipping = false;
                self.end(true);
                self.syncs_since_execute += 1;
            }
            // Skipped, a Query or FunctionCall is answered by nothing.
            b'Q' | b'F' if self.skipping => {}
            b'Q' | b'F' => {
                self.end(false);
                self.syncs_since_execute = 0;
            }
            b'c' | b'f' if self.copy_in => return self.copy_ended(),
            b'c' | b'f' => self.ended_early = true,
            // Flush, Terminate, CopyData and authentication responses ask
            // for no answer of their own here.
            b'd' | b'p' | b'H' | b'X' => {}
            _ => {
                self.open += 1;
                if tag == b'E' {
                    self.syncs_since_execute = 0;
                }
            }
        }
        0
    }

    /// Whether the server skips a message with `tag` sent now: any but a
    /// Sync after an extended-protocol message failed, before the next
    /// Sync.
    pub fn skips(&self, tag: u8) -> bool {
        self.skipping && tag != b'S'
    }

    /// The copy-in is over: the Syncs sent since its Execute were ignored,
    /// and the server did not end a batch there but counts on. Returns
    /// how many.
    fn copy_ended(&mut self) -> u32 {
        self.copy_in = false;
        let ignored = self.syncs_since_execute.min(self.ends.len() as u32);
        for end in self.ends.drain(self.ends.len() - ignored as usize..) {
            self.open += end.after;
        }
        self.syncs_since_execute = 0;
        ignored
    }

    fn end(&mut self, sync: bool) {
        self.ends.push_back(End { sync, after: self.open });
        self.open = 0;
    }

    /// The server sent CopyInResponse.
    /// Returns whether the server now waits on the client's data: not when
    /// the client ended the copy before this came.
    pub fn copy_in(&mut self) -> bool {
        self.copy_in = !mem::take(&mut self.ended_early);
        self.copy_in
    }

    /// The server reads a COPY FROM STDIN: it waits on the client's data.
    pub fn copying_in(&self) -> bool {
        self.copy_in
    }

    /// The server sent an ErrorResponse after `answered` of the
    /// extended-protocol messages sent since its last ReadyForQuery were
    /// answered. If one of those messages failed, the Queries and
    /// FunctionCalls before the next Sync are skipped. An error ends a
    /// copy-in too, with the client's CopyDone or CopyFail still to come
    /// or never sent: the Syncs it sent since the copy's Execute were
    /// ignored, and one started by an Execute failed as that Execute.
    pub fn failed(&mut self, answered: u32) -> Failed {
        let ignored = if self.copy_in { self.copy_ended() } else { 0 };
        Failed {
            skipped: self.skip_failed(answered),
            ignored,
        }
    }

    /// The Queries and FunctionCalls skipped for an error after `answered`
    /// extended-protocol messages were answered.
    fn skip_failed(&mut self, answered: u32) -> u32 {
        let extended = match self.ends.front() {
            // Nothing ends a batch yet: only an extended-protocol message
            // can have failed (or the server is ending the session).
            None => self.open > 0,
            Some(end) => !end.sync && answered < end.after,
        };
        if !extended {
            return 0;
        }
        let (mut skipped, mut messages) = (0, 0);
        while self.ends.front().is_some_and(|end| !end.sync) {
            skipped += 1;
            messages += self.ends.pop_front().map_or(0, |end| end.after);
        }
        // With no Sync sent after the failure, the server answers nothing
        // more until one comes, and the messages since the failure wait
        // for it.
        if self.ends.is_empty() {
            self.skipping = true;
            self.open += messages;
        }
        skipped
    }

    /// A ReadyForQuery came: it answers the oldest batch. Returns whether it
    /// answers everything the client sent.
    pub fn ready(&mut self) -> bool {
        self.ends.pop_front();
        self.answered_all()
    }

    /// Nothing the client sent awaits an answer.
    pub fn answered_all(&self) -> bool {
        self.ends.is_empty() && self.open == 0
    }

    /// Whether the server waits on the client with `answered` of the
    /// extended-protocol messages answered since its last ReadyForQuery:
    /// no batch's end is pending and every message sent since the last
    /// batch's end is answered (the client sent them with a Flush: a
    /// driver's prepare, a cursor between fetches; or the proxy flushed
    /// them for a client quiet without one), or one failed and the server
    /// waits for a Sync.
    pub fn flushed(&self, answered: u32) -> bool {
        self.ends.is_empty() && self.open > 0 && (self.skipping || answered >= self.open)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sent(batches: &mut Batches, tags: &[u8]) {
        for &tag in tags {
            batches.sent(tag);
        }
    }

    #[test]
    fn each_end_of_a_batch_is_answered_once() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PBES");
        sent(&mut batches, b"Q");
        assert!(!batches.ready(), "the Query's answer is still to come");
        assert!(batches.ready());
    }

    #[test]
    fn a_query_after_a_failed_parse_in_its_batch_is_skipped() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PBEQFS");
        assert_eq!(batches.failed(1).skipped, 2, "the Query and the FunctionCall");
        assert!(batches.ready(), "the Sync's ReadyForQuery answers all");
    }

    #[test]
    fn a_query_that_fails_after_its_batch_is_answered_is_not_skipped() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PBEQS");
        batches.failed(3);
        assert!(!batches.ready(), "the Query's own ReadyForQuery");
        assert!(batches.ready(), "the Sync's");
    }

    #[test]
    fn a_query_of_its_own_batch_fails_without_skipping() {
        let mut batches = Batches::default();
        sent(&mut batches, b"QS");
        batches.failed(0);
        assert!(!batches.ready());
        assert!(batches.ready());
    }

    #[test]
    fn after_a_failure_before_the_sync_queries_are_skipped_until_it() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PH");
        batches.failed(0);
        assert!(batches.ends.is_empty());
        sent(&mut batches, b"QF");
        assert!(batches.ends.is_empty(), "skipped, so never answered");
        sent(&mut batches, b"S");
        sent(&mut batches, b"Q");
        assert!(!batches.ready(), "the Query after the Sync runs");
        assert!(batches.ready());
    }

    #[test]
    fn a_sync_ends_the_skipping() {
        let mut batches = Batches::default();
        sent(&mut batches, b"P");
        batches.failed(0);
        assert!(batches.skips(b'Q') && !batches.skips(b'S'));
        sent(&mut batches, b"S");
        assert!(!batches.skips(b'Q'));
        sent(&mut batches, b"QS");
        assert!(!batches.ready(), "the Sync (the proxy's own, or the client's)");
        assert!(!batches.ready(), "the Query ran");
        assert!(batches.ready());
    }

    #[test]
    fn a_failed_sync_skips_nothing() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PBESQ");
        batches.failed(3);
        assert!(!batches.ready());
        assert!(batches.ready());
    }

    #[test]
    fn a_query_ends_the_extended_messages_before_it() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PBEQ");
        assert!(batches.ready(), "no Sync is owed after the Query");
    }

    #[test]
    fn syncs_during_a_copy_in_are_not_answered() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PBES");
        batches.copy_in();
        sent(&mut batches, b"dd");
        assert_eq!(batches.sent(b'c'), 1);
        sent(&mut batches, b"S");
        assert!(batches.ready());
    }

    #[test]
    fn a_copy_that_fails_ends_with_the_syncs_during_it_ignored() {
        // As libpq sends it: CopyDone and a Sync after the error came.
        let mut batches = Batches::default();
        sent(&mut batches, b"PBES");
        batches.copy_in();
        sent(&mut batches, b"dd");
        assert_eq!(batches.failed(2), Failed { skipped: 0, ignored: 1 });
        assert!(!batches.copying_in());
        assert!(batches.flushed(2), "the server waits for a Sync");
        assert_eq!(batches.sent(b'c'), 0, "the copy is over");
        sent(&mut batches, b"S");
        assert!(batches.ready());
        // A client that sends only a Sync after the error.
        sent(&mut batches, b"PBES");
        batches.copy_in();
        assert_eq!(batches.failed(2).ignored, 1);
        sent(&mut batches, b"S");
        assert!(batches.ready());
    }

    #[test]
    fn a_copy_ended_before_its_copy_in_response_leaves_no_copy_in() {
        // CopyData and CopyDone sent right after the Query, as pgx does.
        let mut batches = Batches::default();
        sent(&mut batches, b"Qdc");
        assert!(!batches.copy_in(), "the client waits on nothing of its own");
        assert!(!batches.copying_in());
        assert!(batches.ready());
        // A later batch's error skips nothing of another's.
        sent(&mut batches, b"PBES");
        assert_eq!(batches.failed(2), Failed { skipped: 0, ignored: 0 });
        assert!(batches.ready());
    }

    #[test]
    fn a_copy_done_after_a_failed_copy_ends_no_later_copy() {
        let mut batches = Batches::default();
        sent(&mut batches, b"Q");
        assert!(batches.copy_in());
        batches.failed(0);
        sent(&mut batches, b"c");
        assert!(batches.ready());
        sent(&mut batches, b"Q");
        assert!(batches.copy_in(), "the next COPY's server waits on its data");
    }

    #[test]
    fn a_copy_by_a_query_that_fails_is_answered_at_once() {
        let mut batches = Batches::default();
        sent(&mut batches, b"Q");
        batches.copy_in();
        sent(&mut batches, b"d");
        assert_eq!(batches.failed(0), Failed { skipped: 0, ignored: 0 });
        sent(&mut batches, b"c");
        assert!(batches.ready());
    }

    #[test]
    fn a_failure_before_a_sync_leaves_the_messages_after_it_awaited() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PQSBEH");
        batches.failed(0);
        assert!(!batches.flushed(0), "the Sync's answer is to come");
        assert!(!batches.ready(), "the Bind and Execute after the Sync are owed");
        assert!(!batches.flushed(1), "the Execute after the Sync runs");
        assert!(batches.flushed(2));
    }

    #[test]
    fn the_server_waits_on_the_client_once_all_before_a_flush_is_answered() {
        let mut batches = Batches::default();
        sent(&mut batches, b"PDH");
        assert!(!batches.flushed(1));
        assert!(batches.flushed(2));
        sent(&mut batches, b"BEH");
        assert!(!batches.flushed(3));
        batches.failed(3);
        assert!(batches.flushed(3), "after a failure the server waits for a Sync");
    }

    /// What PostgreSQL answers to one message: a completion, an
    /// ErrorResponse, a ReadyForQuery.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Answer {
        Completed,
        Failed,
        Ready,
    }

    /// PostgreSQL's answers to `messages` (each with whether it fails if
    /// run), as `PostgresMain` gives them: each with the index of the
    /// message it answers.
    fn server(messages: &[(u8, bool)]) -> Vec<(usize, Answer)> {
        let mut answers = Vec::new();
        let mut skipping = false;
        for (i, &(tag, fails)) in messages.iter().enumerate() {
            match tag {
                b'S' => {
                    skipping = false;
                    if fails {
                        answers.push((i, Answer::Failed));
                    }
                    answers.push((i, Answer::Ready));
                }
                b'H' => {}
                _ if skipping => {}
                b'Q' => {
                    // A Query's RowDescription and CommandComplete count as
                    // completions too; it may fail before or after them.
                    if i % 2 == 0 {
                        answers.push((i, Answer::Completed));
                    }
                    answers.push((i, if fails { Answer::Failed } else { Answer::Completed }));
                    answers.push((i, Answer::Ready));
                }
                // A FunctionCallResponse is no completion.
                b'F' => {
                    if fails {
                        answers.push((i, Answer::Failed));
                    }
                    answers.push((i, Answer::Ready));
                }
                _ if fails => {
                    answers.push((i, Answer::Failed));
                    skipping = true;
                }
                _ => answers.push((i, Answer::Completed)),
            }
        }
        answers
    }

    proptest! {
        /// Whatever the client sends and whichever messages fail, however
        /// the client's sending and the server's answers interleave, a
        /// ReadyForQuery is found to answer everything exactly when no
        /// message sent after the one it answers asks for anything more.
        #[test]
        fn a_request_ends_at_the_ready_for_query_that_answers_all_it_sent(
            messages in proptest::collection::vec((prop::sample::select(b"PBDECSQFH".to_vec()), any::<bool>()), 1..24),
            schedule in proptest::collection::vec(any::<bool>(), 48),
        ) {
            let answers = server(&messages);
            let mut batches = Batches::default();
            let (mut sent, mut next, mut answered) = (0, 0, 0);
            let mut turns = schedule.into_iter().chain(std::iter::repeat(true));
            while next < answers.len() {
                let (of, answer) = answers[next];
                // An answer comes only after the message it answers.
                if sent < messages.len() && (of >= sent || !turns.next().unwrap()) {
                    batches.sent(messages[sent].0);
                    sent += 1;
                    continue;
                }
                next += 1;
                match answer {
                    Answer::Completed => answered += 1,
                    Answer::Failed => _ = batches.failed(answered),
                    Answer::Ready => {
                        answered = 0;
                        let all = messages[of + 1..sent].iter().all(|&(tag, _)| tag == b'H');
                        prop_assert_eq!(batches.ready(), all, "at the ReadyForQuery for message {}", of);
                    }
                }
            }
            // Every answer delivered, no batch's end is left waiting.
            prop_assert!(batches.ends.is_empty());
        }
    }
}
