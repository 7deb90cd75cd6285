//! TLS between PostgreSQL clients and the proxy. Without a certificate
//! configured, an SSLRequest is answered 'N' and the client goes on in
//! plain text; with a certificate and key configured, an SSLRequest is
//! answered 'S' and the session continues
//! inside TLS (rustls, through tokio-rustls). The proxy's own connections to
//! PostgreSQL are secured separately ([`super::upstream_tls`]), as
//! PgBouncer's client_tls and server_tls settings are. GSSENCRequest is
//! still answered 'N'.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use thiserror::Error;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// Where the server certificate chain and its private key are, in PEM.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Error)]
pub enum TlsError {
    /// A configured file is missing, unreadable or not what it should be.
    #[error("{field} {path}: {problem}")]
    File {
        field: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error("tls: the key does not fit the certificate: {0}")]
    Mismatch(String),
    #[error("upstream_tls: {0}")]
    Upstream(String),
}

/// The cryptography both directions use.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

/// Loads the certificate chain and key into an acceptor, naming the file
/// that is missing, unreadable or not what it should be.
pub fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
    let certs = certificates("tls.cert", &config.cert)?;
    let key = private_key("tls.key", &config.key)?;
    let server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| TlsError::Mismatch(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// The private key in the PEM file at `path`, the setting `field`.
pub(crate) fn private_key(field: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        field,
        path: path.to_owned(),
        problem: e.to_string(),
    })
}

/// The certificates of the PEM file at `path`, the setting `field`.
pub(crate) fn certificates(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let problem = |problem: String| TlsError::File {
        field,
        path: path.to_owned(),
        problem,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| problem(e.to_string()))?;
    if certs.is_empty() {
        return Err(problem("no CERTIFICATE block in the file".into()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let missing = TlsConfig {
            cert: dir.path().join("missing.pem"),
            key: empty.clone(),
        };
        let err = acceptor(&missing).err().unwrap().to_string();
        assert!(err.starts_with("tls.cert") && err.contains("missing.pem"), "{err}");
        let no_blocks = TlsConfig {
            cert: empty.clone(),
            key: empty,
        };
        let err = acceptor(&no_blocks).err().unwrap().to_string();
        assert!(err.contains("no CERTIFICATE block"), "{err}");
    }
}
