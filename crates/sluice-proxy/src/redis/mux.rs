//! Upstream connections shared by Redis clients whose session is still in
//! its default state (a departure from one upstream connection per client,
//! the design they replaced; [`super::shared`] says why).
//!
//! Each lane is one upstream connection with a writer task, which sends the
//! commands queued for it in as few writes as it can, and a reader task,
//! which frames the replies and hands each to the command that waits for it,
//! in order. Fifty clients' commands then cost the proxy and Redis one read
//! and one write per batch instead of one per command, which is what
//! twemproxy does; a client always uses the same lane, so its own commands
//! run in the order it sent them. A lane that fails answers its waiting
//! commands with an error and is dialled again by the next command.
//!
//! A command's slot travels with it and is given back the moment its
//! reply is framed, before the client has it: the reader never waits for a
//! client, so a client that does not read holds no slot.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use sluice_resp::ReplyScanner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::UpstreamAuth;
use crate::buffer::READ_SIZE;
use crate::gate::Slot;
use crate::socket::{self, OwnedReadHalf, OwnedWriteHalf};

/// A command's reply, or why there is none.
pub(crate) type Answer = Result<Bytes, Arc<str>>;

/// One command on its way to a lane.
struct Call {
    command: Bytes,
    reply: oneshot::Sender<Answer>,
    slot: Slot,
}

/// A written command waiting for its reply.
struct Waiter {
    reply: oneshot::Sender<Answer>,
    /// Dropped with the waiter: when the reply is framed, or the lane fails.
    _slot: Slot,
}

/// Written commands waiting for their replies, oldest first.
type InFlight = Arc<Mutex<VecDeque<Waiter>>>;

/// Largest batch the writer gathers before it writes.
const BATCH_BYTES: usize = 64 * 1024;

pub(crate) struct Mux {
    upstream: String,
    auth: Arc<UpstreamAuth>,
    /// `per_worker` lanes for each worker, in worker order.
    lanes: Vec<Mutex<Option<mpsc::UnboundedSender<Call>>>>,
    per_worker: usize,
}

impl Mux {
    /// `per_worker` shared connections to `upstream` for each of `workers`
    /// (at least one), dialled on first use; their replies tell `auth`
    /// whether the server asks for AUTH.
    pub fn new((upstream, auth): (String, Arc<UpstreamAuth>), per_worker: usize, workers: usize) -> Self {
        let per_worker = per_worker.max(1);
        Mux {
            upstream,
            auth,
            lanes: (0..per_worker * workers).map(|_| Mutex::new(None)).collect(),
            per_worker,
        }
    }

    /// The lane for a client of the calling worker: one of that worker's,
    /// chosen by `key`. A lane runs on the worker that dialled it, so a
    /// worker's clients and their lane never wake another thread.
    pub fn lane_for(&self, key: usize) -> usize {
        let worker = crate::workers::current().unwrap_or(0);
        (worker * self.per_worker + key % self.per_worker) % self.lanes.len()
    }

    /// Queues `command`, admitted with `slot`, on lane `lane`; the
    /// receiver gets its reply.
    pub fn call(&self, lane: usize, command: Bytes, slot: Slot) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        let mut call = Call { command, reply, slot };
        let mut tx = self.lanes[lane % self.lanes.len()]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = tx.as_ref() {
            match sender.send(call) {
                Ok(()) => return answer,
                // The lane failed since: dial it again.
                Err(mpsc::error::SendError(back)) => call = back,
            }
        }
        let (sender, calls) = mpsc::unbounded_channel();
        sender
            .send(call)
            .unwrap_or_else(|_| unreachable!("the receiver is alive"));
        tokio::spawn(lane_task(self.upstream.clone(), Arc::clone(&self.auth), calls));
        *tx = Some(sender);
        answer
    }
}

/// Dials the upstream, then writes and reads until the connection fails.
async fn lane_task(upstream: String, auth: Arc<UpstreamAuth>, mut calls: mpsc::UnboundedReceiver<Call>) {
    let stream = match socket::connect_stream(&upstream).await {
        Ok(s) => s,
        Err(e) => {
            let why = format!("sluice: cannot reach the upstream server {upstream}: {e}");
            return fail(&mut calls, Vec::new(), why);
        }
    };
    let (rd, wr) = socket::into_split(stream);
    let in_flight = InFlight::default();
    let failure = tokio::select! {
        e = write_calls(wr, &mut calls, &in_flight) => e,
        e = read_replies(rd, &in_flight, &auth) => e,
    };
    let waiting = std::mem::take(&mut *in_flight.lock().unwrap_or_else(PoisonError::into_inner));
    fail(
        &mut calls,
        waiting.into(),
        format!("sluice: the shared upstream connection failed: {failure}"),
    );
}

/// Closes the lane (the next command dials a new one) and answers every
/// command written or queued on it with `why`.
fn fail(calls: &mut mpsc::UnboundedReceiver<Call>, written: Vec<Waiter>, why: String) {
    calls.close();
    let why: Arc<str> = why.into();
    let written = written.into_iter().map(|w| w.reply);
    let queued = std::iter::from_fn(|| calls.try_recv().ok().map(|c| c.reply));
    for reply in written.chain(queued) {
        let _ = reply.send(Err(Arc::clone(&why)));
    }
}

/// Gathers queued commands into batches and writes them.
async fn write_calls(
    mut wr: OwnedWriteHalf,
    calls: &mut mpsc::UnboundedReceiver<Call>,
    in_flight: &InFlight,
) -> io::Error {
    let mut batch = BytesMut::new();
    loop {
        let Some(first) = calls.recv().await else {
            return io::Error::new(io::ErrorKind::BrokenPipe, "no more clients");
        };
        // Woken by the first command, this task would otherwise run at once
        // and write it alone; yielding lets the other clients whose commands
        // have arrived run first and join the batch.
        tokio::task::yield_now().await;
        let mut next = Some(first);
        {
            let mut waiting = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
            while let Some(call) = next {
                batch.extend_from_slice(&call.command);
                waiting.push_back(Waiter {
                    reply: call.reply,
                    _slot: call.slot,
                });
                next = if batch.len() < BATCH_BYTES {
                    calls.try_recv().ok()
                } else {
                    None
                };
            }
        }
        if let Err(e) = wr.write_all(&batch).await {
            return e;
        }
        batch.clear();
    }
}

/// Frames replies and hands each to the oldest waiting command.
async fn read_replies(mut rd: OwnedReadHalf, in_flight: &InFlight, auth: &UpstreamAuth) -> io::Error {
    let mut buf = BytesMut::new();
    let mut scanner = ReplyScanner::default();
    let mut scanned = 0;
    loop {
        buf.reserve(READ_SIZE);
        match rd.read_buf(&mut buf).await {
            Ok(0) => return io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed it"),
            Ok(_) => {}
            Err(e) => return e,
        }
        loop {
            let (n, reply) = match scanner.advance(&buf[scanned..]) {
                Ok(r) => r,
                Err(e) => return io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
            };
            scanned += n;
            if reply.is_none() {
                break;
            }
            let bytes = buf.split_to(scanned).freeze();
            scanned = 0;
            auth.note(&bytes);
            let waiter = in_flight.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
            match waiter {
                Some(w) => {
                    let _ = w.reply.send(Ok(bytes));
                }
                None => return io::Error::new(io::ErrorKind::InvalidData, "a reply nobody asked for"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::workers::Workers;

    #[tokio::test]
    async fn a_client_gets_a_lane_of_its_own_worker() {
        let mux = Arc::new(Mux::new(("127.0.0.1:1".into(), Arc::default()), 2, 2));
        // Off the workers (as in tests on their own runtime): worker 0's.
        assert_eq!((0..4).map(|k| mux.lane_for(k)).collect::<Vec<_>>(), [0, 1, 0, 1]);
        let workers = Workers::start(2).unwrap();
        let mut lanes = Vec::new();
        for key in [4, 5, 6, 7] {
            let mux = Arc::clone(&mux);
            lanes.push(workers.next().spawn(async move { mux.lane_for(key) }).await.unwrap());
        }
        // Round robin puts keys 4 and 6 on worker 0, 5 and 7 on worker 1.
        assert_eq!(lanes, [0, 3, 0, 3]);
    }
}
