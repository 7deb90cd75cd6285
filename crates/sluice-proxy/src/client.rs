//! Where clients connect, and who a client is by its connection. The proxy
//! listens on its TCP `listen` address and, when `listen_unix` names a
//! socket file, on that Unix socket too, as PgBouncer listens on
//! `listen_addr` and in `unix_socket_dir`, and redis-server on its port and
//! its `unixsocket`. A client on the database's host that connects through
//! the socket (`psql -h /tmp -p 6432` reaches `/tmp/.s.PGSQL.6432`;
//! `redis-cli -s PATH`) skips the loopback TCP stack on every message.
//!
//! The socket file is made readable and writable by every local user (mode
//! 0777, PostgreSQL's and PgBouncer's default): no wider than a TCP port on
//! 127.0.0.1, which every local user reaches too, and the database still
//! authenticates each client (put the file in a directory of restricted
//! access to narrow it). A file left at the path by a proxy that did
//! not stop cleanly is replaced; one a running server answers on, or one
//! that is not a socket, is an error.
//!
//! Over TCP a client is its address and port. Over the socket it has no
//! address: it is its OS user id (from `SO_PEERCRED`) and, for tenants
//! named by connection, the number of its connection.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_util::either::Either;

use crate::socket::Stream;

/// Who a client is, as far as its connection tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    /// Over the Unix socket: the client's OS user id, when the kernel gave
    /// it, and the number of the connection among the socket's.
    Unix {
        uid: Option<u32>,
        number: u64,
    },
}

impl Peer {
    /// The client's address: its IP, or over the socket `unix:UID`.
    pub fn address(&self) -> String {
        match self {
            Peer::Tcp(addr) => addr.ip().to_string(),
            Peer::Unix { uid: Some(uid), .. } => format!("unix:{uid}"),
            Peer::Unix { uid: None, .. } => "unix".into(),
        }
    }

    /// A number that differs between a host's connections (the port, or
    /// the connection's number on the socket).
    pub fn number(&self) -> usize {
        match self {
            Peer::Tcp(addr) => usize::from(addr.port()),
            Peer::Unix { number, .. } => *number as usize,
        }
    }
}

/// The connection itself: `1.2.3.4:5678`, or `unix:UID#N`.
impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix { number, .. } => write!(f, "{}#{number}", self.address()),
        }
    }
}

/// An accepted connection not yet on its worker: registered with the
/// worker's reactor by [`Accepted::register`], so that its wake-ups stay on
/// that thread.
pub(crate) enum Accepted {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Accepted {
    /// The connection, on the calling worker's reactor, TCP with Nagle's
    /// algorithm off (the proxy writes whole answers).
    pub fn register(self) -> io::Result<Stream> {
        match self {
            Accepted::Tcp(s) => {
                let s = TcpStream::from_std(s)?;
                s.set_nodelay(true)?;
                Ok(Either::Left(s))
            }
            Accepted::Unix(s) => Ok(Either::Right(UnixStream::from_std(s)?)),
        }
    }
}

/// The proxy's listening sockets.
pub(crate) struct Listeners {
    tcp: TcpListener,
    unix: Option<UnixSocket>,
}

/// A listening Unix socket; its file goes when it is dropped.
struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
    accepted: AtomicU64,
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a listener could not be set up: the address or path, and the cause.
#[derive(Debug)]
pub struct ListenError {
    pub addr: String,
    pub source: io::Error,
}

impl Listeners {
    /// Binds `listen` (host:port) and, if given, the socket file `unix`.
    pub async fn bind(listen: &str, unix: Option<&Path>) -> Result<Listeners, ListenError> {
        let tcp = TcpListener::bind(listen).await.map_err(|source| ListenError {
            addr: listen.to_string(),
            source,
        })?;
        let unix = unix
            .map(|path| {
                bind_unix(path).map_err(|source| ListenError {
                    addr: path.display().to_string(),
                    source,
                })
            })
            .transpose()?;
        Ok(Listeners { tcp, unix })
    }

    /// The TCP address bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The next client on either socket.
    pub async fn accept(&self) -> io::Result<(Accepted, Peer)> {
        let unix = async {
            match &self.unix {
                Some(u) => u.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = self.tcp.accept() => {
                let (s, addr) = accepted?;
                Ok((Accepted::Tcp(s.into_std()?), Peer::Tcp(addr)))
            }
            accepted = unix => accepted,
        }
    }
}

impl UnixSocket {
    async fn accept(&self) -> io::Result<(Accepted, Peer)> {
        let (s, _) = self.listener.accept().await?;
        let peer = Peer::Unix {
            uid: s.peer_cred().ok().map(|c| c.uid()),
            number: self.accepted.fetch_add(1, Ordering::Relaxed),
        };
        Ok((Accepted::Unix(s.into_std()?), peer))
    }
}

/// Binds the socket file at `path`, replacing a stale one (a socket that
/// nobody answers on), and lets every local user connect.
fn bind_unix(path: &Path) -> io::Result<UnixSocket> {
    let listener = match UnixListener::bind(path) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            let is_socket = std::fs::symlink_metadata(path)?.file_type().is_socket();
            if !is_socket {
                return Err(io::Error::new(e.kind(), "the path exists and is not a socket"));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(e.kind(), "a running server listens on this socket"));
            }
            std::fs::remove_file(path)?;
            UnixListener::bind(path)?
        }
        bound => bound?,
    };
    let socket = UnixSocket {
        listener,
        path: path.to_owned(),
        accepted: AtomicU64::new(0),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_over_the_socket_is_its_user_and_connection() {
        let tcp = Peer::Tcp("10.0.0.7:5544".parse().unwrap());
        assert_eq!(
            (tcp.address(), tcp.to_string(), tcp.number()),
            ("10.0.0.7".into(), "10.0.0.7:5544".into(), 5544)
        );
        let unix = Peer::Unix {
            uid: Some(1000),
            number: 7,
        };
        assert_eq!(
            (unix.address(), unix.to_string(), unix.number()),
            ("unix:1000".into(), "unix:1000#7".into(), 7)
        );
    }

    #[tokio::test]
    async fn a_stale_socket_file_is_replaced_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".s.PGSQL.6432");
        let first = Listeners::bind("127.0.0.1:0", Some(&path)).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o777);
        let err = Listeners::bind("127.0.0.1:0", Some(&path)).await.err().unwrap();
        assert!(err.source.to_string().contains("a running server"), "{:?}", err.source);
        drop(first);
        assert!(!path.exists(), "dropping the listener removes its file");
        // A proxy killed without cleaning up leaves its socket file behind.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        Listeners::bind("127.0.0.1:0", Some(&path)).await.unwrap();
        let file = dir.path().join("data");
        std::fs::write(&file, "keep me").unwrap();
        let err = Listeners::bind("127.0.0.1:0", Some(&file)).await.err().unwrap();
        assert!(err.source.to_string().contains("not a socket"), "{:?}", err.source);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    }
}
