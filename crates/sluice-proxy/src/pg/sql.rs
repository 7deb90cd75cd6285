//! The few SQL statements transaction pooling must recognise, because they
//! act on session state that does not stay on one backend: `DEALLOCATE`
//! and `DISCARD ALL` (prepared statements, see [`super::prepared`]) and
//! `LISTEN` (notifications arrive on the backend that listened, which the
//! client leaves at the end of its transaction).
//!
//! Only a query that is exactly one such statement is recognised
//! (surrounding blanks and one trailing semicolon allowed): a query string
//! with several statements goes to the server as it is. Keywords match in
//! any case; a name is folded to lower case unless double-quoted, as
//! PostgreSQL folds identifiers. Written by hand because a full SQL parser
//! would cost far more than the three statements need.

/// A statement about session state.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SessionSql {
    /// `DEALLOCATE [PREPARE] name`.
    Deallocate(Vec<u8>),
    /// `DEALLOCATE [PREPARE] ALL`.
    DeallocateAll,
    /// `DISCARD ALL`.
    DiscardAll,
    /// `LISTEN channel` (or any query that starts with LISTEN).
    Listen,
}

/// What `query` (a Query or Parse body's text, without its NUL) is, if it
/// is one of the statements above.
pub(crate) fn classify(query: &[u8]) -> Option<SessionSql> {
    let mut words = Words { rest: query };
    words.skip_blanks();
    // Its first letter rules out almost every query a client sends.
    if !matches!(words.rest.first().map(u8::to_ascii_lowercase), Some(b'l' | b'd')) {
        return None;
    }
    let first = words.keyword()?;
    if first.eq_ignore_ascii_case(b"LISTEN") {
        return Some(SessionSql::Listen);
    }
    let statement = if first.eq_ignore_ascii_case(b"DISCARD") {
        words.keyword().filter(|w| w.eq_ignore_ascii_case(b"ALL"))?;
        SessionSql::DiscardAll
    } else if first.eq_ignore_ascii_case(b"DEALLOCATE") {
        let mut name = words.name()?;
        if name.quoted.is_none() && name.raw.eq_ignore_ascii_case(b"PREPARE") {
            name = words.name()?;
        }
        match name.quoted {
            None if name.raw.eq_ignore_ascii_case(b"ALL") => SessionSql::DeallocateAll,
            None => SessionSql::Deallocate(name.raw.to_ascii_lowercase()),
            Some(unquoted) => SessionSql::Deallocate(unquoted),
        }
    } else {
        return None;
    };
    words.end().then_some(statement)
}

/// A name as written, and its value if it was double-quoted.
struct Name<'a> {
    raw: &'a [u8],
    quoted: Option<Vec<u8>>,
}

struct Words<'a> {
    rest: &'a [u8],
}

impl<'a> Words<'a> {
    fn skip_blanks(&mut self) {
        while let Some((b, rest)) = self.rest.split_first() {
            if !b.is_ascii_whitespace() {
                break;
            }
            self.rest = rest;
        }
    }

    /// The next unquoted word (letters, digits, `_`, `$`).
    fn keyword(&mut self) -> Option<&'a [u8]> {
        self.skip_blanks();
        let len = self
            .rest
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$'))
            .unwrap_or(self.rest.len());
        let (word, rest) = self.rest.split_at(len);
        self.rest = rest;
        (!word.is_empty()).then_some(word)
    }

    /// The next identifier, quoted (`""` stands for `"`) or not.
    fn name(&mut self) -> Option<Name<'a>> {
        self.skip_blanks();
        if self.rest.first() != Some(&b'"') {
            let raw = self.keyword()?;
            return Some(Name { raw, quoted: None });
        }
        let mut value = Vec::new();
        let mut i = 1;
        loop {
            match (self.rest.get(i)?, self.rest.get(i + 1)) {
                (b'"', Some(b'"')) => {
                    value.push(b'"');
                    i += 2;
                }
                (b'"', _) => break,
                (&b, _) => {
                    value.push(b);
                    i += 1;
                }
            }
        }
        let raw = &self.rest[..=i];
        self.rest = &self.rest[i + 1..];
        Some(Name {
            raw,
            quoted: Some(value),
        })
    }

    /// Nothing but blanks and one semicolon remains.
    fn end(&mut self) -> bool {
        self.skip_blanks();
        if let Some(rest) = self.rest.strip_prefix(b";") {
            self.rest = rest;
            self.skip_blanks();
        }
        self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deallocate_discard_and_listen_are_recognised_as_postgresql_reads_them() {
        let dealloc = |name: &str| Some(SessionSql::Deallocate(name.as_bytes().to_vec()));
        assert_eq!(classify(b"DEALLOCATE s1"), dealloc("s1"));
        assert_eq!(classify(b"  deallocate prepare S1 ;  "), dealloc("s1"), "folded");
        assert_eq!(classify(b"DEALLOCATE \"_pg3_0\""), dealloc("_pg3_0"));
        assert_eq!(classify(b"DEALLOCATE \"Odd \"\" Name\""), dealloc("Odd \" Name"));
        assert_eq!(classify(b"DEALLOCATE \"prepare\""), dealloc("prepare"));
        assert_eq!(classify(b"DEALLOCATE ALL"), Some(SessionSql::DeallocateAll));
        assert_eq!(classify(b"deallocate prepare all;"), Some(SessionSql::DeallocateAll));
        assert_eq!(
            classify(b"DEALLOCATE \"all\""),
            dealloc("all"),
            "a quoted name is a name"
        );
        assert_eq!(classify(b"Discard All"), Some(SessionSql::DiscardAll));
        assert_eq!(classify(b"LISTEN ch"), Some(SessionSql::Listen));
        assert_eq!(classify(b"listen \"Ch\"; SELECT 1"), Some(SessionSql::Listen));
    }

    #[test]
    fn anything_else_is_not() {
        for other in [
            &b"SELECT 1"[..],
            b"DEALLOCATE a; SELECT 1",
            b"DEALLOCATE",
            b"DEALLOCATE \"unterminated",
            b"DISCARD PLANS",
            b"DISCARD ALL; DISCARD ALL",
            b"",
            b"   ",
            b"UNLISTEN *",
            b"\xff\xfe",
        ] {
            assert_eq!(classify(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
