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
//!   (query text and parameter types): `sluice_` and 32 hex digits of its
//!   SHA-256. Clients preparing the same statement share it on a backend;
//!   different statements never share a name.
//! - A client's Parse, Bind, Describe and Close that name one of its
//!   statements are rewritten to that name. A Parse goes as Close and Parse
//!   of the server name, so that it succeeds whether or not the backend has
//!   the statement already (another client may have made it); the
//!   CloseComplete answering the Close the client never sent is dropped. A
//!   client's Close only forgets the statement: others may use it.
//! - Before a request's first message goes out, the statements the client
//!   has and the leased backend lacks are made on it (Close, Parse and Sync
//!   each, answered before the request starts).
//! - A statement counts as made on a backend when its ParseComplete comes
//!   back; one whose Parse failed, or was skipped after an error up to the
//!   Sync, is forgotten at the ReadyForQuery that ends its batch, as
//!   PostgreSQL forgets it.
//!
//! Departures, as PgBouncer's: statements made or dropped with SQL
//! (PREPARE, DEALLOCATE, DISCARD ALL) are not tracked; errors about a
//! statement name the server's name, not the client's; a backend keeps the
//! statements made on it until it closes (no per-backend limit), which
//! `server_idle_timeout_secs` bounds in time. A client redefining a name it
//! holds gets PostgreSQL's error 42P05, raised by re-sending the existing
//! statement's Parse under its server name.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::frame;

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
}

impl Statement {
    fn new(parse: &[u8]) -> Statement {
        let digest = Sha256::digest(parse);
        let mut server = BytesMut::with_capacity(39);
        server.put_slice(b"sluice_");
        for byte in &digest[..16] {
            server.put_slice(format!("{byte:02x}").as_bytes());
        }
        Statement {
            server: server.freeze(),
            parse: Bytes::copy_from_slice(parse),
        }
    }

    /// Appends Close and Parse of the statement under its server name.
    fn write_make(&self, out: &mut BytesMut) {
        frame::write_message_parts(out, b'C', &[b"S", &self.server, b"\0"]);
        self.write_parse(out);
    }

    fn write_parse(&self, out: &mut BytesMut) {
        frame::write_message_parts(out, b'P', &[&self.server, b"\0", &self.parse]);
    }
}

/// The statements made on one backend, by server name.
#[derive(Default)]
pub(crate) struct Made(Mutex<HashSet<Bytes>>);

impl Made {
    fn lock(&self) -> MutexGuard<'_, HashSet<Bytes>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a statement made by [`write_makes`].
    pub fn note(&self, statement: &Statement) {
        self.lock().insert(statement.server.clone());
    }
}

/// What the server's next ParseComplete or CloseComplete answers, or the
/// ReadyForQuery that ends a batch.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// A message the client sent: its answer goes to the client.
    Relay,
    /// The Close sent before a client's Parse: its answer is dropped.
    Drop,
    /// A client's Parse of a new statement.
    Parsed { client: Bytes, server: Bytes },
    /// A Sync, Query or FunctionCall.
    Ready,
}

/// One client's prepared statements, and the answers owed for the Parse and
/// Close messages sent on its behalf.
#[derive(Default)]
pub(crate) struct Statements {
    named: HashMap<Bytes, Statement>,
    replies: VecDeque<Reply>,
}

impl Statements {
    /// Client → server: appends to `out` the message to send instead of
    /// this one, and returns true; false when it goes as it is. Bodies too
    /// short to name a statement go as they are, for the server to reject.
    pub fn rewrite(&mut self, tag: u8, body: &[u8], out: &mut BytesMut) -> bool {
        match tag {
            b'P' => self.parse(body, out),
            b'B' => self.bind(body, out),
            b'D' => self.describe(body, out),
            b'C' => self.close(body, out),
            b'S' | b'Q' | b'F' => {
                self.replies.push_back(Reply::Ready);
                false
            }
            _ => false,
        }
    }

    fn parse(&mut self, body: &[u8], out: &mut BytesMut) -> bool {
        let Some((name, rest)) = split_cstr(body) else {
            return false;
        };
        if name.is_empty() {
            self.replies.push_back(Reply::Relay);
            return false;
        }
        if let Some(held) = self.named.get(name) {
            self.replies.push_back(Reply::Relay);
            held.write_parse(out);
            return true;
        }
        let statement = Statement::new(rest);
        statement.write_make(out);
        self.replies.push_back(Reply::Drop);
        self.replies.push_back(Reply::Parsed {
            client: Bytes::copy_from_slice(name),
            server: statement.server.clone(),
        });
        self.named.insert(Bytes::copy_from_slice(name), statement);
        true
    }

    fn bind(&self, body: &[u8], out: &mut BytesMut) -> bool {
        let Some((portal, rest)) = split_cstr(body) else {
            return false;
        };
        let Some((name, rest)) = split_cstr(rest) else {
            return false;
        };
        let Some(held) = self.named.get(name) else {
            return false;
        };
        frame::write_message_parts(out, b'B', &[portal, b"\0", &held.server, b"\0", rest]);
        true
    }

    fn describe(&self, body: &[u8], out: &mut BytesMut) -> bool {
        let Some(held) = statement_named(body).and_then(|name| self.named.get(name)) else {
            return false;
        };
        frame::write_message_parts(out, b'D', &[b"S", &held.server, b"\0"]);
        true
    }

    fn close(&mut self, body: &[u8], out: &mut BytesMut) -> bool {
        self.replies.push_back(Reply::Relay);
        let Some(name) = statement_named(body) else {
            return false;
        };
        if self.named.remove(name).is_none() {
            return false;
        }
        frame::write_message_parts(out, b'C', &[b"S", NO_STATEMENT, b"\0"]);
        true
    }

    /// Server → client: notes what a ParseComplete ('1'), CloseComplete
    /// ('3') or ReadyForQuery ('Z') answered on the backend whose
    /// statements are `made`; returns whether the client is to see it.
    pub fn reply(&mut self, tag: u8, made: &Made) -> bool {
        match tag {
            b'1' | b'3' => match self.replies.pop_front() {
                Some(Reply::Drop) => false,
                Some(Reply::Parsed { server, .. }) => {
                    made.lock().insert(server);
                    true
                }
                Some(Reply::Ready) => {
                    // A reply no message asked for: keep the batch's end.
                    self.replies.push_front(Reply::Ready);
                    true
                }
                Some(Reply::Relay) | None => true,
            },
            b'Z' => {
                self.end_batch(made);
                true
            }
            _ => true,
        }
    }

    /// A ReadyForQuery: the Parses of its batch still unanswered failed or
    /// were skipped after an error; their statements exist nowhere.
    fn end_batch(&mut self, made: &Made) {
        while let Some(reply) = self.replies.pop_front() {
            match reply {
                Reply::Ready => return,
                Reply::Parsed { client, server } => {
                    made.lock().remove(&server);
                    if self.named.get(&client).is_some_and(|held| held.server == server) {
                        self.named.remove(&client);
                    }
                }
                Reply::Relay | Reply::Drop => {}
            }
        }
    }

    /// The client's statements that a backend has not made, once each.
    pub fn missing(&self, made: &Made) -> Vec<Statement> {
        let made = made.lock();
        let mut seen = HashSet::new();
        self.named
            .values()
            .filter(|held| !made.contains(&held.server) && seen.insert(held.server.clone()))
            .cloned()
            .collect()
    }

    /// Forgets statements that could not be made on a backend: whatever
    /// made them work once (a table, a type) is gone.
    pub fn forget(&mut self, failed: &[Statement]) {
        self.named.retain(|_, held| !failed.contains(held));
    }
}

/// Close and Parse, then Sync, for each statement: what the backend is sent
/// to make them before a request.
pub(crate) fn write_makes(statements: &[Statement], out: &mut BytesMut) {
    for statement in statements {
        statement.write_make(out);
        frame::write_message(out, b'S', b"");
    }
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
    let end = body.iter().position(|&b| b == 0)?;
    Some((&body[..end], &body[end + 1..]))
}

#[cfg(test)]
mod tests;
