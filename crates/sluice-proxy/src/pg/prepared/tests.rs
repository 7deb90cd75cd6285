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

fn bind_body(name: &str) -> Vec<u8> {
    format!("\0{name}\0\0\0\0\0\0\0").into_bytes()
}

/// The body of a Close or Describe of a statement.
fn statement_body(server: &[u8]) -> Vec<u8> {
    [&b"S"[..], server, b"\0"].concat()
}

/// A client's statements and the backend it holds.
struct Client {
    statements: Statements,
    made: Made,
}

impl Client {
    fn new(limit: usize) -> Client {
        Client {
            statements: Statements::new(limit),
            made: Made::default(),
        }
    }

    /// Sends a message: what goes to the server.
    fn send(&mut self, tag: u8, body: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = BytesMut::new();
        if self.statements.rewrite(tag, body, &self.made, &mut out) {
            messages(&out)
        } else {
            vec![(tag, body.to_vec())]
        }
    }

    /// The server's answers: which the client sees.
    fn replies(&mut self, tags: &[u8]) -> Vec<bool> {
        let mut answered = 0;
        tags.iter()
            .map(|&tag| match tag {
                b'E' => {
                    self.statements.failed(answered, 0);
                    true
                }
                b'Z' => {
                    answered = 0;
                    self.statements.reply(tag, &[], &self.made)
                }
                tag => {
                    answered += 1;
                    self.statements.reply(tag, &[], &self.made)
                }
            })
            .collect()
    }

    fn server_name(&self, client: &str) -> Vec<u8> {
        self.statements.named[client.as_bytes()].server.to_vec()
    }
}

#[test]
fn a_named_parse_goes_as_close_and_parse_of_a_name_shared_by_equal_statements() {
    let mut a = Client::new(200);
    let sent = a.send(b'P', &parse_body("P_0", "SELECT 1"));
    let server = a.server_name("P_0");
    assert!(server.starts_with(b"sluice_") && server.len() == 39, "{server:?}");
    let mut parse = server.clone();
    parse.extend(b"\0SELECT 1\0\0\0");
    assert_eq!(sent, vec![(b'C', statement_body(&server)), (b'P', parse)]);

    let mut b = Client::new(200);
    b.send(b'P', &parse_body("mine", "SELECT 1"));
    assert_eq!(b.server_name("mine"), server, "same statement, same name");
    b.send(b'P', &parse_body("other", "SELECT 2"));
    assert_ne!(b.server_name("other"), server);
}

#[test]
fn bind_describe_and_close_of_a_held_name_are_rewritten_others_pass() {
    let mut c = Client::new(200);
    c.send(b'P', &parse_body("q", "SELECT $1"));
    let server = c.server_name("q");

    let sent = c.send(b'B', b"portal\0q\0\0\0\0\0\0\0");
    let bind = [&b"portal\0"[..], &server, b"\0\0\0\0\0\0\0"].concat();
    assert_eq!(sent, vec![(b'B', bind)]);
    assert_eq!(c.send(b'D', b"Sq\0"), vec![(b'D', statement_body(&server))]);
    for untouched in [&b"Pq\0"[..], b"Sunknown\0"] {
        assert_eq!(c.send(b'D', untouched), vec![(b'D', untouched.to_vec())]);
    }
    let unknown = bind_body("nope");
    assert_eq!(c.send(b'B', &unknown), vec![(b'B', unknown)]);
    let unnamed = parse_body("", "SELECT 3");
    assert_eq!(c.send(b'P', &unnamed), vec![(b'P', unnamed)]);

    // A client's Close forgets the statement; the backends keep it.
    assert_eq!(c.send(b'C', b"Sq\0"), vec![(b'C', statement_body(NO_STATEMENT))]);
    assert!(c.statements.named.is_empty());
    assert_eq!(c.send(b'B', &bind_body("q")), vec![(b'B', bind_body("q"))]);
}

#[test]
fn replies_drop_the_added_close_and_note_what_a_backend_made() {
    let mut c = Client::new(200);
    c.send(b'P', &parse_body("q", "SELECT 1"));
    c.send(b'C', b"Pportal\0");
    c.send(b'S', b"");
    assert_eq!(
        c.replies(b"313Z"),
        [false, true, true, true],
        "only the Close the client sent is answered"
    );
    assert_eq!(tags(&c.send(b'B', &bind_body("q"))), b"B", "the backend has q");

    // On another backend, q is made where it is bound, and the answers to
    // its making are dropped.
    c.made = Made::default();
    assert_eq!(tags(&c.send(b'B', &bind_body("q"))), b"CPB");
    assert_eq!(tags(&c.send(b'B', &bind_body("q"))), b"B", "made once");
    c.send(b'S', b"");
    assert_eq!(c.replies(b"31Z"), [false, false, true]);
    assert!(c.made.contains(&Bytes::from(c.server_name("q"))));
}

fn tags(sent: &[(u8, Vec<u8>)]) -> Vec<u8> {
    sent.iter().map(|(tag, _)| *tag).collect()
}

const INT4: u32 = 23;
const FLOAT8: u32 = 701;

/// A RowDescription's body: one column `v` of type `oid`.
fn row_description(oid: u32) -> Vec<u8> {
    let mut body = 1u16.to_be_bytes().to_vec();
    body.extend(b"v\0");
    body.extend(16_384u32.to_be_bytes());
    body.extend(1u16.to_be_bytes());
    body.extend(oid.to_be_bytes());
    body.extend(4u16.to_be_bytes());
    body.extend((-1i32).to_be_bytes());
    body.extend(0u16.to_be_bytes());
    body
}

impl Client {
    /// The server's answer to a Describe of a statement: which parts the
    /// client sees.
    fn described(&mut self, result: &[u8]) -> [bool; 2] {
        [
            self.statements.reply(b't', &[], &self.made),
            self.statements.reply(b'T', result, &self.made),
        ]
    }

    /// The held Bind, as it goes to the server.
    fn release(&mut self) -> Vec<(u8, Vec<u8>)> {
        assert!(self.statements.decided());
        let mut out = BytesMut::new();
        self.statements.release(&mut out);
        assert!(!self.statements.holding());
        messages(&out)
    }

    /// Prepares `q` reading a column of type `oid`, and describes it.
    fn prepared(oid: u32) -> Client {
        let mut c = Client::new(200);
        c.send(b'P', &parse_body("q", "SELECT v FROM t"));
        c.send(b'D', b"Sq\0");
        c.send(b'S', b"");
        assert_eq!(c.replies(b"31"), [false, true]);
        assert_eq!(
            c.described(&row_description(oid)),
            [true, true],
            "the client's own Describe"
        );
        assert_eq!(c.replies(b"Z"), [true]);
        c
    }
}

#[test]
fn a_described_statement_made_anew_holds_its_bind_until_its_result_is_told() {
    let mut c = Client::prepared(INT4);
    let server = c.server_name("q");
    assert_eq!(
        tags(&c.send(b'B', &bind_body("q"))),
        b"B",
        "the backend's result is the client's"
    );
    assert!(!c.statements.holding());

    // Another backend: made anew, described, flushed; the Bind waits.
    c.made = Made::default();
    assert_eq!(tags(&c.send(b'B', &bind_body("q"))), b"CPDH");
    assert!(c.statements.holding() && !c.statements.decided());
    assert_eq!(c.replies(b"31"), [false, false]);
    assert_eq!(
        c.described(&row_description(INT4)),
        [false, false],
        "the proxy's Describe"
    );
    let bind = [&b"\0"[..], &server, b"\0\0\0\0\0\0\0"].concat();
    assert_eq!(c.release(), vec![(b'B', bind)], "the same result: the Bind goes on");
    assert!(!c.statements.result_changed());
    assert_eq!(tags(&c.send(b'B', &bind_body("q"))), b"B", "now known there");
}

#[test]
fn a_bind_of_a_statement_whose_result_changed_is_sent_to_fail() {
    let mut c = Client::prepared(INT4);
    c.made = Made::default();
    c.send(b'B', &bind_body("q"));
    assert_eq!(c.replies(b"31"), [false, false]);
    c.described(&row_description(FLOAT8));
    let bind = [&b"\0"[..], NO_STATEMENT, b"\0\0\0\0\0\0\0"].concat();
    assert_eq!(c.release(), vec![(b'B', bind)]);
    assert!(c.statements.result_changed(), "its error is told as PostgreSQL's");
    assert!(!c.statements.result_changed(), "once");
}

#[test]
fn a_backend_holding_the_statement_with_another_result_makes_it_anew() {
    let mut c = Client::prepared(FLOAT8);
    let server = Bytes::from(c.server_name("q"));
    // Made there before the change, as another client's.
    c.made.described(&server, &Bytes::from(row_description(INT4)));
    assert_eq!(tags(&c.send(b'B', &bind_body("q"))), b"CPDH");
    assert_eq!(c.replies(b"31"), [false, false]);
    c.described(&row_description(FLOAT8));
    assert_eq!(tags(&c.release()), b"B");
    assert!(!c.statements.result_changed());
}

#[test]
fn a_held_bind_goes_on_when_the_server_fails_before_telling_the_result() {
    let mut c = Client::prepared(INT4);
    c.made = Made::default();
    c.send(b'B', &bind_body("q"));
    // The table is gone: CloseComplete, then the Parse's error.
    assert_eq!(c.replies(b"3E"), [false, true]);
    let sent = c.release();
    assert_eq!(tags(&sent), b"B");
    assert_ne!(sent[0].1, [&b"\0"[..], NO_STATEMENT, b"\0\0\0\0\0\0\0"].concat());
}

#[test]
fn a_held_bind_waits_on_past_an_error_in_an_earlier_batch() {
    let mut c = Client::prepared(INT4);
    c.made = Made::default();
    c.send(b'P', &parse_body("", "SELEC 1"));
    c.send(b'S', b"");
    c.send(b'B', &bind_body("q"));
    assert_eq!(c.replies(b"EZ"), [true, true], "the earlier batch failed");
    assert!(!c.statements.decided(), "the statement is made after that batch's Sync");
    assert_eq!(c.replies(b"31"), [false, false]);
    c.described(&row_description(FLOAT8));
    assert_eq!(c.release()[0].1, [&b"\0"[..], NO_STATEMENT, b"\0\0\0\0\0\0\0"].concat());
}

#[test]
fn a_held_bind_waits_on_past_a_query_that_failed_on_its_own() {
    let mut c = Client::prepared(INT4);
    c.made = Made::default();
    c.send(b'Q', b"SELECT 1/0\0");
    c.send(b'B', &bind_body("q"));
    // The Query's own error: the server goes on after its ReadyForQuery.
    c.statements.failed(0, 0);
    assert!(!c.statements.decided());
    assert_eq!(c.replies(b"Z31"), [true, false, false]);
    c.described(&row_description(FLOAT8));
    assert_eq!(c.release()[0].1, [&b"\0"[..], NO_STATEMENT, b"\0\0\0\0\0\0\0"].concat());
}

#[test]
fn a_held_bind_goes_on_when_an_error_skips_through_to_it() {
    let mut c = Client::prepared(INT4);
    c.made = Made::default();
    c.send(b'P', &parse_body("", "SELEC 1"));
    c.send(b'Q', b"SELECT 1\0");
    c.send(b'B', &bind_body("q"));
    // The Parse failed: the server skips the Query and the rest to a Sync.
    c.statements.failed(0, 1);
    assert!(c.statements.decided());
    assert_eq!(tags(&c.release()), b"B");
}

#[test]
fn a_statement_never_described_is_bound_without_waiting() {
    let mut c = Client::new(200);
    c.send(b'P', &parse_body("q", "SELECT v FROM t"));
    c.send(b'S', b"");
    c.replies(b"31Z");
    c.made = Made::default();
    assert_eq!(tags(&c.send(b'B', &bind_body("q"))), b"CPB");
    assert!(!c.statements.holding());
}

#[test]
fn results_differing_only_in_where_columns_come_from_are_the_same() {
    let mut other_table = row_description(INT4);
    other_table[4..8].copy_from_slice(&99u32.to_be_bytes());
    assert!(same_result(&row_description(INT4), &other_table));
    assert!(!same_result(&row_description(INT4), &row_description(FLOAT8)));
    let mut renamed = row_description(INT4);
    renamed[2] = b'w';
    assert!(!same_result(&row_description(INT4), &renamed));
    assert!(same_result(b"", b""), "NoData");
    assert!(!same_result(b"", &row_description(INT4)));
}

#[test]
fn a_statement_that_cannot_be_made_again_is_not_counted_as_made() {
    let mut c = Client::new(200);
    c.send(b'P', &parse_body("q", "SELECT * FROM gone"));
    c.send(b'S', b"");
    assert_eq!(c.replies(b"31Z"), [false, true, true]);
    c.made = Made::default();
    assert_eq!(tags(&c.send(b'D', b"Sq\0")), b"CPD");
    c.send(b'S', b"");
    // The table is gone: CloseComplete, then the Parse's error.
    assert_eq!(c.replies(b"3Z"), [false, true]);
    assert!(c.made.lock().last.is_empty());
    assert!(c.statements.named.contains_key(&b"q"[..]), "the client still holds it");
}

#[test]
fn a_parse_that_failed_is_forgotten_at_the_end_of_its_batch_only() {
    let mut c = Client::new(200);
    c.send(b'P', &parse_body("bad", "SELEC 1"));
    c.send(b'S', b"");
    c.send(b'P', &parse_body("good", "SELECT 1"));
    c.send(b'S', b"");
    // The first batch: CloseComplete, then an error instead of ParseComplete.
    assert_eq!(c.replies(b"3Z"), [false, true]);
    assert!(!c.statements.named.contains_key(&b"bad"[..]), "PostgreSQL has no 'bad'");
    assert!(
        c.statements.named.contains_key(&b"good"[..]),
        "the next batch is untouched"
    );
    assert_eq!(c.replies(b"31Z"), [false, true, true]);
    assert_eq!(c.made.lock().last.len(), 1, "only 'good' is on the backend");

    // The name is free again: a new Parse of it is made, not refused.
    let sent = c.send(b'P', &parse_body("bad", "SELECT 2"));
    assert_eq!(sent.len(), 2, "Close and Parse");
}

#[test]
fn redefining_a_held_name_resends_its_statement_for_the_server_to_refuse() {
    let mut c = Client::new(200);
    c.send(b'P', &parse_body("q", "SELECT 1"));
    c.send(b'S', b"");
    assert_eq!(c.replies(b"31Z"), [false, true, true]);
    let server = c.server_name("q");
    let sent = c.send(b'P', &parse_body("q", "SELECT 2"));
    let parse = [&server[..], b"\0SELECT 1\0\0\0"].concat();
    assert_eq!(
        sent,
        vec![(b'P', parse.clone()), (b'P', parse)],
        "no Close: the second Parse is refused (42P05) even where the first made it"
    );
    assert_eq!(c.server_name("q"), server);
    c.send(b'S', b"");
    // Where the backend lacked it: the first ParseComplete is dropped, the
    // client sees the second Parse's ErrorResponse and ReadyForQuery.
    assert_eq!(c.replies(b"1Z"), [false, true]);
    assert!(c.statements.replies.is_empty());
}

#[test]
fn a_backend_keeps_at_most_the_limit_closing_the_least_recently_bound() {
    let mut c = Client::new(2);
    c.send(b'P', &parse_body("a", "SELECT 'a'"));
    c.send(b'P', &parse_body("b", "SELECT 'b'"));
    c.send(b'B', &bind_body("a"));
    let sent = c.send(b'P', &parse_body("c", "SELECT 'c'"));
    assert_eq!(tags(&sent), b"CPC", "Close and Parse of c, Close of b");
    assert_eq!(sent[2].1, statement_body(&c.server_name("b")), "a was bound since");
    c.send(b'S', b"");
    assert_eq!(
        c.replies(b"3131313Z"),
        [false, true, false, true, false, true, false, true],
        "the Closes the client never sent are dropped"
    );
    // b is made again where it is bound, closing a, now the least recent.
    let sent = c.send(b'B', &bind_body("b"));
    assert_eq!(tags(&sent), b"CPCB");
    assert_eq!(sent[2].1, statement_body(&c.server_name("a")));
    assert_eq!(c.made.lock().last.len(), 2);
}

#[test]
fn deallocate_of_a_held_statement_drops_the_backends_copy_making_it_first_if_missing() {
    let mut c = Client::new(200);
    c.send(b'P', &parse_body("q", "SELECT 1"));
    c.send(b'S', b"");
    c.replies(b"31Z");
    let server = c.server_name("q");
    let dealloc = |server: &[u8]| [&b"DEALLOCATE "[..], server, b"\0"].concat();
    assert_eq!(c.send(b'Q', b"deallocate \"q\";\0"), vec![(b'Q', dealloc(&server))]);
    assert!(c.statements.named.is_empty() && c.made.lock().last.is_empty());
    assert_eq!(c.replies(b"Z"), [true]);
    assert_eq!(
        c.send(b'Q', b"DEALLOCATE q\0"),
        vec![(b'Q', b"DEALLOCATE q\0".to_vec())],
        "no longer held: as it is"
    );
    assert_eq!(c.replies(b"Z"), [true]);

    // Held, but not on this backend: made first, in a batch of its own.
    c.send(b'P', &parse_body("r", "SELECT 2"));
    c.send(b'S', b"");
    c.replies(b"31Z");
    c.made = Made::default();
    let sent = c.send(b'Q', b"DEALLOCATE r\0");
    assert_eq!(tags(&sent), b"CPSQ");
    assert_eq!(
        c.replies(b"31ZZ"),
        [false, false, false, true],
        "only the Query's ReadyForQuery is seen"
    );

    // The extended protocol: the unnamed statement's text is rewritten.
    c.send(b'P', &parse_body("s", "SELECT 3"));
    let s = String::from_utf8(c.server_name("s")).unwrap();
    let sent = c.send(b'P', &parse_body("", "DEALLOCATE s"));
    assert_eq!(sent, vec![(b'P', parse_body("", &format!("DEALLOCATE {s}")))]);
}

#[test]
fn listen_runs_as_an_error_and_deallocate_all_forgets_everything() {
    let mut c = Client::new(200);
    let sent = c.send(b'Q', b"LISTEN ch\0");
    assert!(sent[0].1.starts_with(b"DO $sluice$BEGIN RAISE EXCEPTION"), "{sent:?}");
    let sent = c.send(b'P', &parse_body("", "listen ch"));
    assert!(sent[0].1.starts_with(b"\0DO $sluice$"), "{sent:?}");
    c.send(b'P', &parse_body("a", "SELECT 1"));
    c.statements.dropped_all(&c.made);
    assert!(c.statements.named.is_empty() && c.made.lock().last.is_empty());
}

/// What `statements` sends for one message on the backend whose
/// statements are `made`.
fn send_on(statements: &mut Statements, made: &Made, tag: u8, body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = BytesMut::new();
    if statements.rewrite(tag, body, made, &mut out) {
        messages(&out)
    } else {
        vec![(tag, body.to_vec())]
    }
}

#[test]
fn the_unnamed_statement_follows_its_client_to_a_backend_that_ran_another() {
    let backend = Made::default();
    let (mut a, mut b) = (Statements::new(200), Statements::new(200));
    let (parse_a, parse_b) = (parse_body("", "SELECT 'a'"), parse_body("", "SELECT 'b'"));
    // Each Parses the unnamed statement in a request of its own.
    for (client, parse) in [(&mut a, &parse_a), (&mut b, &parse_b)] {
        assert_eq!(send_on(client, &backend, b'P', parse), vec![(b'P', parse.clone())]);
        send_on(client, &backend, b'S', b"");
        assert!(client.reply(b'1', &[], &backend));
        assert!(client.reply(b'Z', &[], &backend));
    }
    // The backend's is b's now: a's Bind goes after a's Parse, whose
    // answer a never sees.
    let sent = send_on(&mut a, &backend, b'B', &bind_body(""));
    assert_eq!(sent, vec![(b'P', parse_a.clone()), (b'B', bind_body(""))]);
    assert!(!a.reply(b'1', &[], &backend));
    assert_eq!(tags(&send_on(&mut a, &backend, b'D', b"S\0")), b"D", "a's is there now");
    send_on(&mut a, &backend, b'S', b"");
    assert!(a.reply(b'Z', &[], &backend));
    // b, whose statement was replaced, gets its own back the same way.
    assert_eq!(tags(&send_on(&mut b, &backend, b'D', b"S\0")), b"PD");
}

#[test]
fn a_client_without_an_unnamed_statement_cannot_bind_anothers() {
    let backend = Made::default();
    let (mut a, mut b) = (Statements::new(200), Statements::new(200));
    send_on(&mut a, &backend, b'P', &parse_body("", "SELECT 'a'"));
    let sent = send_on(&mut b, &backend, b'B', &bind_body(""));
    assert_eq!(sent, vec![(b'C', b"S\0".to_vec()), (b'B', bind_body(""))]);
    assert!(!b.reply(b'3', &[], &backend), "the Close b never sent");
    // A simple Query drops the unnamed statement: a has none either.
    send_on(&mut a, &backend, b'Q', b"SELECT 1\0");
    assert_eq!(tags(&send_on(&mut a, &backend, b'B', &bind_body(""))), b"CB");
}

/// A client that parsed `SELECT 'a'` as its unnamed statement, answered.
fn with_unnamed_a(backend: &Made) -> Statements {
    let mut a = Statements::new(200);
    send_on(&mut a, backend, b'P', &parse_body("", "SELECT 'a'"));
    send_on(&mut a, backend, b'S', b"");
    assert!(a.reply(b'1', &[], backend) && a.reply(b'Z', &[], backend));
    a
}

/// What a Bind of the unnamed statement sends after `batch` (each message
/// sent, then the server's ErrorResponse after `answered` answers, then
/// its ReadyForQuery).
fn bind_after_error(batch: &[(u8, Vec<u8>)], answered: u32) -> Vec<(u8, Vec<u8>)> {
    let backend = Made::default();
    let mut a = with_unnamed_a(&backend);
    for (tag, body) in batch {
        send_on(&mut a, &backend, *tag, body);
    }
    a.failed(answered, 0);
    assert!(a.reply(b'Z', &[], &backend));
    send_on(&mut a, &backend, b'B', &bind_body(""))
}

#[test]
fn an_unnamed_parse_that_failed_leaves_no_unnamed_statement() {
    let failing = [(b'P', parse_body("", "SELEC 'b'")), (b'S', vec![])];
    assert_eq!(
        tags(&bind_after_error(&failing, 0)),
        b"CB",
        "PostgreSQL dropped 'a' before the Parse failed: the Bind is refused"
    );
}

#[test]
fn an_unnamed_parse_or_close_skipped_after_an_error_keeps_the_one_before() {
    let a_again = vec![(b'P', parse_body("", "SELECT 'a'")), (b'B', bind_body(""))];
    let bind = (b'B', bind_body("nope"));
    let skipped_parse = [bind.clone(), (b'P', parse_body("", "SELECT 'b'")), (b'S', vec![])];
    assert_eq!(
        bind_after_error(&skipped_parse, 0),
        a_again,
        "the Bind failed, not the Parse"
    );
    let two_skipped = [
        bind.clone(),
        (b'P', parse_body("", "SELECT 'b'")),
        (b'P', parse_body("", "SELECT 'c'")),
        (b'S', vec![]),
    ];
    assert_eq!(bind_after_error(&two_skipped, 0), a_again);
    let skipped_close = [bind.clone(), (b'C', b"S\0".to_vec()), (b'S', vec![])];
    assert_eq!(bind_after_error(&skipped_close, 0), a_again);
    // After an answered Close, the failed Parse's position is its own.
    let closed_then_failed = [
        (b'C', b"S\0".to_vec()),
        (b'P', parse_body("", "SELEC 'b'")),
        (b'S', vec![]),
    ];
    let backend = Made::default();
    let mut a = with_unnamed_a(&backend);
    for (tag, body) in &closed_then_failed {
        send_on(&mut a, &backend, *tag, body);
    }
    assert!(a.reply(b'3', &[], &backend), "the client's own CloseComplete");
    a.failed(1, 0);
    assert!(a.reply(b'Z', &[], &backend));
    assert_eq!(tags(&send_on(&mut a, &backend, b'B', &bind_body(""))), b"CB");
}

#[test]
fn syncs_ignored_during_a_copy_in_leave_the_batch_counting_on() {
    let backend = Made::default();
    let mut a = with_unnamed_a(&backend);
    // libpq's COPY FROM STDIN by the extended protocol: a Sync right after
    // the Execute, which the server ignores in copy-in mode.
    for (tag, body) in [(b'B', bind_body("")), (b'E', b"\0\0\0\0\0".to_vec()), (b'S', vec![])] {
        send_on(&mut a, &backend, tag, &body);
    }
    a.syncs_ignored(1);
    send_on(&mut a, &backend, b'P', &parse_body("", "SELEC 'b'"));
    send_on(&mut a, &backend, b'S', b"");
    // BindComplete and the COPY's CommandComplete came before the error.
    a.failed(2, 0);
    assert!(a.reply(b'Z', &[], &backend));
    assert_eq!(
        tags(&send_on(&mut a, &backend, b'B', &bind_body(""))),
        b"CB",
        "the Parse failed: no unnamed statement"
    );
}

#[test]
fn a_skipped_parse_does_not_undo_a_later_batchs() {
    let backend = Made::default();
    let mut a = with_unnamed_a(&backend);
    // Pipelined: a batch whose Parse is skipped, then one that parses 'c'.
    for (tag, body) in [
        (b'B', bind_body("nope")),
        (b'P', parse_body("", "SELECT 'b'")),
        (b'S', vec![]),
        (b'P', parse_body("", "SELECT 'c'")),
        (b'S', vec![]),
    ] {
        send_on(&mut a, &backend, tag, &body);
    }
    a.failed(0, 0);
    assert!(a.reply(b'Z', &[], &backend));
    assert!(a.reply(b'1', &[], &backend) && a.reply(b'Z', &[], &backend));
    assert_eq!(
        send_on(&mut a, &backend, b'B', &bind_body("")),
        vec![(b'P', parse_body("", "SELECT 'c'")), (b'B', bind_body(""))],
        "'c' is the client's; the backend's became unknown at the error"
    );
}

#[test]
fn a_query_skipped_after_an_error_keeps_the_unnamed_statement_and_owes_no_ready_for_query() {
    let backend = Made::default();
    let mut a = with_unnamed_a(&backend);
    for (tag, body) in [
        (b'B', bind_body("nope")),
        (b'Q', b"SELECT 1\0".to_vec()),
        (b'S', vec![]),
    ] {
        send_on(&mut a, &backend, tag, &body);
    }
    // The session's batches find the Query skipped.
    a.failed(0, 1);
    assert!(a.reply(b'Z', &[], &backend), "the Sync's, which the client sees");
    // Nothing is owed any more: a named Parse's answers are as always.
    let sent = send_on(&mut a, &backend, b'P', &parse_body("s", "SELECT 2"));
    assert_eq!(sent.iter().map(|(tag, _)| *tag).collect::<Vec<_>>(), b"CP");
    send_on(&mut a, &backend, b'S', b"");
    assert!(!a.reply(b'3', &[], &backend), "the proxy's Close");
    assert!(a.reply(b'1', &[], &backend) && a.reply(b'Z', &[], &backend));
    assert_eq!(
        send_on(&mut a, &backend, b'B', &bind_body("")),
        vec![(b'P', parse_body("", "SELECT 'a'")), (b'B', bind_body(""))],
        "'a' is still the client's"
    );
}

proptest! {
    #[test]
    fn any_bytes_from_a_client_or_server_keep_the_limit_and_never_panic(
        sent in proptest::collection::vec((prop::sample::select(b"PBDCSQFE".to_vec()), proptest::collection::vec(any::<u8>(), 0..24)), 0..16),
        replies in proptest::collection::vec((prop::sample::select(b"13ZtTnE".to_vec()), proptest::collection::vec(any::<u8>(), 0..40)), 0..24),
        limit in 1usize..4,
    ) {
        let mut c = Client::new(limit);
        for (tag, body) in &sent {
            c.send(*tag, body);
            prop_assert!(c.made.lock().last.len() <= limit);
        }
        for (tag, body) in &replies {
            match tag {
                b'E' => c.statements.failed(0, 0),
                _ => _ = c.statements.reply(*tag, body, &c.made),
            }
            if c.statements.decided() {
                c.release();
            }
        }
    }
}
