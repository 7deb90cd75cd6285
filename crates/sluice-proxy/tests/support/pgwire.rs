//! A blocking raw PostgreSQL protocol client, for what psql cannot do on
//! demand: send a CancelRequest, send malformed bytes, keep a transaction
//! open while another client is refused, read slowly inside TLS.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::frontend;
use sluice_proxy::pg::frame::{self, BackendKey};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// What the client talks over: a socket, or TLS over one.
pub trait Wire: Read + Write + Send {}
impl<T: Read + Write + Send> Wire for T {}

pub struct PgConn {
    stream: Box<dyn Wire>,
    pub key: Option<BackendKey>,
}

/// How a query ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// An ErrorResponse with this SQLSTATE and message.
    Server {
        sqlstate: String,
        message: String,
    },
    Closed,
}

impl PgConn {
    /// Opens a session as `user` (trusted, no password) and reads up to the
    /// first ReadyForQuery.
    pub fn connect(addr: SocketAddr, user: &str) -> PgConn {
        PgConn::login(addr, user, None)
    }

    /// Opens a session as `user`, answering a cleartext, md5 or SCRAM-SHA-256
    /// password request with `password`.
    pub fn login(addr: SocketAddr, user: &str, password: Option<&str>) -> PgConn {
        PgConn::try_login(addr, user, password).unwrap_or_else(|e| panic!("startup failed: {e:?}"))
    }

    /// As [`PgConn::login`], with the server's refusal as an error.
    pub fn try_login(addr: SocketAddr, user: &str, password: Option<&str>) -> Result<PgConn, QueryError> {
        PgConn::raw(addr).log_in(user, password)
    }

    /// Opens a session as `user` (trusted) inside TLS, trusting the
    /// certificate at `ca` for `localhost`, and reading slowly: at most 16
    /// KiB per read of the socket, after a pause of `pace` (see [`Paced`]).
    pub fn connect_tls(addr: SocketAddr, user: &str, ca: &Path, pace: Duration) -> PgConn {
        PgConn::tls(addr, ca, pace)
            .log_in(user, None)
            .unwrap_or_else(|e| panic!("startup failed: {e:?}"))
    }

    /// A connection inside TLS, its handshake done, nothing sent in it.
    pub fn tls(addr: SocketAddr, ca: &Path, pace: Duration) -> PgConn {
        let mut tcp = PgConn::socket(addr);
        tcp.write_all(&frame::ssl_request()).expect("sending SSLRequest");
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer).expect("reading the SSLRequest's answer");
        assert_eq!(&answer, b"S", "the proxy declined TLS");
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).expect("reading the CA") {
            roots
                .add(cert.expect("a PEM certificate"))
                .expect("a usable certificate");
        }
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").expect("a server name");
        let tls = ClientConnection::new(Arc::new(config), name).expect("a TLS client");
        let mut stream = StreamOwned::new(tls, Paced { tcp, pace });
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock).expect("the TLS handshake");
        }
        PgConn {
            stream: Box::new(stream),
            key: None,
        }
    }

    /// Sends the StartupMessage and reads up to the first ReadyForQuery,
    /// answering a cleartext, md5 or SCRAM-SHA-256 password request with
    /// `password`.
    fn log_in(self, user: &str, password: Option<&str>) -> Result<PgConn, QueryError> {
        let mut conn = self;
        conn.send_startup(user);
        let mut scram = None;
        loop {
            match conn.read_message() {
                Some((b'R', body)) => {
                    let mut out = BytesMut::new();
                    match (&body[..4], password) {
                        ([0, 0, 0, 0], _) => {}
                        ([0, 0, 0, 3], Some(password)) => {
                            frontend::password_message(password.as_bytes(), &mut out).unwrap()
                        }
                        ([0, 0, 0, 5], Some(password)) => {
                            let salt = body[4..8].try_into().expect("an md5 salt");
                            let answer = md5_hash(user.as_bytes(), password.as_bytes(), salt);
                            frontend::password_message(answer.as_bytes(), &mut out).unwrap()
                        }
                        ([0, 0, 0, 10], Some(password)) => {
                            let s = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
                            frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut out).unwrap();
                            scram = Some(s);
                        }
                        ([0, 0, 0, 11], _) => {
                            let s = scram.as_mut().expect("SASLContinue after SASL");
                            s.update(&body[4..]).expect("the server's SCRAM message");
                            frontend::sasl_response(s.message(), &mut out).unwrap();
                        }
                        ([0, 0, 0, 12], _) => {
                            let s = scram.as_mut().expect("SASLFinal after SASL");
                            s.finish(&body[4..]).expect("the server's SCRAM signature");
                        }
                        (method, _) => panic!("cannot answer authentication request {method:?}"),
                    }
                    conn.send(&out);
                }
                Some((b'K', body)) => conn.key = BackendKey::from_body(&body),
                Some((b'Z', _)) => return Ok(conn),
                Some((b'E', body)) => return Err(server_error(&body)),
                Some(_) => {}
                None => panic!("the proxy closed the connection during startup"),
            }
        }
    }

    /// Sends a StartupMessage for `user` and database `postgres`.
    pub fn send_startup(&mut self, user: &str) {
        let mut startup = BytesMut::new();
        frame::write_startup(&mut startup, &[("user", user), ("database", "postgres")]);
        self.send(&startup);
    }

    /// A bare TCP connection to send anything on.
    pub fn raw(addr: SocketAddr) -> PgConn {
        PgConn {
            stream: Box::new(PgConn::socket(addr)),
            key: None,
        }
    }

    fn socket(addr: SocketAddr) -> TcpStream {
        let stream = TcpStream::connect(addr).expect("connecting to the proxy");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("setting a read timeout");
        stream
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("writing to the proxy");
    }

    /// One byte, as the answer to an SSLRequest; `None` once the
    /// connection closed.
    pub fn read_byte(&mut self) -> Option<u8> {
        let mut byte = [0u8; 1];
        self.stream.read_exact(&mut byte).ok()?;
        Some(byte[0])
    }

    /// The next message's tag and body; `None` once the connection closed.
    pub fn read_message(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut header = [0u8; 5];
        self.stream.read_exact(&mut header).ok()?;
        let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let mut body = vec![0u8; usize::try_from(len - 4).expect("the proxy sent a bad length")];
        self.stream.read_exact(&mut body).ok()?;
        Some((header[0], body))
    }

    /// Sends a simple Query.
    pub fn send_query(&mut self, sql: &str) {
        let mut out = BytesMut::new();
        frame::write_message(&mut out, b'Q', format!("{sql}\0").as_bytes());
        self.send(&out);
    }

    /// Reads one query's answer up to ReadyForQuery: the rows' first column,
    /// and the transaction status.
    pub fn finish(&mut self) -> (Result<Vec<String>, QueryError>, u8) {
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            match self.read_message() {
                None => return (Err(QueryError::Closed), 0),
                Some((b'D', body)) => rows.push(first_column(&body)),
                Some((b'E', body)) => error = Some(server_error(&body)),
                Some((b'Z', body)) => return (error.map_or(Ok(rows), Err), body[0]),
                Some(_) => {}
            }
        }
    }

    /// Runs a simple query and reads its answer.
    pub fn query(&mut self, sql: &str) -> Result<Vec<String>, QueryError> {
        self.send_query(sql);
        self.finish().0
    }
}

/// Reads until the connection closes; the last ErrorResponse, if any.
pub fn last_error_before_close(conn: &mut PgConn) -> Option<QueryError> {
    let mut last = None;
    while let Some((tag, body)) = conn.read_message() {
        if tag == b'E' {
            last = Some(server_error(&body));
        }
    }
    last
}

/// Parse of the statement `name`, then Sync.
pub fn prepare(name: &str, sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frame::write_message(&mut out, b'P', format!("{name}\0{sql}\0\0\0").as_bytes());
    frame::write_message(&mut out, b'S', b"");
    out
}

/// Bind of the statement `name` (no parameters), Execute, Sync.
pub fn execute(name: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frame::write_message(&mut out, b'B', format!("\0{name}\0\0\0\0\0\0\0").as_bytes());
    frame::write_message(&mut out, b'E', b"\0\0\0\0\0");
    frame::write_message(&mut out, b'S', b"");
    out
}

/// Close of the statement `name`, then Sync.
pub fn close_statement(name: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frame::write_message(&mut out, b'C', format!("S{name}\0").as_bytes());
    frame::write_message(&mut out, b'S', b"");
    out
}

pub fn server_error(body: &[u8]) -> QueryError {
    let field = |code: u8| {
        body.split(|&b| b == 0)
            .find(|f| f.first() == Some(&code))
            .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
            .unwrap_or_default()
    };
    QueryError::Server {
        sqlstate: field(b'C'),
        message: field(b'M'),
    }
}

fn first_column(body: &[u8]) -> String {
    let len = i32::from_be_bytes([body[2], body[3], body[4], body[5]]);
    match usize::try_from(len) {
        Ok(len) => String::from_utf8_lossy(&body[6..6 + len]).into_owned(),
        Err(_) => "NULL".into(),
    }
}

/// A socket read at most 16 KiB at a time, each read after a pause: a
/// client slower than the proxy, whose socket buffers stay full.
struct Paced {
    tcp: TcpStream,
    pace: Duration,
}

impl Read for Paced {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(self.pace);
        let len = buf.len().min(16 * 1024);
        self.tcp.read(&mut buf[..len])
    }
}

impl Write for Paced {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}
