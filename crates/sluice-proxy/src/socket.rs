//! A plain connection, TCP or a Unix-domain socket: to the upstream server
//! when the configured upstream is a path (PostgreSQL's
//! `/var/run/postgresql/.s.PGSQL.5432`, Redis's `unixsocket`), and from
//! clients (see `client`). A proxy on the database's host saves the
//! loopback TCP stack on every message that way, as PgBouncer does with
//! `host=/var/run/postgresql` (docs/BENCHMARKS.md, "A Unix socket to
//! PostgreSQL"). Code that only reads and writes takes a [`Stream`];
//! PostgreSQL's backends, which read without a buffer in between, a
//! [`Socket`].
//!
//! With its socket as the upstream, PostgreSQL authenticates every client
//! of the proxy by its `local` lines of pg_hba.conf: `peer` there would
//! see the proxy's OS user for every client and let each in as that user
//! without a password; use `scram-sha-256` (or `trust` where that is
//! meant). PostgreSQL speaks no TLS on its Unix socket, so `upstream_tls`
//! needs a host:port upstream.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::Interest;
use tokio::net::{tcp, unix, TcpStream, UnixStream};
use tokio_util::either::Either;

/// A connection to read and write, TCP or Unix.
pub(crate) type Stream = Either<TcpStream, UnixStream>;
pub(crate) type ReadHalf<'a> = Either<tcp::ReadHalf<'a>, unix::ReadHalf<'a>>;
pub(crate) type WriteHalf<'a> = Either<tcp::WriteHalf<'a>, unix::WriteHalf<'a>>;
pub(crate) type OwnedReadHalf = Either<tcp::OwnedReadHalf, unix::OwnedReadHalf>;
pub(crate) type OwnedWriteHalf = Either<tcp::OwnedWriteHalf, unix::OwnedWriteHalf>;

/// Splits a connection into halves that borrow it (no lock between them,
/// unlike `tokio::io::split`).
pub(crate) fn split(stream: &mut Stream) -> (ReadHalf<'_>, WriteHalf<'_>) {
    match stream {
        Either::Left(s) => {
            let (rd, wr) = s.split();
            (Either::Left(rd), Either::Left(wr))
        }
        Either::Right(s) => {
            let (rd, wr) = s.split();
            (Either::Right(rd), Either::Right(wr))
        }
    }
}

/// Splits a connection into halves that can go to different tasks.
pub(crate) fn into_split(stream: Stream) -> (OwnedReadHalf, OwnedWriteHalf) {
    match stream {
        Either::Left(s) => {
            let (rd, wr) = s.into_split();
            (Either::Left(rd), Either::Left(wr))
        }
        Either::Right(s) => {
            let (rd, wr) = s.into_split();
            (Either::Right(rd), Either::Right(wr))
        }
    }
}

/// Where the upstream server listens, as the configuration names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// `host:port`.
    Tcp(String),
    /// A socket file, named by an absolute path.
    Unix(PathBuf),
}

impl Address {
    /// An upstream that starts with `/` is a Unix socket's path.
    pub fn parse(upstream: &str) -> Address {
        if upstream.starts_with('/') {
            Address::Unix(PathBuf::from(upstream))
        } else {
            Address::Tcp(upstream.to_string())
        }
    }
}

/// The server a connection reached: where to send a CancelRequest so
/// that it lands on the same server, whatever a name resolves to later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A PostgreSQL backend's connection without TLS: a [`Stream`] read and
/// written through its readiness, which `Either` does not pass on.
pub struct Socket(pub Stream);

/// Runs the same expression on whichever stream `socket` holds.
macro_rules! on_stream {
    ($socket:expr, $s:ident => $e:expr) => {
        match &$socket.0 {
            Either::Left($s) => $e,
            Either::Right($s) => $e,
        }
    };
}

/// Connects to `upstream`, a host:port or a Unix socket's path.
pub(crate) async fn connect_stream(upstream: &str) -> io::Result<Stream> {
    match Address::parse(upstream) {
        Address::Tcp(addr) => Ok(Either::Left(connect_tcp(&addr).await?)),
        Address::Unix(path) => Ok(Either::Right(UnixStream::connect(path).await?)),
    }
}

/// Connects over TCP with Nagle's algorithm off: the proxy writes whole
/// requests and answers, so delaying small writes only adds latency.
pub async fn connect_tcp(addr: &str) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Connects to the server `peer` names again (for a CancelRequest).
pub async fn connect_peer(peer: &Peer) -> io::Result<Stream> {
    match peer {
        Peer::Tcp(addr) => Ok(Either::Left(TcpStream::connect(addr).await?)),
        Peer::Unix(path) => Ok(Either::Right(UnixStream::connect(path).await?)),
    }
}

impl Socket {
    /// The server this connection reached.
    pub fn peer(&self) -> io::Result<Peer> {
        match &self.0 {
            Either::Left(s) => Ok(Peer::Tcp(s.peer_addr()?)),
            Either::Right(s) => match s.peer_addr()?.as_pathname() {
                Some(path) => Ok(Peer::Unix(path.to_path_buf())),
                None => Err(io::Error::other("the upstream's Unix socket has no path")),
            },
        }
    }

    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self, s => s.poll_read_ready(cx))
    }

    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self, s => s.poll_write_ready(cx))
    }

    pub fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        on_stream!(self, s => s.try_io(interest, f))
    }

    pub fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        on_stream!(self, s => s.try_read_buf(buf))
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        on_stream!(self, s => s.try_read(buf))
    }

    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        on_stream!(self, s => s.try_write(buf))
    }

    /// The same connection, watched from now on by the reactor of the
    /// runtime this is called in instead of the one it was registered
    /// with: its readiness then wakes the calling thread directly, not
    /// another thread that must wake this one.
    pub fn register_here(self) -> io::Result<Socket> {
        Ok(Socket(match self.0 {
            Either::Left(s) => Either::Left(TcpStream::from_std(s.into_std()?)?),
            Either::Right(s) => Either::Right(UnixStream::from_std(s.into_std()?)?),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_starting_with_a_slash_is_a_unix_socket() {
        assert_eq!(
            Address::parse("/run/postgresql/.s.PGSQL.5432"),
            Address::Unix("/run/postgresql/.s.PGSQL.5432".into())
        );
        assert_eq!(Address::parse("db:5432"), Address::Tcp("db:5432".into()));
        assert_eq!(Address::parse("[::1]:6379"), Address::Tcp("[::1]:6379".into()));
    }
}
