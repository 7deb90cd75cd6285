//! CancelRequest forwarding: a cancel reaches the backend whose key it
//! carries, and no other. A client cancels a running query by opening a new
//! connection and sending its backend's key; the proxy relays each backend's
//! BackendKeyData unchanged, so the key a client holds is the backend's own.
//! The registry maps every live session's key to its upstream address, and
//! a cancel is forwarded only for a key the proxy handed out, so the proxy
//! cannot be used to spray cancels at the server.
//!
//! A request still on its way to a backend (waiting at the gate, or for a
//! pooled backend) has reached none, so a cancel stops it there instead:
//! the client gets PostgreSQL's answer to a cancelled query (57014), and
//! the request never runs.
//!
//! Under transaction pooling a cancel sent as the client's query ends could
//! reach its backend after the backend went on to another client's query,
//! and cancel that one. The server takes a cancel by signalling the
//! backend and then closing the cancel's connection; until it has, the
//! pool leases the backend to no one if another is idle, and otherwise
//! waits for it (`Pool::lease`), so the signal lands while the backend
//! waits for a query, where PostgreSQL ignores it. The wait is bounded:
//! the proxy gives up on a server that takes more than a second to accept
//! the cancel's connection or to close it.

use std::collections::hash_map::{Entry, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::frame::BackendKey;
use super::pool::{Backend, Link};
use crate::socket;

/// How long a cancel's connection is waited on for the server to close it:
/// PostgreSQL closes it at once, so only a server that does not holds a
/// backend out of the pool this long.
const CANCEL_TAKEN_WAIT: Duration = Duration::from_secs(1);

/// A cancel sent for a backend and not yet taken; dropping it (taken, or
/// the sending failed) says so.
struct Pending(Arc<Backend>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.cancel_taken();
    }
}

/// The keys clients of live sessions hold, shared by all sessions.
#[derive(Default)]
pub struct CancelRegistry {
    keys: Mutex<HashMap<BackendKey, Arc<Link>>>,
}

/// A registered key; dropping it (the session ended) removes it.
pub struct CancelGuard {
    registry: Arc<CancelRegistry>,
    key: BackendKey,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.key);
    }
}

impl CancelRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<BackendKey, Arc<Link>>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers that a client holding `key` cancels on `link`.
    pub(crate) fn register(self: &Arc<Self>, key: BackendKey, link: Arc<Link>) -> CancelGuard {
        self.lock().insert(key, link);
        CancelGuard {
            registry: Arc::clone(self),
            key,
        }
    }

    /// Makes up a key no live session holds, for a client that cancels on
    /// `link`.
    pub(crate) fn register_new(self: &Arc<Self>, link: Arc<Link>) -> (BackendKey, CancelGuard) {
        let mut keys = self.lock();
        loop {
            let key = BackendKey {
                pid: rand::random(),
                secret: rand::random(),
            };
            if let Entry::Vacant(slot) = keys.entry(key) {
                slot.insert(link);
                let guard = CancelGuard {
                    registry: Arc::clone(self),
                    key,
                };
                return (key, guard);
            }
        }
    }

    /// Stops the request of the session holding `key` while it is on its
    /// way to a backend; otherwise sends a CancelRequest to the backend the
    /// session uses now, on a fresh connection. Returns whether a
    /// CancelRequest was sent: not for an unknown key, which PostgreSQL
    /// would also ignore without an answer, nor for a request stopped on
    /// its way (its session's own backend, idle, is left alone: a late
    /// signal there could cancel the client's next query), nor when the
    /// session has no backend (under transaction pooling, no request in
    /// flight).
    pub async fn forward(&self, key: BackendKey) -> io::Result<bool> {
        let Some(link) = self.lock().get(&key).cloned() else {
            return Ok(false);
        };
        if link.cancel_on_its_way() {
            return Ok(false);
        }
        let Some((backend, backend_key, upstream)) = link.cancel_target() else {
            return Ok(false);
        };
        let _pending = Pending(backend);
        let mut stream = tokio::time::timeout(CANCEL_TAKEN_WAIT, socket::connect_peer(&upstream))
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the server did not accept a cancel's connection",
                )
            })??;
        stream.write_all(&backend_key.cancel_request()).await?;
        // The server answers nothing and closes the connection once it has
        // signalled the backend.
        let _ = tokio::time::timeout(CANCEL_TAKEN_WAIT, stream.read(&mut [0u8; 1])).await;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::pool::Backend;
    use tokio::io::AsyncReadExt;

    /// A backend of a stand-in server at `server`, with `key`, on a link.
    async fn linked(server: &tokio::net::TcpListener, key: BackendKey) -> (Arc<Link>, tokio::net::TcpStream) {
        let backend = Backend::connect(&server.local_addr().unwrap().to_string(), None)
            .await
            .unwrap();
        backend.set_key(key);
        let (accepted, _) = server.accept().await.unwrap();
        let link = Arc::new(Link::default());
        link.set(Arc::new(backend));
        (link, accepted)
    }

    /// The CancelRequest a stand-in server receives; it then closes the
    /// connection, as PostgreSQL does once it has signalled the backend.
    async fn cancel_received(server: &tokio::net::TcpListener) -> Vec<u8> {
        let (mut conn, _) = server.accept().await.unwrap();
        let mut packet = vec![0u8; 16];
        conn.read_exact(&mut packet).await.unwrap();
        packet
    }

    #[tokio::test]
    async fn forwards_known_keys_only_and_forgets_them_when_dropped() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let registry = Arc::new(CancelRegistry::default());
        let key = BackendKey {
            pid: 4242,
            secret: 0xdead_beef,
        };
        let (link, _session) = linked(&server, key).await;
        let guard = registry.register(key, link);
        let unknown = BackendKey { pid: 4242, secret: 1 };
        assert!(!registry.forward(unknown).await.unwrap());
        let (forwarded, received) = tokio::join!(registry.forward(key), cancel_received(&server));
        assert!(forwarded.unwrap());
        assert_eq!(received, key.cancel_request());
        drop(guard);
        assert!(!registry.forward(key).await.unwrap());
    }

    #[tokio::test]
    async fn a_request_on_its_way_is_stopped_there_and_later_cancels_reach_the_backend() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let registry = Arc::new(CancelRegistry::default());
        let key = BackendKey { pid: 5, secret: 6 };
        let (link, _session) = linked(&server, key).await;
        let _guard = registry.register(key, Arc::clone(&link));
        let mut cancelled = std::pin::pin!(link.set_out());
        assert!(
            !registry.forward(key).await.unwrap(),
            "no CancelRequest for the session's idle backend"
        );
        assert!(link.arrive(cancelled.as_mut(), None).is_err(), "stopped on its way");
        let mut next = std::pin::pin!(link.set_out());
        assert!(link.arrive(next.as_mut(), None).is_ok(), "a cancel before is not kept");
        let (forwarded, received) = tokio::join!(registry.forward(key), cancel_received(&server));
        assert!(forwarded.unwrap());
        assert_eq!(received, key.cancel_request());
    }

    #[tokio::test]
    async fn a_made_up_key_cancels_on_the_backend_the_session_holds_now() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let registry = Arc::new(CancelRegistry::default());
        let backend_key = BackendKey { pid: 7, secret: 8 };
        let (link, _session) = linked(&server, backend_key).await;
        let (client_key, _guard) = registry.register_new(Arc::clone(&link));
        assert_ne!(client_key, backend_key);
        let (forwarded, received) = tokio::join!(registry.forward(client_key), cancel_received(&server));
        assert!(forwarded.unwrap());
        assert_eq!(received, backend_key.cancel_request());
        link.take();
        assert!(
            !registry.forward(client_key).await.unwrap(),
            "no backend, nothing to cancel"
        );
    }

    #[tokio::test]
    async fn a_cancel_is_pending_on_its_backend_until_the_server_closes_its_connection() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let registry = Arc::new(CancelRegistry::default());
        let key = BackendKey { pid: 9, secret: 10 };
        let (link, _session) = linked(&server, key).await;
        let backend = link.get().unwrap();
        let _guard = registry.register(key, Arc::clone(&link));
        let forward = tokio::spawn({
            let registry = Arc::clone(&registry);
            async move { registry.forward(key).await.unwrap() }
        });
        let (mut conn, _) = server.accept().await.unwrap();
        let mut packet = vec![0u8; 16];
        conn.read_exact(&mut packet).await.unwrap();
        // Given back now, the backend would take the signal in another
        // client's query.
        assert!(link.take().is_some());
        assert!(backend.cancel_pending(), "received, not yet taken");
        let mut taken = std::pin::pin!(backend.cancels_taken());
        let waiting = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(taken.as_mut(), cx).is_pending())
        });
        assert!(waiting.await, "the backend waits for the cancel to be taken");
        drop(conn);
        assert!(forward.await.unwrap());
        taken.await;
        assert!(!backend.cancel_pending());
    }
}
