//! Pub/sub: which connections listen to which channels and patterns, and
//! the mailbox each has for the messages published to it.
//!
//! PUBLISH runs on the publisher's worker, inside the publisher's step,
//! so it must not take another connection's lock (two publishers to each
//! other would wait on each other). It puts the message in each
//! subscriber's [`Mailbox`], a lock of its own that is never held while
//! another is taken, and names the subscriber for the poller to wake once
//! the publisher's step is done; the subscriber's next step moves its
//! mail to its output. A subscriber waits as a blocked client does
//! (`crate::blocked`), parked until a message wakes it.
//!
//! A subscriber that does not read its messages is closed once its
//! mailbox holds [`MAILBOX_BYTES`], as Redis closes a pub/sub client past
//! its output buffer limit (`client-output-buffer-limit pubsub 32mb`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::blocked::ConnKey;
use crate::glob::glob_match;
use crate::resp::Reply;

/// Bytes of messages a subscriber may leave unread before it is closed.
pub const MAILBOX_BYTES: usize = 32 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection's messages, published and not yet moved to its output.
pub(crate) struct Mailbox {
    pub key: ConnKey,
    inner: Mutex<Mail>,
}

#[derive(Default)]
struct Mail {
    messages: Vec<Reply>,
    bytes: usize,
    /// Past [`MAILBOX_BYTES`]: the connection is to be closed.
    overflowed: bool,
}

impl Mailbox {
    pub fn new(key: ConnKey) -> Self {
        Mailbox {
            key,
            inner: Mutex::new(Mail::default()),
        }
    }

    fn post(&self, message: Reply, bytes: usize) {
        let mut mail = lock(&self.inner);
        if mail.bytes + bytes > MAILBOX_BYTES {
            mail.overflowed = true;
            return;
        }
        mail.bytes += bytes;
        mail.messages.push(message);
    }

    /// The messages waiting, taken; `Err` if the connection overflowed.
    pub fn take(&self) -> Result<Vec<Reply>, ()> {
        let mut mail = lock(&self.inner);
        if mail.overflowed {
            return Err(());
        }
        mail.bytes = 0;
        Ok(std::mem::take(&mut mail.messages))
    }

    pub fn is_empty(&self) -> bool {
        let mail = lock(&self.inner);
        mail.messages.is_empty() && !mail.overflowed
    }
}

/// Every subscription of one server.
#[derive(Default)]
pub(crate) struct PubSub {
    inner: Mutex<Subscriptions>,
}

type Listeners = BTreeMap<ConnKey, Arc<Mailbox>>;

#[derive(Default)]
struct Subscriptions {
    channels: HashMap<Vec<u8>, Listeners>,
    patterns: HashMap<Vec<u8>, Listeners>,
}

impl PubSub {
    /// Adds `mailbox` to the listeners of `name`, a channel or (`pattern`)
    /// a pattern.
    pub fn subscribe(&self, name: &[u8], pattern: bool, mailbox: &Arc<Mailbox>) {
        let mut s = lock(&self.inner);
        let table = if pattern { &mut s.patterns } else { &mut s.channels };
        table
            .entry(name.to_vec())
            .or_default()
            .insert(mailbox.key, mailbox.clone());
    }

    pub fn unsubscribe(&self, name: &[u8], pattern: bool, conn: ConnKey) {
        let mut s = lock(&self.inner);
        let table = if pattern { &mut s.patterns } else { &mut s.channels };
        if let Some(listeners) = table.get_mut(name) {
            listeners.remove(&conn);
            if listeners.is_empty() {
                table.remove(name);
            }
        }
    }

    /// Posts `message` to every listener of `channel` and of the patterns
    /// it matches; the connections to wake, one per delivery (PUBLISH's
    /// count).
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> Vec<ConnKey> {
        let bulk = |b: &[u8]| Reply::Bulk(Some(b.to_vec()));
        let bytes = channel.len() + message.len() + 32;
        let s = lock(&self.inner);
        let mut woken = Vec::new();
        for mailbox in s.channels.get(channel).into_iter().flat_map(|l| l.values()) {
            mailbox.post(Reply::Push(vec![bulk(b"message"), bulk(channel), bulk(message)]), bytes);
            woken.push(mailbox.key);
        }
        for (pattern, listeners) in &s.patterns {
            if !glob_match(pattern, channel) {
                continue;
            }
            for mailbox in listeners.values() {
                let pmessage = vec![bulk(b"pmessage"), bulk(pattern), bulk(channel), bulk(message)];
                mailbox.post(Reply::Push(pmessage), bytes + pattern.len());
                woken.push(mailbox.key);
            }
        }
        woken
    }

    /// Channels with a listener, those matching `pattern` if given.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let s = lock(&self.inner);
        let mut names: Vec<Vec<u8>> = s
            .channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob_match(p, c)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// How many connections listen to `channel`.
    pub fn listeners(&self, channel: &[u8]) -> usize {
        lock(&self.inner).channels.get(channel).map_or(0, BTreeMap::len)
    }

    /// How many patterns have a listener.
    pub fn patterns(&self) -> usize {
        lock(&self.inner).patterns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reaches_channel_and_pattern_listeners_once_each() {
        let p = PubSub::default();
        let (a, b) = (Arc::new(Mailbox::new(1)), Arc::new(Mailbox::new(2)));
        p.subscribe(b"news", false, &a);
        p.subscribe(b"n*", true, &a);
        p.subscribe(b"news", false, &b);
        assert_eq!(p.publish(b"news", b"hi"), vec![1, 2, 1]);
        assert_eq!(a.take().unwrap().len(), 2, "message and pmessage");
        assert_eq!(b.take().unwrap().len(), 1);
        assert!(a.is_empty());
        p.unsubscribe(b"news", false, 2);
        assert_eq!((p.listeners(b"news"), p.patterns()), (1, 1));
        assert_eq!(p.channels(Some(b"x*")), Vec::<Vec<u8>>::new());
        assert_eq!(p.channels(None), vec![b"news".to_vec()]);
    }

    #[test]
    fn a_listener_that_does_not_read_overflows() {
        let p = PubSub::default();
        let a = Arc::new(Mailbox::new(1));
        p.subscribe(b"c", false, &a);
        let big = vec![0u8; 1 << 20];
        for _ in 0..40 {
            p.publish(b"c", &big);
        }
        assert!(a.take().is_err() && !a.is_empty());
    }
}
