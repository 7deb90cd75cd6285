//! The few SQL statements transaction pooling must recognise, because they
//! act on session state that does not stay on one backend: `DEALLOCATE`
//! and `DISCARD ALL` (prepared statements, see `pg::prepared`) and
//! `LISTEN` (notifications arrive on the backend that listened, which the
//! client leaves at the end of its transaction).
//!
//! `DEALLOCATE` and `DISCARD ALL` are recognised only as a query that is
//! exactly one such statement (surrounding blanks and one trailing
//! semicolon allowed): a query string with several statements goes to the
//! server as it is. `LISTEN` is recognised as any statement of the query
//! string, after comments too, since one that slipped through would leave
//! a pooled backend listening for whichever client comes next; the
//! statements are told apart by a scan that steps over comments, quoted
//! strings and identifiers, and dollar quotes, as PostgreSQL's lexer does
//! (a `LISTEN` run by a function or `EXECUTE` inside one is not seen).
//! Keywords match in any case; a name is folded to lower case unless
//! double-quoted, as PostgreSQL folds identifiers. Written by hand because
//! a full SQL parser would cost far more than the three statements need.

/// A statement about session state.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionSql {
    /// `DEALLOCATE [PREPARE] name`.
    Deallocate(Vec<u8>),
    /// `DEALLOCATE [PREPARE] ALL`.
    DeallocateAll,
    /// `DISCARD ALL`.
    DiscardAll,
    /// A query with a `LISTEN` among its statements.
    Listen,
}

/// What `query` (a Query or Parse body's text, without its NUL) is, if it
/// is one of the statements above.
pub fn classify(query: &[u8]) -> Option<SessionSql> {
    if listens(query) {
        return Some(SessionSql::Listen);
    }
    let mut words = Words { rest: query };
    words.skip_blanks();
    // Its first letter rules out almost every query a client sends.
    if !matches!(words.rest.first().map(u8::to_ascii_lowercase), Some(b'l' | b'd')) {
        return None;
    }
    let first = words.keyword()?;
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

/// Whether a statement of `query` is a `LISTEN`.
fn listens(query: &[u8]) -> bool {
    // Most queries do not hold the word at all: a scan for its first
    // letter settles them without lexing.
    let mentions = memchr::memchr2_iter(b'l', b'L', query)
        .any(|at| query.get(at..at + 6).is_some_and(|w| w.eq_ignore_ascii_case(b"LISTEN")));
    if !mentions {
        return false;
    }
    let mut rest = query;
    loop {
        let mut words = Words { rest };
        words.skip_blanks_and_comments();
        if words.keyword().is_some_and(|w| w.eq_ignore_ascii_case(b"LISTEN")) {
            return true;
        }
        match statement_end(rest) {
            Some(end) => rest = &rest[end + 1..],
            None => return false,
        }
    }
}

/// Where the statement at the start of `sql` ends: the index of its
/// semicolon, stepping over comments, quoted strings and identifiers and
/// dollar quotes; `None` if it runs to the end.
fn statement_end(sql: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < sql.len() {
        i = match (sql[i], sql.get(i + 1)) {
            (b';', _) => return Some(i),
            (b'-', Some(b'-')) => memchr::memchr(b'\n', &sql[i..]).map_or(sql.len(), |n| i + n + 1),
            (b'/', Some(b'*')) => block_comment_end(sql, i),
            (b'\'', _) => {
                let escapes = i > 0
                    && sql[i - 1].eq_ignore_ascii_case(&b'e')
                    && !(i > 1 && (sql[i - 2].is_ascii_alphanumeric() || sql[i - 2] == b'_'));
                quoted_end(sql, i, b'\'', escapes)
            }
            (b'"', _) => quoted_end(sql, i, b'"', false),
            (b'$', _) => dollar_quote_end(sql, i),
            _ => i + 1,
        };
    }
    None
}

/// Past the `/* ... */` opening at `start` (they nest).
fn block_comment_end(sql: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0usize, start);
    while i + 1 < sql.len() {
        match (sql[i], sql[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    sql.len()
}

/// Past the string or identifier quoted by `quote` that opens at `start`
/// (a doubled quote stands for one; with `escapes`, a backslash escapes
/// the next byte, as in `E'...'`).
fn quoted_end(sql: &[u8], start: usize, quote: u8, escapes: bool) -> usize {
    let mut i = start + 1;
    while i < sql.len() {
        match sql[i] {
            b'\\' if escapes => i += 2,
            b if b == quote && sql.get(i + 1) == Some(&quote) => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    sql.len()
}

/// Past the dollar-quoted string (`$$...$$`, `$tag$...$tag$`) that opens at
/// `start`; a `$` that opens none (a parameter such as `$1`) is one byte.
fn dollar_quote_end(sql: &[u8], start: usize) -> usize {
    let tag_len = sql[start + 1..]
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
        .unwrap_or(sql.len() - start - 1);
    let opens = sql.get(start + 1 + tag_len) == Some(&b'$') && !sql.get(start + 1).is_some_and(u8::is_ascii_digit);
    if !opens {
        return start + 1;
    }
    let tag = &sql[start..start + tag_len + 2];
    let body = start + tag.len();
    memchr::memmem::find(&sql[body..], tag).map_or(sql.len(), |at| body + at + tag.len())
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

    fn skip_blanks_and_comments(&mut self) {
        loop {
            self.skip_blanks();
            let end = match self.rest {
                [b'-', b'-', ..] => memchr::memchr(b'\n', self.rest).map_or(self.rest.len(), |n| n + 1),
                [b'/', b'*', ..] => block_comment_end(self.rest, 0),
                _ => return,
            };
            self.rest = &self.rest[end..];
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
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_bytes_are_classified_without_a_panic(query in proptest::collection::vec(any::<u8>(), 0..64)) {
            classify(&query);
        }

        #[test]
        fn a_listen_after_plain_statements_is_found(plain in "[a-zA-Z0-9 ,()=+*]{0,40}", n in 1usize..4) {
            let query = format!("{}LISTEN x", format!("{plain};").repeat(n));
            prop_assert_eq!(classify(query.as_bytes()), Some(SessionSql::Listen));
        }
    }

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
    fn listen_is_found_in_any_statement_after_comments() {
        for listening in [
            &b"/* c */ LISTEN x"[..],
            b"-- why\n  listen x",
            b"/* a /* nested */ comment */listen x",
            b"SELECT 1; LISTEN x",
            b"SELECT 'a;b'; /* ; */ LISTEN x;",
            b"SELECT $$;$$, $t$ ' ; $t$; Listen x",
            b"SELECT E'\\';'; LISTEN x",
            b"SELECT \"a;\"\"\" FROM t; LISTEN x",
        ] {
            assert_eq!(
                classify(listening),
                Some(SessionSql::Listen),
                "{}",
                String::from_utf8_lossy(listening)
            );
        }
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
            b"SELECT pg_listening_channels()",
            b"SELECT 'LISTEN x'",
            b"SELECT 1 -- ; LISTEN x",
            b"SELECT 1 /* ; LISTEN x */",
            b"SELECT $$; LISTEN x$$",
            b"SELECT $1::text; UNLISTEN x",
            b"SELECT 'it''s; LISTEN x'",
            b"SELECT \"LISTEN\" FROM t",
            b"SELECT '; LISTEN x",
            b"UNLISTEN *",
            b"\xff\xfe",
        ] {
            assert_eq!(classify(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
