//! Passwords judged at the proxy, for logins answered from the pool (see
//! [`super::pool::Pool::welcome`]).
//!
//! A login the server asks a password of is relayed to it and judged by
//! it. Once the server has let such a login in, later logins of the same
//! StartupMessage may be answered from the pool, without a server process
//! of their own, if the proxy can ask them what the server asked and judge
//! the answer as the server would. It can when the relayed exchange proves
//! what the server holds:
//!
//! - **cleartext**: the client sent the password the server took, and the
//!   user's `auth_file` secret ([`super::auth_file`]) is that password.
//!   PostgreSQL asks for a password in clear for `ldap`, `pam`, `radius`
//!   and `bsd` as well as for `password`; a one-time code never matches
//!   the file, so such logins stay the server's;
//! - **md5**: the user's `auth_file` secret gives the answer the client
//!   gave to the server's salt;
//! - **SCRAM-SHA-256**: the user's `auth_file` password, salted and
//!   iterated as the server said, gives the proof the client sent; or the
//!   line is the server's own SCRAM secret (the same salt and iterations),
//!   and the proof checks against it. The proxy then holds the server's
//!   StoredKey and ServerKey, and asks later logins with the server's salt
//!   and iteration count: a client sees the exchange it would see with the
//!   server, and the final message proves to it that the proxy holds the
//!   secret, as the server's does.
//!
//! Requiring the auth_file's agreement also means the pool can open
//! backends for every login it answers so (see `pg::pool`).
//!
//! A [`Verifier`] is what one relayed exchange proved; a [`Check`] asks a
//! later login and judges its responses. A verifier lives only as long as
//! the server's answers kept with it (at most the idle timeout), and a
//! password the proxy refuses sends the next login to the server again.
//!
//! Departures from PostgreSQL, each bounded by the idle timeout:
//!
//! - a password changed on the server, or past its `VALID UNTIL`, is
//!   judged as before until a login is relayed again: at once where the
//!   proxy refuses a password, or where a relayed login or a connection
//!   the pool opens is refused;
//! - SCRAM-SHA-256-PLUS (channel binding) is not offered: a relayed login
//!   that used it proves nothing, and a client that requires it (libpq's
//!   `channel_binding=require`) cannot log in on answers kept from a plain
//!   SCRAM login;
//! - a password salted with more than [`MAX_ITERATIONS`] is not derived
//!   (a SCRAM secret in the auth_file has no such bound), and its logins
//!   stay the server's.

use bytes::{Bytes, BytesMut};
use subtle::ConstantTimeEq;
use thiserror::Error;

use super::auth_file::Secret;
use super::frame;
use super::password::{self, CLEARTEXT, MD5, SASL, SASL_CONTINUE, SASL_FINAL};
use super::scram::{self, ClientFinal, ClientFirst, ClientKey, ScramSecret, MAX_ITERATIONS, SCRAM_SHA_256};

/// A relayed login's password exchange, as it passed through the proxy.
/// (No `Debug`: it holds passwords, and what is proved from it keys.)
#[derive(Default)]
pub(crate) struct Exchange {
    /// The server's authentication requests other than AuthenticationOk,
    /// each body whole (the method first).
    pub requests: Vec<Bytes>,
    /// The client's responses (`p` message bodies), in order.
    pub responses: Vec<Bytes>,
}

/// What a relayed exchange proved the server holds for a user.
pub enum Verifier {
    /// The server asked for the password in clear. Kept as md5(password ‖
    /// user), the form `pg_authid` knows, not as the password.
    Cleartext {
        md5: String,
    },
    /// The server asked for md5; `md5` is the hash in `pg_authid`'s form.
    Md5 {
        md5: String,
    },
    Scram(ScramSecret),
}

/// Why a login's answer is refused; the client is told in a FATAL error.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("password authentication failed for user \"{0}\"")]
    Wrong(String),
    #[error("sluice: malformed answer to the password request: {0}")]
    Malformed(&'static str),
}

impl Refusal {
    /// PostgreSQL's SQLSTATE for the same refusal.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Refusal::Wrong(_) => "28P01",
            Refusal::Malformed(_) => "08P01",
        }
    }
}

impl Verifier {
    /// What `exchange`, which ended in the server letting `user` in, proves
    /// with the user's `auth_file` secret, if anything (see the module doc).
    pub(crate) fn proved(user: &str, secret: Option<&Secret>, exchange: &Exchange) -> Option<Verifier> {
        let (first, _) = method(exchange.requests.first()?)?;
        let verifier = match (first, secret?) {
            (CLEARTEXT, secret) => Verifier::Cleartext { md5: secret.md5(user)? },
            (MD5, secret) => Verifier::Md5 { md5: secret.md5(user)? },
            (SASL, Secret::Password(password)) => {
                let relayed = RelayedScram::parse(exchange).filter(|r| r.iterations <= MAX_ITERATIONS)?;
                Verifier::Scram(ScramSecret::salted(password, relayed.salt, relayed.iterations)?)
            }
            // Whether it is the server's is checked with the proofs.
            (SASL, Secret::Scram(secret)) => Verifier::Scram(secret.clone()),
            _ => return None,
        };
        verifier.proves(user, exchange).then_some(verifier)
    }

    /// Whether `exchange`, relayed, is `user`'s holding the password this
    /// verifier checks: a check without PBKDF2, so a verifier kept is
    /// tried before a new one is derived.
    pub(crate) fn proves(&self, user: &str, exchange: &Exchange) -> bool {
        let Some((first, data)) = exchange.requests.first().and_then(|request| method(request)) else {
            return false;
        };
        match (self, first, exchange.responses.as_slice()) {
            (Verifier::Cleartext { md5 }, CLEARTEXT, [given]) => {
                c_string(given).is_some_and(|given| postgres_protocol::password::md5(given, user) == *md5)
            }
            (Verifier::Md5 { md5 }, MD5, [given]) => data
                .first_chunk::<4>()
                .zip(c_string(given))
                .is_some_and(|(salt, given)| password::md5_from_hash(md5, *salt).as_bytes() == given),
            (Verifier::Scram(secret), SASL, _) => exchange.client_key(secret).is_some(),
            _ => false,
        }
    }
}

impl Exchange {
    /// The ClientKey the client's proof in this relayed SCRAM exchange
    /// reveals, where `secret` is the server's (see [`super::scram`]).
    pub fn client_key(&self, secret: &ScramSecret) -> Option<ClientKey> {
        RelayedScram::parse(self)?.client_key(secret)
    }
}

/// The authentication method of a request body, and its data.
fn method(request: &[u8]) -> Option<(u32, &[u8])> {
    let (method, data) = request.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*method), data))
}

/// The bytes of a NUL-terminated string that fills `body`.
fn c_string(body: &[u8]) -> Option<&[u8]> {
    body.strip_suffix(b"\0").filter(|s| !s.contains(&0))
}

/// A relayed SCRAM-SHA-256 exchange (without channel binding), as the
/// proofs in it are checked.
struct RelayedScram<'a> {
    salt: &'a str,
    iterations: u32,
    auth_message: String,
    proof: [u8; 32],
    /// What the server's SASLFinal carried (`v=`): its proof that it holds
    /// the ServerKey.
    server_signature: Option<&'a [u8]>,
}

impl RelayedScram<'_> {
    /// The ClientKey the client's proof reveals, where `secret` is the
    /// server's: it salts as the server did, the server's signature is the
    /// one its ServerKey gives, and the proof checks against its StoredKey.
    fn client_key(&self, secret: &ScramSecret) -> Option<ClientKey> {
        if (self.salt, self.iterations) != (secret.salt.as_str(), secret.iterations) {
            return None;
        }
        let signature = scram::base64(&secret.server_signature(&self.auth_message));
        if !self
            .server_signature
            .is_some_and(|v| bool::from(v.ct_eq(signature.as_bytes())))
        {
            return None;
        }
        secret.client_key(&self.auth_message, &self.proof)
    }
}

impl<'a> RelayedScram<'a> {
    /// The SASLInitialResponse and SASLResponse of `exchange`, with the
    /// server's SASLContinue between them.
    fn parse(exchange: &'a Exchange) -> Option<RelayedScram<'a>> {
        let [initial, last] = exchange.responses.as_slice() else {
            return None;
        };
        let (SASL_CONTINUE, server_first) = method(exchange.requests.get(1)?)? else {
            return None;
        };
        let server_first = std::str::from_utf8(server_first).ok()?;
        let (mechanism, first) = scram::initial_response(initial).ok()?;
        if mechanism != SCRAM_SHA_256 {
            return None;
        }
        let first = ClientFirst::parse(first).ok()?;
        let (nonce, salt, iterations) = scram::server_first(server_first)?;
        if !nonce.starts_with(first.nonce) || iterations == 0 {
            return None;
        }
        let last = ClientFinal::parse(last, first.gs2, nonce).ok()?;
        let server_signature = match exchange.requests.get(2).and_then(|request| method(request)) {
            Some((SASL_FINAL, data)) => data.strip_prefix(b"v="),
            _ => None,
        };
        Some(RelayedScram {
            salt,
            iterations,
            auth_message: [first.bare, server_first, last.without_proof].join(","),
            proof: last.proof,
            server_signature,
        })
    }
}

/// One login asked for its password by the proxy.
pub struct Check<'a> {
    verifier: &'a Verifier,
    user: &'a str,
    step: Step,
}

enum Step {
    /// The first request is sent; its answer is awaited.
    Asked,
    /// Asked for md5 with this salt.
    Md5([u8; 4]),
    /// The server-first message is sent: the client's proof is awaited.
    ScramFinal {
        gs2: String,
        nonce: String,
        /// client-first-message-bare "," server-first-message ",".
        auth_prefix: String,
    },
}

impl<'a> Check<'a> {
    /// Asks `user`'s login what the server asked, into `out`.
    pub fn ask(verifier: &'a Verifier, user: &'a str, out: &mut BytesMut) -> Check<'a> {
        let step = match verifier {
            Verifier::Cleartext { .. } => {
                request(out, CLEARTEXT, &[]);
                Step::Asked
            }
            Verifier::Md5 { .. } => {
                let salt: [u8; 4] = rand::random();
                request(out, MD5, &salt);
                Step::Md5(salt)
            }
            Verifier::Scram(_) => {
                request(out, SASL, &[SCRAM_SHA_256.as_bytes(), b"\0\0"].concat());
                Step::Asked
            }
        };
        Check { verifier, user, step }
    }

    /// Judges the client's response (a `p` message body). `Ok(true)`: the
    /// password is proved, and `out` holds what the server would send
    /// before AuthenticationOk; `Ok(false)`: `out` holds the next request.
    pub fn answer(&mut self, body: &[u8], out: &mut BytesMut) -> Result<bool, Refusal> {
        let wrong = || Refusal::Wrong(self.user.into());
        let judged = |hash: &str, given: &str| match bool::from(hash.as_bytes().ct_eq(given.as_bytes())) {
            true => Ok(true),
            false => Err(wrong()),
        };
        match (&self.step, self.verifier) {
            (Step::Asked, Verifier::Cleartext { md5 }) => {
                let given = c_string(body).ok_or(Refusal::Malformed("the password message is not one string"))?;
                judged(md5, &postgres_protocol::password::md5(given, self.user))
            }
            (Step::Md5(salt), Verifier::Md5 { md5 }) => {
                let given = c_string(body).ok_or(Refusal::Malformed("the password message is not one string"))?;
                let given = std::str::from_utf8(given).map_err(|_| wrong())?;
                judged(&password::md5_from_hash(md5, *salt), given)
            }
            (Step::Asked, Verifier::Scram(secret)) => {
                let (mechanism, first) = scram::initial_response(body).map_err(Refusal::Malformed)?;
                if mechanism != SCRAM_SHA_256 {
                    return Err(Refusal::Malformed(
                        "the client chose a SASL mechanism that was not offered",
                    ));
                }
                let first = ClientFirst::parse(first).map_err(Refusal::Malformed)?;
                let nonce = format!("{}{}", first.nonce, scram::nonce());
                let server_first = format!("r={nonce},s={},i={}", secret.salt, secret.iterations);
                request(out, SASL_CONTINUE, server_first.as_bytes());
                self.step = Step::ScramFinal {
                    gs2: first.gs2.into(),
                    auth_prefix: format!("{},{server_first},", first.bare),
                    nonce,
                };
                Ok(false)
            }
            (
                Step::ScramFinal {
                    gs2,
                    nonce,
                    auth_prefix,
                },
                Verifier::Scram(secret),
            ) => {
                let last = ClientFinal::parse(body, gs2, nonce).map_err(Refusal::Malformed)?;
                let auth_message = format!("{auth_prefix}{}", last.without_proof);
                if !secret.proves(&auth_message, &last.proof) {
                    return Err(wrong());
                }
                let signature = scram::base64(&secret.server_signature(&auth_message));
                request(out, SASL_FINAL, format!("v={signature}").as_bytes());
                Ok(true)
            }
            _ => Err(Refusal::Malformed("an answer out of turn")),
        }
    }
}

/// Appends an authentication request.
fn request(out: &mut BytesMut, method: u32, data: &[u8]) {
    frame::write_message_parts(out, b'R', &[&method.to_be_bytes(), data]);
}

#[cfg(test)]
mod tests {
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
    use postgres_protocol::message::frontend;

    use super::*;

    /// The bodies of the messages in `out`, which it empties.
    fn bodies(out: &mut BytesMut) -> Vec<Bytes> {
        let mut found = Vec::new();
        while let Ok(Some(header)) = frame::parse_header(out) {
            found.push(out.split_to(header.len).freeze().slice(5..));
        }
        found
    }

    /// A `p` message's body, as a client library writes it.
    fn written(write: impl FnOnce(&mut BytesMut) -> std::io::Result<()>) -> Bytes {
        let mut out = BytesMut::new();
        write(&mut out).unwrap();
        bodies(&mut out).remove(0)
    }

    /// `password`'s SCRAM exchange with a check of `verifier`, by
    /// rust-postgres's client: the check's outcome, and whether the client
    /// took the server's final message.
    fn scram_login(verifier: &Verifier, password: &str) -> (Result<bool, Refusal>, bool) {
        let mut out = BytesMut::new();
        let mut check = Check::ask(verifier, "alice", &mut out);
        let first = bodies(&mut out);
        assert_eq!(&first[0][..], b"\0\0\0\x0aSCRAM-SHA-256\0\0");
        let mut client = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
        let initial = written(|o| frontend::sasl_initial_response(SCRAM_SHA_256, client.message(), o));
        assert_eq!(check.answer(&initial, &mut out), Ok(false));
        let server_first = bodies(&mut out).remove(0);
        client.update(&server_first[4..]).unwrap();
        let last = written(|o| frontend::sasl_response(client.message(), o));
        let outcome = check.answer(&last, &mut out);
        let taken = outcome == Ok(true) && client.finish(&bodies(&mut out).remove(0)[4..]).is_ok();
        (outcome, taken)
    }

    /// A SCRAM exchange as a server holding `password` would run it with
    /// rust-postgres's client, recorded as the proxy records a relayed one.
    fn relayed_scram(password: &str) -> Exchange {
        let secret = ScramSecret::salted(password, "c2FsdHNhbHRzYWx0", 4096).unwrap();
        let verifier = Verifier::Scram(secret);
        let mut out = BytesMut::new();
        let mut check = Check::ask(&verifier, "alice", &mut out);
        let mut exchange = Exchange::default();
        exchange.requests.extend(bodies(&mut out));
        let mut client = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
        let initial = written(|o| frontend::sasl_initial_response(SCRAM_SHA_256, client.message(), o));
        check.answer(&initial, &mut out).unwrap();
        let server_first = bodies(&mut out).remove(0);
        client.update(&server_first[4..]).unwrap();
        let last = written(|o| frontend::sasl_response(client.message(), o));
        exchange.requests.push(server_first);
        exchange.responses.extend([initial, last.clone()]);
        assert_eq!(check.answer(&last, &mut out), Ok(true));
        exchange.requests.extend(bodies(&mut out));
        exchange
    }

    #[test]
    fn a_scram_client_proves_the_right_password_and_takes_the_proxys_signature() {
        let verifier = Verifier::Scram(ScramSecret::salted("s3cret", "c2FsdHNhbHRzYWx0", 4096).unwrap());
        assert_eq!(scram_login(&verifier, "s3cret"), (Ok(true), true));
        assert_eq!(
            scram_login(&verifier, "not-it"),
            (Err(Refusal::Wrong("alice".into())), false)
        );
    }

    #[test]
    fn a_relayed_scram_exchange_proves_the_auth_files_password_only() {
        let exchange = relayed_scram("s3cret");
        let right = Secret::Password("s3cret".into());
        let Some(verifier) = Verifier::proved("alice", Some(&right), &exchange) else {
            panic!("the password the client proved is proved")
        };
        // The secret proved is the server's: its salt and iterations, and a
        // client holding the password logs in with them.
        let Verifier::Scram(secret) = &verifier else {
            unreachable!()
        };
        assert_eq!((secret.salt.as_str(), secret.iterations), ("c2FsdHNhbHRzYWx0", 4096));
        assert_eq!(scram_login(&verifier, "s3cret"), (Ok(true), true));
        let stale = Secret::Password("old".into());
        assert!(Verifier::proved("alice", Some(&stale), &exchange).is_none());
        assert!(Verifier::proved("alice", None, &exchange).is_none());
        let md5 = Secret::Md5(postgres_protocol::password::md5(b"s3cret", "alice"));
        assert!(
            Verifier::proved("alice", Some(&md5), &exchange).is_none(),
            "an md5 hash cannot prove SCRAM"
        );
    }

    #[test]
    fn a_scram_secret_proves_a_relayed_exchange_and_reveals_the_client_key() {
        let secret = ScramSecret::salted("s3cret", "c2FsdHNhbHRzYWx0", 4096).unwrap();
        let exchange = relayed_scram("s3cret");
        let stored = Secret::Scram(secret.clone());
        let verifier = Verifier::proved("alice", Some(&stored), &exchange).expect("proved by the secret");
        assert_eq!(scram_login(&verifier, "s3cret"), (Ok(true), true));
        let key = exchange.client_key(&secret).expect("the proof reveals the key");
        assert!(secret.opens_with(&key));
        let other = relayed_scram("other");
        assert!(Verifier::proved("alice", Some(&stored), &other).is_none());
        assert!(other.client_key(&secret).is_none());
        let salted_otherwise = ScramSecret::salted("s3cret", "b3RoZXI=", 4096).unwrap();
        assert!(
            exchange.client_key(&salted_otherwise).is_none(),
            "not the server's salt"
        );
        let stale = Secret::Scram(salted_otherwise);
        assert!(Verifier::proved("alice", Some(&stale), &exchange).is_none());
        // The server's signature in its final message checks the ServerKey.
        let other_server_key = ScramSecret {
            server_key: [7; 32],
            ..secret.clone()
        };
        assert!(exchange.client_key(&other_server_key).is_none());
        let forged = Secret::Scram(other_server_key);
        assert!(Verifier::proved("alice", Some(&forged), &exchange).is_none());
    }

    /// The pool's login with a revealed ClientKey (`password::Login`), run
    /// against the proxy's own check of the secret standing for the server.
    fn keyed_login(secret: &ScramSecret, key: ClientKey) -> Result<(), String> {
        let mut login = password::Login::new("alice", Ok(Secret::Scram(secret.clone())), Some(key));
        let verifier = Verifier::Scram(secret.clone());
        let mut from_server = BytesMut::new();
        let mut check = Check::ask(&verifier, "alice", &mut from_server);
        loop {
            let request = bodies(&mut from_server).remove(0);
            let (asked, data) = method(&request).unwrap();
            let mut to_server = BytesMut::new();
            login.answer(asked, data, &mut to_server).map_err(|e| e.to_string())?;
            if asked == SASL_FINAL {
                return login.finished().map_err(|e| e.to_string());
            }
            assert!(
                login.finished().is_err(),
                "no AuthenticationOk before the server's proof"
            );
            let response = bodies(&mut to_server).remove(0);
            check.answer(&response, &mut from_server).map_err(|e| e.to_string())?;
        }
    }

    #[test]
    fn the_pool_logs_in_with_the_key_a_relayed_proof_revealed() {
        let secret = ScramSecret::salted("s3cret", "c2FsdHNhbHRzYWx0", 4096).unwrap();
        let key = relayed_scram("s3cret").client_key(&secret).expect("a key");
        assert_eq!(keyed_login(&secret, key.clone()), Ok(()));
        let mut wrong = key;
        wrong[0] ^= 1;
        let refused = keyed_login(&secret, wrong).unwrap_err();
        assert!(refused.contains("opens server connections only once"), "{refused}");
    }

    #[test]
    fn a_kept_verifier_proves_later_exchanges_of_its_password_only() {
        let right = Secret::Password("s3cret".into());
        let verifier = Verifier::proved("alice", Some(&right), &relayed_scram("s3cret")).expect("proved");
        assert!(
            verifier.proves("alice", &relayed_scram("s3cret")),
            "a new nonce, the same password"
        );
        assert!(!verifier.proves("alice", &relayed_scram("other")));
        let cleartext = |password: &'static [u8]| Exchange {
            requests: vec![Bytes::copy_from_slice(&CLEARTEXT.to_be_bytes())],
            responses: vec![Bytes::from_static(password)],
        };
        assert!(!verifier.proves("alice", &cleartext(b"s3cret\0")), "another method");
        let verifier = Verifier::proved("alice", Some(&right), &cleartext(b"s3cret\0")).expect("proved");
        assert!(verifier.proves("alice", &cleartext(b"s3cret\0")));
        assert!(!verifier.proves("alice", &cleartext(b"other\0")));
        assert!(!verifier.proves("bob", &cleartext(b"s3cret\0")), "another user");
    }

    #[test]
    fn md5_is_judged_from_the_password_or_its_hash() {
        let salt = [7, 7, 7, 7];
        let answer = postgres_protocol::authentication::md5_hash(b"alice", b"s3cret", salt);
        let exchange = Exchange {
            requests: vec![Bytes::from([&MD5.to_be_bytes()[..], &salt].concat())],
            responses: vec![Bytes::from(format!("{answer}\0"))],
        };
        let hash = postgres_protocol::password::md5(b"s3cret", "alice");
        for secret in [Secret::Password("s3cret".into()), Secret::Md5(hash)] {
            let verifier = Verifier::proved("alice", Some(&secret), &exchange).expect("proved");
            let mut out = BytesMut::new();
            let mut check = Check::ask(&verifier, "alice", &mut out);
            let request = bodies(&mut out).remove(0);
            let (MD5, their_salt) = method(&request).unwrap() else {
                panic!("md5 is asked")
            };
            let salt = *their_salt.first_chunk::<4>().unwrap();
            let right = postgres_protocol::authentication::md5_hash(b"alice", b"s3cret", salt);
            assert_eq!(check.answer(format!("{right}\0").as_bytes(), &mut out), Ok(true));
            let mut check = Check::ask(&verifier, "alice", &mut out);
            let salt = *method(&bodies(&mut out)[0]).unwrap().1.first_chunk::<4>().unwrap();
            let wrong = postgres_protocol::authentication::md5_hash(b"alice", b"other", salt);
            assert_eq!(
                check.answer(format!("{wrong}\0").as_bytes(), &mut out),
                Err(Refusal::Wrong("alice".into()))
            );
        }
        let stale = Secret::Password("old".into());
        assert!(Verifier::proved("alice", Some(&stale), &exchange).is_none());
        assert!(Verifier::proved("alice", None, &exchange).is_none());
    }

    #[test]
    fn cleartext_is_judged_where_the_auth_file_agrees_with_the_server() {
        let exchange = Exchange {
            requests: vec![Bytes::copy_from_slice(&CLEARTEXT.to_be_bytes())],
            responses: vec![Bytes::from_static(b"s3cret\0")],
        };
        let stale = Secret::Password("old".into());
        assert!(Verifier::proved("bob", Some(&stale), &exchange).is_none());
        assert!(Verifier::proved("bob", None, &exchange).is_none());
        let hash = Secret::Md5(postgres_protocol::password::md5(b"s3cret", "bob"));
        assert!(Verifier::proved("bob", Some(&hash), &exchange).is_some());
        let right = Secret::Password("s3cret".into());
        let verifier = Verifier::proved("bob", Some(&right), &exchange).expect("proved");
        let mut out = BytesMut::new();
        let mut check = Check::ask(&verifier, "bob", &mut out);
        assert_eq!(&bodies(&mut out)[0][..], &CLEARTEXT.to_be_bytes());
        assert_eq!(check.answer(b"s3cret\0", &mut out), Ok(true));
        let mut check = Check::ask(&verifier, "bob", &mut out);
        assert_eq!(check.answer(b"s3cre\0", &mut out), Err(Refusal::Wrong("bob".into())));
    }

    #[test]
    fn malformed_answers_are_named_not_panicked_on() {
        let verifier = Verifier::Scram(ScramSecret::salted("pw", "c2FsdA==", 16).unwrap());
        let first = |message: &[u8]| {
            let mut out = BytesMut::new();
            let mut check = Check::ask(&verifier, "alice", &mut out);
            let body = [b"SCRAM-SHA-256\0", &(message.len() as i32).to_be_bytes()[..], message].concat();
            check.answer(&body, &mut out)
        };
        for (message, expected) in [
            (&b"p=tls-server-end-point,,n=,r=abc"[..], "channel binding"),
            (b"n,a=someone,n=,r=abc", "authorization identity"),
            (b"x,,n=,r=abc", "GS2 header"),
            (b"n,,r=abc", "names no user"),
            (b"n,,m=ext,n=,r=abc", "extension"),
            (b"n,,n=,r=", "nonce"),
            (b"n,,n=,r=a\x01b", "nonce"),
            (b"n,,n=,r=\xff", "UTF-8"),
        ] {
            match first(message) {
                Err(Refusal::Malformed(why)) => assert!(why.contains(expected), "{why}"),
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(message)),
            }
        }
        let mut out = BytesMut::new();
        let mut check = Check::ask(&verifier, "alice", &mut out);
        out.clear();
        for body in [
            &b""[..],
            b"SCRAM-SHA-256",
            b"SCRAM-SHA-256\0\0\0\0\x08n,,n=,r=x",
            b"PLAIN\0\0\0\0\x01x",
        ] {
            assert!(
                matches!(check.answer(body, &mut out), Err(Refusal::Malformed(_))),
                "{body:?}"
            );
        }
        let body = [b"SCRAM-SHA-256\0", &9i32.to_be_bytes()[..], b"n,,n=,r=x"].concat();
        assert_eq!(check.answer(&body, &mut out), Ok(false));
        let nonce = String::from_utf8(bodies(&mut out)[0][6..].to_vec()).unwrap();
        let nonce = nonce.split(',').next().unwrap();
        let proof = scram::base64(&[0u8; 32]);
        for (last, expected) in [
            (format!("c=biws,r={nonce}"), "no proof"),
            (format!("c=eSws,r={nonce},p={proof}"), "channel binding"),
            (format!("c=biws,r=x,p={proof}"), "nonce"),
            (format!("c=biws,r={nonce},p=AAAA"), "32 bytes"),
        ] {
            match check.answer(last.as_bytes(), &mut out) {
                Err(Refusal::Malformed(why)) => assert!(why.contains(expected), "{why}"),
                other => panic!("{last}: {other:?}"),
            }
        }
        let zero = format!("c=biws,r={nonce},p={proof}");
        assert_eq!(
            check.answer(zero.as_bytes(), &mut out),
            Err(Refusal::Wrong("alice".into()))
        );
    }

    #[test]
    fn exchanges_that_prove_nothing_prove_nothing() {
        let password = Secret::Password("pw".into());
        // A login that used channel binding: later ones are not offered it.
        let mut plus = relayed_scram("pw");
        let initial = plus.responses[0].strip_prefix(b"SCRAM-SHA-256\0").unwrap();
        plus.responses[0] = Bytes::from([&b"SCRAM-SHA-256-PLUS\0"[..], initial].concat());
        assert!(Verifier::proved("u", Some(&password), &plus).is_none());
        assert!(Verifier::proved("u", Some(&password), &relayed_scram("pw")).is_some());
        assert!(Verifier::proved("u", Some(&password), &Exchange::default()).is_none());
        let mut out_of_order = relayed_scram("pw");
        out_of_order.responses.swap(0, 1);
        assert!(Verifier::proved("u", Some(&password), &out_of_order).is_none());
        let unknown = Exchange {
            requests: vec![Bytes::copy_from_slice(&7u32.to_be_bytes())],
            responses: vec![Bytes::from_static(b"x\0")],
        };
        assert!(Verifier::proved("u", Some(&password), &unknown).is_none());
    }
}
