use bytes::BytesMut;
use proptest::prelude::*;

use super::*;

fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, RespError> {
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

#[test]
fn frames_pipelined_multibulk_and_inline_commands() {
    let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nxy\r\nGET  k\r\n\r\nPING\n*0\r\n";
    let commands = parse_all(input).unwrap();
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
    let err = |input: &[u8]| parse_all(input).unwrap_err().to_string();
    assert_eq!(err(b"*1\r\n+x\r\n"), "Protocol error: expected '$', got '+'");
    assert_eq!(err(b"*x\r\n"), "Protocol error: invalid multibulk length 'x'");
    assert_eq!(
        parse_all(b"*-10\r\nPING\r\n").unwrap(),
        vec![vec![], words(&["PING"])],
        "a count below 1 is skipped, as Redis skips it"
    );
    assert_eq!(err(b"*1\r\n$-5\r\n"), "Protocol error: invalid bulk length '-5'");
    assert!(err(b"*1\r\n$536870913\r\n").contains("invalid bulk length 536870913 (the limit is 536870912)"));
    assert!(err(b"*99999999999\r\n").contains("invalid multibulk length 99999999999 (the limit is"));
    assert_eq!(
        err(b"*1\r\n$1\r\nab\r\n"),
        "Protocol error: bulk string not followed by CRLF"
    );
    let long_inline = vec![b'a'; MAX_INLINE_LEN + 10];
    assert!(err(&long_inline).contains("inline command line longer than 65536 bytes"));
}

#[test]
fn before_auth_redis_s_own_bounds_apply() {
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
}

#[test]
fn a_bulk_at_the_size_limit_is_waited_for_not_refused() {
    let mut parser = CommandParser::default();
    assert_eq!(parser.parse(b"*1\r\n$536870912\r\nabc").unwrap(), None);
}

fn scan_all(input: &[u8]) -> Result<Vec<(usize, Reply)>, RespError> {
    let mut scanner = ReplyScanner::default();
    let mut pos = 0;
    let mut replies = Vec::new();
    loop {
        let (n, reply) = scanner.advance(&input[pos..])?;
        pos += n;
        match reply {
            Some(reply) => replies.push((pos, reply)),
            None => return Ok(replies),
        }
    }
}

#[test]
fn frames_every_resp2_and_resp3_reply_type() {
    let replies: &[&[u8]] = &[
        b"+OK\r\n",
        b"-ERR wrong\r\n",
        b":42\r\n",
        b"$5\r\nhe\r\nl\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
        b"*0\r\n",
        b"%2\r\n+a\r\n:1\r\n+b\r\n*2\r\n,3.5\r\n#t\r\n",
        b"~1\r\n_\r\n",
        b"(123456789012345678901234567890\r\n",
        b"=15\r\ntxt:Some string\r\n",
        b"!9\r\nSYNTAX xy\r\n",
        b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.1923\r\n*1\r\n:2\r\n",
        b">3\r\n+message\r\n+ch\r\n+hi\r\n",
    ];
    let input = replies.concat();
    let scanned = scan_all(&input).unwrap();
    let ends: Vec<usize> = replies
        .iter()
        .scan(0, |end, r| {
            *end += r.len();
            Some(*end)
        })
        .collect();
    assert_eq!(scanned.iter().map(|(end, _)| *end).collect::<Vec<_>>(), ends);
    let kinds: Vec<u8> = scanned.iter().map(|(_, r)| r.kind).collect();
    assert_eq!(kinds, b"+-:$$***%~(=!*>");
    assert!(scanned[1].1.is_error() && scanned[12].1.is_error() && !scanned[0].1.is_error());
    assert!(scanned[14].1.is_push());
}

#[test]
fn malformed_replies_get_errors() {
    assert_eq!(scan_all(b"?3\r\n").unwrap_err(), RespError::UnknownType(b'?'));
    assert_eq!(scan_all(b"\r\n").unwrap_err(), RespError::EmptyLine);
    assert!(matches!(scan_all(b"$-2\r\n").unwrap_err(), RespError::BadLength { .. }));
    assert!(matches!(
        scan_all(b"*abc\r\n").unwrap_err(),
        RespError::BadLength { .. }
    ));
}

#[test]
fn a_reply_of_any_depth_is_framed() {
    // As deep as the recursive table Redis's own test suite returns from
    // a script (7,995 levels, then an error).
    let mut deep = "*1\r\n".repeat(8000);
    deep.push_str("-ERR reached lua stack limit\r\n");
    let (n, reply) = ReplyScanner::default().advance(deep.as_bytes()).unwrap();
    assert_eq!(n, deep.len());
    assert_eq!(reply.map(|r| r.kind), Some(b'*'));
}

#[test]
fn inline_commands_are_split_as_redis_splits_them() {
    let commands = parse_all(b"SET k \"a b\"\r\nSET 'it\\'s' x\r\nECHO \"q\\\"uote\"\r\nSET a\"b c\" d\r\n").unwrap();
    assert_eq!(commands[0], words(&["SET", "k", "a b"]));
    assert_eq!(commands[1], words(&["SET", "it\\'s", "x"]));
    assert_eq!(
        commands[2],
        words(&["ECHO", "q\\\"uote"]),
        "escapes are the server's to resolve"
    );
    assert_eq!(
        commands[3],
        words(&["SET", "a\"b c\"", "d"]),
        "a quote inside an argument opens a quoted part"
    );
    let err = |input: &[u8]| parse_all(input).unwrap_err();
    for bad in [
        &b"SET k \"unterminated\r\n"[..],
        b"SET k 'x\r\n",
        b"SET k \"a\"b\r\n",
        b"SET 'it''s' x\r\n",
        b"GET \"k\\\"\r\n",
    ] {
        assert_eq!(
            err(bad),
            RespError::UnbalancedQuotes,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

/// A RESP3 value, for generating replies.
#[derive(Clone, Debug)]
enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Push(Vec<Value>),
    Attributed(Vec<(Value, Value)>, Box<Value>),
}

fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Simple(s) => out.extend(format!("+{s}\r\n").bytes()),
        Value::Error(s) => out.extend(format!("-{s}\r\n").bytes()),
        Value::Int(i) => out.extend(format!(":{i}\r\n").bytes()),
        Value::Bulk(b) => {
            out.extend(format!("${}\r\n", b.len()).bytes());
            out.extend(b);
            out.extend(b"\r\n");
        }
        Value::Null => out.extend(b"_\r\n"),
        Value::Array(items) | Value::Push(items) => {
            out.extend(
                format!(
                    "{}{}\r\n",
                    if matches!(v, Value::Push(_)) { '>' } else { '*' },
                    items.len()
                )
                .bytes(),
            );
            items.iter().for_each(|i| encode(i, out));
        }
        Value::Map(pairs) | Value::Attributed(pairs, _) => {
            out.extend(
                format!(
                    "{}{}\r\n",
                    if matches!(v, Value::Map(_)) { '%' } else { '|' },
                    pairs.len()
                )
                .bytes(),
            );
            for (k, val) in pairs {
                encode(k, out);
                encode(val, out);
            }
            if let Value::Attributed(_, inner) = v {
                encode(inner, out);
            }
        }
    }
}

fn kind(v: &Value) -> u8 {
    match v {
        Value::Simple(_) => b'+',
        Value::Error(_) => b'-',
        Value::Int(_) => b':',
        Value::Bulk(_) => b'$',
        Value::Null => b'_',
        Value::Array(_) => b'*',
        Value::Map(_) => b'%',
        Value::Push(_) => b'>',
        Value::Attributed(_, inner) => kind(inner),
    }
}

fn value() -> impl Strategy<Value = Value> {
    let text = "[a-zA-Z0-9 ]{0,12}";
    let leaf = prop_oneof![
        text.prop_map(Value::Simple),
        text.prop_map(Value::Error),
        any::<i64>().prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bulk),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let pairs = proptest::collection::vec((inner.clone(), inner.clone()), 0..4);
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            pairs.clone().prop_map(Value::Map),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Push),
            (pairs, inner).prop_map(|(p, v)| Value::Attributed(p, Box::new(v))),
        ]
    })
}

proptest! {
    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_all(&input);
        let _ = scan_all(&input);
    }

    #[test]
    fn commands_round_trip_in_any_split(
        commands in proptest::collection::vec(proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..6), 1..5),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut input = BytesMut::new();
        for args in &commands {
            encode_command(args, &mut input);
        }
        prop_assert_eq!(parse_all(&input).unwrap(), commands.clone());
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
    fn replies_round_trip_in_any_chunking(values in proptest::collection::vec(value(), 1..5), chunk in 1usize..17) {
        let mut input = Vec::new();
        let mut ends = Vec::new();
        for v in &values {
            encode(v, &mut input);
            ends.push(input.len());
        }
        let mut scanner = ReplyScanner::default();
        let mut seen = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut consumed = 0;
        for piece in input.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                let (n, reply) = scanner.advance(&buf).unwrap();
                buf.drain(..n);
                consumed += n;
                match reply {
                    Some(reply) => seen.push((consumed, reply.kind)),
                    None => break,
                }
            }
        }
        let expected: Vec<(usize, u8)> = ends.iter().copied().zip(values.iter().map(kind)).collect();
        prop_assert_eq!(seen, expected);
        prop_assert!(scanner.is_idle());
    }
}
