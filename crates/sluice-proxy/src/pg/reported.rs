//! Reported settings that follow their client under transaction pooling.
//!
//! PostgreSQL tells a client the value of a few settings at login and again
//! whenever one changes (ParameterStatus): the client's encoding, DateStyle,
//! IntervalStyle, TimeZone and others. Drivers decode by them, and
//! frameworks set them once per connection (Django runs `SET TIME ZONE`,
//! Rails `SET intervalstyle`). Under transaction pooling such a `SET` stays
//! on the backend the client held, and reaches whichever client holds it
//! next. For these settings the proxy knows both sides, because the server
//! reports them: the values each client was last told, and the values each
//! backend last reported. When a client's request gets a backend whose
//! values differ, the proxy first sets the client's own, in a Query of its
//! own whose answers the client never sees (see `pg::session`; should it
//! fail, the session ends rather than run under another client's
//! settings). PgBouncer restores the first six the same way.
//!
//! Other settings (`search_path`, `work_mem`, ...) are not reported by
//! PostgreSQL 15, so the proxy cannot see them change: they stay on the
//! backend (`docs/transaction-pooling.md`). One difference from a server
//! of one's own: a default changed by a configuration reload is reported
//! to the client that holds the backend at the time; the others keep, and
//! are restored to, the value they were told.
//!
//! ```
//! # use sluice_proxy::pg::reported::Reported;
//! let (mut client, mut backend) = (Reported::default(), Reported::default());
//! client.note(b"TimeZone\0UTC\0");
//! backend.note(b"TimeZone\0Asia/Tokyo\0");
//! let mut query = Vec::new();
//! assert!(client.restore_on(&backend, &mut query));
//! assert_eq!(query, b"SET TimeZone TO $sluice$UTC$sluice$;");
//! ```

use bytes::Bytes;

/// The settings that follow their client, as PostgreSQL names them in
/// ParameterStatus, in the order they are set; the first [`PARSING`] of
/// them are those by which the server reads a statement's text.
const FOLLOWED: [&[u8]; 7] = [
    b"client_encoding",
    b"DateStyle",
    b"IntervalStyle",
    b"TimeZone",
    b"standard_conforming_strings",
    b"application_name",
    b"default_transaction_read_only",
];

/// How many of [`FOLLOWED`], from the first, change what a statement's
/// text means: the encoding of its bytes, whether a backslash escapes in
/// a string, and how a date, time, time zone or interval literal reads
/// (the server converts such a literal once, when it parses the
/// statement).
const PARSING: usize = 5;

/// The last reported value of each followed setting, of one client or one
/// backend; `None` where none was reported.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reported([Option<Bytes>; FOLLOWED.len()]);

impl Reported {
    /// A ParameterStatus body (name, NUL, value, NUL): notes its value if
    /// the setting is followed; returns whether that changed one of the
    /// settings by which the server reads a statement's text (see
    /// [`Reported::parsing`]). Malformed bodies are ignored: the client is
    /// sent them as they are, to judge.
    pub fn note(&mut self, body: &[u8]) -> bool {
        let mut fields = body.split(|&b| b == 0);
        let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
            return false;
        };
        match FOLLOWED.iter().position(|followed| *followed == name) {
            Some(at) if self.0[at].as_deref() != Some(value) => {
                self.0[at] = Some(Bytes::copy_from_slice(value));
                at < PARSING
            }
            _ => false,
        }
    }

    /// The values of the settings by which the server reads a statement's
    /// text, as bytes that differ wherever one of them does: two clients
    /// whose parsing settings are equal can share a statement the server
    /// parsed for either.
    pub fn parsing(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for value in &self.0[..PARSING] {
            match value {
                Some(value) => {
                    out.push(1);
                    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
                    out.extend_from_slice(value);
                }
                None => out.push(0),
            }
        }
        out
    }

    /// Appends to `query` the SQL that gives `backend` this client's
    /// values where they differ (settings the client was never told of are
    /// left as they are); returns whether it appended any.
    pub fn restore_on(&self, backend: &Reported, query: &mut Vec<u8>) -> bool {
        let mut any = false;
        for ((name, value), theirs) in FOLLOWED.iter().zip(&self.0).zip(&backend.0) {
            let Some(value) = value.as_deref().filter(|value| Some(*value) != theirs.as_deref()) else {
                continue;
            };
            let tag = dollar_tag(value);
            for part in [b"SET ", *name, b" TO ", &tag, value, &tag, b";"] {
                query.extend_from_slice(part);
            }
            any = true;
        }
        any
    }
}

/// A dollar-quote tag that ends a quote of `value` where `value` ends:
/// one found nowhere in `value` followed by the tag (a value ending in
/// `$sluice` would close `$sluice$` early). Dollar quoting reads the same
/// whatever `standard_conforming_strings` is, and needs no escaping.
fn dollar_tag(value: &[u8]) -> Vec<u8> {
    let mut tag = b"$sluice$".to_vec();
    let mut n = 0u32;
    while memchr::memmem::find(&[value, &tag].concat(), &tag) != Some(value.len()) {
        n += 1;
        tag = format!("$sluice{n}$").into_bytes();
    }
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_settings_differ_where_a_setting_that_changes_a_reading_does() {
        let base = reported(&[("TimeZone", "UTC"), ("DateStyle", "ISO, MDY")]);
        let renamed = reported(&[
            ("TimeZone", "UTC"),
            ("DateStyle", "ISO, MDY"),
            ("application_name", "b"),
        ]);
        assert_eq!(base.parsing(), renamed.parsing(), "a name changes no reading");
        for other in [
            reported(&[("TimeZone", "Asia/Tokyo"), ("DateStyle", "ISO, MDY")]),
            reported(&[("TimeZone", "UTC"), ("DateStyle", "ISO, DMY")]),
            reported(&[("TimeZone", "UTC")]),
            // One value's end is not another's start.
            reported(&[("TimeZone", "UTCISO, MDY")]),
            reported(&[
                ("TimeZone", "UTC"),
                ("DateStyle", "ISO, MDY"),
                ("standard_conforming_strings", "off"),
            ]),
        ] {
            assert_ne!(base.parsing(), other.parsing(), "{other:?}");
        }
    }

    fn reported(pairs: &[(&str, &str)]) -> Reported {
        let mut reported = Reported::default();
        for (name, value) in pairs {
            reported.note(format!("{name}\0{value}\0").as_bytes());
        }
        reported
    }

    fn restore(client: &Reported, backend: &Reported) -> Option<String> {
        let mut query = Vec::new();
        client
            .restore_on(backend, &mut query)
            .then(|| String::from_utf8(query).unwrap())
    }

    #[test]
    fn equal_values_need_nothing() {
        let values = [("TimeZone", "UTC"), ("DateStyle", "ISO, MDY")];
        assert_eq!(restore(&reported(&values), &reported(&values)), None);
    }

    #[test]
    fn only_what_differs_is_set_with_the_encoding_first() {
        let client = reported(&[
            ("TimeZone", "UTC"),
            ("client_encoding", "LATIN1"),
            ("DateStyle", "ISO, MDY"),
        ]);
        let backend = reported(&[
            ("TimeZone", "Asia/Tokyo"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
        ]);
        assert_eq!(
            restore(&client, &backend).as_deref(),
            Some("SET client_encoding TO $sluice$LATIN1$sluice$;SET TimeZone TO $sluice$UTC$sluice$;")
        );
    }

    #[test]
    fn a_setting_the_client_was_never_told_of_stays() {
        let backend = reported(&[("IntervalStyle", "iso_8601")]);
        assert_eq!(restore(&Reported::default(), &backend), None);
        let client = reported(&[("IntervalStyle", "postgres")]);
        assert_eq!(
            restore(&client, &Reported::default()).as_deref(),
            Some("SET IntervalStyle TO $sluice$postgres$sluice$;")
        );
    }

    #[test]
    fn unfollowed_and_malformed_reports_change_nothing() {
        let mut reported = Reported::default();
        reported.note(b"server_version\x0015.4\0");
        reported.note(b"TimeZone");
        reported.note(b"");
        assert_eq!(reported, Reported::default());
    }

    #[test]
    fn a_value_ending_as_the_tag_begins_gets_another_tag() {
        let client = reported(&[("application_name", "x$sluice")]);
        assert_eq!(
            restore(&client, &Reported::default()).as_deref(),
            Some("SET application_name TO $sluice1$x$sluice$sluice1$;")
        );
    }

    #[test]
    fn quotes_and_backslashes_go_inside_a_dollar_quote_they_cannot_end() {
        let client = reported(&[("application_name", "it's a \\ $sluice$ name")]);
        assert_eq!(
            restore(&client, &Reported::default()).as_deref(),
            Some("SET application_name TO $sluice1$it's a \\ $sluice$ name$sluice1$;")
        );
    }
}
