//! Named prepared statements under transaction pooling ([`super::pool`]).
//!
//! A client that prepares a statement (Parse with a name, as pgbench
//! `-M prepared`, JDBC after `prepareThreshold` uses, or asyncpg always
//! does) binds it in later requests, which may run on another backend. As
//! PgBouncer's `max_prepared_statements` (1.21) does, the proxy keeps each
//! client's statements and makes sure the backend a request runs on has
//! them:
//!
//! - Every backend knows a statement by one name made from its Parse body
//!   (query text and parameter types) and the client's settings that
//!   change how the server reads that text (its encoding, time zone, date
//!   and interval styles and string quoting; see
//!   [`super::reported::Reported::parsing`]): `sluice_` and 32 hex digits
//!   of their SHA-256. Clients preparing the same statement under the same
//!   settings share it on a backend; different statements never share a
//!   name, nor do clients whose time zone differs, since the server
//!   converts a literal such as `'2024-01-01 12:00'::timestamptz` once, at
//!   the Parse. A client that changes such a setting after preparing a
//!   statement has it named again, and made again under the new value,
//!   at its next use: it reads the new value's conversion from then on,
//!   where PostgreSQL keeps the reading of the Parse (to do that, the
//!   proxy would have to set the old value around every Parse it makes
//!   again), and no other client is given a statement read under settings
//!   other than its own. A Parse in the batch that changes such a setting
//!   is read by the server under the new value, while the proxy learns of
//!   the change at the batch's end; so at that moment every statement made
//!   on the backend counts as missing there, to be made again where next
//!   used.
//! - A client's Parse, Bind, Describe and Close that name one of its
//!   statements are rewritten to that name. A Parse goes as Close and Parse
//!   of the server name, so that it succeeds whether or not the backend has
//!   the statement already (another client may have made it); the
//!   CloseComplete answering the Close the client never sent is dropped. A
//!   client's Close only forgets the statement: others may use it.
//! - A Bind or Describe of a statement the backend lacks (it was made on
//!   another backend, closed to keep the limit, or dropped by SQL) is
//!   preceded by the statement's Close and Parse, whose answers are dropped:
//!   a statement is made where and when it is used, in the same batch, at
//!   no extra round trip. If the Parse fails now (a table it reads is
//!   gone), the client gets PostgreSQL's error for it in its batch.
//! - A statement counts as made on a backend from the moment its Parse is
//!   sent; one whose Parse failed, or was skipped after an error up to the
//!   Sync, is forgotten at the ReadyForQuery that ends its batch, as
//!   PostgreSQL forgets it. Where unsure, the proxy counts a statement as
//!   missing: making it again (Close, then Parse) is always safe.
//! - A backend keeps at most `max_prepared_statements` (default 200, as
//!   PgBouncer's): making one more closes the least recently bound there,
//!   and the proxy drops that Close's answer too. A client needing it again
//!   has it made again where it binds it, so a client may hold any number
//!   of statements.
//! - SQL that drops statements acts on the issuing client's own: `DEALLOCATE
//!   name` of a statement the client prepared by protocol forgets it and
//!   drops the backend's copy (other clients sharing it have it made again
//!   where they use it); `DEALLOCATE
//!   ALL` and `DISCARD ALL` run on the backend (they drop every statement
//!   there, and the proxy notes the backend as having none, so others' are
//!   made again where they are used) and forget all of the client's.
//! - A statement's result follows its client too. PostgreSQL fixes a
//!   prepared statement's result (its columns' names, types and type
//!   modifiers) when it parses it, and fails a Bind with 0A000 "cached plan
//!   must not change result type" once a schema change (`ALTER TABLE ...
//!   TYPE`, a column added under `SELECT *`) alters it; drivers that
//!   decode by the types a Describe told them (pgx, pgjdbc, asyncpg) count
//!   on that. A statement made on another backend after the change would
//!   answer with the new types instead, read by the driver as the old. So
//!   the proxy notes the result each client was told at its Describe of a
//!   statement, and the result each backend's statement was made with, as
//!   Describes tell them. A Bind of a statement the client described, on a
//!   backend whose result is not known to be the client's, goes after the
//!   statement is made there anew and described, with a Flush: the Bind
//!   waits that one round trip ([`Statements::holding`]), then goes as
//!   sent if the results match, or else binds a statement no backend has,
//!   and the server's error is told as PostgreSQL's 0A000. Statements never
//!   described (libpq's, which describe each portal instead) are not held.
//!
//! - The unnamed statement follows its client too. PostgreSQL keeps it
//!   across Syncs until the next unnamed Parse or simple Query, so a driver
//!   may Parse it in one request and Bind it in the next (libpq's
//!   `PQprepare` with an empty name, pgx's describe-exec mode), by which
//!   time the backend's unnamed statement may be another client's. The
//!   proxy remembers each client's last unnamed Parse and which one each
//!   backend last ran; a Bind or Describe of the unnamed statement on a
//!   backend holding another is preceded by the client's Parse (its answer
//!   dropped), or by a Close of the unnamed statement when the client has
//!   none, so that the Bind fails as it would have on a server of its own.
//!   Around errors the client's record follows PostgreSQL's: a failed
//!   unnamed Parse leaves none (the server drops the old one before it
//!   parses), a Parse, Close or simple Query skipped after an earlier error
//!   in its batch leaves the one before (and a skipped `DEALLOCATE` the
//!   statement it names). The proxy tells the two apart by position: the
//!   server ends its answer to each message with one message of its own,
//!   so an ErrorResponse answers the message after those answered.
//!
//! Departures, as PgBouncer's: statements made with SQL PREPARE are the
//! backend's, not the client's, and do not follow it; errors about a
//! statement name the server's name, not the client's; a batch that itself
//! binds more statements than the limit may find a portal of one closed
//! (closing a statement closes its portals). A client redefining a name it
//! holds gets PostgreSQL's error 42P05, raised by sending the held
//! statement's Parse twice under its server name.

use std::collections::{HashMap, VecDeque};
use std::mem;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::frame;
use super::reported::Reported;
use super::sql::SessionSql;

/// What a `LISTEN` runs instead under transaction pooling: an error in the
/// client's own transaction, as if the server had refused it.
const LISTEN_REFUSED: &str = "DO $sluice$BEGIN RAISE EXCEPTION USING ERRCODE = 'feature_not_supported', \
     MESSAGE = 'sluice: LISTEN needs session pooling (pool = \"session\"): under transaction pooling \
     the client moves between server connections, and notifications go to the one that listened'; END$sluice$";

/// A Close for a statement no backend has: PostgreSQL answers it with
/// CloseComplete and nothing else.
const NO_STATEMENT: &[u8] = b"sluice_none";

/// A statement a client prepared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Statement {
    /// The name backends know it by.
    server: Bytes,
    /// The Parse body after the name: query text and parameter types.
    parse: Bytes,
    /// The result the client was told at its Describe of the statement
    /// (see [`ResultDesc`]); `None` until it describes it.
    result: Option<ResultDesc>,
    /// The client's `Statements::parsing_changes` when it was named.
    parsing: u32,
}

/// A statement's result as a Describe tells it: the RowDescription's body,
/// or empty for NoData.
type ResultDesc = Bytes;

impl Statement {
    /// The statement `parse` (text and parameter types) as the server
    /// reads it under the parsing settings `parsing` (see
    /// [`Reported::parsing`], the client's `parsing_changes`-th): its
    /// server name is theirs and its text's, so
    /// that a client never binds a statement whose literals were read
    /// under another client's time zone, date style or encoding.
    fn new(parse: &[u8], parsing: &[u8], parsing_changes: u32) -> Statement {
        let digest = Sha256::new().chain_update(parse).chain_update(parsing).finalize();
        Statement {
            server: Bytes::from(format!("sluice_{}", super::lower_hex(&digest[..16]))),
            parse: Bytes::copy_from_slice(parse),
            result: None,
            parsing: parsing_changes,
        }
    }

    /// Appends Close and Parse of the statement under its server name.
    fn write_make(&self, out: &mut BytesMut) {
        write_close(&self.server, out);
        self.write_parse(out);
    }

    fn write_parse(&self, out: &mut BytesMut) {
        frame::write_message_parts(out, b'P', &[&self.server, b"\0", &self.parse]);
    }
}

/// The statements made on one backend: when each was last made or bound,
/// by server name.
#[derive(Default)]
pub(crate) struct Made(Mutex<Uses>);

#[derive(Default)]
struct Uses {
    last: HashMap<Bytes, Use>,
    clock: u64,
    /// The body (text and parameter types) of the last unnamed Parse sent
    /// to the backend; `None` when it has none or the proxy cannot tell.
    unnamed: Option<Bytes>,
}

/// A statement made on a backend.
struct Use {
    /// When it was last made or bound, on the backend's clock.
    last: u64,
    /// Its result, fixed when it was made, once a Describe told it.
    result: Option<ResultDesc>,
}

impl Uses {
    fn touch(&mut self, server: &Bytes) {
        self.clock += 1;
        if let Some(made) = self.last.get_mut(server) {
            made.last = self.clock;
        }
    }
}

impl Made {
    fn lock(&self) -> MutexGuard<'_, Uses> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn contains(&self, server: &Bytes) -> bool {
        self.lock().last.contains_key(server)
    }

    fn forget(&self, server: &Bytes) {
        self.lock().last.remove(server);
    }

    /// The backend's settings that change how it reads a statement's text
    /// changed, and a statement parsed since may carry a name made for
    /// those before: every statement, the unnamed one too, counts as
    /// missing, to be made again (Close, then Parse) where next used.
    pub fn forget_all(&self) {
        let mut uses = self.lock();
        uses.last.clear();
        uses.unnamed = None;
    }

    /// Whether the backend has the statement made with the result
    /// `expected`, as far as a Describe told; if so, it is bound now.
    fn bind_if_same(&self, server: &Bytes, expected: &ResultDesc) -> bool {
        let mut uses = self.lock();
        let made = uses.last.get(server).and_then(|made| made.result.as_ref());
        let same = made.is_some_and(|result| same_result(result, expected));
        if same {
            uses.touch(server);
        }
        same
    }

    fn described(&self, server: &Bytes, result: &ResultDesc) {
        if let Some(made) = self.lock().last.get_mut(server) {
            made.result = Some(result.clone());
        }
    }

    /// Notes `statement` as made, and returns the server names to close
    /// so that at most `limit` remain: the least recently used, never
    /// `statement` (the one used last).
    pub fn add(&self, statement: &Statement, limit: usize) -> Vec<Bytes> {
        let mut uses = self.lock();
        uses.clock += 1;
        let now = uses.clock;
        // Made again, it has the result the schema gives it now.
        uses.last.insert(
            statement.server.clone(),
            Use {
                last: now,
                result: None,
            },
        );
        let mut victims = Vec::new();
        while uses.last.len() > limit.max(1) {
            let oldest = uses
                .last
                .iter()
                .min_by_key(|(_, made)| made.last)
                .map(|(name, _)| name.clone());
            let Some(oldest) = oldest else { break };
            uses.last.remove(&oldest);
            victims.push(oldest);
        }
        victims
    }

    /// The backend dropped every statement (DEALLOCATE ALL, DISCARD ALL).
    pub fn clear(&self) {
        self.lock().last.clear();
    }

    /// The proxy sent a simple Query of its own, which drops the backend's
    /// unnamed statement: the client's is made again before it is used.
    pub fn unnamed_dropped(&self) {
        self.lock().unnamed = None;
    }
}

/// What the server's next ParseComplete or CloseComplete answers, or the
/// ReadyForQuery that ends a batch.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// A message the client sent: its answer goes to the client.
    Relay,
    /// A message the proxy added: its answer is dropped.
    Drop,
    /// A client's Parse of a new statement.
    Parsed { client: Bytes, server: Bytes },
    /// A statement made again before its Bind or Describe: the answer is
    /// dropped, and without one the backend does not have it.
    Remade { server: Bytes },
    /// A Sync, Query or FunctionCall, ending a batch in which `sent`
    /// messages were counted; a Query or FunctionCall the server skipped
    /// after an error is answered by nothing.
    Ready { sent: u32, ending: Ending },
    /// A Sync the proxy added: its ReadyForQuery is dropped.
    Synced,
    /// The client's Parse of the unnamed statement, sent after `at`
    /// messages of its batch that the server answers, when the client's
    /// unnamed statement was `previous`; its `change`-th change.
    /// Without an answer the backend's unnamed statement is unknown.
    Unnamed {
        at: u32,
        previous: Option<Bytes>,
        change: u32,
    },
    /// The client's unnamed statement made again before its use: the
    /// answer is dropped, and without one the backend's is unknown.
    UnnamedRemade,
    /// The client's Close of its unnamed statement, which was `previous`,
    /// as the `change`-th change.
    UnnamedClosed { previous: Option<Bytes>, change: u32 },
    /// A Describe of a statement, answered by ParameterDescription and then
    /// RowDescription or NoData: the result of the backend's `server`
    /// (when it is a client's statement), and of the client's `client`
    /// (when the client described one it holds). The proxy's own
    /// (`relay` false) is dropped and decides the held Bind.
    Described {
        server: Option<Bytes>,
        client: Option<Bytes>,
        relay: bool,
    },
}

// One is queued for every Parse, Close, Sync and Query sent: small enough
// that queueing it stays a copy of a cache line or two.
const _: () = assert!(mem::size_of::<Reply>() <= 80);

/// A client's Bind held back until the server tells the result of the
/// statement it binds, made anew on the backend just before it.
struct Hold {
    /// The Bind's portal, and what follows the statement's name.
    portal: Bytes,
    rest: Bytes,
    server: Bytes,
    /// The result the client was told.
    expected: ResultDesc,
    /// Decided: whether the result changed (`false` too when the server
    /// failed before telling, and skips the Bind).
    changed: Option<bool>,
}

/// A statement a simple Query deallocated: the client's name for it, and
/// it. Boxed: rare, and inline it would triple the size of every [`Reply`]
/// a Query queues.
type Deallocated = Box<(Bytes, Statement)>;

/// What ends a batch, for what a ReadyForQuery answers when PostgreSQL
/// skipped a Query or FunctionCall after an error.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    Sync,
    FunctionCall,
    /// A Query, which dropped the client's unnamed statement, `previous`,
    /// as the `change`-th change, and the statement it deallocated, if any.
    Query {
        previous: Option<Bytes>,
        change: u32,
        deallocated: Option<Deallocated>,
    },
}

/// One client's prepared statements, and the answers owed for the Parse and
/// Close messages sent on its behalf.
#[derive(Default)]
pub(crate) struct Statements {
    named: HashMap<Bytes, Statement>,
    /// The body of the client's unnamed statement, as last sent.
    unnamed: Option<Bytes>,
    /// How many times the client's Parse, Close or Query changed
    /// `unnamed`: an error can restore an earlier one only if no later
    /// message changed it since.
    unnamed_changes: u32,
    replies: VecDeque<Reply>,
    /// Messages sent in the batch being sent whose answers each end with
    /// one message of the server's (see [`Statements::failed`]).
    sent: u32,
    /// Where in the batch being answered an ErrorResponse came, counted as
    /// `sent` is: the message there failed, those after it were skipped.
    failed_at: Option<u32>,
    /// Of the Queries and FunctionCalls ending batches that are being
    /// answered, how many the server skips (see [`Statements::failed`]).
    skipped: u32,
    /// Statements a backend may keep (`max_prepared_statements`).
    limit: usize,
    /// A Bind waiting for the result of the statement it binds.
    hold: Option<Hold>,
    /// A Bind went to fail for a result that changed: the server's next
    /// ErrorResponse is told to the client as PostgreSQL's own.
    changed: bool,
    /// The client's parsing settings as it was last told them
    /// ([`Reported::parsing`]): part of the server name of each statement
    /// it prepares from now on.
    parsing: Vec<u8>,
    /// How many times `parsing` changed: a statement named before the last
    /// change is named again before it is used.
    parsing_changes: u32,
}

impl Statements {
    /// No statements yet; a backend keeps at most `limit`.
    pub fn new(limit: usize) -> Statements {
        Statements {
            limit,
            ..Statements::default()
        }
    }

    /// The client was told a new value of one of its parsing `settings`:
    /// statements it prepares from now on are named for them as they are
    /// now.
    pub fn told(&mut self, settings: &Reported) {
        self.parsing = settings.parsing();
        self.parsing_changes = self.parsing_changes.wrapping_add(1);
    }

    /// Client → server, for the backend whose statements are `made`:
    /// appends to `out` the messages to send instead of this one, and
    /// returns true; false when it goes as it is. Bodies too short to name
    /// a statement go as they are, for the server to reject. A message the
    /// server skips (it came after an error, before the next Sync) is not
    /// given here: it changes nothing.
    pub fn rewrite(&mut self, tag: u8, body: &[u8], made: &Made, out: &mut BytesMut) -> bool {
        let rewritten = match tag {
            b'P' => self.parse(body, made, out),
            b'B' => self.bind(body, made, out),
            b'D' => self.describe(body, made, out),
            b'C' => self.close(body, made, out),
            b'Q' => self.query(body, made, out),
            b'S' | b'F' => {
                let ending = if tag == b'S' {
                    Ending::Sync
                } else {
                    Ending::FunctionCall
                };
                self.expect(Reply::Ready {
                    sent: self.sent,
                    ending,
                });
                false
            }
            _ => false,
        };
        // Parses and Closes are counted where their replies are expected.
        if matches!(tag, b'B' | b'D' | b'E') {
            self.sent = self.sent.wrapping_add(1);
        }
        rewritten
    }

    /// Notes the reply owed for a Parse, Close, Sync, Query or
    /// FunctionCall about to be sent.
    fn expect(&mut self, reply: Reply) {
        match reply {
            Reply::Ready { .. } | Reply::Synced => self.sent = 0,
            _ => self.sent = self.sent.wrapping_add(1),
        }
        self.replies.push_back(reply);
    }

    /// Sets the client's unnamed statement; returns the one it replaces.
    fn set_unnamed(&mut self, made: &Made, body: Option<Bytes>) -> Option<Bytes> {
        self.unnamed_changes = self.unnamed_changes.wrapping_add(1);
        made.lock().unnamed = body.clone();
        mem::replace(&mut self.unnamed, body)
    }

    /// A simple Query: SQL about session state is mapped to the client's
    /// own (see [`super::sql`]).
    fn query(&mut self, body: &[u8], made: &Made, out: &mut BytesMut) -> bool {
        // A Query's body is its text and one NUL: a text with a NUL inside is
        // the server's to refuse, so there is nothing to scan for.
        let text = body.strip_suffix(b"\0").unwrap_or(body);
        // A simple Query drops the unnamed statement.
        let previous = self.set_unnamed(made, None);
        let change = self.unnamed_changes;
        let (rewritten, deallocated) = self.session_sql(text, made, out, true).unzip();
        if let Some(text) = &rewritten {
            frame::write_message_parts(out, b'Q', &[text, b"\0"]);
        }
        self.expect(Reply::Ready {
            sent: self.sent,
            ending: Ending::Query {
                previous,
                change,
                deallocated: deallocated.flatten(),
            },
        });
        rewritten.is_some()
    }

    /// The text to run instead of `text` when it is SQL about session
    /// state, after whatever it needs sent first (into `out`), with the
    /// statement it deallocates: `DEALLOCATE` of a statement the client
    /// holds drops the backend's copy (made first if missing), and `LISTEN`
    /// raises an error that names session pooling. Before a simple Query
    /// (`query`) that starts its batch, the statement made goes with a Sync
    /// of its own: were the Parse to fail, the server would skip the Query,
    /// and no Sync of the client's would come to end that.
    fn session_sql(
        &mut self,
        text: &[u8],
        made: &Made,
        out: &mut BytesMut,
        query: bool,
    ) -> Option<(Vec<u8>, Option<Deallocated>)> {
        match super::sql::classify(text)? {
            SessionSql::Listen => Some((LISTEN_REFUSED.as_bytes().to_vec(), None)),
            SessionSql::Deallocate(name) => {
                let held = self.named.get(&name[..])?.clone();
                if !made.contains(&held.server) {
                    let starts_batch = self.sent == 0;
                    self.make_if_missing(&held, made, out);
                    if query && starts_batch {
                        frame::write_message(out, b'S', b"");
                        self.expect(Reply::Synced);
                    }
                }
                let name = self.named.remove_entry(&name[..]).map(|(name, _)| name);
                made.forget(&held.server);
                let text = [&b"DEALLOCATE "[..], &held.server].concat();
                Some((text, name.map(|name| Box::new((name, held)))))
            }
            SessionSql::DeallocateAll | SessionSql::DiscardAll => None,
        }
    }

    /// `DEALLOCATE ALL` or `DISCARD ALL` completed on the backend: it has no
    /// statement left, and the client holds none.
    pub fn dropped_all(&mut self, made: &Made) {
        self.named.clear();
        made.clear();
    }

    fn parse(&mut self, body: &[u8], made: &Made, out: &mut BytesMut) -> bool {
        let Some((name, rest)) = split_cstr(body) else {
            // The server fails it where it stands, as any message it answers.
            self.sent = self.sent.wrapping_add(1);
            return false;
        };
        if name.is_empty() {
            let rewritten = split_cstr(rest).and_then(|(text, types)| {
                let (text, _) = self.session_sql(text, made, out, false)?;
                Some([&text[..], b"\0", types].concat())
            });
            let is_rewritten = rewritten.is_some();
            let sent = Bytes::from(rewritten.unwrap_or_else(|| rest.to_vec()));
            if is_rewritten {
                frame::write_message_parts(out, b'P', &[b"\0", &sent]);
            }
            let at = self.sent;
            let previous = self.set_unnamed(made, Some(sent));
            let change = self.unnamed_changes;
            self.expect(Reply::Unnamed { at, previous, change });
            return is_rewritten;
        }
        if let Some(held) = self.named.get(name) {
            // PostgreSQL refuses to redefine a name (42P05): the second of
            // two Parses of the held statement is refused whether or not
            // the backend had it; the first one's answer, if any, is
            // dropped.
            held.write_parse(out);
            held.write_parse(out);
            self.expect(Reply::Drop);
            self.expect(Reply::Relay);
            return true;
        }
        let statement = match split_cstr(rest) {
            // A LISTEN prepared under a name runs as its refusal too.
            Some((text, types)) if super::sql::classify(text) == Some(SessionSql::Listen) => Statement::new(
                &[LISTEN_REFUSED.as_bytes(), b"\0", types].concat(),
                &self.parsing,
                self.parsing_changes,
            ),
            _ => Statement::new(rest, &self.parsing, self.parsing_changes),
        };
        statement.write_make(out);
        self.expect(Reply::Drop);
        self.expect(Reply::Parsed {
            client: Bytes::copy_from_slice(name),
            server: statement.server.clone(),
        });
        self.close_victims(made.add(&statement, self.limit), out);
        self.named.insert(Bytes::copy_from_slice(name), statement);
        true
    }

    /// A Bind of a statement the client holds goes under its server name,
    /// after the statement is made if the backend lacks it. When the client
    /// was told the statement's result and the backend's is not known to
    /// be the same, the statement is made anew and described, and the Bind
    /// is held (see [`Statements::holding`]).
    fn bind(&mut self, body: &[u8], made: &Made, out: &mut BytesMut) -> bool {
        let Some((portal, rest)) = split_cstr(body) else {
            return false;
        };
        let Some((name, rest)) = split_cstr(rest) else {
            return false;
        };
        if name.is_empty() {
            return self.use_unnamed(b'B', body, made, out);
        }
        let Some(held) = self.current(name) else {
            return false;
        };
        let expected = match held.result.clone() {
            Some(expected) if made.bind_if_same(&held.server, &expected) => None,
            Some(expected) => Some(expected),
            None => {
                self.make_if_missing(&held, made, out);
                made.lock().touch(&held.server);
                None
            }
        };
        let Some(expected) = expected else {
            frame::write_message_parts(out, b'B', &[portal, b"\0", &held.server, b"\0", rest]);
            return true;
        };
        self.make(&held, made, out);
        frame::write_message_parts(out, b'D', &[b"S", &held.server, b"\0"]);
        self.expect(Reply::Described {
            server: Some(held.server.clone()),
            client: None,
            relay: false,
        });
        // Without it the server keeps the answer until the client's Sync.
        frame::write_message(out, b'H', b"");
        self.hold = Some(Hold {
            portal: Bytes::copy_from_slice(portal),
            rest: Bytes::copy_from_slice(rest),
            server: held.server,
            expected,
            changed: None,
        });
        true
    }

    /// A Bind is held until the server tells the result of the statement
    /// it binds: the caller sends what [`Statements::rewrite`] gave, waits
    /// until [`Statements::decided`], then sends [`Statements::release`]'s.
    pub fn holding(&self) -> bool {
        self.hold.is_some()
    }

    /// The held Bind may go on.
    pub fn decided(&self) -> bool {
        self.hold.as_ref().is_some_and(|hold| hold.changed.is_some())
    }

    /// Appends the held Bind to `out`: as the client sent it, but for a
    /// result other than the one the client was told, where it binds a
    /// statement no backend has, for the server to fail it as PostgreSQL
    /// fails a statement whose result changed (0A000, see
    /// [`Statements::result_changed`]).
    pub fn release(&mut self, out: &mut BytesMut) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        let changed = hold.changed == Some(true);
        let name = if changed { NO_STATEMENT } else { &hold.server[..] };
        frame::write_message_parts(out, b'B', &[&hold.portal, b"\0", name, b"\0", &hold.rest]);
        self.changed |= changed;
    }

    /// An ErrorResponse came: whether it answers a Bind sent to fail for a
    /// changed result, and is to be told as PostgreSQL tells that.
    pub fn result_changed(&mut self) -> bool {
        mem::take(&mut self.changed)
    }

    fn describe(&mut self, body: &[u8], made: &Made, out: &mut BytesMut) -> bool {
        let statement = body.first() == Some(&b'S');
        if body == b"S\0" {
            let rewritten = self.use_unnamed(b'D', body, made, out);
            self.expect_described(None, None);
            return rewritten;
        }
        let Some((name, held)) = statement_named(body)
            .and_then(|name| Some((self.named.get_key_value(name)?.0.clone(), self.current(name)?)))
        else {
            if statement {
                self.expect_described(None, None);
            }
            return false;
        };
        self.make_if_missing(&held, made, out);
        frame::write_message_parts(out, b'D', &[b"S", &held.server, b"\0"]);
        self.expect_described(Some(held.server), Some(name));
        true
    }

    /// Notes the answer owed for the client's Describe of a statement: it
    /// is counted as the other messages of a batch are, in `rewrite`.
    fn expect_described(&mut self, server: Option<Bytes>, client: Option<Bytes>) {
        self.replies.push_back(Reply::Described {
            server,
            client,
            relay: true,
        });
    }

    /// The client's statement `name`, named for its parsing settings as
    /// they are now: one prepared before the client changed them is
    /// renamed, and so made again under the new values where it is used,
    /// rather than bound where another client's settings made it.
    fn current(&mut self, name: &[u8]) -> Option<Statement> {
        let held = self.named.get_mut(name)?;
        // Not while answers are awaited: they name statements as they were
        // sent (a failed Parse's, a Describe's), and a renamed one would
        // not be recognised in them.
        if held.parsing != self.parsing_changes && self.replies.is_empty() {
            held.server = Statement::new(&held.parse, &self.parsing, self.parsing_changes).server;
            held.parsing = self.parsing_changes;
        }
        Some(held.clone())
    }

    /// Makes `held` on the backend first if it lacks it, closing the least
    /// recently used beyond the limit.
    fn make_if_missing(&mut self, held: &Statement, made: &Made, out: &mut BytesMut) {
        if !made.contains(&held.server) {
            self.make(held, made, out);
        }
    }

    /// Makes `held` on the backend, whether or not it has it.
    fn make(&mut self, held: &Statement, made: &Made, out: &mut BytesMut) {
        held.write_make(out);
        self.expect(Reply::Drop);
        self.expect(Reply::Remade {
            server: held.server.clone(),
        });
        if held.parsing == self.parsing_changes {
            self.close_victims(made.add(held, self.limit), out);
        } else {
            // Still named for the client's settings before they changed
            // (see `current`) but made under the new ones: not the
            // statement its name says, so no other client is to find it.
            made.forget(&held.server);
        }
    }

    fn close_victims(&mut self, victims: Vec<Bytes>, out: &mut BytesMut) {
        for victim in victims {
            write_close(&victim, out);
            self.expect(Reply::Drop);
        }
    }

    /// A Bind or Describe (`tag`, `body`) of the unnamed statement: when
    /// the backend's is not the client's, it goes after the client's Parse,
    /// or after a Close of the backend's when the client has none.
    fn use_unnamed(&mut self, tag: u8, body: &[u8], made: &Made, out: &mut BytesMut) -> bool {
        let mut uses = made.lock();
        match &self.unnamed {
            Some(own) if uses.unnamed.as_ref() == Some(own) => return false,
            Some(own) => {
                frame::write_message_parts(out, b'P', &[b"\0", own]);
                uses.unnamed = Some(own.clone());
                drop(uses);
                self.expect(Reply::UnnamedRemade);
            }
            None => {
                write_close(b"", out);
                uses.unnamed = None;
                drop(uses);
                self.expect(Reply::Drop);
            }
        }
        frame::write_message(out, tag, body);
        true
    }

    fn close(&mut self, body: &[u8], made: &Made, out: &mut BytesMut) -> bool {
        if body == b"S\0" {
            let previous = self.set_unnamed(made, None);
            let change = self.unnamed_changes;
            self.expect(Reply::UnnamedClosed { previous, change });
            return false;
        }
        self.expect(Reply::Relay);
        let Some(name) = statement_named(body) else {
            return false;
        };
        if self.named.remove(name).is_none() {
            return false;
        }
        write_close(NO_STATEMENT, out);
        true
    }

    /// The last `n` Syncs sent were ignored by the server (they came
    /// during a copy-in): no ReadyForQuery will answer them.
    pub fn syncs_ignored(&mut self, mut n: u32) {
        let mut at = self.replies.len();
        while n > 0 && at > 0 {
            at -= 1;
            if let Some(Reply::Ready { sent, .. }) = self.replies.get(at) {
                // The server did not end the batch there: it counts on.
                self.sent = self.sent.wrapping_add(*sent);
                self.replies.remove(at);
                n -= 1;
            }
        }
    }

    /// An ErrorResponse came after `answered` messages of its batch were
    /// answered, each by its last message (ParseComplete, BindComplete,
    /// CloseComplete, RowDescription or NoData after a Describe, or
    /// CommandComplete, PortalSuspended or EmptyQueryResponse after an
    /// Execute): the message after them failed, and the server skips the
    /// rest up to the Sync, among it the next `skipped` Queries and
    /// FunctionCalls (the session's batches tell how many).
    pub fn failed(&mut self, answered: u32, skipped: u32) {
        self.failed_at.get_or_insert(answered);
        self.skipped += skipped;
        if self.hold.is_none() {
            return;
        }
        // Failed before a batch's end that the server answers (a Sync, or
        // a Query or FunctionCall it does not skip) ahead of the held
        // Bind's statement, the server goes on past that end and tells
        // the result. Otherwise it tells none: the held Bind goes, to be
        // skipped with the rest.
        let ends_before = self
            .replies
            .iter()
            .take_while(|reply| !matches!(reply, Reply::Described { relay: false, .. }))
            .filter(|reply| matches!(reply, Reply::Ready { .. } | Reply::Synced))
            .count();
        let skipped_through = u32::try_from(ends_before).is_ok_and(|ends| ends <= self.skipped);
        if let Some(hold) = self.hold.as_mut().filter(|_| skipped_through) {
            hold.changed.get_or_insert(false);
        }
    }

    /// Server → client: notes what a ParseComplete ('1'), CloseComplete
    /// ('3'), ReadyForQuery ('Z'), ParameterDescription ('t'), or the
    /// RowDescription ('T') or NoData ('n') right after a
    /// ParameterDescription, with `body`, answered on the backend whose
    /// statements are `made`; returns whether the client is to see it.
    pub fn reply(&mut self, tag: u8, body: &[u8], made: &Made) -> bool {
        match tag {
            b'1' | b'3' => match self.replies.pop_front() {
                Some(Reply::Drop | Reply::Remade { .. } | Reply::UnnamedRemade) => false,
                Some(end @ (Reply::Ready { .. } | Reply::Synced | Reply::Described { .. })) => {
                    // A reply no message asked for: keep the batch's end.
                    self.replies.push_front(end);
                    true
                }
                Some(Reply::Relay | Reply::Parsed { .. } | Reply::Unnamed { .. } | Reply::UnnamedClosed { .. })
                | None => true,
            },
            b'Z' => self.end_batch(made),
            // Only a Describe of a statement is answered so.
            b't' => match self.replies.front() {
                Some(Reply::Described { relay, .. }) => *relay,
                _ => true,
            },
            b'T' | b'n' => self.described(body, made),
            _ => true,
        }
    }

    /// A statement's result, described: noted for the backend and for the
    /// client, and compared with what the client was told where a Bind
    /// waits for it.
    fn described(&mut self, body: &[u8], made: &Made) -> bool {
        if !matches!(self.replies.front(), Some(Reply::Described { .. })) {
            return true;
        }
        let Some(Reply::Described { server, client, relay }) = self.replies.pop_front() else {
            return true;
        };
        let result = ResultDesc::copy_from_slice(body);
        if let Some(server) = &server {
            made.described(server, &result);
            let held = client.and_then(|client| self.named.get_mut(&client));
            if let Some(held) = held.filter(|held| held.server == server) {
                held.result = Some(result.clone());
            }
        }
        if !relay {
            if let Some(hold) = self.hold.as_mut() {
                hold.changed = Some(!same_result(&result, &hold.expected));
            }
        }
        relay
    }

    /// A ReadyForQuery: the Parses of its batch still unanswered failed or
    /// were skipped after an error; their statements exist nowhere. Of
    /// the client's unnamed statement, the first unnamed Parse, Close or
    /// Query left unanswered decides: PostgreSQL drops the unnamed
    /// statement before it parses a new one, so after a failed Parse there
    /// is none, and after a skipped Parse, Close or Query the one before
    /// stays. A Query or FunctionCall that an error before it in its batch
    /// made the server skip gets no ReadyForQuery: this one answers the
    /// next Sync. Returns whether the client is to see it.
    fn end_batch(&mut self, made: &Made) -> bool {
        let failed_at = self.failed_at.take();
        // A Bind sent to fail that did not (a statement of that name was
        // made by SQL) leaves no error to tell.
        self.changed = false;
        // Past a skipped Query or FunctionCall, every message was skipped.
        let mut skipping = false;
        let mut unanswered = Unanswered::default();
        let seen = loop {
            let Some(reply) = self.replies.pop_front() else {
                break true;
            };
            match reply {
                Reply::Ready {
                    ending: Ending::Sync, ..
                } => break true,
                Reply::Ready { ending, .. } if self.skipped > 0 => {
                    self.skipped -= 1;
                    skipping = true;
                    if let Ending::Query {
                        previous,
                        change,
                        deallocated,
                    } = ending
                    {
                        unanswered.note(previous, change);
                        if let Some(deallocated) = deallocated {
                            let (name, statement) = *deallocated;
                            self.named.entry(name).or_insert(statement);
                        }
                    }
                }
                Reply::Ready { .. } => break true,
                Reply::Synced => break false,
                Reply::Parsed { client, server } => {
                    made.forget(&server);
                    if self.named.get(&client).is_some_and(|held| held.server == server) {
                        self.named.remove(&client);
                    }
                }
                Reply::Remade { server } => made.forget(&server),
                Reply::UnnamedRemade => made.lock().unnamed = None,
                Reply::Unnamed { at, previous, change } => {
                    made.lock().unnamed = None;
                    let failed = !skipping && failed_at == Some(at);
                    unanswered.note(if failed { None } else { previous }, change);
                }
                Reply::UnnamedClosed { previous, change } => {
                    made.lock().unnamed = None;
                    unanswered.note(previous, change);
                }
                Reply::Relay | Reply::Drop | Reply::Described { .. } => {}
            }
        };
        // Unless a message after the batch changed it since.
        if let Some(kept) = unanswered.kept {
            if unanswered.last_change == self.unnamed_changes {
                self.unnamed = kept;
            }
        }
        seen
    }
}

/// The unnamed Parses and Closes, and the simple Queries, of a batch left
/// unanswered.
#[derive(Default)]
struct Unanswered {
    /// The client's unnamed statement after the first of them, if any.
    kept: Option<Option<Bytes>>,
    /// The last one's change.
    last_change: u32,
}

impl Unanswered {
    fn note(&mut self, kept: Option<Bytes>, change: u32) {
        self.kept.get_or_insert(kept);
        self.last_change = change;
    }
}

/// Whether two results, as Describes told them, are the same to
/// PostgreSQL's check of a prepared statement (`equalTupleDescs` on its
/// columns): the same columns, each of the same name, type and type
/// modifier; the table and column each comes from may differ.
fn same_result(a: &[u8], b: &[u8]) -> bool {
    match (columns(a), columns(b)) {
        (Some(columns_a), Some(columns_b)) => columns_a == columns_b,
        _ => a == b,
    }
}

/// A column of a result, as PostgreSQL compares them.
#[derive(PartialEq, Eq)]
struct Column<'a> {
    name: &'a [u8],
    type_oid: &'a [u8],
    type_modifier: &'a [u8],
}

/// A RowDescription's columns (none for NoData's empty body); `None` if
/// malformed.
fn columns(body: &[u8]) -> Option<Vec<Column<'_>>> {
    if body.is_empty() {
        return Some(Vec::new());
    }
    let count = u16::from_be_bytes(body.get(..2)?.try_into().ok()?);
    let mut rest = &body[2..];
    let mut columns = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (name, after) = split_cstr(rest)?;
        // Table OID (4), column number (2), type OID (4), type size (2),
        // type modifier (4), format (2).
        let field = after.get(..18)?;
        columns.push(Column {
            name,
            type_oid: &field[6..10],
            type_modifier: &field[12..16],
        });
        rest = &after[18..];
    }
    Some(columns)
}

/// Appends a Close of the statement a backend knows as `server`.
fn write_close(server: &[u8], out: &mut BytesMut) {
    frame::write_message_parts(out, b'C', &[b"S", server, b"\0"]);
}

/// The name in a Describe or Close body that names a statement ('S'), not
/// a portal ('P'); a named one only.
fn statement_named(body: &[u8]) -> Option<&[u8]> {
    let (&kind, rest) = body.split_first()?;
    let (name, _) = split_cstr(rest)?;
    (kind == b'S' && !name.is_empty()).then_some(name)
}

/// A NUL-terminated string and what follows it.
fn split_cstr(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = memchr::memchr(0, body)?;
    Some((&body[..end], &body[end + 1..]))
}

#[cfg(test)]
mod tests;
