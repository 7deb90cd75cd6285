//! Answering a server's authentication requests when the pool opens a
//! connection itself (see [`super::pool`]), with the user's secret from the
//! `auth_file` ([`super::auth_file`]): cleartext, md5 and SCRAM-SHA-256
//! (without channel binding, which would bind the login to the proxy's
//! TLS connection, not a client's). With a password or md5 hash the
//! computations are `postgres-protocol`'s, the crate rust-postgres logs in
//! with; with a SCRAM secret, [`super::scram::KeyedLogin`]'s.

use bytes::BytesMut;
use md5::{Digest, Md5};
use postgres_protocol::authentication::sasl;
use postgres_protocol::message::frontend;
use thiserror::Error;

use super::auth_file::Secret;
use super::scram::{ClientKey, KeyedLogin};

/// AuthenticationOk, which needs no answer.
pub(crate) const OK: u32 = 0;
pub(crate) const CLEARTEXT: u32 = 3;
pub(crate) const MD5: u32 = 5;
pub(crate) const SASL: u32 = 10;
pub(crate) const SASL_CONTINUE: u32 = 11;
pub(crate) const SASL_FINAL: u32 = 12;

#[derive(Debug, Error)]
pub(crate) enum AuthError {
    #[error("the server asks a password (authentication request {method}) to open a connection for user `{user}`, and {why}")]
    NoSecret { user: String, method: u32, why: String },
    #[error("the server asks SCRAM-SHA-256 of user `{user}`, and auth_file has only the md5 hash of the password: give the password itself")]
    Md5Only { user: String },
    #[error("the server asks user `{user}` for authentication request {method}, and auth_file has only the SCRAM secret, which answers SCRAM-SHA-256: give the password itself")]
    ScramOnly { user: String, method: u32 },
    #[error("auth_file has a SCRAM secret for user `{user}`, which opens server connections only once a client of that user has logged in through the proxy with the password the secret is of")]
    NoClientKey { user: String },
    #[error("the server asks for authentication request {0}, which the pool cannot answer (it answers cleartext, md5 and SCRAM-SHA-256)")]
    Unsupported(u32),
    #[error("the server offers no SASL mechanism the pool knows (it knows SCRAM-SHA-256 without channel binding)")]
    NoMechanism,
    #[error("SCRAM-SHA-256 exchange: {0}")]
    Scram(std::io::Error),
    #[error("SCRAM-SHA-256 exchange: {0}")]
    KeyedScram(&'static str),
    #[error("the server let the login in before it proved it holds the password (no SCRAM final message)")]
    Unproved,
    #[error("an authentication request out of order or malformed")]
    Malformed,
}

/// One login's side of the authentication exchange.
pub(crate) struct Login<'a> {
    user: &'a str,
    /// The user's secret, or why there is none.
    secret: Result<Secret, String>,
    /// Where the secret is a SCRAM secret: the ClientKey a client's proof
    /// revealed, if one did (see [`super::scram`]).
    client_key: Option<ClientKey>,
    scram: Option<Scram>,
    /// The server's final SCRAM message checked out.
    server_proved: bool,
}

/// A SCRAM exchange under way, with the password or with a ClientKey.
enum Scram {
    Password(sasl::ScramSha256),
    Keyed(KeyedLogin),
}

impl<'a> Login<'a> {
    pub fn new(user: &'a str, secret: Result<Secret, String>, client_key: Option<ClientKey>) -> Login<'a> {
        Login {
            user,
            secret,
            client_key,
            scram: None,
            server_proved: false,
        }
    }

    /// Called at AuthenticationOk: a SCRAM exchange begun must have ended
    /// in the server's proof, or a server that skipped it would have let
    /// the pool in without holding the secret.
    pub fn finished(&self) -> Result<(), AuthError> {
        match self.scram.is_none() || self.server_proved {
            true => Ok(()),
            false => Err(AuthError::Unproved),
        }
    }

    /// Answers an authentication request other than AuthenticationOk
    /// (`method` and the message body after it) into `out`.
    pub fn answer(&mut self, method: u32, data: &[u8], out: &mut BytesMut) -> Result<(), AuthError> {
        match method {
            SASL_CONTINUE => match self.scram.as_mut().ok_or(AuthError::Malformed)? {
                Scram::Password(scram) => {
                    scram.update(data).map_err(AuthError::Scram)?;
                    frontend::sasl_response(scram.message(), out).map_err(AuthError::Scram)?;
                }
                Scram::Keyed(keyed) => {
                    let last = keyed.answer(data).map_err(AuthError::KeyedScram)?;
                    frontend::sasl_response(last.as_bytes(), out).map_err(AuthError::Scram)?;
                }
            },
            SASL_FINAL => {
                match self.scram.as_mut().ok_or(AuthError::Malformed)? {
                    Scram::Password(scram) => scram.finish(data).map_err(AuthError::Scram)?,
                    Scram::Keyed(keyed) => keyed.finish(data).map_err(AuthError::KeyedScram)?,
                }
                self.server_proved = true;
            }
            _ => self.first_answer(method, data, out)?,
        }
        Ok(())
    }

    /// The answer to the server's first request, which names the method.
    fn first_answer(&mut self, method: u32, data: &[u8], out: &mut BytesMut) -> Result<(), AuthError> {
        let secret = self.secret.as_ref().map_err(|why| AuthError::NoSecret {
            user: self.user.into(),
            method,
            why: why.clone(),
        })?;
        let bad_secret = |e| AuthError::NoSecret {
            user: self.user.into(),
            method,
            why: format!("its auth_file secret cannot be sent: {e}"),
        };
        if method == SASL && !data.split(|&b| b == 0).any(|m| m == sasl::SCRAM_SHA_256.as_bytes()) {
            return Err(AuthError::NoMechanism);
        }
        match (method, secret) {
            (CLEARTEXT, Secret::Password(password)) => {
                frontend::password_message(password.as_bytes(), out).map_err(bad_secret)
            }
            (MD5, secret) => {
                let salt = *data.first_chunk::<4>().ok_or(AuthError::Malformed)?;
                let answer = md5_answer(self.user, secret, salt).ok_or_else(|| AuthError::ScramOnly {
                    user: self.user.into(),
                    method,
                })?;
                frontend::password_message(answer.as_bytes(), out).map_err(bad_secret)
            }
            (SASL, Secret::Password(password)) => {
                let scram = sasl::ScramSha256::new(password.as_bytes(), sasl::ChannelBinding::unsupported());
                frontend::sasl_initial_response(sasl::SCRAM_SHA_256, scram.message(), out).map_err(AuthError::Scram)?;
                self.scram = Some(Scram::Password(scram));
                Ok(())
            }
            (SASL, Secret::Scram(secret)) => {
                let client_key = self
                    .client_key
                    .clone()
                    .filter(|key| secret.opens_with(key))
                    .ok_or_else(|| AuthError::NoClientKey { user: self.user.into() })?;
                let keyed = KeyedLogin::new(secret.clone(), client_key);
                frontend::sasl_initial_response(sasl::SCRAM_SHA_256, keyed.first().as_bytes(), out)
                    .map_err(AuthError::Scram)?;
                self.scram = Some(Scram::Keyed(keyed));
                Ok(())
            }
            (CLEARTEXT | SASL, Secret::Md5(_)) => Err(AuthError::Md5Only { user: self.user.into() }),
            (CLEARTEXT, Secret::Scram(_)) => Err(AuthError::ScramOnly {
                user: self.user.into(),
                method,
            }),
            (method, _) => Err(AuthError::Unsupported(method)),
        }
    }
}

/// `md5` and hex of md5(hex of md5(password ‖ user) ‖ salt), PostgreSQL's
/// md5 answer, from the hash the secret gives; a SCRAM secret has no md5
/// answer: `None`.
fn md5_answer(user: &str, secret: &Secret, salt: [u8; 4]) -> Option<String> {
    Some(md5_from_hash(&secret.md5(user)?, salt))
}

/// The md5 answer to `salt` from `hash`, as `pg_authid` stores it (`md5`
/// and 32 hex digits).
pub(crate) fn md5_from_hash(hash: &str, salt: [u8; 4]) -> String {
    let mut md5 = Md5::new();
    md5.update(&hash.as_bytes()[3..]);
    md5.update(salt);
    format!("md5{}", super::lower_hex(&md5.finalize()))
}

#[cfg(test)]
mod tests {
    use postgres_protocol::authentication::md5_hash;

    use super::super::scram::ScramSecret;
    use super::*;

    #[test]
    fn md5_from_the_hash_equals_md5_from_the_password() {
        let salt = [1, 2, 3, 4];
        let hash = md5_hash(b"alice", b"s3cret", [0; 4]);
        // md5_hash's inner step is what pg_authid stores.
        let stored = format!("md5{}", super::super::lower_hex(&Md5::digest(b"s3cretalice")));
        assert_ne!(hash, stored);
        assert_eq!(
            md5_answer("alice", &Secret::Md5(stored), salt),
            md5_answer("alice", &Secret::Password("s3cret".into()), salt)
        );
    }

    #[test]
    fn answers_cleartext_and_md5() {
        let password = Secret::Password("pw".into());
        let mut out = BytesMut::new();
        let mut login = Login::new("u", Ok(password.clone()), None);
        login.answer(CLEARTEXT, b"", &mut out).unwrap();
        assert_eq!(&out[..], b"p\0\0\0\x07pw\0");
        out.clear();
        login.answer(MD5, &[9, 9, 9, 9], &mut out).unwrap();
        assert_eq!(out.len(), 1 + 4 + 35 + 1);
    }

    #[test]
    fn refuses_clearly() {
        let hash = Secret::Md5(format!("md5{}", "0".repeat(32)));
        let mut out = BytesMut::new();
        let err = Login::new("u", Err("no auth_file is set".into()), None)
            .answer(MD5, &[0; 4], &mut out)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the server asks a password (authentication request 5) to open a connection for user `u`, and no auth_file is set"
        );
        let err = Login::new("u", Ok(hash), None)
            .answer(SASL, b"SCRAM-SHA-256\0\0", &mut out)
            .unwrap_err();
        assert!(matches!(err, AuthError::Md5Only { .. }), "{err}");
        let password = Secret::Password("pw".into());
        let err = Login::new("u", Ok(password.clone()), None)
            .answer(SASL, b"SCRAM-SHA-256-PLUS\0\0", &mut out)
            .unwrap_err();
        assert!(matches!(err, AuthError::NoMechanism), "{err}");
        let err = Login::new("u", Ok(password.clone()), None)
            .answer(7, b"", &mut out)
            .unwrap_err();
        assert!(matches!(err, AuthError::Unsupported(7)), "{err}");
        let err = Login::new("u", Ok(password.clone()), None)
            .answer(SASL_CONTINUE, b"r=x", &mut out)
            .unwrap_err();
        assert!(matches!(err, AuthError::Malformed), "{err}");
        let short_salt = Login::new("u", Ok(password), None).answer(MD5, b"\0\0", &mut out);
        let stored = postgres_protocol::password::scram_sha_256(b"pw");
        let secret = Secret::Scram(ScramSecret::parse(&stored).unwrap());
        for key in [None, Some(ClientKey::new([0; 32]))] {
            let err = Login::new("u", Ok(secret.clone()), key)
                .answer(SASL, b"SCRAM-SHA-256\0\0", &mut out)
                .unwrap_err();
            assert!(matches!(err, AuthError::NoClientKey { .. }), "{err}");
        }
        for method in [CLEARTEXT, MD5] {
            let err = Login::new("u", Ok(secret.clone()), None)
                .answer(method, &[0; 4], &mut out)
                .unwrap_err();
            assert!(matches!(err, AuthError::ScramOnly { .. }), "{err}");
        }
        assert!(matches!(short_salt, Err(AuthError::Malformed)));
        assert!(out.is_empty(), "nothing is sent after a refusal");
    }

    #[test]
    fn a_bad_scram_server_message_is_an_error_not_a_panic() {
        let password = Secret::Password("pw".into());
        let mut out = BytesMut::new();
        let mut login = Login::new("u", Ok(password.clone()), None);
        login.answer(SASL, b"SCRAM-SHA-256\0\0", &mut out).unwrap();
        assert!(out.starts_with(b"p"));
        let err = login.answer(SASL_CONTINUE, b"garbage", &mut out).unwrap_err();
        assert!(matches!(err, AuthError::Scram(_)), "{err}");
    }
}
