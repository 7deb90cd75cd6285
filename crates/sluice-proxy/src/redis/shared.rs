//! The first phase of a Redis session: while a client sends only commands
//! that neither read nor change connection state ([`shareable`]), they go
//! over a shared upstream connection ([`Mux`]) instead of one of its own.
//! A fresh connection is in Redis's default state (database 0, user
//! `default` unauthenticated, RESP2, no name, no transaction), so such a
//! command gets the same answer on any shared connection as on a dedicated
//! one. The first command that is not shareable (SELECT, AUTH, HELLO,
//! CLIENT, MULTI, WATCH, a blocking command, SUBSCRIBE, ...) ends the
//! phase: once every earlier command is answered, the session dials its own
//! upstream connection and goes on as [`super::session`] describes, from
//! that command on.
//!
//! Departure from one upstream connection per client, the design this
//! replaced (and what PostgreSQL sessions keep): with a connection per
//! client, each command costs the proxy two reads and two writes on 2
//! shared cores, and redis-benchmark runs at 0.54–0.73× direct
//! (docs/BENCHMARKS.md, "`sluice proxy` in front of Redis"); sharing only
//! what cannot tell the difference keeps session semantics and batches the
//! rest. `shared_upstreams = 0` restores one connection per client from
//! the start.

use std::io;

use crate::socket::{self, ReadHalf, Stream, WriteHalf};
use bytes::{Buf, Bytes, BytesMut};
use sluice_resp::{error_reply, CommandParser, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use super::command::{shareable, Args};
use super::context::RedisContext;
use super::mux::{Answer, Mux};
use crate::buffer::room_to_read;
use crate::relay::{admitted, Backlog, Outcome, Tenancy};

/// How the shared phase ended.
pub(crate) enum Phase {
    /// The session is over: the client left, broke the protocol, or the
    /// proxy is shutting down.
    Done,
    /// A command that needs a connection of its own is first in the buffer.
    Dedicated,
}

/// What the client hears next, in order. The slot of a command sent to a
/// lane is the lane's to give back (see [`Mux`]).
enum Entry {
    Reply {
        answer: oneshot::Receiver<Answer>,
        outcome: Outcome,
    },
    /// The proxy's own answer: a refusal or a protocol error.
    Answer(Bytes),
}

/// Serves `client` over lane `lane` of `mux` until the phase ends. `buf`
/// keeps what the client sent beyond it.
pub(crate) async fn serve(
    client: &mut Stream,
    buf: &mut BytesMut,
    who: &Tenancy,
    ctx: &RedisContext,
    (mux, lane): (&Mux, usize),
    shutdown: watch::Receiver<bool>,
) -> io::Result<Phase> {
    let (rd, wr) = socket::split(client);
    let (entries, heard) = mpsc::unbounded_channel();
    let backlog = super::backlog();
    let to_upstream = ToUpstream {
        client: rd,
        buf,
        parser: CommandParser::new(Limits {
            max_bulk: ctx.max_message,
            ..Limits::default()
        }),
        who,
        ctx,
        mux,
        lane,
        entries,
        backlog: &backlog,
        held: false,
        eof: false,
    };
    let (phase, answered) = tokio::join!(to_upstream.run(shutdown), answer(wr, heard, &backlog));
    answered?;
    phase
}

struct ToUpstream<'a> {
    client: ReadHalf<'a>,
    buf: &'a mut BytesMut,
    parser: CommandParser,
    who: &'a Tenancy,
    ctx: &'a RedisContext,
    mux: &'a Mux,
    lane: usize,
    entries: mpsc::UnboundedSender<Entry>,
    /// What waits for the client (see [`Backlog`]).
    backlog: &'a Backlog,
    /// Complete commands wait in `buf` for the backlog to have room.
    held: bool,
    /// The client closed its side; what it sent before is still served.
    eof: bool,
}

impl ToUpstream<'_> {
    /// Sends every complete command, then reads more, until the phase ends.
    /// Returning drops `entries`, which lets the answering side finish.
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> io::Result<Phase> {
        loop {
            if *shutdown.borrow_and_update() {
                return Ok(Phase::Done);
            }
            if let Some(phase) = self.send_commands().await {
                return Ok(phase);
            }
            if self.eof && !self.held {
                return Ok(Phase::Done);
            }
            let before_auth = self.ctx.upstream_auth.required();
            let read_more = super::reads_more(self.held, self.eof, before_auth, self.buf.len());
            if read_more {
                room_to_read(self.buf);
            }
            tokio::select! {
                read = self.client.read_buf(self.buf), if read_more => self.eof = read? == 0,
                _ = self.backlog.changed(), if self.held => {}
                _ = shutdown.changed() => return Ok(Phase::Done),
            }
        }
    }

    /// Sends the complete commands in the buffer that the backlog has room
    /// for; `Some` ends the phase.
    async fn send_commands(&mut self) -> Option<Phase> {
        self.held = false;
        loop {
            if !self.backlog.has_room() {
                self.held = true;
                return None;
            }
            // A client here has not authenticated (AUTH ends the phase).
            self.parser.set_before_auth(self.ctx.upstream_auth.required());
            let len = match self.parser.parse(self.buf) {
                Ok(Some(len)) => len,
                Ok(None) => return None,
                Err(e) => {
                    self.tell(Entry::Answer(error_reply(&e.to_string())));
                    return Some(Phase::Done);
                }
            };
            let args = Args::new(&self.buf[..len], self.parser.args());
            if args.is_empty() {
                self.buf.advance(len);
                continue;
            }
            if !shareable(args) {
                return Some(Phase::Dedicated);
            }
            let command = self.buf.split_to(len).freeze();
            let entry = match admitted(self.who, self.ctx.gate.admit(&self.who.tenant).await) {
                Ok((slot, outcome)) => Entry::Reply {
                    answer: self.mux.call(self.lane, command, slot),
                    outcome,
                },
                Err(refusal) => Entry::Answer(error_reply(&refusal.to_string())),
            };
            self.tell(entry);
        }
    }

    fn tell(&self, entry: Entry) {
        self.backlog.owe();
        // The answering side outlives this one: it stops only when
        // `entries` is dropped or the client is gone, when nothing is lost.
        let _ = self.entries.send(entry);
    }
}

/// Writes the answers in order, as many at once as are ready, until the
/// sending side is done and everything it sent is answered.
async fn answer(
    mut client: WriteHalf<'_>,
    mut heard: mpsc::UnboundedReceiver<Entry>,
    backlog: &Backlog,
) -> io::Result<()> {
    let mut out = BytesMut::new();
    loop {
        let entry = match heard.try_recv() {
            Ok(entry) => entry,
            Err(_) => {
                flush(&mut client, &mut out, backlog).await?;
                match heard.recv().await {
                    Some(entry) => entry,
                    None => return Ok(()),
                }
            }
        };
        match entry {
            Entry::Answer(bytes) => out.extend_from_slice(&bytes),
            Entry::Reply { mut answer, outcome } => {
                let reply = match answer.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => {
                        flush(&mut client, &mut out, backlog).await?;
                        (&mut answer).await.ok()
                    }
                    received => received.ok(),
                };
                let reply = match reply {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(why)) => error_reply(&why),
                    None => error_reply("sluice: the shared upstream went away"),
                };
                outcome.finish(reply.first() == Some(&b'-'));
                out.extend_from_slice(&reply);
            }
        }
        backlog.set_bytes(out.len());
        backlog.paid();
    }
}

async fn flush(client: &mut WriteHalf<'_>, out: &mut BytesMut, backlog: &Backlog) -> io::Result<()> {
    if !out.is_empty() {
        client.write_all(out).await?;
        out.clear();
        backlog.set_bytes(0);
    }
    Ok(())
}
