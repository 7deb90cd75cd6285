//! One Redis client connection through the proxy, on its own upstream
//! connection once the shared phase ([`super::shared`])
//! has handed it over (or from the start with `shared_upstreams = 0`):
//! every command is admitted by the gate before it is forwarded and holds
//! its slot until the server's reply is complete; pipelined commands are
//! admitted and answered in order. A command pipelined behind one still in
//! the server joins that one's slot rather than taking another, up to
//! [`MAX_JOINED`] commands a slot: Redis runs one connection's commands one
//! after another, so a second slot there would count no work and could
//! only keep another client out (a looping script and a PING pipelined
//! behind it would hold both slots of P = 2, and other clients would wait
//! at the gate instead of hearing BUSY from Redis). Each command's latency
//! is still recorded as its own ([`crate::gate::Rider`]); the bound keeps a
//! client that never stops pipelining from holding one slot for ever. A transaction is one request, admitted
//! at its EXEC: MULTI and the commands it queues go through at once, since
//! the server only queues them, so a client that thinks between MULTI and
//! EXEC holds no slot. Blocking commands and those that observe or control
//! the server ([`super::command`]) pass through outside admission, and
//! after SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, MONITOR, SYNC or PSYNC the connection
//! becomes a plain byte stream (even after the client unsubscribes: from
//! then on its commands are not admitted, which is rare and harmless).
//!
//! The two directions run at once: replies are read from the server as
//! they come, whether or not the client reads them, and wait for the client
//! in the session's [`Backlog`], whose bound stops the client's new
//! commands, not the server's replies. A client that stops reading thus
//! holds no slot, only its own backlog.
//!
//! A refused command gets `-ERR <refusal>` in its place among the replies.
//! A refused EXEC discards the transaction (the proxy sends DISCARD in its
//! place and answers with the refusal), so no command meant to be atomic
//! runs on its own.
//!
//! `CLIENT REPLY OFF` and `SKIP` are the proxy's: the server always
//! replies, so that the proxy knows when each command is done and gives its
//! slot back, and the proxy drops the replies the client asked not to get
//! (inside MULTI, CLIENT REPLY is refused). QUIT is answered by the proxy,
//! which closes the connection once every earlier reply is delivered;
//! inside MULTI the transaction is discarded with it, as Redis does. A
//! client that leaves meanwhile ends its session at once, whatever reply
//! is still owed.

use std::collections::VecDeque;
use std::io;
use std::mem;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Buf, Bytes, BytesMut};
use sluice_resp::{encode_command, error_reply, CommandParser, Limits, ProtocolError, ReplyScanner, ScannedReply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::command::{classify, Args, Kind, ReplyMode};
use super::context::RedisContext;
use super::shared::{self, Phase};
use crate::buffer::room_to_read;
use crate::client::Peer;
use crate::config::TenantKey;
use crate::gate::{Refusal, Rider, Slot};
use crate::relay::{admit, drive, Backlog, ClientEnd, Flags, Outcome, Tenancy};
use crate::socket::{self, ReadHalf, Stream, WriteHalf};

/// Most commands that share one slot (see the module's doc): a client that
/// pipelines without pause takes a new one, queueing at the gate like any
/// other, once this many rode the last.
pub(crate) const MAX_JOINED: usize = 16;

/// How far back from the newest entry a command looks for the slot to
/// join; entries without a slot (MULTI's queued commands, passthroughs)
/// in between are rare and short.
const JOIN_LOOKBACK: usize = 8;

/// What the upstream → client direction does when it reaches an entry.
enum Pending {
    /// A reply from the server completes this command.
    Reply {
        slot: Option<Slot>,
        /// The command handed its slot over to one pipelined behind it.
        rider: Option<Rider>,
        outcome: Option<Outcome>,
        rename: Option<Arc<str>>,
        deliver: Deliver,
        /// AUTH, or HELLO with AUTH: a success authenticates the client.
        authenticates: bool,
    },
    /// The proxy answers this command itself, in its place among the replies.
    Answer(Bytes),
    /// From here on the connection is a byte stream.
    Stream,
}

/// What the client gets of a server reply.
enum Deliver {
    /// The reply as the server sent it.
    Reply,
    /// Nothing (`CLIENT REPLY OFF` or `SKIP`).
    Nothing,
    /// These bytes instead (a refused EXEC's refusal, for its DISCARD's OK).
    Instead(Bytes),
}

/// What the two directions share.
struct State {
    /// Commands sent upstream (or answered by the proxy), oldest first.
    pending: VecDeque<Pending>,
    /// A new tenant name the server accepted (AUTH, HELLO, CLIENT SETNAME).
    rename: Option<Arc<str>>,
    /// A transaction is open: draining waits for its EXEC or DISCARD.
    in_tx: bool,
    /// The server accepted the client's AUTH (or HELLO with AUTH).
    authenticated: bool,
    /// An AUTH of a client not yet authenticated awaits its reply: until
    /// then the commands after it wait, framed by the bounds it settles.
    auth_pending: bool,
}

struct Shared {
    state: Mutex<State>,
    flags: Flags,
    backlog: Backlog,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, entry: Pending) {
        let answered_here = matches!(entry, Pending::Answer(_));
        if !matches!(entry, Pending::Stream) {
            self.backlog.owe();
        }
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
    ctx: &RedisContext,
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
        state: Mutex::new(State {
            pending: VecDeque::new(),
            rename: None,
            in_tx: false,
            authenticated: false,
            auth_pending: false,
        }),
        flags: Flags::default(),
        backlog: super::backlog(),
    };
    let (client_rd, client_wr) = socket::split(&mut client);
    let (upstream_rd, upstream_wr) = socket::split(&mut upstream);
    let to_upstream = ToUpstream {
        client: client_rd,
        upstream: upstream_wr,
        buf,
        parser: CommandParser::new(Limits {
            max_bulk: ctx.max_message,
            ..Limits::default()
        }),
        shared: &shared,
        ctx,
        who,
        in_tx: false,
        replies: ReplyMode::On,
        held: false,
        eof: false,
        joined: MAX_JOINED,
    };
    let to_client = ToClient {
        upstream: upstream_rd,
        client: client_wr,
        buf: BytesMut::new(),
        out: BytesMut::new(),
        scanner: ReplyScanner::default(),
        deliver: Deliver::Reply,
        shared: &shared,
        auth: &ctx.upstream_auth,
    };
    drive(to_upstream.run(), to_client.run(), &shared.flags, shutdown).await
}

/// Client → upstream: frames commands, asks the gate, forwards.
struct ToUpstream<'a> {
    client: ReadHalf<'a>,
    upstream: WriteHalf<'a>,
    buf: BytesMut,
    parser: CommandParser,
    shared: &'a Shared,
    ctx: &'a RedisContext,
    who: Tenancy,
    /// MULTI was forwarded and its EXEC or DISCARD not yet.
    in_tx: bool,
    /// The client's `CLIENT REPLY` mode.
    replies: ReplyMode,
    /// Complete commands wait in `buf` for the backlog to have room.
    held: bool,
    /// The client closed its side; what it sent before is still served.
    eof: bool,
    /// Commands that rode the slot last taken at the gate.
    joined: usize,
}

/// What to do with one framed command.
enum Action {
    Forward,
    /// Send these bytes upstream in the command's place.
    Replace(Bytes),
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

impl ToUpstream<'_> {
    /// Starts with what the shared phase left in the buffer, if anything.
    async fn run(mut self) -> io::Result<ClientEnd> {
        loop {
            match self.forward().await? {
                None => {}
                Some(Exit::Stream) => {
                    tokio::io::copy(&mut self.client, &mut self.upstream).await?;
                    return Ok(ClientEnd::Closed);
                }
                Some(Exit::Stop(ClientEnd::Quit | ClientEnd::ProtocolError)) => return self.closing().await,
                Some(Exit::Stop(end)) => return Ok(end),
            }
            if self.eof && !self.held {
                return Ok(ClientEnd::Closed);
            }
            self.read_or_wait().await?;
        }
    }

    /// After QUIT or a protocol error: what is owed is delivered, then the
    /// session ends. Meanwhile what the client sends is dropped unread, and
    /// its leaving ends the session at once, as Redis frees a client that
    /// leaves: a reply owed may never come (`BLPOP k 0` before the QUIT),
    /// and the session would keep its server connection and its place
    /// among the clients until it did.
    async fn closing(mut self) -> io::Result<ClientEnd> {
        self.shared.flags.close();
        self.buf.clear();
        while !self.eof {
            room_to_read(&mut self.buf);
            self.eof = self.client.read_buf(&mut self.buf).await? == 0;
            self.buf.clear();
        }
        Ok(ClientEnd::Closed)
    }

    /// Whether the client has yet to authenticate where the server asks it
    /// to (see [`super::UpstreamAuth`]).
    fn before_auth(&self) -> bool {
        self.ctx.upstream_auth.required() && !self.shared.lock().authenticated
    }

    /// Reads more from the client; while commands are held, also wakes when
    /// the backlog may have room, and reads only up to `MAX_READ_AHEAD`.
    async fn read_or_wait(&mut self) -> io::Result<()> {
        let backlog = &self.shared.backlog;
        if !super::reads_more(self.held, self.eof, self.before_auth(), self.buf.len()) {
            backlog.changed().await;
            return Ok(());
        }
        room_to_read(&mut self.buf);
        tokio::select! {
            read = self.client.read_buf(&mut self.buf) => self.eof = read? == 0,
            _ = backlog.changed(), if self.held => {}
        }
        Ok(())
    }

    /// Handles every complete command in the buffer that the backlog has
    /// room for; forwarded commands go upstream in as few writes as
    /// possible. Returns `Some` when the session leaves command framing.
    async fn forward(&mut self) -> io::Result<Option<Exit>> {
        let mut buf = mem::take(&mut self.buf);
        let mut pos = 0;
        let mut unsent = 0..0;
        self.held = false;
        let outcome = loop {
            let awaits_auth = self.ctx.upstream_auth.required() && self.shared.lock().auth_pending;
            if !self.shared.backlog.has_room() || awaits_auth {
                self.held = true;
                break None;
            }
            let before_auth = self.before_auth();
            self.parser.set_before_auth(before_auth);
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
            let replacement = match &action {
                Action::Replace(bytes) => Some(bytes.clone()),
                _ => None,
            };
            if let Some(bytes) = replacement {
                self.upstream.write_all(&buf[unsent]).await?;
                self.upstream.write_all(&bytes).await?;
                unsent = command.end..command.end;
            } else if matches!(action, Action::Forward | Action::Stream) {
                if unsent.end != command.start {
                    self.upstream.write_all(&buf[unsent]).await?;
                    unsent = command.start..command.start;
                }
                unsent.end = command.end;
            }
            match action {
                Action::Forward | Action::Replace(_) | Action::Skip => {}
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
            // Redis ignores blank lines and empty arrays without a reply,
            // as a command whose reply a `CLIENT REPLY SKIP` covers.
            self.wants_reply();
            return Ok(Action::Skip);
        }
        let kind = classify(args);
        if let Kind::Quit = kind {
            self.answer(Bytes::from_static(b"+OK\r\n"));
            return Ok(Action::Stop(ClientEnd::Quit));
        }
        if self.in_tx {
            return self.inside_tx(&kind, &buf[unsent.clone()], unsent).await;
        }
        if self.shared.flags.draining() {
            return Ok(Action::Stop(ClientEnd::Shutdown));
        }
        match kind {
            Kind::Blocking | Kind::Control => {
                self.who.stats.record_passthrough();
                self.expect_reply(None, None);
                Ok(Action::Forward)
            }
            Kind::Stream => {
                self.who.stats.record_passthrough();
                self.shared.push(Pending::Stream);
                Ok(Action::Stream)
            }
            Kind::Multi => {
                self.in_tx = true;
                self.shared.lock().in_tx = true;
                self.expect_reply(None, None);
                Ok(Action::Forward)
            }
            Kind::Reply(mode) => {
                self.client_reply(mode);
                Ok(Action::Skip)
            }
            Kind::Names { user, name } => {
                let rename = self.rename(user, name);
                self.request(&buf[unsent.clone()], unsent, rename, user.is_some()).await
            }
            Kind::EndTx { reset } => {
                // DISCARD outside a transaction is an error that changes
                // nothing.
                if reset {
                    self.reset_replies();
                }
                self.request(&buf[unsent.clone()], unsent, None, false).await
            }
            Kind::Plain | Kind::Exec | Kind::Quit => self.request(&buf[unsent.clone()], unsent, None, false).await,
        }
    }

    /// `CLIENT REPLY`: the server keeps replying; the proxy drops what the
    /// client asked not to get.
    fn client_reply(&mut self, mode: ReplyMode) {
        match mode {
            ReplyMode::On => {
                self.replies = ReplyMode::On;
                self.answer(Bytes::from_static(b"+OK\r\n"));
            }
            ReplyMode::Off => self.replies = ReplyMode::Off,
            // SKIP while replies are off changes nothing.
            ReplyMode::Skip if self.replies == ReplyMode::On => self.replies = ReplyMode::Skip,
            ReplyMode::Skip => {}
        }
    }

    /// RESET turns replies back on; a SKIP before it still covers RESET's
    /// own reply, as in Redis (which clears OFF and a SKIP to come, not the
    /// one of the command it runs).
    fn reset_replies(&mut self) {
        if self.replies == ReplyMode::Off {
            self.replies = ReplyMode::On;
        }
    }

    /// Whether the client wants the reply to the command being handled;
    /// a SKIP covers this one command.
    fn wants_reply(&mut self) -> bool {
        match self.replies {
            ReplyMode::On => true,
            ReplyMode::Off => false,
            ReplyMode::Skip => {
                self.replies = ReplyMode::On;
                false
            }
        }
    }

    /// The proxy answers the command being handled itself.
    fn answer(&mut self, bytes: Bytes) {
        if self.wants_reply() {
            self.shared.push(Pending::Answer(bytes));
        }
    }

    /// The server answers the command being handled.
    fn expect_reply(&mut self, admitted: Option<(Slot, Outcome)>, rename: Option<Arc<str>>) {
        self.expect(admitted, rename, false);
    }

    /// The server answers the command being handled, which may
    /// authenticate the client.
    fn expect(&mut self, admitted: Option<(Slot, Outcome)>, rename: Option<Arc<str>>, authenticates: bool) {
        let deliver = if self.wants_reply() {
            Deliver::Reply
        } else {
            Deliver::Nothing
        };
        let (slot, outcome) = admitted.unzip();
        if authenticates && self.before_auth() {
            self.shared.lock().auth_pending = true;
        }
        self.shared.push(Pending::Reply {
            slot,
            rider: None,
            outcome,
            rename,
            deliver,
            authenticates,
        });
    }

    /// The name Redis might rename a tenant to, if the tenant key is that
    /// kind of name.
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
        authenticates: bool,
    ) -> io::Result<Action> {
        match self.admit(unsent_bytes, unsent).await? {
            Ok(admitted) => {
                self.expect(Some(admitted), rename, authenticates);
                Ok(Action::Forward)
            }
            Err(refusal) => {
                self.answer(refusal_reply(&refusal));
                Ok(Action::Skip)
            }
        }
    }

    async fn admit(
        &mut self,
        unsent_bytes: &[u8],
        unsent: &mut Range<usize>,
    ) -> io::Result<Result<(Slot, Outcome), Refusal>> {
        self.apply_rename();
        if let Some(slot) = self.join() {
            return Ok(Ok((slot, Outcome::of(&self.who))));
        }
        let (answer, flushed) = admit(
            &self.ctx.gate,
            &self.who,
            &mut self.upstream,
            unsent_bytes,
            // RESP has no cancel.
            std::future::pending(),
        )
        .await?;
        if flushed {
            *unsent = unsent.end..unsent.end;
        }
        self.joined = 1;
        Ok(answer)
    }

    /// Inside MULTI: the server queues commands; EXEC is the request.
    async fn inside_tx(
        &mut self,
        kind: &Kind<'_>,
        unsent_bytes: &[u8],
        unsent: &mut Range<usize>,
    ) -> io::Result<Action> {
        let action = match kind {
            Kind::Exec => match self.admit(unsent_bytes, unsent).await? {
                Ok(admitted) => {
                    self.expect_reply(Some(admitted), None);
                    Action::Forward
                }
                Err(refusal) => {
                    let deliver = if self.wants_reply() {
                        Deliver::Instead(refusal_reply(&refusal))
                    } else {
                        Deliver::Nothing
                    };
                    self.shared.push(Pending::Reply {
                        slot: None,
                        rider: None,
                        outcome: None,
                        rename: None,
                        deliver,
                        authenticates: false,
                    });
                    let mut discard = BytesMut::new();
                    encode_command(&["DISCARD"], &mut discard);
                    Action::Replace(discard.freeze())
                }
            },
            Kind::Reply(_) => {
                self.answer(error_reply("sluice: CLIENT REPLY inside MULTI is not supported"));
                return Ok(Action::Skip);
            }
            Kind::EndTx { reset } => {
                if *reset {
                    self.reset_replies();
                }
                self.expect_reply(None, None);
                Action::Forward
            }
            _ => {
                self.expect_reply(None, None);
                return Ok(Action::Forward);
            }
        };
        self.in_tx = false;
        self.shared.lock().in_tx = false;
        Ok(action)
    }

    /// Takes up a tenant name the server accepted since the last command.
    fn apply_rename(&mut self) {
        if let Some(name) = self.shared.lock().rename.take() {
            self.who = self.ctx.who(&name);
            // The slot in the server is the old tenant's.
            self.joined = MAX_JOINED;
        }
    }

    /// The slot of a command of this connection still in the server, for
    /// the command being handled to share, if it may (see [`MAX_JOINED`]).
    fn join(&mut self) -> Option<Slot> {
        if self.joined >= MAX_JOINED {
            return None;
        }
        let mut state = self.shared.lock();
        let slot = state
            .pending
            .iter_mut()
            .rev()
            .take(JOIN_LOOKBACK)
            .find_map(|entry| match entry {
                Pending::Reply { slot, rider, .. } => {
                    let mut slot = slot.take()?;
                    *rider = Some(slot.hand_over());
                    Some(slot)
                }
                _ => None,
            })?;
        self.joined += 1;
        Some(slot)
    }
}

fn refusal_reply(refusal: &Refusal) -> Bytes {
    error_reply(&refusal.to_string())
}

/// Upstream → client: frames replies, completes their requests, and writes
/// to the client without ever letting a slow client stop the reading.
struct ToClient<'a> {
    upstream: ReadHalf<'a>,
    client: WriteHalf<'a>,
    buf: BytesMut,
    /// What waits for the client to read it.
    out: BytesMut,
    scanner: ReplyScanner,
    /// What becomes of the reply being scanned.
    deliver: Deliver,
    shared: &'a Shared,
    /// Told of the server's NOAUTH replies.
    auth: &'a super::UpstreamAuth,
}

/// What the reply stream does next, decided between replies.
enum Next {
    Scan,
    Answer(Bytes),
    Stream,
}

impl ToClient<'_> {
    async fn run(mut self) -> io::Result<()> {
        loop {
            if self.out.is_empty() && self.finished() {
                return Ok(());
            }
            room_to_read(&mut self.buf);
            tokio::select! {
                biased;
                written = self.client.write(&self.out), if !self.out.is_empty() => self.written(written?)?,
                read = self.upstream.read_buf(&mut self.buf) => {
                    if read? == 0 {
                        return self.upstream_closed().await;
                    }
                }
                _ = self.shared.flags.wake.notified() => {}
            }
            if self.forward()? {
                self.client.write_all(&self.out).await?;
                tokio::io::copy(&mut self.upstream, &mut self.client).await?;
                return Ok(());
            }
            self.shared.backlog.set_bytes(self.out.len());
        }
    }

    fn written(&mut self, n: usize) -> io::Result<()> {
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.out.advance(n);
        if self.out.is_empty() {
            // Not a slice of the last large reply's buffer, kept alive.
            self.out = BytesMut::new();
        }
        Ok(())
    }

    /// Draining or closing, and nothing is left to answer. A draining
    /// client inside MULTI still sends its EXEC or DISCARD; a closing one
    /// (QUIT, a protocol error) sends nothing more, and its transaction
    /// goes with the server connection, as Redis discards it at QUIT.
    fn finished(&self) -> bool {
        let flags = &self.shared.flags;
        let closing = flags.closing();
        if !(closing || flags.draining()) {
            return false;
        }
        let state = self.shared.lock();
        state.pending.is_empty() && (closing || !state.in_tx)
    }

    /// Moves the complete part of the buffer to the client's output, with
    /// the proxy's own answers in their places and without the replies the
    /// client does not want. Returns true when the connection has become a
    /// byte stream.
    fn forward(&mut self) -> io::Result<bool> {
        let mut buf = mem::take(&mut self.buf);
        let mut pos = 0;
        let mut copied = 0;
        let mut stream = false;
        let mut start = 0;
        loop {
            if self.scanner.is_idle() {
                self.emit(&buf[copied..pos]);
                copied = pos;
                start = pos;
                match self.next(buf.get(pos).copied()) {
                    Next::Scan => {}
                    Next::Answer(answer) => {
                        self.out.extend_from_slice(&answer);
                        continue;
                    }
                    Next::Stream => {
                        stream = true;
                        self.out.extend_from_slice(&buf[pos..]);
                        pos = buf.len();
                        copied = pos;
                        break;
                    }
                }
            }
            let (n, reply) = self.scanner.advance(&buf[pos..]).map_err(invalid_data)?;
            pos += n;
            match reply {
                None => break,
                Some(reply) => {
                    if reply.is_error() {
                        // A simple error is one line, framed whole in one buffer.
                        self.auth.note(&buf[start..pos]);
                    }
                    self.complete(reply);
                }
            }
        }
        self.emit(&buf[copied..pos]);
        buf.advance(pos);
        self.buf = buf;
        Ok(stream)
    }

    /// Passes reply bytes on, unless the reply they belong to is dropped.
    fn emit(&mut self, bytes: &[u8]) {
        if let Deliver::Reply = self.deliver {
            self.out.extend_from_slice(bytes);
        }
    }

    /// Between replies: what the next entry asks for, given the first byte
    /// of the next reply if it has come (a push is no command's reply).
    fn next(&mut self, first: Option<u8>) -> Next {
        let mut state = self.shared.lock();
        self.deliver = Deliver::Reply;
        match state.pending.front() {
            Some(Pending::Answer(_)) => match state.pending.pop_front() {
                Some(Pending::Answer(answer)) => {
                    drop(state);
                    self.shared.backlog.paid();
                    Next::Answer(answer)
                }
                _ => Next::Scan,
            },
            Some(Pending::Stream) => Next::Stream,
            Some(Pending::Reply { deliver, .. }) if first.is_some_and(|b| b != b'>') => {
                self.deliver = match deliver {
                    Deliver::Reply => Deliver::Reply,
                    Deliver::Nothing | Deliver::Instead(_) => Deliver::Nothing,
                };
                Next::Scan
            }
            _ => Next::Scan,
        }
    }

    /// A reply is complete: its request ends.
    fn complete(&mut self, reply: ScannedReply) {
        if reply.is_push() {
            return;
        }
        let entry = self.shared.lock().pending.pop_front();
        // An entry-less reply is unsolicited (say, an error before the server
        // closes); it is forwarded all the same.
        if let Some(Pending::Reply {
            slot,
            rider,
            outcome,
            rename,
            deliver,
            authenticates,
        }) = entry
        {
            drop((slot, rider));
            if authenticates {
                let mut state = self.shared.lock();
                state.authenticated |= !reply.is_error();
                state.auth_pending = false;
            }
            self.shared.backlog.paid();
            if let Some(outcome) = outcome {
                outcome.finish(reply.is_error());
            }
            if let (Some(name), false) = (rename, reply.is_error()) {
                self.shared.lock().rename = Some(name);
            }
            if let Deliver::Instead(bytes) = deliver {
                self.out.extend_from_slice(&bytes);
            }
        }
    }

    /// The server closed: commands still waiting get an error each, when the
    /// reply stream is between replies (mid-reply, an error would corrupt it).
    async fn upstream_closed(&mut self) -> io::Result<()> {
        if self.scanner.is_idle() {
            let waiting = self.shared.lock().pending.len();
            let error = error_reply("sluice: the upstream server closed the connection");
            for _ in 0..waiting {
                self.out.extend_from_slice(&error);
            }
        }
        self.client.write_all(&self.out).await
    }
}

fn invalid_data(e: ProtocolError) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("reply from the upstream server: {e}"),
    )
}
