//! One Redis client connection through the proxy (issue 5, §2 "Requests"),
//! on its own upstream connection once the shared phase ([`super::shared`])
//! has handed it over (or from the start with `shared_upstreams = 0`):
//! every command is admitted by the gate before it is forwarded and holds
//! its slot until its reply is complete; MULTI…EXEC holds one slot from
//! MULTI to the reply of EXEC or DISCARD; pipelined commands are admitted
//! and answered in order. Blocking commands pass through outside admission,
//! and after SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE or MONITOR the connection
//! becomes a plain byte stream (even after the client unsubscribes: from
//! then on its commands are not admitted, which is rare and harmless).
//!
//! A refused command gets `-ERR <refusal>` in its place among the replies.
//! A refused MULTI refuses the whole transaction: every command up to EXEC
//! or DISCARD gets the same error and none reaches the server, so no command
//! meant to be atomic runs on its own.

use std::collections::VecDeque;
use std::io;
use std::mem;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::command::{classify, Args, Kind};
use super::resp::{CommandParser, Reply, ReplyScanner};
use super::shared::{self, Phase};
use crate::client::Peer;
use crate::config::TenantKey;
use crate::gate::{Refusal, Slot};
use crate::session::{admit, drive, room_to_read, ClientEnd, Context, Flags, Outcome, Who};
use crate::socket::{self, ReadHalf, Stream, WriteHalf};

/// What the upstream → client direction does when it reaches an entry.
enum Pending {
    /// A reply from the server completes this command.
    Reply {
        slot: Option<Slot>,
        outcome: Option<Outcome>,
        rename: Option<Arc<str>>,
    },
    /// The proxy answers this command itself, in its place among the replies.
    Answer(Bytes),
    /// From here on the connection is a byte stream.
    Stream,
}

/// What the two directions share.
#[derive(Default)]
struct State {
    /// Commands sent upstream (or answered by the proxy), oldest first.
    pending: VecDeque<Pending>,
    /// A new tenant name the server accepted (AUTH, HELLO, CLIENT SETNAME).
    rename: Option<Arc<str>>,
    /// A transaction is open: draining waits for its EXEC or DISCARD.
    in_tx: bool,
}

struct Shared {
    state: Mutex<State>,
    flags: Flags,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, entry: Pending) {
        let answered_here = matches!(entry, Pending::Answer(_));
        self.lock().pending.push_back(entry);
        if answered_here {
            self.flags.wake.notify_one();
        }
    }
}

/// Serves one client: connects upstream, then relays until either side ends.
pub(crate) async fn serve(
    mut client: Stream,
    peer: &Peer,
    ctx: &Context,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let name = ctx.tenant_by_address(peer).unwrap_or_else(|| "default".into());
    let who = ctx.who(&name);
    let mut buf = BytesMut::new();
    if let Some(mux) = &ctx.mux {
        let lane = mux.lane_for(peer.number());
        let phase = shared::serve(&mut client, &mut buf, &who, ctx, (mux, lane), shutdown.clone()).await?;
        if let Phase::Done = phase {
            return Ok(());
        }
    }
    let mut upstream = match ctx.connect_upstream().await {
        Ok(upstream) => upstream,
        Err(e) => {
            let msg = format!(
                "-ERR sluice: cannot reach the upstream server {}: {e}\r\n",
                ctx.upstream
            );
            return client.write_all(msg.as_bytes()).await;
        }
    };
    let shared = Shared {
        state: Mutex::default(),
        flags: Flags::default(),
    };
    let (client_rd, client_wr) = socket::split(&mut client);
    let (upstream_rd, upstream_wr) = socket::split(&mut upstream);
    let up = Up {
        client: client_rd,
        upstream: upstream_wr,
        buf,
        parser: CommandParser::default(),
        shared: &shared,
        ctx,
        who,
        tx: None,
        refused_tx: None,
    };
    let down = Down {
        upstream: upstream_rd,
        client: client_wr,
        buf: BytesMut::new(),
        out: BytesMut::new(),
        scanner: ReplyScanner::default(),
        shared: &shared,
    };
    drive(up.run(), down.run(), &shared.flags, shutdown).await
}

/// Client → upstream: frames commands, asks the gate, forwards.
struct Up<'a> {
    client: ReadHalf<'a>,
    upstream: WriteHalf<'a>,
    buf: BytesMut,
    parser: CommandParser,
    shared: &'a Shared,
    ctx: &'a Context,
    who: Who,
    /// The open transaction's slot, released with EXEC's or DISCARD's reply.
    tx: Option<(Slot, Outcome)>,
    /// The refusal of the open transaction's MULTI.
    refused_tx: Option<Bytes>,
}

/// What to do with one framed command.
enum Action {
    Forward,
    Skip,
    /// Forward it and then everything else unframed.
    Stream,
    Stop(ClientEnd),
}

/// Why command framing ends.
enum Exit {
    /// The connection became a byte stream.
    Stream,
    Stop(ClientEnd),
}

impl Up<'_> {
    /// Starts with what the shared phase left in the buffer, if anything.
    async fn run(mut self) -> io::Result<ClientEnd> {
        loop {
            match self.forward().await? {
                None => {}
                Some(Exit::Stream) => {
                    tokio::io::copy(&mut self.client, &mut self.upstream).await?;
                    return Ok(ClientEnd::Closed);
                }
                Some(Exit::Stop(end)) => return Ok(end),
            }
            room_to_read(&mut self.buf);
            if self.client.read_buf(&mut self.buf).await? == 0 {
                return Ok(ClientEnd::Closed);
            }
        }
    }

    /// Handles every complete command in the buffer; forwarded commands go
    /// upstream in as few writes as possible. Returns `Some` when the
    /// session leaves command framing.
    async fn forward(&mut self) -> io::Result<Option<Exit>> {
        let mut buf = mem::take(&mut self.buf);
        let mut pos = 0;
        let mut unsent = 0..0;
        let outcome = loop {
            let len = match self.parser.parse(&buf[pos..]) {
                Ok(Some(len)) => len,
                Ok(None) => break None,
                Err(e) => {
                    self.shared.push(Pending::Answer(error_reply(&e.to_string())));
                    break Some(Exit::Stop(ClientEnd::ProtocolError));
                }
            };
            let command = pos..pos + len;
            let action = self.command(&buf, command.clone(), &mut unsent).await?;
            pos += len;
            if matches!(action, Action::Forward | Action::Stream) {
                if unsent.end != command.start {
                    self.upstream.write_all(&buf[unsent]).await?;
                    unsent = command.start..command.start;
                }
                unsent.end = command.end;
            }
            match action {
                Action::Forward | Action::Skip => {}
                Action::Stream => {
                    // Whatever follows is no longer framed: it goes as is.
                    unsent.end = buf.len();
                    pos = buf.len();
                    break Some(Exit::Stream);
                }
                Action::Stop(end) => break Some(Exit::Stop(end)),
            }
        };
        self.upstream.write_all(&buf[unsent]).await?;
        buf.advance(pos);
        self.buf = buf;
        Ok(outcome)
    }

    /// Decides what one command is and records what its reply must do.
    async fn command(&mut self, buf: &[u8], command: Range<usize>, unsent: &mut Range<usize>) -> io::Result<Action> {
        let args = Args::new(&buf[command], self.parser.args());
        if args.is_empty() {
            // Redis ignores blank lines and empty arrays without a reply.
            return Ok(Action::Skip);
        }
        let kind = classify(args);
        if self.refused_tx.is_some() {
            return Ok(self.inside_refused_tx(&kind));
        }
        if self.tx.is_some() {
            return Ok(self.inside_tx(&kind));
        }
        if self.shared.flags.draining() {
            return Ok(Action::Stop(ClientEnd::Shutdown));
        }
        match kind {
            Kind::Blocking => {
                self.who.stats.record_passthrough();
                self.shared.push(Pending::Reply {
                    slot: None,
                    outcome: None,
                    rename: None,
                });
                Ok(Action::Forward)
            }
            Kind::Stream => {
                self.who.stats.record_passthrough();
                self.shared.push(Pending::Stream);
                Ok(Action::Stream)
            }
            Kind::Multi => self.multi(&buf[unsent.clone()], unsent).await,
            Kind::Names { user, name } => {
                let rename = self.rename(user, name);
                self.request(&buf[unsent.clone()], unsent, rename).await
            }
            Kind::Plain | Kind::EndTx => self.request(&buf[unsent.clone()], unsent, None).await,
        }
    }

    /// The new tenant name a naming command asks for, if the tenant key is
    /// that kind of name.
    fn rename(&self, user: Option<&[u8]>, name: Option<&[u8]>) -> Option<Arc<str>> {
        let chosen = match self.ctx.tenant_key {
            TenantKey::User => user,
            TenantKey::ClientName => name,
            _ => None,
        };
        chosen.map(|n| Arc::from(String::from_utf8_lossy(n).as_ref()))
    }

    /// Admits one command as one request.
    async fn request(
        &mut self,
        unsent_bytes: &[u8],
        unsent: &mut Range<usize>,
        rename: Option<Arc<str>>,
    ) -> io::Result<Action> {
        self.apply_rename();
        let (answer, flushed) = admit(&self.ctx.gate, &self.who, &mut self.upstream, unsent_bytes).await?;
        if flushed {
            *unsent = unsent.end..unsent.end;
        }
        match answer {
            Ok((slot, outcome)) => {
                self.shared.push(Pending::Reply {
                    slot: Some(slot),
                    outcome: Some(outcome),
                    rename,
                });
                Ok(Action::Forward)
            }
            Err(refusal) => {
                self.shared.push(Pending::Answer(refusal_reply(&refusal)));
                Ok(Action::Skip)
            }
        }
    }

    /// Admits a transaction at its MULTI.
    async fn multi(&mut self, unsent_bytes: &[u8], unsent: &mut Range<usize>) -> io::Result<Action> {
        self.apply_rename();
        let (answer, flushed) = admit(&self.ctx.gate, &self.who, &mut self.upstream, unsent_bytes).await?;
        if flushed {
            *unsent = unsent.end..unsent.end;
        }
        match answer {
            Ok(admitted) => {
                self.tx = Some(admitted);
                self.shared.lock().in_tx = true;
                self.shared.push(Pending::Reply {
                    slot: None,
                    outcome: None,
                    rename: None,
                });
                Ok(Action::Forward)
            }
            Err(refusal) => {
                let reply = refusal_reply(&refusal);
                self.refused_tx = Some(reply.clone());
                self.shared.push(Pending::Answer(reply));
                Ok(Action::Skip)
            }
        }
    }

    fn inside_tx(&mut self, kind: &Kind<'_>) -> Action {
        let entry = match (kind, self.tx.take()) {
            (Kind::EndTx, Some((slot, outcome))) => {
                self.shared.lock().in_tx = false;
                Pending::Reply {
                    slot: Some(slot),
                    outcome: Some(outcome),
                    rename: None,
                }
            }
            (_, tx) => {
                self.tx = tx;
                Pending::Reply {
                    slot: None,
                    outcome: None,
                    rename: None,
                }
            }
        };
        self.shared.push(entry);
        Action::Forward
    }

    fn inside_refused_tx(&mut self, kind: &Kind<'_>) -> Action {
        let reply = match kind {
            Kind::EndTx => self.refused_tx.take(),
            _ => self.refused_tx.clone(),
        };
        self.shared.push(Pending::Answer(reply.unwrap_or_default()));
        Action::Skip
    }

    /// Takes up a tenant name the server accepted since the last command.
    fn apply_rename(&mut self) {
        if let Some(name) = self.shared.lock().rename.take() {
            self.who = self.ctx.who(&name);
        }
    }
}

/// A RESP error line; CR and LF, which would end it early, become spaces.
pub(crate) fn error_reply(message: &str) -> Bytes {
    let clean: String = message
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    Bytes::from(format!("-ERR {clean}\r\n"))
}

pub(crate) fn refusal_reply(refusal: &Refusal) -> Bytes {
    error_reply(&refusal.to_string())
}

/// Upstream → client: frames replies, completes their requests, forwards.
struct Down<'a> {
    upstream: ReadHalf<'a>,
    client: WriteHalf<'a>,
    buf: BytesMut,
    /// Used only when the proxy's own answers are interleaved with replies.
    out: BytesMut,
    scanner: ReplyScanner,
    shared: &'a Shared,
}

/// What the reply stream does next, decided between replies.
enum Next {
    Scan,
    Answer(Bytes),
    Stream,
}

impl Down<'_> {
    async fn run(mut self) -> io::Result<()> {
        loop {
            if self.finished() {
                return Ok(());
            }
            room_to_read(&mut self.buf);
            tokio::select! {
                read = self.upstream.read_buf(&mut self.buf) => {
                    if read? == 0 {
                        return self.upstream_closed().await;
                    }
                }
                _ = self.shared.flags.wake.notified() => {}
            }
            if self.forward().await? {
                tokio::io::copy(&mut self.upstream, &mut self.client).await?;
                return Ok(());
            }
        }
    }

    /// Draining or closing, and nothing is left to answer.
    fn finished(&self) -> bool {
        let flags = &self.shared.flags;
        if !(flags.draining() || flags.closing()) {
            return false;
        }
        let state = self.shared.lock();
        state.pending.is_empty() && !state.in_tx
    }

    /// Forwards the complete part of the buffer, with the proxy's own
    /// answers in their places. Returns true when the connection has become
    /// a byte stream.
    async fn forward(&mut self) -> io::Result<bool> {
        let mut buf = mem::take(&mut self.buf);
        let mut pos = 0;
        let mut copied = 0;
        let mut stream = false;
        loop {
            if self.scanner.is_idle() {
                match self.next() {
                    Next::Scan => {}
                    Next::Answer(answer) => {
                        self.out.extend_from_slice(&buf[copied..pos]);
                        self.out.extend_from_slice(&answer);
                        copied = pos;
                        continue;
                    }
                    Next::Stream => {
                        stream = true;
                        pos = buf.len();
                        break;
                    }
                }
            }
            let (n, reply) = self.scanner.advance(&buf[pos..]).map_err(invalid_data)?;
            pos += n;
            match reply {
                None => break,
                Some(reply) => self.complete(reply),
            }
        }
        if self.out.is_empty() {
            self.client.write_all(&buf[..pos]).await?;
        } else {
            self.out.extend_from_slice(&buf[copied..pos]);
            self.client.write_all(&self.out).await?;
            self.out.clear();
        }
        buf.advance(pos);
        self.buf = buf;
        Ok(stream)
    }

    fn next(&mut self) -> Next {
        let mut state = self.shared.lock();
        match state.pending.front() {
            Some(Pending::Answer(_)) => match state.pending.pop_front() {
                Some(Pending::Answer(answer)) => Next::Answer(answer),
                _ => Next::Scan,
            },
            Some(Pending::Stream) => Next::Stream,
            _ => Next::Scan,
        }
    }

    /// A reply is complete: its request ends.
    fn complete(&mut self, reply: Reply) {
        if reply.is_push() {
            return;
        }
        let entry = self.shared.lock().pending.pop_front();
        // An entry-less reply is unsolicited (say, an error before the server
        // closes); it is forwarded all the same.
        if let Some(Pending::Reply { slot, outcome, rename }) = entry {
            drop(slot);
            if let Some(outcome) = outcome {
                outcome.finish(reply.is_error());
            }
            if let (Some(name), false) = (rename, reply.is_error()) {
                self.shared.lock().rename = Some(name);
            }
        }
    }

    /// The server closed: commands still waiting get an error each, when the
    /// reply stream is between replies (mid-reply, an error would corrupt it).
    async fn upstream_closed(&mut self) -> io::Result<()> {
        if !self.scanner.is_idle() {
            return Ok(());
        }
        let waiting = self.shared.lock().pending.len();
        let error = error_reply("sluice: the upstream server closed the connection");
        for _ in 0..waiting {
            self.out.extend_from_slice(&error);
        }
        self.client.write_all(&self.out).await
    }
}

fn invalid_data(e: super::resp::RespError) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("reply from the upstream server: {e}"),
    )
}
