//! Self-signed certificates for TLS tests, made by openssl.

use std::path::Path;
use std::process::Command;

use sluice_proxy::pg::tls::TlsConfig;

/// A self-signed certificate and key in `dir`, files named after `name`,
/// for `localhost` and 127.0.0.1 (the names rustls checks are the
/// subjectAltName's, not the CN), trusted by naming the certificate itself.
pub fn self_signed(dir: &Path, name: &str) -> TlsConfig {
    make(
        dir,
        name,
        "localhost",
        &["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
    )
}

/// A self-signed client certificate for PostgreSQL's `cert` login as
/// `user` (the server matches the CN to the user name).
pub fn client_cert(dir: &Path, user: &str) -> TlsConfig {
    make(dir, &format!("client-{user}"), user, &[])
}

fn make(dir: &Path, name: &str, cn: &str, extra: &[&str]) -> TlsConfig {
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"])
        .args(["-subj", &format!("/CN={cn}")])
        .args(extra)
        // rustls refuses a CA certificate as the server's own.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("running openssl");
    assert!(
        made.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    TlsConfig { cert, key }
}
