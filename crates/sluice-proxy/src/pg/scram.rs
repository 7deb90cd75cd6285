//! SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL speaks it: the secret
//! `pg_authid` stores, the client's messages, and the proofs both sides
//! compute.
//!
//! The proxy takes all three parts of an exchange. It judges a client's
//! proof like a server (`pg::verifier`), checks an exchange it only
//! relayed, and logs in to the server like a client, with a password or,
//! where its `auth_file` holds a SCRAM secret, with the ClientKey a
//! client's proof revealed ([`KeyedLogin`]): the XOR of a proof with the
//! client signature is the ClientKey, which the StoredKey is the hash of.
//! PgBouncer logs in with SCRAM secrets the same way.
//!
//! Written here, on RustCrypto's HMAC and SHA-256: `postgres-protocol` has
//! only the client side with a password, and no maintained crate has the
//! server side, the checking of a watched exchange, or a client with a key.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

pub(crate) use postgres_protocol::authentication::sasl::SCRAM_SHA_256;

/// The most iterations the proxy salts a password with, to check a relayed
/// login against the auth_file's password: each costs an HMAC, once per
/// such login (PostgreSQL's default is 4096).
pub(crate) const MAX_ITERATIONS: u32 = 100_000;
/// Random bytes of the proxy's share of a nonce, as PostgreSQL's.
const NONCE_BYTES: usize = 18;

/// A user's ClientKey: it logs in as the user wherever the StoredKey is
/// PostgreSQL's, so it is wiped from memory when dropped.
pub(crate) type ClientKey = Zeroizing<[u8; 32]>;

/// A SCRAM-SHA-256 secret, as `pg_authid` stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramSecret {
    /// In base64, as the server sends it.
    pub salt: String,
    pub iterations: u32,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl ScramSecret {
    /// Reads `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
    /// (base64 fields), the form `pg_authid.rolpassword` holds.
    pub fn parse(text: &str) -> Result<ScramSecret, &'static str> {
        const BAD: &str = "a SCRAM secret must read SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, as pg_authid stores it";
        let rest = text.strip_prefix("SCRAM-SHA-256$").ok_or(BAD)?;
        let (parameters, keys) = rest.split_once('$').ok_or(BAD)?;
        let (iterations, salt) = parameters.split_once(':').ok_or(BAD)?;
        let (stored_key, server_key) = keys.split_once(':').ok_or(BAD)?;
        let key = |b64: &str| {
            BASE64
                .decode(b64)
                .ok()
                .and_then(|k| <[u8; 32]>::try_from(k).ok())
                .ok_or(BAD)
        };
        let iterations = iterations.parse().ok().filter(|&i| i > 0).ok_or(BAD)?;
        BASE64.decode(salt).map_err(|_| BAD)?;
        Ok(ScramSecret {
            salt: salt.into(),
            iterations,
            stored_key: key(stored_key)?,
            server_key: key(server_key)?,
        })
    }

    /// The secret of `password` salted with `salt` (base64) and iterated
    /// `iterations` times.
    pub fn salted(password: &str, salt: &str, iterations: u32) -> Option<ScramSecret> {
        let salted = hi(&normalize(password), &BASE64.decode(salt).ok()?, iterations);
        Some(ScramSecret {
            salt: salt.into(),
            iterations,
            stored_key: Sha256::digest(hmac(&salted, b"Client Key")).into(),
            server_key: hmac(&salted, b"Server Key"),
        })
    }

    /// The ClientKey `proof` reveals, if it is that of a client holding
    /// the password: its XOR with the client signature hashes to the
    /// StoredKey (RFC 5802 §3).
    pub fn client_key(&self, auth_message: &str, proof: &[u8; 32]) -> Option<ClientKey> {
        let client_key = ClientKey::new(xor(proof, &self.client_signature(auth_message)));
        self.opens_with(&client_key).then_some(client_key)
    }

    /// Whether `proof` is that of a client holding the password.
    pub fn proves(&self, auth_message: &str, proof: &[u8; 32]) -> bool {
        self.client_key(auth_message, proof).is_some()
    }

    /// The proof a client holding `client_key` sends.
    pub fn proof(&self, client_key: &[u8; 32], auth_message: &str) -> [u8; 32] {
        xor(client_key, &self.client_signature(auth_message))
    }

    /// What the server's final message carries: proof that it holds the
    /// ServerKey.
    pub fn server_signature(&self, auth_message: &str) -> [u8; 32] {
        hmac(&self.server_key, auth_message.as_bytes())
    }

    fn client_signature(&self, auth_message: &str) -> [u8; 32] {
        hmac(&self.stored_key, auth_message.as_bytes())
    }

    /// Whether `client_key` is the one this secret stores the hash of.
    pub fn opens_with(&self, client_key: &[u8; 32]) -> bool {
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        stored_key.ct_eq(&self.stored_key).into()
    }
}

/// SCRAM's Hi(): PBKDF2 with HMAC-SHA-256 and one block.
fn hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    // Keyed once: each iteration clones it rather than hash the key again.
    let keyed = Hmac::<Sha256>::new_from_slice(password).expect("HMAC takes keys of any length");
    let mut mac = keyed.clone();
    mac.update(salt);
    mac.update(&1u32.to_be_bytes());
    let mut previous: [u8; 32] = mac.finalize().into_bytes().into();
    let mut result = previous;
    for _ in 1..iterations {
        let mut mac = keyed.clone();
        mac.update(&previous);
        previous = mac.finalize().into_bytes().into();
        result.iter_mut().zip(previous).for_each(|(r, p)| *r ^= p);
    }
    result
}

fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// SASLprep of the password where it applies; PostgreSQL uses the bytes as
/// they are otherwise (a password need not be valid UTF-8, nor pass it).
fn normalize(password: &str) -> Vec<u8> {
    match stringprep::saslprep(password) {
        Ok(prepared) => prepared.into_owned().into_bytes(),
        Err(_) => password.as_bytes().to_vec(),
    }
}

/// A SASLInitialResponse body: the mechanism chosen, and its first message.
pub(crate) fn initial_response(body: &[u8]) -> Result<(&str, &[u8]), &'static str> {
    const BAD: &str = "SASLInitialResponse is not a mechanism name and a length-prefixed message";
    let end = body.iter().position(|&b| b == 0).ok_or(BAD)?;
    let mechanism = std::str::from_utf8(&body[..end]).map_err(|_| BAD)?;
    let (len, message) = body[end + 1..].split_first_chunk::<4>().ok_or(BAD)?;
    if usize::try_from(i32::from_be_bytes(*len)).ok() != Some(message.len()) {
        return Err(BAD);
    }
    Ok((mechanism, message))
}

/// A client-first-message (RFC 5802 §7).
pub(crate) struct ClientFirst<'a> {
    /// The GS2 header, both commas included: bound by the final message.
    pub gs2: &'a str,
    /// The message without its GS2 header, as the AuthMessage takes it.
    pub bare: &'a str,
    pub nonce: &'a str,
}

impl<'a> ClientFirst<'a> {
    pub fn parse(message: &'a [u8]) -> Result<ClientFirst<'a>, &'static str> {
        let message = std::str::from_utf8(message).map_err(|_| "the SCRAM message is not UTF-8")?;
        let rest = match message.as_bytes().first() {
            Some(b'n' | b'y') => &message[1..],
            Some(b'p') => return Err("the client asks for channel binding, which was not offered"),
            _ => return Err("the SCRAM message does not begin with a GS2 header"),
        };
        let rest = rest.strip_prefix(',').ok_or("the GS2 header is malformed")?;
        if rest.starts_with("a=") {
            return Err("an authorization identity is not supported");
        }
        let bare = rest.strip_prefix(',').ok_or("the GS2 header is malformed")?;
        let gs2 = &message[..message.len() - bare.len()];
        if bare.starts_with("m=") {
            return Err("the client requires a SCRAM extension that is not supported");
        }
        let mut attributes = bare.split(',');
        if !attributes.next().is_some_and(|user| user.starts_with("n=")) {
            return Err("the client-first message names no user (n=)");
        }
        let nonce = attributes
            .next()
            .and_then(|nonce| nonce.strip_prefix("r="))
            .filter(|nonce| !nonce.is_empty() && nonce.bytes().all(|b| (0x21..0x7f).contains(&b)))
            .ok_or("the client-first message has no printable nonce (r=)")?;
        Ok(ClientFirst { gs2, bare, nonce })
    }
}

/// A client-final-message (RFC 5802 §7), checked against the exchange.
pub(crate) struct ClientFinal<'a> {
    /// The message up to its proof, as the AuthMessage takes it.
    pub without_proof: &'a str,
    pub proof: [u8; 32],
}

impl<'a> ClientFinal<'a> {
    /// Parses `message` and checks that it binds the GS2 header `gs2` and
    /// carries the whole `nonce`.
    pub fn parse(message: &'a [u8], gs2: &str, nonce: &str) -> Result<ClientFinal<'a>, &'static str> {
        let message = std::str::from_utf8(message).map_err(|_| "the SCRAM message is not UTF-8")?;
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or("the client-final message has no proof (p=)")?;
        let mut attributes = without_proof.split(',');
        let binding = attributes.next().and_then(|c| c.strip_prefix("c="));
        if binding.and_then(|c| BASE64.decode(c).ok()).as_deref() != Some(gs2.as_bytes()) {
            return Err("the channel binding (c=) does not repeat the GS2 header");
        }
        if attributes.next().and_then(|r| r.strip_prefix("r=")) != Some(nonce) {
            return Err("the nonce (r=) is not the one the server sent");
        }
        let proof = BASE64.decode(proof).ok().and_then(|p| <[u8; 32]>::try_from(p).ok());
        let proof = proof.ok_or("the proof (p=) is not 32 bytes of base64")?;
        Ok(ClientFinal { without_proof, proof })
    }
}

fn xor(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// A fresh nonce share: random bytes in base64.
pub(crate) fn nonce() -> String {
    BASE64.encode(rand::random::<[u8; NONCE_BYTES]>())
}

/// `bytes` in base64, as SCRAM's messages carry binary values.
pub fn base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// A server-first-message's nonce, salt (base64) and iteration count.
pub(crate) fn server_first(message: &str) -> Option<(&str, &str, u32)> {
    let mut attributes = message.split(',');
    let nonce = attributes.next()?.strip_prefix("r=")?;
    let salt = attributes.next()?.strip_prefix("s=")?;
    let iterations = attributes.next()?.strip_prefix("i=")?.parse().ok()?;
    Some((nonce, salt, iterations))
}

/// The client side of an exchange with a ClientKey instead of a password:
/// how the pool opens a server connection for a user whose `auth_file`
/// line is a SCRAM secret.
pub(crate) struct KeyedLogin {
    secret: ScramSecret,
    client_key: ClientKey,
    /// The client-first-message without its GS2 header.
    first_bare: String,
    nonce: String,
    /// Once the proof is sent, what the server's signature signs.
    auth_message: Option<String>,
}

impl KeyedLogin {
    pub fn new(secret: ScramSecret, client_key: ClientKey) -> KeyedLogin {
        let nonce = nonce();
        KeyedLogin {
            secret,
            client_key,
            first_bare: format!("n=,r={nonce}"),
            nonce,
            auth_message: None,
        }
    }

    /// The client-first-message.
    pub fn first(&self) -> String {
        format!("n,,{}", self.first_bare)
    }

    /// The client-final-message answering the server-first `message`.
    pub fn answer(&mut self, message: &[u8]) -> Result<String, &'static str> {
        let message = std::str::from_utf8(message).map_err(|_| "the server's SCRAM message is not UTF-8")?;
        let (nonce, salt, iterations) = server_first(message).ok_or("the server's SCRAM message is malformed")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend the client's");
        }
        if (salt, iterations) != (self.secret.salt.as_str(), self.secret.iterations) {
            return Err("the server salts the password otherwise than the auth_file's SCRAM secret says: the secret is not the server's");
        }
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{message},{without_proof}", self.first_bare);
        let proof = self.secret.proof(&self.client_key, &auth_message);
        self.auth_message = Some(auth_message);
        Ok(format!("{without_proof},p={}", base64(&proof)))
    }

    /// Checks the server-final `message`: the server holds the ServerKey.
    pub fn finish(&self, message: &[u8]) -> Result<(), &'static str> {
        let auth_message = self
            .auth_message
            .as_ref()
            .ok_or("the server's SCRAM messages are out of order")?;
        let signature = message
            .strip_prefix(b"v=")
            .and_then(|v| BASE64.decode(v).ok())
            .ok_or("the server's final SCRAM message carries no signature")?;
        match bool::from(signature.ct_eq(&self.secret.server_signature(auth_message))) {
            true => Ok(()),
            false => Err("the server's SCRAM signature is wrong: it does not hold the secret's ServerKey"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3's exchange: user "user", password "pencil".
    const SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const CLIENT_FIRST_BARE: &str = "n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const WITHOUT_PROOF: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const PROOF: &str = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SIGNATURE: &str = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    #[test]
    fn rfc_7677s_exchange_is_proved_and_signed() {
        let secret = ScramSecret::salted("pencil", SALT, 4096).unwrap();
        let auth_message = [CLIENT_FIRST_BARE, SERVER_FIRST, WITHOUT_PROOF].join(",");
        let proof: [u8; 32] = BASE64.decode(PROOF).unwrap().try_into().unwrap();
        let client_key = secret
            .client_key(&auth_message, &proof)
            .expect("the RFC's proof proves");
        assert!(secret.opens_with(&client_key));
        assert_eq!(
            secret.proof(&client_key, &auth_message),
            proof,
            "the key gives the proof back"
        );
        assert_eq!(base64(&secret.server_signature(&auth_message)), SIGNATURE);
        let mut wrong = proof;
        wrong[0] ^= 1;
        assert!(!secret.proves(&auth_message, &wrong));
    }

    #[test]
    fn a_secret_reads_as_pg_authid_writes_it() {
        let stored = postgres_protocol::password::scram_sha_256(b"s3cret");
        let secret = ScramSecret::parse(&stored).expect("rust-postgres's secret");
        assert_eq!(secret.iterations, 4096);
        assert_eq!(
            Some(&secret),
            ScramSecret::salted("s3cret", &secret.salt, 4096).as_ref()
        );
        for bad in [
            "SCRAM-SHA-256$4096:c2FsdA==$a:b",
            "SCRAM-SHA-256$0:c2FsdA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "SCRAM-SHA-256$4096:!!$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "SCRAM-SHA-256$4096",
            "SCRAM-SHA-1$4096:c2FsdA==$a:b",
        ] {
            assert!(ScramSecret::parse(bad).unwrap_err().starts_with("a SCRAM secret must read"), "{bad}");
        }
    }

    #[test]
    fn a_keyed_login_proves_what_a_password_login_proves() {
        let secret = ScramSecret::salted("s3cret", "c2FsdHNhbHQ=", 4096).unwrap();
        // The key a client holding the password has.
        let client_key = ClientKey::new(hmac(
            &hi(b"s3cret", &BASE64.decode("c2FsdHNhbHQ=").unwrap(), 4096),
            b"Client Key",
        ));
        let mut login = KeyedLogin::new(secret.clone(), client_key.clone());
        let first = login.first();
        let bare = first.strip_prefix("n,,").unwrap();
        let client_nonce = bare.strip_prefix("n=,r=").unwrap();
        let sent = format!("r={client_nonce}{},s=c2FsdHNhbHQ=,i=4096", nonce());
        let last = login.answer(sent.as_bytes()).unwrap();
        let last = ClientFinal::parse(last.as_bytes(), "n,,", server_first(&sent).unwrap().0).unwrap();
        let auth_message = format!("{bare},{sent},{}", last.without_proof);
        assert!(secret.proves(&auth_message, &last.proof), "the server takes the proof");
        let signed = format!("v={}", base64(&secret.server_signature(&auth_message)));
        assert_eq!(login.finish(signed.as_bytes()), Ok(()));
        let forged = format!("v={}", base64(&[7; 32]));
        assert!(
            login.finish(forged.as_bytes()).is_err(),
            "a forged signature is refused"
        );
        let mut other = KeyedLogin::new(secret.clone(), client_key);
        let salted_otherwise = format!("r={}x,s=b3RoZXI=,i=4096", &other.first()[8..]);
        assert!(other
            .answer(salted_otherwise.as_bytes())
            .unwrap_err()
            .contains("not the server's"));
        assert!(other
            .answer(b"r=someone-else,s=c2FsdHNhbHQ=,i=4096")
            .unwrap_err()
            .contains("nonce"));
    }
}
