use bytes::BytesMut;
use proptest::prelude::*;

use super::*;

/// The messages in `out`, as (tag, body).
fn messages(out: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut all = Vec::new();
    let mut rest = out;
    while let Some(header) = frame::parse_header(rest).unwrap() {
        all.push((header.tag, rest[5..header.len].to_vec()));
        rest = &rest[header.len..];
    }
    assert!(rest.is_empty(), "a message cut short");
    all
}

fn parse_body(name: &str, query: &str) -> Vec<u8> {
    format!("{name}\0{query}\0\0\0").into_bytes()
}

/// Sends a message through `statements`: what goes to the server.
fn send(statements: &mut Statements, tag: u8, body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = BytesMut::new();
    if statements.rewrite(tag, body, &mut out) {
        messages(&out)
    } else {
        vec![(tag, body.to_vec())]
    }
}

fn server_name_of(statements: &Statements, client: &str) -> Vec<u8> {
    statements.named[client.as_bytes()].server.to_vec()
}

#[test]
fn a_named_parse_goes_as_close_and_parse_of_a_name_shared_by_equal_statements() {
    let mut a = Statements::default();
    let sent = send(&mut a, b'P', &parse_body("P_0", "SELECT 1"));
    let server = server_name_of(&a, "P_0");
    assert!(server.starts_with(b"sluice_") && server.len() == 39, "{server:?}");
    let mut close = b"S".to_vec();
    close.extend(&server);
    close.push(0);
    let mut parse = server.clone();
    parse.extend(b"\0SELECT 1\0\0\0");
    assert_eq!(sent, vec![(b'C', close), (b'P', parse)]);

    let mut b = Statements::default();
    send(&mut b, b'P', &parse_body("mine", "SELECT 1"));
    assert_eq!(server_name_of(&b, "mine"), server, "same statement, same name");
    send(&mut b, b'P', &parse_body("other", "SELECT 2"));
    assert_ne!(server_name_of(&b, "other"), server);
}

#[test]
fn bind_describe_and_close_of_a_held_name_are_rewritten_others_pass() {
    let mut s = Statements::default();
    send(&mut s, b'P', &parse_body("q", "SELECT $1"));
    let server = server_name_of(&s, "q");

    let sent = send(&mut s, b'B', b"portal\0q\0\0\0\0\0\0\0");
    let mut bind = b"portal\0".to_vec();
    bind.extend(&server);
    bind.extend(b"\0\0\0\0\0\0\0");
    assert_eq!(sent, vec![(b'B', bind)]);

    let mut describe = b"S".to_vec();
    describe.extend(&server);
    describe.push(0);
    assert_eq!(send(&mut s, b'D', b"Sq\0"), vec![(b'D', describe)]);
    for untouched in [&b"Pq\0"[..], b"Sunknown\0", b"S\0"] {
        assert_eq!(send(&mut s, b'D', untouched), vec![(b'D', untouched.to_vec())]);
    }
    let unknown = b"\0nope\0\0\0\0\0\0\0".to_vec();
    assert_eq!(send(&mut s, b'B', &unknown), vec![(b'B', unknown)]);
    let unnamed = parse_body("", "SELECT 3");
    assert_eq!(send(&mut s, b'P', &unnamed), vec![(b'P', unnamed)]);

    // A client's Close forgets the statement; the backends keep it.
    assert_eq!(send(&mut s, b'C', b"Sq\0"), vec![(b'C', b"Ssluice_none\0".to_vec())]);
    assert!(s.named.is_empty());
    assert_eq!(send(&mut s, b'B', b"\0q\0\0\0\0\0\0\0")[0].1, b"\0q\0\0\0\0\0\0\0");
}

#[test]
fn replies_drop_the_added_close_and_note_what_a_backend_made() {
    let made = Made::default();
    let mut s = Statements::default();
    send(&mut s, b'P', &parse_body("q", "SELECT 1"));
    send(&mut s, b'C', b"Pportal\0");
    send(&mut s, b'S', b"");
    let seen: Vec<bool> = [b'3', b'1', b'3', b'Z']
        .iter()
        .map(|&tag| s.reply(tag, &made))
        .collect();
    assert_eq!(
        seen,
        [false, true, true, true],
        "only the Close the client sent is answered"
    );
    assert!(s.missing(&made).is_empty(), "the backend has q");

    let other = Made::default();
    let missing = s.missing(&other);
    assert_eq!(missing.len(), 1);
    let mut out = BytesMut::new();
    write_makes(&missing, &mut out);
    let tags: Vec<u8> = messages(&out).iter().map(|(tag, _)| *tag).collect();
    assert_eq!(tags, b"CPS");
    other.note(&missing[0]);
    assert!(s.missing(&other).is_empty());
}

#[test]
fn a_parse_that_failed_is_forgotten_at_the_end_of_its_batch_only() {
    let made = Made::default();
    let mut s = Statements::default();
    send(&mut s, b'P', &parse_body("bad", "SELEC 1"));
    send(&mut s, b'S', b"");
    send(&mut s, b'P', &parse_body("good", "SELECT 1"));
    send(&mut s, b'S', b"");
    // The first batch: CloseComplete, then an error instead of ParseComplete.
    assert!(!s.reply(b'3', &made));
    assert!(s.reply(b'Z', &made));
    assert!(!s.named.contains_key(&b"bad"[..]), "PostgreSQL has no statement 'bad'");
    assert!(s.named.contains_key(&b"good"[..]), "the next batch is untouched");
    assert!(!s.reply(b'3', &made));
    assert!(s.reply(b'1', &made));
    assert!(s.reply(b'Z', &made));
    assert!(s.missing(&made).is_empty());

    // The name is free again: a new Parse of it is made, not refused.
    let sent = send(&mut s, b'P', &parse_body("bad", "SELECT 2"));
    assert_eq!(sent.len(), 2, "Close and Parse");
}

#[test]
fn redefining_a_held_name_resends_its_statement_for_the_server_to_refuse() {
    let mut s = Statements::default();
    send(&mut s, b'P', &parse_body("q", "SELECT 1"));
    let server = server_name_of(&s, "q");
    let sent = send(&mut s, b'P', &parse_body("q", "SELECT 2"));
    let mut parse = server.clone();
    parse.extend(b"\0SELECT 1\0\0\0");
    assert_eq!(sent, vec![(b'P', parse)], "no Close: the server answers 42P05");
    assert_eq!(server_name_of(&s, "q"), server);
}

#[test]
fn forget_drops_statements_that_could_not_be_made() {
    let mut s = Statements::default();
    send(&mut s, b'P', &parse_body("a", "SELECT 1"));
    send(&mut s, b'P', &parse_body("b", "SELECT 1"));
    send(&mut s, b'P', &parse_body("c", "SELECT 2"));
    let missing = s.missing(&Made::default());
    assert_eq!(missing.len(), 2, "a and b share one statement");
    let gone: Vec<Statement> = missing
        .into_iter()
        .filter(|m| m.parse.starts_with(b"SELECT 1"))
        .collect();
    s.forget(&gone);
    let mut left: Vec<&[u8]> = s.named.keys().map(|k| &k[..]).collect();
    left.sort();
    assert_eq!(left, [&b"c"[..]]);
}

proptest! {
    #[test]
    fn any_bytes_from_a_client_or_server_never_panic(
        sent in proptest::collection::vec((prop::sample::select(b"PBDCSQFE".to_vec()), proptest::collection::vec(any::<u8>(), 0..24)), 0..16),
        replies in proptest::collection::vec(prop::sample::select(b"13ZT".to_vec()), 0..24),
    ) {
        let made = Made::default();
        let mut s = Statements::default();
        for (tag, body) in &sent {
            let mut out = BytesMut::new();
            if s.rewrite(*tag, body, &mut out) {
                messages(&out);
            }
        }
        for tag in replies {
            s.reply(tag, &made);
        }
        let _ = s.missing(&made);
    }
}
