//! One connection to a shard that runs a connection's commands one after
//! another (Redis), shared by every sub-request to that shard: commands are
//! written in the order they are sent, batched into one write when several
//! wait, and the replies, which come back in the same order, are handed to
//! their senders in turn. This is how twemproxy and Redis Cluster clients
//! talk to Redis: a connection per sub-request would cost Redis a read and
//! a write per command where a pipeline costs it one per batch.
//!
//! The order in which sub-requests enter the pipeline is the order Redis
//! runs them; the shard's gate decides it when more are waiting than it
//! lets in.
//!
//! Contract: each [`Pipeline::send`] gets exactly its own replies (the
//! last, or all of them, as its [`Keep`] asks) or an error. A connection
//! that fails, or whose oldest command has waited past the reply timeout,
//! fails every command still waiting on it and is marked broken; the next
//! send is refused at once, so that the shard opens a new one. The timeout
//! is watched by one timer a connection, not one a command: registering a
//! timer wakes tokio's driver, which at tens of thousands of commands a
//! second costs a system call each.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_resp::ReplyScanner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Commands written at most in one batch.
const BATCH: usize = 256;

type Done = oneshot::Sender<Result<Vec<u8>, Failed>>;

/// A send that got no whole answer: why, and under [`Keep::All`] the
/// replies that came before the failure, each whole (commands that ran
/// and were answered, which a caller must not report as failed).
#[derive(Debug)]
pub struct Failed {
    pub error: io::Error,
    pub answered: Vec<u8>,
}

/// Which of a send's replies its sender gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The last, or the first if it is an error: a command behind `ASKING`,
    /// a transaction behind `MULTI`.
    Last,
    /// Every one, as they came, one after another: a run of a client's
    /// pipelined commands.
    All,
}

/// Commands for the shard: their bytes, how many replies they bring (two
/// with `ASKING` before a command), which of them to keep, and who waits.
struct Sent {
    bytes: Vec<u8>,
    replies: usize,
    keep: Keep,
    done: Done,
}

/// A written send: the replies it still expects, which it keeps, who waits
/// and when it was written.
struct Written {
    replies: usize,
    keep: Keep,
    done: Done,
    at: Instant,
}

#[derive(Default)]
struct Waiting {
    /// Sends written, in order.
    queue: VecDeque<Written>,
    broken: bool,
}

pub struct Pipeline {
    tx: mpsc::UnboundedSender<Sent>,
    waiting: Arc<Mutex<Waiting>>,
}

fn lock(w: &Mutex<Waiting>) -> MutexGuard<'_, Waiting> {
    // Every change under the lock is one statement; a panic elsewhere
    // leaves it consistent.
    w.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails every waiting command, and marks the connection broken; the
/// front one, if it keeps every reply, gets those `answered` so far.
fn fail_all(waiting: &Mutex<Waiting>, why: &io::Error, mut answered: Vec<u8>) {
    let mut w = lock(waiting);
    w.broken = true;
    for written in w.queue.drain(..) {
        let answered = match written.keep {
            Keep::All => std::mem::take(&mut answered),
            Keep::Last => Vec::new(),
        };
        let error = io::Error::new(why.kind(), why.to_string());
        let _ = written.done.send(Err(Failed { error, answered }));
    }
}

/// A buffer that a large reply grew gives its memory back once empty.
pub(crate) fn shrink(buf: &mut Vec<u8>) {
    if buf.is_empty() && buf.capacity() > 1 << 20 {
        buf.shrink_to(64 << 10);
    }
}

impl Pipeline {
    /// Takes over `stream` (and `unread`, bytes already read from it) with a
    /// writing and a reading task.
    pub fn start(stream: TcpStream, unread: Vec<u8>, reply_timeout: Duration) -> Pipeline {
        let (mut read, mut write) = stream.into_split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Sent>();
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let w = waiting.clone();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            let mut bytes = Vec::new();
            while rx.recv_many(&mut batch, BATCH).await > 0 {
                bytes.clear();
                {
                    let mut waiting = lock(&w);
                    let now = Instant::now();
                    for sent in batch.drain(..) {
                        if waiting.broken {
                            let error = io::Error::new(io::ErrorKind::BrokenPipe, "connection lost");
                            let _ = sent.done.send(Err(Failed {
                                error,
                                answered: Vec::new(),
                            }));
                            continue;
                        }
                        bytes.extend_from_slice(&sent.bytes);
                        waiting.queue.push_back(Written {
                            replies: sent.replies,
                            keep: sent.keep,
                            done: sent.done,
                            at: now,
                        });
                    }
                }
                if let Err(e) = write.write_all(&bytes).await {
                    fail_all(&w, &e, Vec::new());
                    return;
                }
            }
        });
        let w = waiting.clone();
        tokio::spawn(async move {
            let mut buf = unread;
            // Frames replies across reads, so a long one is not walked
            // again from its start at each read; `scanned` bytes after
            // `at` are the part of the next reply it has taken.
            let mut scanner = ReplyScanner::default();
            let mut scanned = 0;
            // The replies kept of the front send so far: under
            // `Keep::Last` the first of several (an `ASKING` pair, a
            // transaction), returned if it is an error; under `Keep::All`
            // each one.
            let mut kept: Vec<u8> = Vec::new();
            let mut watch =
                tokio::time::interval((reply_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)));
            watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Replies are taken from `at` on and the buffer compacted
                // once a read, not once a reply.
                let mut at = 0;
                loop {
                    match scanner.advance(&buf[at + scanned..]) {
                        Ok((n, Some(_))) => scanned += n,
                        Ok((n, None)) => {
                            scanned += n;
                            break;
                        }
                        Err(e) => {
                            let e = io::Error::new(io::ErrorKind::InvalidData, e);
                            return fail_all(&w, &e, std::mem::take(&mut kept));
                        }
                    }
                    let len = std::mem::take(&mut scanned);
                    let reply = &buf[at..at + len];
                    at += len;
                    let mut waiting = lock(&w);
                    let Some(front) = waiting.queue.front_mut() else {
                        drop(waiting);
                        let e = io::Error::new(io::ErrorKind::InvalidData, "a reply nobody asked for");
                        return fail_all(&w, &e, Vec::new());
                    };
                    front.replies -= 1;
                    let last = front.replies == 0;
                    match front.keep {
                        Keep::All => kept.extend_from_slice(reply),
                        Keep::Last if kept.is_empty() && !last => kept.extend_from_slice(reply),
                        Keep::Last => {}
                    }
                    if !last {
                        continue;
                    }
                    let front = waiting.queue.pop_front().expect("the front is there");
                    let answer = match front.keep {
                        Keep::Last if kept.first() != Some(&b'-') => reply.to_vec(),
                        _ => std::mem::take(&mut kept),
                    };
                    kept.clear();
                    let _ = front.done.send(Ok(answer));
                }
                buf.drain(..at);
                shrink(&mut buf);
                if buf.capacity() - buf.len() < 4096 {
                    buf.reserve(16 << 10);
                }
                tokio::select! {
                    read = read.read_buf(&mut buf) => match read {
                        Ok(0) => {
                            let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the shard closed the connection");
                            return fail_all(&w, &e, std::mem::take(&mut kept));
                        }
                        Ok(_) => {}
                        Err(e) => return fail_all(&w, &e, std::mem::take(&mut kept)),
                    },
                    _ = watch.tick() => {
                        let overdue = lock(&w).queue.front().is_some_and(|front| front.at.elapsed() > reply_timeout);
                        if overdue {
                            let e = io::Error::new(io::ErrorKind::TimedOut, "no reply in time");
                            return fail_all(&w, &e, std::mem::take(&mut kept));
                        }
                    }
                }
            }
        });
        Pipeline { tx, waiting }
    }

    /// Whether the connection has failed; a broken pipeline is replaced.
    pub fn is_broken(&self) -> bool {
        lock(&self.waiting).broken
    }

    /// Sends `bytes`, which bring `replies` replies, and waits for those
    /// `keep` asks for.
    pub async fn send(&self, bytes: Vec<u8>, replies: usize, keep: Keep) -> Result<Vec<u8>, Failed> {
        let (done, answer) = oneshot::channel();
        let lost = || Failed {
            error: io::Error::new(io::ErrorKind::BrokenPipe, "connection lost"),
            answered: Vec::new(),
        };
        let sent = Sent {
            bytes,
            replies,
            keep,
            done,
        };
        self.tx.send(sent).map_err(|_| lost())?;
        answer.await.map_err(|_| lost())?
    }
}
