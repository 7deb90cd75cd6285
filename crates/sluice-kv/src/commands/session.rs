//! One connection's state: who it is, what it named itself, the protocol
//! it speaks, its transaction, the request of several commands it is in
//! the middle of, where it connects from, the blocking pop it waits in,
//! and what it is subscribed to.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use sluice_core::Ctx;

use super::transaction::Transaction;
use crate::pubsub::Mailbox;
use crate::resp::Reply;

/// One connection's state.
pub(crate) struct Session {
    /// The connection's number, as `CLIENT ID` gives it.
    pub id: u64,
    pub tenant: u32,
    pub authenticated: bool,
    pub quit: bool,
    /// The client asked for RESP3 (`HELLO 3`).
    pub resp3: bool,
    pub transaction: Transaction,
    pub client: Names,
    /// A request of several commands (sent with `SLUICE.WITH ... IOS n`)
    /// with I/Os left: its I/O policies count it in the system until its
    /// last command, a command of another request, or the connection's end.
    pub open: Option<Ctx>,
    /// The client's address and the server's, for `CLIENT INFO`; none for
    /// the server's own sessions.
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// The blocking pop the connection waits in (`crate::blocked`).
    pub block: Option<Block>,
    /// Where its published messages go; none for the server's own
    /// sessions, which cannot subscribe.
    pub mailbox: Option<Arc<Mailbox>>,
    /// The channels and patterns it is subscribed to (`crate::pubsub`).
    pub channels: BTreeSet<Vec<u8>>,
    pub patterns: BTreeSet<Vec<u8>>,
}

/// A blocking pop that found its keys empty: the connection waits until
/// one of them is written or the deadline passes, then runs it again.
pub(crate) struct Block {
    pub keys: Vec<Vec<u8>>,
    /// None: no timeout.
    pub deadline: Option<Instant>,
    /// The waiters' generation before the command last looked at its keys.
    pub generation: u64,
    /// The request as the client sent it, run again when woken.
    pub request: Vec<Vec<u8>>,
    /// XREAD's IDs as its first run read them (`$`: the stream's last
    /// ID then), which the runs after a wake read from.
    pub since: Vec<(u64, u64)>,
}

impl Session {
    pub fn new(id: u64, tenant: u32, authenticated: bool) -> Self {
        Session {
            id,
            tenant,
            authenticated,
            quit: false,
            resp3: false,
            transaction: Transaction::default(),
            client: Names::default(),
            addresses: None,
            open: None,
            block: None,
            mailbox: None,
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
        }
    }

    /// How many channels and patterns the connection listens to.
    pub fn subscriptions(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }
}

/// What the client called itself.
#[derive(Default)]
pub(crate) struct Names {
    pub name: Option<String>,
    pub lib_name: Option<String>,
    pub lib_ver: Option<String>,
}

/// Redis's rule for names: printable ASCII without spaces.
pub(crate) fn valid(text: &[u8]) -> Option<String> {
    text.iter()
        .all(|b| (b'!'..=b'~').contains(b))
        .then(|| String::from_utf8_lossy(text).into_owned())
}

impl Names {
    /// Names the connection; an empty name clears it.
    pub fn set_name(&mut self, name: &[u8]) -> Result<(), Reply> {
        let name = valid(name)
            .ok_or_else(|| Reply::error("Client names cannot contain spaces, newlines or special characters."))?;
        self.name = (!name.is_empty()).then_some(name);
        Ok(())
    }
}
