//! CancelRequest forwarding (issue 5, §1: "CancelRequest forwarded to the
//! right backend"). A client cancels a running query by opening a new
//! connection and sending its backend's key; the proxy relays each backend's
//! BackendKeyData unchanged, so the key a client holds is the backend's own.
//! The registry maps every live session's key to its upstream address, and
//! a cancel is forwarded only for a key the proxy handed out, so the proxy
//! cannot be used to spray cancels at the server.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::frame::BackendKey;

/// The backend keys of live sessions, shared by all of them.
#[derive(Debug, Default)]
pub struct CancelRegistry {
    keys: Mutex<HashMap<BackendKey, SocketAddr>>,
}

/// A registered key; dropping it (the session ended) removes it.
#[derive(Debug)]
pub struct CancelGuard {
    registry: Arc<CancelRegistry>,
    key: BackendKey,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.registry
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

impl CancelRegistry {
    /// Remembers that `key` belongs to a backend at `upstream`.
    pub fn register(self: &Arc<Self>, key: BackendKey, upstream: SocketAddr) -> CancelGuard {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, upstream);
        CancelGuard {
            registry: Arc::clone(self),
            key,
        }
    }

    /// Sends a CancelRequest for `key` to its backend's server on a fresh
    /// connection. Returns false for an unknown key, which PostgreSQL would
    /// also ignore without an answer.
    pub async fn forward(&self, key: BackendKey) -> io::Result<bool> {
        let upstream = self
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .copied();
        let Some(upstream) = upstream else {
            return Ok(false);
        };
        let mut stream = TcpStream::connect(upstream).await?;
        stream.write_all(&key.cancel_request()).await?;
        stream.shutdown().await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn forwards_known_keys_only_and_forgets_them_when_dropped() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let registry = Arc::new(CancelRegistry::default());
        let key = BackendKey {
            pid: 4242,
            secret: 0xdead_beef,
        };
        let guard = registry.register(key, server.local_addr().unwrap());
        let unknown = BackendKey { pid: 4242, secret: 1 };
        assert!(!registry.forward(unknown).await.unwrap());
        assert!(registry.forward(key).await.unwrap());
        let (mut conn, _) = server.accept().await.unwrap();
        let mut packet = Vec::new();
        conn.read_to_end(&mut packet).await.unwrap();
        assert_eq!(packet, key.cancel_request());
        drop(guard);
        assert!(!registry.forward(key).await.unwrap());
    }
}
