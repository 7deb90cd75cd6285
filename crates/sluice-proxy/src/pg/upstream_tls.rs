//! TLS from the proxy to PostgreSQL (`[proxy.upstream_tls]`, PgBouncer's
//! `server_tls_sslmode`): every server connection the proxy opens, a
//! session's own or a pooled one, first sends an SSLRequest and continues
//! inside TLS when the server answers 'S'. Without the section the
//! connections stay plain, as before (a server reached over loopback).
//!
//! Modes, named as libpq's `sslmode`: `prefer` (TLS when the server offers
//! it, else plain), `require` (TLS or no connection; the certificate is not
//! checked, as libpq's `require` without a root certificate), `verify-ca`
//! (the certificate must chain to `ca`, whatever names it carries; `ca =
//! "system"` takes the system's trusted roots, as libpq's
//! `sslrootcert=system`, honouring `SSL_CERT_FILE` and `SSL_CERT_DIR`),
//! `verify-full` (it must also name `server_name`, by default the host of
//! `upstream`). With `cert` and `key` the proxy shows a client certificate
//! of its own, for servers whose pg_hba.conf asks for one (`cert`
//! authentication, or `clientcert=verify-ca|verify-full`); it is the
//! proxy's, not a client's: every login the proxy relays presents it.
//!
//! SCRAM channel binding: on a TLS connection PostgreSQL offers
//! SCRAM-SHA-256-PLUS, which binds the login to the certificate the client
//! saw. A client that reaches the proxy over TLS sees the proxy's, so its
//! login passes only when the proxy presents the server's own certificate
//! (`[proxy.tls]` with the server's certificate and key), or when the
//! client does without binding (libpq's `channel_binding=disable`); else
//! the server refuses it ("SCRAM channel binding check failed"). Leaving
//! SCRAM-SHA-256-PLUS out of the offer does not help: a client that can
//! bind and is not offered to is refused as a downgrade. A plain client
//! never binds, and logs in as before.
//!
//! CancelRequests go plain: PostgreSQL reads them before TLS and before
//! pg_hba.conf, whose `hostssl` lines do not apply to them.

use std::io;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll, Waker};

use bytes::{BufMut, BytesMut};
use serde::Deserialize;
use tokio::io::Interest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use super::frame;
use super::tls::{certificates, private_key, provider, TlsError};
use crate::buffer::READ_SIZE;
use crate::socket::Socket;

/// How much TLS the proxy asks of the server (libpq's names; its default).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

impl SslMode {
    /// Whether the server's certificate must chain to `ca`.
    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// `[proxy.upstream_tls]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    pub mode: SslMode,
    /// `verify-ca` and `verify-full`: PEM certificates the server's must
    /// chain to, or "system" for the system's trusted roots.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// `verify-full`: the name the certificate must carry, if not the host
    /// of `upstream`.
    #[serde(default)]
    pub server_name: Option<String>,
    /// The proxy's client certificate chain (PEM), for servers that ask
    /// for one; with `key`.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of `cert`.
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// What opening a server connection under TLS needs, built once at start.
pub(crate) struct UpstreamTls {
    mode: SslMode,
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl UpstreamTls {
    /// Loads the CA and checks the settings against each other, naming
    /// what is wrong.
    pub fn new(config: &UpstreamTlsConfig, upstream: &str) -> Result<UpstreamTls, TlsError> {
        let host = config.server_name.as_deref().unwrap_or_else(|| host_of(upstream));
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            TlsError::Upstream(format!(
                "`{host}` is not a server name to check a certificate against: {e}"
            ))
        })?;
        Ok(UpstreamTls {
            mode: config.mode,
            connector: TlsConnector::from(Arc::new(client_config(config)?)),
            name,
        })
    }

    /// Asks the server on `tcp` for TLS and, as the mode allows, returns the
    /// connection inside TLS or still plain.
    pub async fn open(&self, mut tcp: TcpStream) -> io::Result<ServerStream> {
        tcp.write_all(&frame::ssl_request()).await?;
        // Exactly one byte: anything the server sent after it is not to be
        // trusted as if it came inside TLS.
        let answer = tcp.read_u8().await?;
        match answer {
            b'S' => {
                let tls = self.connector.connect(self.name.clone(), tcp).await?;
                Ok(ServerStream::Tls(Box::new(Mutex::new(tls))))
            }
            b'N' if self.mode == SslMode::Prefer => Ok(ServerStream::Plain(Socket(Either::Left(tcp)))),
            b'N' => Err(io::Error::other(format!(
                "the server does not accept TLS, and upstream_tls.mode is \"{}\"",
                self.mode
            ))),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the server answered the SSLRequest with {other:#04x}, neither 'S' nor 'N'"),
            )),
        }
    }
}

/// What a TLS client of the server needs under `config`: its certificate
/// check, and the proxy's own certificate if it has one.
pub(crate) fn client_config(config: &UpstreamTlsConfig) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Upstream(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier(config, provider)?);
    match (&config.cert, &config.key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(
                certificates("upstream_tls.cert", cert)?,
                private_key("upstream_tls.key", key)?,
            )
            .map_err(|e| TlsError::Upstream(format!("key does not fit cert: {e}"))),
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(TlsError::Upstream(
            "cert and key go together: give both or neither".into(),
        )),
    }
}

/// The host of a `host:port` address (brackets of an IPv6 one removed).
fn host_of(upstream: &str) -> &str {
    let host = upstream.rsplit_once(':').map_or(upstream, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// How the server's certificate is checked under `config.mode`.
fn verifier(
    config: &UpstreamTlsConfig,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, TlsError> {
    let mode = config.mode;
    let Some(ca) = &config.ca else {
        return match mode.verifies() {
            true => Err(TlsError::Upstream(format!(
                "mode = \"{mode}\" needs ca: the PEM certificates the server's must chain to"
            ))),
            false => Ok(Arc::new(Lenient { chain: None, provider })),
        };
    };
    if !mode.verifies() {
        return Err(TlsError::Upstream(format!(
            "ca is checked only with mode = \"verify-ca\" or \"verify-full\", not \"{mode}\""
        )));
    }
    let chained = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca)?), Arc::clone(&provider))
        .build()
        .map_err(|e| TlsError::Upstream(format!("ca {}: {e}", ca.display())))?;
    Ok(match mode {
        SslMode::VerifyCa => Arc::new(Lenient {
            chain: Some(chained),
            provider,
        }),
        _ => chained,
    })
}

/// The roots in the PEM file `ca`, or the system's for "system".
fn roots(ca: &std::path::Path) -> Result<RootCertStore, TlsError> {
    if ca == std::path::Path::new(SYSTEM_ROOTS) {
        return system_roots();
    }
    let mut roots = RootCertStore::empty();
    for cert in certificates("upstream_tls.ca", ca)? {
        roots.add(cert).map_err(|e| TlsError::File {
            field: "upstream_tls.ca",
            path: ca.to_owned(),
            problem: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// `ca`'s value that names the system's trusted roots (libpq's word).
const SYSTEM_ROOTS: &str = "system";

/// The system's trusted roots (rustls-native-certs: the platform's store,
/// or `SSL_CERT_FILE` / `SSL_CERT_DIR` when set). Certificates the store
/// holds that rustls cannot use are skipped; none usable is an error.
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(TlsError::Upstream(format!(
            "ca = \"system\": no usable trusted root certificate found on this system{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({})", why.join("; "))
            }
        )));
    }
    Ok(roots)
}

/// The modes that check less than webpki does: `prefer` and `require` no
/// certificate at all (libpq's `require` without a root certificate),
/// `verify-ca` the chain to `ca` but not the names it is valid for (webpki
/// checks the chain before the name, so a name mismatch means the chain
/// passed). The handshake's signatures are checked in every mode.
#[derive(Debug)]
struct Lenient {
    /// `verify-ca`'s chain check; `None` checks no certificate.
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        use tokio_rustls::rustls::{CertificateError, Error};
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, name, ocsp, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A server connection, plain or inside TLS, read and written through a
/// shared reference: a session reads answers while it writes requests.
pub(crate) enum ServerStream {
    Plain(Socket),
    /// Locked only inside one poll, never across a wait.
    Tls(Box<Mutex<TlsStream<TcpStream>>>),
}

type Tls<'a> = MutexGuard<'a, TlsStream<TcpStream>>;

impl ServerStream {
    fn tls(tls: &Mutex<TlsStream<TcpStream>>) -> Tls<'_> {
        tls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends what the server sent to `buf`; 0 when it closed.
    pub fn poll_read(&self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        match self {
            ServerStream::Plain(socket) => loop {
                ready!(socket.poll_read_ready(cx))?;
                let spare = buf.capacity() - buf.len();
                let mut read = None;
                // A read shorter than asked drained the socket: answering
                // WouldBlock makes tokio forget the readiness, so the next
                // read waits for the next event instead of first asking the
                // kernel for nothing (strace: one failed recv per message
                // from the server, where PgBouncer has none).
                let outcome = socket.try_io(Interest::READABLE, || {
                    let n = socket.try_read_buf(buf)?;
                    read = Some(n);
                    if 0 < n && n < spare {
                        Err(io::ErrorKind::WouldBlock.into())
                    } else {
                        Ok(n)
                    }
                });
                match (read, outcome) {
                    (Some(n), _) => return Poll::Ready(Ok(n)),
                    (None, Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    (None, outcome) => return Poll::Ready(outcome),
                }
            },
            ServerStream::Tls(tls) => {
                let mut chunk = [MaybeUninit::<u8>::uninit(); READ_SIZE];
                let mut read = ReadBuf::uninit(&mut chunk);
                ready!(Pin::new(&mut *Self::tls(tls)).poll_read(cx, &mut read))?;
                buf.put_slice(read.filled());
                Poll::Ready(Ok(read.filled().len()))
            }
        }
    }

    /// Writes what the connection takes of `buf` now, or waits until it
    /// can. Under TLS the bytes may wait in the TLS buffer: see
    /// [`ServerStream::poll_flush`].
    pub fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            ServerStream::Plain(socket) => loop {
                ready!(socket.poll_write_ready(cx))?;
                match socket.try_write(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    written => return Poll::Ready(written),
                }
            },
            ServerStream::Tls(tls) => Pin::new(&mut *Self::tls(tls)).poll_write(cx, buf),
        }
    }

    /// Sends what TLS still holds of earlier writes.
    pub fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ServerStream::Plain(_) => Poll::Ready(Ok(())),
            ServerStream::Tls(tls) => Pin::new(&mut *Self::tls(tls)).poll_flush(cx),
        }
    }

    /// Whether an idle connection is still usable: the server has neither
    /// closed it nor sent anything unasked (such as the FATAL message of an
    /// administrator's shutdown).
    pub fn is_alive(&self) -> bool {
        match self {
            ServerStream::Plain(socket) => {
                let mut probe = [0u8; 1];
                matches!(socket.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            ServerStream::Tls(tls) => {
                // TLS records that carry no data (session tickets) leave it
                // Pending, as they should.
                let mut probe = [0u8; 1];
                let mut cx = Context::from_waker(Waker::noop());
                let read = Pin::new(&mut *Self::tls(tls)).poll_read(&mut cx, &mut ReadBuf::new(&mut probe));
                read.is_pending()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: SslMode, ca: Option<PathBuf>) -> UpstreamTlsConfig {
        UpstreamTlsConfig {
            mode,
            ca,
            ..Default::default()
        }
    }

    #[test]
    fn settings_that_cannot_work_are_named() {
        let err = |c: &UpstreamTlsConfig, upstream| UpstreamTls::new(c, upstream).err().unwrap().to_string();
        assert!(err(&config(SslMode::VerifyFull, None), "db:5432").contains("needs ca"));
        let with_ca = config(SslMode::Require, Some("ca.pem".into()));
        assert!(err(&with_ca, "db:5432").contains("only with mode = \"verify-ca\" or \"verify-full\""));
        assert!(err(&config(SslMode::VerifyCa, None), "db:5432").contains("mode = \"verify-ca\" needs ca"));
        let mut half = config(SslMode::Require, None);
        half.cert = Some("client.crt".into());
        assert!(err(&half, "db:5432").contains("cert and key go together"));
        half.key = Some("client.key".into());
        assert!(err(&half, "db:5432").starts_with("upstream_tls.cert client.crt"));
        let missing = config(SslMode::VerifyFull, Some("/nonexistent/ca.pem".into()));
        let e = err(&missing, "db:5432");
        assert!(e.starts_with("upstream_tls.ca /nonexistent/ca.pem"), "{e}");
        let mut bad_name = config(SslMode::Require, None);
        bad_name.server_name = Some("not a name!".into());
        assert!(err(&bad_name, "db:5432").contains("`not a name!`"));
        assert!(UpstreamTls::new(&config(SslMode::Prefer, None), "[::1]:5432").is_ok());
    }

    #[test]
    fn the_server_name_is_the_upstream_host() {
        assert_eq!(host_of("db.example:5432"), "db.example");
        assert_eq!(host_of("[::1]:5432"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }
}
