use bytes::BytesMut;
use proptest::prelude::*;

use super::*;
use crate::limits::{MAX_BULK_LEN, MAX_INLINE_LEN};

fn encode_request(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command(args, &mut out);
    out
}

/// Every command `CommandParser` frames from `input`, each as its arguments.
fn frame_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
    let mut parser = CommandParser::default();
    let mut pos = 0;
    let mut commands = Vec::new();
    while let Some(len) = parser.parse(&input[pos..])? {
        let command = &input[pos..pos + len];
        commands.push(parser.args().iter().map(|r| command[r.clone()].to_vec()).collect());
        pos += len;
    }
    Ok(commands)
}

fn words(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

fn small() -> Limits {
    Limits {
        max_bulk: 4,
        max_args: 2,
        max_inline: 8,
        unauthenticated: false,
    }
}

#[test]
fn arrays_and_inline_commands_parse() {
    let l = Limits::default();
    let req = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n";
    let (args, used) = parse(req, &l).unwrap().unwrap();
    assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
    assert_eq!(parse(&req[used..], &l).unwrap().unwrap(), (vec![b"PING".to_vec()], 6));
    assert_eq!(parse(b"  set  a   b\r\n", &l).unwrap().unwrap().0.len(), 3);
    let lf = b"SET a b\nGET a\r\n";
    let (args, used) = parse(lf, &l).unwrap().unwrap();
    assert_eq!(
        (args.len(), used),
        (3, 8),
        "an inline command may end at a bare LF, as in Redis"
    );
    assert_eq!(
        parse(&lf[used..], &l).unwrap().unwrap(),
        (vec![b"GET".to_vec(), b"a".to_vec()], 7)
    );
    assert_eq!(parse(b"*1\n$4\nPING\n", &l), Ok(None), "array lines still end at CRLF");
}

#[test]
fn frames_pipelined_multibulk_and_inline_commands() {
    let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nxy\r\nGET  k\r\n\r\nPING\n*0\r\n";
    let commands = frame_all(input).unwrap();
    assert_eq!(
        commands,
        vec![
            words(&["SET", "k", "v\r\nxy"]),
            words(&["GET", "k"]),
            vec![],
            words(&["PING"]),
            vec![]
        ]
    );
}

#[test]
fn resumes_a_command_split_anywhere() {
    let mut input = BytesMut::new();
    encode_command(&["SET", "key", "a value with\r\nCRLF"], &mut input);
    for cut in 0..input.len() {
        let mut parser = CommandParser::default();
        assert_eq!(parser.parse(&input[..cut]).unwrap(), None, "cut at {cut}");
        assert_eq!(parser.parse(&input).unwrap(), Some(input.len()), "cut at {cut}");
        assert_eq!(parser.args().len(), 3);
    }
}

#[test]
fn malformed_commands_get_errors_that_name_the_problem() {
    let err = |input: &[u8]| {
        let framed = frame_all(input).unwrap_err();
        let mut pos = 0;
        let parsed = loop {
            match parse(&input[pos..], &Limits::default()) {
                Ok(Some((_, used))) => pos += used,
                other => break other.unwrap_err(),
            }
        };
        assert_eq!(framed, parsed, "the relay's and the server's error");
        framed.to_string()
    };
    assert_eq!(err(b"*1\r\n+x\r\n"), "Protocol error: expected '$', got '+'");
    assert_eq!(err(b"*1\r\n:3\r\n"), "Protocol error: expected '$', got ':'");
    assert_eq!(err(b"*x\r\n"), "Protocol error: invalid multibulk length 'x'");
    assert_eq!(err(b"*+1\r\n"), "Protocol error: invalid multibulk length '+1'");
    assert_eq!(
        frame_all(b"*-10\r\nPING\r\n").unwrap(),
        vec![vec![], words(&["PING"])],
        "a count below 1 is skipped, as Redis skips it"
    );
    assert_eq!(err(b"*1\r\n$-5\r\n"), "Protocol error: invalid bulk length '-5'");
    assert!(err(b"*1\r\n$536870913\r\n").contains("invalid bulk length 536870913 (the limit is 536870912)"));
    assert!(err(b"*99999999999\r\n").contains("invalid multibulk length 99999999999 (the limit is 2147483647)"));
    assert_eq!(
        err(b"*1\r\n$1\r\nab\r\n"),
        "Protocol error: bulk string not followed by CRLF"
    );
    let long_inline = vec![b'a'; MAX_INLINE_LEN + 10];
    assert!(err(&long_inline).contains("inline command line longer than 65536 bytes"));
    assert_eq!(err(b"SET k \"v\r\n"), "Protocol error: unbalanced quotes in request");
}

#[test]
fn sizes_over_the_limits_are_errors_before_their_bytes_arrive() {
    let small = small();
    assert!(
        parse(b"*1\r\n$5\r\n", &small).is_err(),
        "bulk over the limit before its bytes arrive"
    );
    assert!(parse(b"*3\r\n", &small).is_err());
    let e = parse(b"123456789", &small).unwrap_err();
    assert!(e.to_string().contains("longer than 8 bytes"), "{e}");
    assert_eq!(
        parse(b"12345678\r", &small),
        Ok(None),
        "a line of the limit, its LF to come"
    );
    assert!(parse(b"12345678\r\n", &small).unwrap().is_some());
    assert!(parse(b"123456789\r\n", &small).is_err(), "a whole line over the limit");
    // Found by fuzz/fuzz_targets/resp_request.rs: inline requests were
    // bounded in bytes but not in arguments.
    let e = parse(b"a b c\r\n", &small).unwrap_err();
    assert!(e.to_string().contains("more than 2 arguments"), "{e}");
    let e = parse(&[b"*1\r\n$".as_slice(), &[b'1'; 33]].concat(), &small).unwrap_err();
    assert!(e.to_string().contains("bulk length line longer than 32 bytes"), "{e}");
}

#[test]
fn limits_before_auth_are_redis_s_and_name_themselves() {
    let l = Limits::default().before_auth();
    let e = parse(b"*11\r\n", &l).unwrap_err();
    assert_eq!(e.to_string(), "Protocol error: unauthenticated multibulk length");
    let e = parse(b"*1\r\n$16385\r\n", &l).unwrap_err();
    assert_eq!(e.to_string(), "Protocol error: unauthenticated bulk length");
    let e = parse(b"*1\r\n$536870912\r\n", &l).unwrap_err();
    assert_eq!(e.to_string(), "Protocol error: unauthenticated bulk length");
    let e = parse(b"*1\r\n$536870913\r\n", &l).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("Protocol error: invalid bulk length 536870913"),
        "over the limit for anyone: invalid, as Redis checks it first"
    );
    assert_eq!(parse(b"*10\r\n$16384\r\n", &l), Ok(None), "at the limits, more to come");
    let e = parse(b"*1\r\n$-1\r\n", &l).unwrap_err();
    assert_eq!(e.to_string(), "Protocol error: invalid bulk length '-1'");
    assert_eq!(small().before_auth().max_args, 2, "never above the configured limits");
}

#[test]
fn the_parser_switches_bounds_when_its_client_authenticates() {
    let mut parser = CommandParser::default();
    parser.set_before_auth(true);
    assert_eq!(
        parser.parse(b"*11\r\n").unwrap_err().to_string(),
        "Protocol error: unauthenticated multibulk length"
    );
    let mut parser = CommandParser::default();
    parser.set_before_auth(true);
    assert_eq!(
        parser.parse(b"*2\r\n$3\r\nSET\r\n$16385\r\n").unwrap_err().to_string(),
        "Protocol error: unauthenticated bulk length"
    );
    let mut parser = CommandParser::default();
    parser.set_before_auth(true);
    let auth = b"*3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$6\r\nsecret\r\n";
    assert_eq!(parser.parse(auth).unwrap(), Some(auth.len()));
    parser.set_before_auth(false);
    assert_eq!(
        parser.parse(b"*1\r\n$16385\r\n").unwrap(),
        None,
        "waited for once authenticated"
    );
    let mut parser = CommandParser::new(Limits {
        max_bulk: 1024,
        ..Limits::default()
    });
    assert_eq!(
        parser.parse(b"*1\r\n$1025\r\n").unwrap_err().to_string(),
        "Protocol error: invalid bulk length 1025 (the limit is 1024)"
    );
}

#[test]
fn a_bulk_at_the_size_limit_is_waited_for_not_refused() {
    let mut parser = CommandParser::default();
    let header = format!("*1\r\n${MAX_BULK_LEN}\r\nabc");
    assert_eq!(parser.parse(header.as_bytes()).unwrap(), None);
}

#[test]
fn inline_commands_are_split_as_redis_splits_them() {
    let line =
        b"SET k \"a b\"\r\nSET 'it\\'s' x\r\nECHO \"q\\\"uote\"\r\nSET a\"b c\" d\r\nSET k \"\\x41\\n\\z\" ''\r\n";
    let framed = frame_all(line).unwrap();
    assert_eq!(framed[0], words(&["SET", "k", "a b"]));
    assert_eq!(framed[1], words(&["SET", "it\\'s", "x"]));
    assert_eq!(
        framed[2],
        words(&["ECHO", "q\\\"uote"]),
        "a relay leaves escapes for the server to resolve"
    );
    assert_eq!(
        framed[3],
        words(&["SET", "a\"b c\"", "d"]),
        "a quote inside an argument opens a quoted part"
    );
    assert_eq!(framed[4], words(&["SET", "k", "\\x41\\n\\z", ""]));
    let mut parsed = Vec::new();
    let mut pos = 0;
    while let Some((args, used)) = parse(&line[pos..], &Limits::default()).unwrap() {
        parsed.push(args);
        pos += used;
    }
    assert_eq!(
        parsed,
        vec![
            words(&["SET", "k", "a b"]),
            words(&["SET", "it's", "x"]),
            words(&["ECHO", "q\"uote"]),
            words(&["SET", "ab c", "d"]),
            words(&["SET", "k", "A\nz", ""]),
        ],
        "a server resolves them, as Redis does"
    );
    for bad in [
        &b"SET k \"unterminated\r\n"[..],
        b"SET k 'x\r\n",
        b"SET k \"a\"b\r\n",
        b"SET 'it''s' x\r\n",
        b"GET \"k\\\"\r\n",
    ] {
        let why = String::from_utf8_lossy(bad);
        assert_eq!(frame_all(bad).unwrap_err(), ProtocolError::UnbalancedQuotes, "{why}");
        assert_eq!(
            parse(bad, &Limits::default()).unwrap_err(),
            ProtocolError::UnbalancedQuotes,
            "{why}"
        );
    }
}

/// The arguments `CommandParser` frames in `input` and those `parse`
/// copies, command by command, for arrays only (an inline argument's range
/// keeps its escapes), and the error each ends with.
type Both = (Vec<(usize, Vec<Vec<u8>>)>, Option<ProtocolError>);

fn both(input: &[u8], limits: &Limits) -> (Both, Both) {
    let mut parser = CommandParser::new(*limits);
    let (mut framed, mut parsed) = (Vec::new(), Vec::new());
    let mut pos = 0;
    let framed_error = loop {
        match parser.parse(&input[pos..]) {
            Ok(Some(len)) => {
                let command = &input[pos..pos + len];
                let args = parser.args().iter().map(|r| command[r.clone()].to_vec()).collect();
                framed.push((len, if command[0] == b'*' { args } else { vec![] }));
                pos += len;
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    pos = 0;
    let parsed_error = loop {
        match parse(&input[pos..], limits) {
            Ok(Some((args, len))) => {
                parsed.push((len, if input[pos] == b'*' { args } else { vec![] }));
                pos += len;
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    ((framed, framed_error), (parsed, parsed_error))
}

proptest! {
    #[test]
    fn any_request_parses_whole_and_no_prefix_parses(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6)) {
        let req = encode_request(&args);
        let l = Limits::default();
        prop_assert_eq!(parse(&req, &l).unwrap(), Some((args, req.len())));
        for cut in 0..req.len() {
            prop_assert_eq!(parse(&req[..cut], &l).unwrap(), None);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_both_readers_agree(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let small = Limits { max_bulk: 64, max_args: 8, max_inline: 64, unauthenticated: false };
        if let Ok(Some((args, used))) = parse(&bytes, &small) {
            prop_assert!(used <= bytes.len());
            prop_assert!(args.len() <= small.max_args);
        }
        let (framed, parsed) = both(&bytes, &small);
        prop_assert_eq!(framed, parsed);
    }

    #[test]
    fn commands_round_trip_in_any_split(
        commands in prop::collection::vec(prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 1..6), 1..5),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut input = BytesMut::new();
        for args in &commands {
            encode_command(args, &mut input);
        }
        prop_assert_eq!(frame_all(&input).unwrap(), commands.clone());
        // Fed in two reads, the parser resumes and frames the same commands.
        let cut = cut.index(input.len() + 1);
        let mut parser = CommandParser::default();
        if let Some(len) = parser.parse(&input[..cut]).unwrap() {
            prop_assert_eq!(parser.args().len(), commands[0].len());
            prop_assert!(len <= cut);
        } else {
            let len = parser.parse(&input).unwrap().unwrap();
            prop_assert_eq!(parser.args().len(), commands[0].len());
            prop_assert!(len > cut || cut == input.len());
        }
    }

    #[test]
    fn inline_words_split_back_to_themselves(args in prop::collection::vec("[a-zA-Z0-9\"' \\\\]{0,8}", 1..6)) {
        // Each argument quoted as redis-cli quotes it: double quotes, with
        // a backslash before a quote or a backslash.
        let line: Vec<u8> = args
            .iter()
            .map(|a| format!("\"{}\"", a.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect::<Vec<_>>()
            .join(" ")
            .into_bytes();
        let (parsed, used) = parse(&[line.as_slice(), b"\r\n"].concat(), &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(used, line.len() + 2);
        prop_assert_eq!(parsed, args.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>());
    }
}

/// A request of `n` one-byte arguments, fed as a client sends it: in
/// 64 KiB reads, the parser called after each. Each call resumes where the
/// previous one stopped: the arguments already framed are overwritten
/// with garbage between calls, which a parser that walked the request
/// again from its start would trip on. Framing is thus linear in the
/// request's size however many reads it takes.
fn frame_in_reads(n: usize) {
    let mut wire = encode_request(&vec![b"x".to_vec(); n]);
    let header = 1 + n.to_string().len() + 2;
    let mut parser = CommandParser::default();
    let mut end = 0;
    loop {
        end = (end + (64 << 10)).min(wire.len());
        match parser.parse(&wire[..end]).unwrap() {
            None => {
                let progress = parser.progress;
                assert!(end - progress.pos < 7, "every whole argument of the prefix is framed");
                assert_eq!(progress.framed, (progress.pos - header) / 7);
                wire[header..progress.pos].fill(b'?');
            }
            Some(used) => {
                assert_eq!((used, parser.args().len()), (wire.len(), n));
                return;
            }
        }
    }
}

#[test]
fn a_request_of_ten_thousand_to_a_million_elements_is_framed_in_one_pass() {
    for n in [10_000, 100_000, 1_000_000] {
        frame_in_reads(n);
    }
}
