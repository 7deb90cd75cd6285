use proptest::prelude::*;

use super::*;

fn scan_all(input: &[u8]) -> Result<Vec<(usize, ScannedReply)>, ProtocolError> {
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
    for (reply, end) in replies.iter().zip(&ends) {
        let start = end - reply.len();
        assert_eq!(reply_len(&input[start..], &Limits::relay()).unwrap(), Some(reply.len()));
    }
}

#[test]
fn malformed_replies_get_errors() {
    assert_eq!(scan_all(b"?3\r\n").unwrap_err(), ProtocolError::UnknownType(b'?'));
    assert_eq!(scan_all(b"\r\n").unwrap_err(), ProtocolError::EmptyLine);
    assert!(matches!(
        scan_all(b"$-2\r\n").unwrap_err(),
        ProtocolError::BadLength { .. }
    ));
    assert!(matches!(
        scan_all(b"*abc\r\n").unwrap_err(),
        ProtocolError::BadLength { .. }
    ));
    assert_eq!(scan_all(b"$2\r\nabc\r\n").unwrap_err(), ProtocolError::MissingCrlf);
    let mut scanner = ReplyScanner::default();
    assert_eq!(scanner.advance(b"$2\r\nab\r").unwrap(), (7, None));
    assert_eq!(
        scanner.advance(b"x").unwrap_err(),
        ProtocolError::MissingCrlf,
        "the CRLF is checked across reads"
    );
    let limits = Limits {
        max_bulk: 4,
        max_args: 2,
        ..Limits::relay()
    };
    assert!(reply_len(b"$5\r\n", &limits)
        .unwrap_err()
        .to_string()
        .contains("invalid bulk length 5 (the limit is 4)"));
    assert!(reply_len(b"%3\r\n", &limits)
        .unwrap_err()
        .to_string()
        .contains("invalid map length 3 (the limit is 2)"));
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
fn array_items_are_found_without_building_them() {
    let l = Limits::relay();
    let array = b"*3\r\n:1\r\n$2\r\nxy\r\n*1\r\n$-1\r\n";
    let items = array_items(array, &l).unwrap().unwrap();
    let pieces: Vec<&[u8]> = items.into_iter().map(|r| &array[r]).collect();
    assert_eq!(pieces, vec![&b":1\r\n"[..], b"$2\r\nxy\r\n", b"*1\r\n$-1\r\n"]);
    assert_eq!(array_items(b"+OK\r\n", &l).unwrap(), None);
    assert_eq!(array_items(b"*-1\r\n", &l).unwrap(), None);
    assert_eq!(
        array_items(&array[..array.len() - 1], &l).unwrap_err(),
        ProtocolError::IncompleteArray
    );
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
            let tag = if matches!(v, Value::Push(_)) { '>' } else { '*' };
            out.extend(format!("{tag}{}\r\n", items.len()).bytes());
            items.iter().for_each(|i| encode(i, out));
        }
        Value::Map(pairs) | Value::Attributed(pairs, _) => {
            let tag = if matches!(v, Value::Map(_)) { '%' } else { '|' };
            out.extend(format!("{tag}{}\r\n", pairs.len()).bytes());
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
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bulk),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let pairs = prop::collection::vec((inner.clone(), inner.clone()), 0..4);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            pairs.clone().prop_map(Value::Map),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Push),
            (pairs, inner).prop_map(|(p, v)| Value::Attributed(p, Box::new(v))),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = scan_all(&input);
        let _ = array_items(&input, &Limits::relay());
    }

    #[test]
    fn replies_round_trip_in_any_chunking(values in prop::collection::vec(value(), 1..5), chunk in 1usize..17) {
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
