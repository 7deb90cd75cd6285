//! The pub/sub commands: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE,
//! PUBLISH and PUBSUB (CHANNELS, NUMSUB, NUMPAT), with Redis's replies: a
//! confirmation per channel, pushes in RESP3. How messages travel:
//! `crate::pubsub`. A connection subscribed in RESP2 takes only these
//! commands, PING and QUIT, as in Redis.

use std::cell::RefCell;

use super::session::Session;
use crate::blocked::ConnKey;
use crate::resp::Reply;
use crate::shared::Shared;

thread_local! {
    /// Connections a PUBLISH on this thread posted to: the poller wakes
    /// them once the publisher's step is done.
    static NOTIFIED: RefCell<Vec<ConnKey>> = const { RefCell::new(Vec::new()) };
}

/// The connections to wake for what this thread published.
pub(crate) fn take_notified() -> Vec<ConnKey> {
    NOTIFIED.take()
}

fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(Some(b.to_vec()))
}

/// Whether `name` may run on a connection subscribed in RESP2.
pub(super) fn allowed_while_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe" | "unsubscribe" | "psubscribe" | "punsubscribe" | "ping" | "quit" | "reset"
    )
}

/// SUBSCRIBE and PSUBSCRIBE (`name`): a confirmation for each, with the
/// connection's count of subscriptions after it.
pub(super) fn subscribe(shared: &Shared, session: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    let Some(mailbox) = session.mailbox.clone() else {
        return Reply::error(format!("'{name}' is not allowed here"));
    };
    let pattern = name == "psubscribe";
    let mut confirmations = Vec::with_capacity(args.len());
    for channel in args {
        let set = if pattern {
            &mut session.patterns
        } else {
            &mut session.channels
        };
        if set.insert(channel.clone()) {
            shared.pubsub.subscribe(channel, pattern, &mailbox);
        }
        confirmations.push(confirmation(name, bulk(channel), session));
    }
    Reply::Many(confirmations)
}

/// What (un)subscribing from `channel` answers: the command, the channel,
/// and the connection's count of subscriptions after it.
fn confirmation(name: &str, channel: Reply, session: &Session) -> Reply {
    Reply::Push(vec![
        bulk(name.as_bytes()),
        channel,
        Reply::Integer(session.subscriptions() as i64),
    ])
}

/// UNSUBSCRIBE and PUNSUBSCRIBE (`name`): from the channels named, or
/// from every one; a confirmation for each (one with nil if there were
/// none).
pub(super) fn unsubscribe(shared: &Shared, session: &mut Session, name: &str, args: &[Vec<u8>]) -> Reply {
    let pattern = name == "punsubscribe";
    let set = if pattern { &session.patterns } else { &session.channels };
    let names: Vec<Vec<u8>> = if args.is_empty() {
        set.iter().cloned().collect()
    } else {
        args.to_vec()
    };
    if names.is_empty() {
        return confirmation(name, Reply::Bulk(None), session);
    }
    let key = session.mailbox.as_ref().map(|m| m.key);
    let mut confirmations = Vec::with_capacity(names.len());
    for channel in names {
        let set = if pattern {
            &mut session.patterns
        } else {
            &mut session.channels
        };
        if set.remove(&channel) {
            if let Some(key) = key {
                shared.pubsub.unsubscribe(&channel, pattern, key);
            }
        }
        confirmations.push(confirmation(name, bulk(&channel), session));
    }
    Reply::Many(confirmations)
}

/// Leaves every channel and pattern: the connection is closing.
pub(crate) fn leave(shared: &Shared, session: &mut Session) {
    let Some(key) = session.mailbox.as_ref().map(|m| m.key) else {
        return;
    };
    for channel in std::mem::take(&mut session.channels) {
        shared.pubsub.unsubscribe(&channel, false, key);
    }
    for pattern in std::mem::take(&mut session.patterns) {
        shared.pubsub.unsubscribe(&pattern, true, key);
    }
}

/// `PUBLISH channel message`: how many deliveries (a connection that
/// listens to the channel and to a pattern matching it gets two).
pub(super) fn publish(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let woken = shared.pubsub.publish(&args[0], &args[1]);
    let count = woken.len() as i64;
    NOTIFIED.with_borrow_mut(|n| n.extend(woken));
    Reply::Integer(count)
}

/// `PUBSUB CHANNELS [pattern]`, `PUBSUB NUMSUB [channel ...]`, `PUBSUB
/// NUMPAT`.
pub(super) fn pubsub(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let sub = args[0].to_ascii_lowercase();
    match (sub.as_slice(), &args[1..]) {
        (b"channels", [] | [_]) => {
            let names = shared.pubsub.channels(args.get(1).map(Vec::as_slice));
            Reply::Array(names.iter().map(|c| bulk(c)).collect())
        }
        (b"numsub", channels) => Reply::Array(
            channels
                .iter()
                .flat_map(|c| [bulk(c), Reply::Integer(shared.pubsub.listeners(c) as i64)])
                .collect(),
        ),
        (b"numpat", []) => Reply::Integer(shared.pubsub.patterns() as i64),
        (b"channels" | b"numpat", _) => Reply::error(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(&args[0])
        )),
        _ => Reply::error(format!(
            "unknown subcommand '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}
