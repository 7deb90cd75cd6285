//! The passwords transaction pooling opens server connections with, and
//! judges logins by (`auth_file`, in PgBouncer's format).
//!
//! A login is relayed byte for byte to PostgreSQL, on a backend of its own
//! (see `pg::pool`), until the server has let one of its StartupMessage
//! in; only then may clients of it borrow pooled backends. When the pool
//! has none idle it opens one itself, and a server that asks a password
//! needs the user's: this file gives it. The same line lets the proxy
//! judge the passwords of later logins it answers from the pool, once a
//! relayed login showed the server takes that password
//! ([`super::verifier`]). Each line is `"user" "secret"` (a `"` inside a field is
//! written `""`; further fields are ignored; blank lines and lines starting
//! with `;` or `#` are comments), the secret being one of
//!
//! - the password itself, which answers every method PostgreSQL asks for
//!   (cleartext, md5, SCRAM-SHA-256),
//! - its md5 hash, `md5` followed by 32 hex digits of md5(password ‖ user)
//!   as in `pg_authid`, which answers md5 only, or
//! - its SCRAM secret, `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
//!   as in `pg_authid` (so that no password need be written down), which
//!   answers SCRAM-SHA-256 only, and opens server connections only once a
//!   login of the user relayed to the server since the proxy started was
//!   proved by it: a client's proof that checks against the secret reveals
//!   the ClientKey to log in with ([`super::scram`]), as PgBouncer does.
//!   After the secret changes, that takes a relayed login again.
//!
//! The file is read when the proxy starts (a bad file stops it there, with
//! the line at fault named), and again at each server connection the pool
//! opens under a password and at each relayed login whose password the
//! proxy has not judged yet, so a changed password takes effect without a
//! restart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::scram::ScramSecret;

/// What a user's line gives to log in with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Secret {
    Password(String),
    /// `md5` and 32 lowercase hex digits, as `pg_authid` stores it.
    Md5(String),
    Scram(ScramSecret),
}

impl Secret {
    /// `user`'s md5 hash as `pg_authid` stores it (`md5` and 32 hex digits
    /// of md5(password ‖ user)); a SCRAM secret has none.
    pub fn md5(&self, user: &str) -> Option<String> {
        match self {
            Secret::Password(password) => Some(postgres_protocol::password::md5(password.as_bytes(), user)),
            Secret::Md5(hash) => Some(hash.clone()),
            Secret::Scram(_) => None,
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AuthFileError {
    #[error("auth_file {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("auth_file {path}, line {line}: {problem}")]
    Line {
        path: PathBuf,
        line: usize,
        problem: &'static str,
    },
}

/// Secrets by user name, read from the file at `path`.
pub(crate) fn read(path: &Path) -> Result<HashMap<String, Secret>, AuthFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| AuthFileError::Read {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    parse(&text).map_err(|(line, problem)| AuthFileError::Line {
        path: path.to_owned(),
        line,
        problem,
    })
}

/// Secrets by user name; on error, the line (from 1) and what is wrong.
fn parse(text: &str) -> Result<HashMap<String, Secret>, (usize, &'static str)> {
    let mut secrets = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with([';', '#']) {
            continue;
        }
        let (user, rest) = quoted(line).ok_or((n + 1, "a line must be \"user\" \"secret\", each in double quotes"))?;
        let (secret, _) = quoted(rest.trim_start()).ok_or((n + 1, "the secret is missing or not in double quotes"))?;
        secrets.insert(user, secret_of(secret).map_err(|problem| (n + 1, problem))?);
    }
    Ok(secrets)
}

/// The double-quoted field at the start of `s` (`""` standing for `"`) and
/// what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut rest = s.strip_prefix('"')?;
    let mut field = String::new();
    loop {
        let end = rest.find('"')?;
        field.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        match rest.strip_prefix('"') {
            Some(after) => {
                field.push('"');
                rest = after;
            }
            None => return Some((field, rest)),
        }
    }
}

fn secret_of(secret: String) -> Result<Secret, &'static str> {
    if secret.starts_with("SCRAM-SHA-256$") {
        return ScramSecret::parse(&secret).map(Secret::Scram);
    }
    let is_md5 = secret.len() == 35
        && secret.starts_with("md5")
        && secret[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    Ok(if is_md5 {
        Secret::Md5(secret)
    } else {
        Secret::Password(secret)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_is_read_or_a_line_is_named(text in "(\"|[a-z]| |\n|;|#|md5|SCRAM-SHA-256\\$|\\PC)*") {
            match parse(&text) {
                Ok(secrets) => prop_assert!(secrets.len() <= text.lines().count()),
                Err((line, _)) => prop_assert!((1..=text.lines().count()).contains(&line)),
            }
        }
    }

    #[test]
    fn reads_passwords_md5_hashes_and_scram_secrets() {
        let text = "; PgBouncer-style\n\n\"alice\" \"s3cret\"\n# comment\n\"bob\" \"md5a3556571e93b0d20722ba62be61e8c2d\" \"ignored\"\n\"q\"\"uote\" \"pa\"\"ss\"\n";
        let secrets = parse(text).unwrap();
        assert_eq!(secrets["alice"], Secret::Password("s3cret".into()));
        assert_eq!(
            secrets["bob"],
            Secret::Md5("md5a3556571e93b0d20722ba62be61e8c2d".into())
        );
        assert_eq!(secrets["q\"uote"], Secret::Password("pa\"ss".into()));
        assert_eq!(secrets.len(), 3);
        let stored = postgres_protocol::password::scram_sha_256(b"s3cret");
        let secrets = parse(&format!("\"carol\" \"{stored}\"")).unwrap();
        assert_eq!(secrets["carol"], Secret::Scram(ScramSecret::parse(&stored).unwrap()));
    }

    #[test]
    fn an_md5_lookalike_is_a_password() {
        let secrets = parse("\"u\" \"md5-not-a-hash\"\n\"v\" \"md5A3556571E93B0D20722BA62BE61E8C2D\"").unwrap();
        assert_eq!(secrets["u"], Secret::Password("md5-not-a-hash".into()));
        assert!(matches!(secrets["v"], Secret::Password(_)));
    }

    #[test]
    fn names_the_line_at_fault() {
        assert_eq!(parse("\"a\" \"b\"\nalice s3cret\n").unwrap_err().0, 2);
        assert_eq!(
            parse("\"alice\"").unwrap_err(),
            (1, "the secret is missing or not in double quotes")
        );
        assert_eq!(parse("\"alice\" \"unterminated").unwrap_err().0, 1);
        let (line, problem) = parse("\n\"a\" \"SCRAM-SHA-256$4096:c2FsdA==$a:b\"").unwrap_err();
        assert_eq!(line, 2);
        assert!(problem.starts_with("a SCRAM secret must read"), "{problem}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = read(Path::new("/nonexistent/users.txt")).unwrap_err();
        assert!(
            err.to_string().starts_with("auth_file /nonexistent/users.txt: "),
            "{err}"
        );
    }
}
