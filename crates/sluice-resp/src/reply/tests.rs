use proptest::prelude::*;

use super::*;
use crate::request::encode_command;

#[test]
fn replies_encode_as_resp2() {
    let mut out = Vec::new();
    Reply::Array(vec![
        Reply::ok(),
        Reply::error("bad\r\nthing"),
        Reply::Integer(-3),
        Reply::Bulk(None),
        Reply::Bulk(Some(b"v".to_vec())),
    ])
    .encode(&mut out);
    assert_eq!(
        out,
        b"*5\r\n+OK\r\n-ERR bad  thing\r\n:-3\r\n$-1\r\n$1\r\nv\r\n".to_vec()
    );
    assert_eq!(&error_reply("no\r\nway")[..], b"-ERR no  way\r\n");
}

#[test]
fn replies_parse_back_and_malformed_ones_are_named() {
    let l = Limits::default();
    let reply = Reply::Array(vec![
        Reply::ok(),
        Reply::Error("MOVED 3999 127.0.0.1:6381".into()),
        Reply::Integer(-3),
        Reply::Bulk(None),
        Reply::Array(vec![Reply::Bulk(Some(b"a\r\nb".to_vec()))]),
    ]);
    let mut out = Vec::new();
    reply.encode(&mut out);
    assert_eq!(parse_reply(&out, &l).unwrap(), Some((reply, out.len())));
    for cut in 0..out.len() {
        assert_eq!(parse_reply(&out[..cut], &l).unwrap(), None, "cut at {cut}");
    }
    let double = Reply::Double(b"1.5".to_vec());
    let (mut three, mut two) = (Vec::new(), Vec::new());
    double.encode_as(&mut three, true);
    double.encode_as(&mut two, false);
    assert_eq!(
        (three.as_slice(), two.as_slice()),
        (&b",1.5\r\n"[..], &b"$3\r\n1.5\r\n"[..])
    );
    assert_eq!(parse_reply(&three, &l).unwrap(), Some((double, three.len())));
    let map = Reply::Map(vec![(Reply::Simple("proto".into()), Reply::Integer(3))]);
    let mut out = Vec::new();
    map.encode_as(&mut out, true);
    assert_eq!(out, b"%1\r\n+proto\r\n:3\r\n");
    assert_eq!(parse_reply(&out, &l).unwrap(), Some((map, out.len())));
    let set = Reply::Set(vec![Reply::Bulk(Some(b"m".to_vec()))]);
    let (mut three, mut two) = (Vec::new(), Vec::new());
    set.encode_as(&mut three, true);
    set.encode_as(&mut two, false);
    assert_eq!(
        (three.as_slice(), two.as_slice()),
        (&b"~1\r\n$1\r\nm\r\n"[..], &b"*1\r\n$1\r\nm\r\n"[..])
    );
    assert_eq!(parse_reply(&three, &l).unwrap(), Some((set, three.len())));
    let push = Reply::Push(vec![Reply::Bulk(Some(b"message".to_vec()))]);
    let (mut three, mut two) = (Vec::new(), Vec::new());
    push.encode_as(&mut three, true);
    push.encode_as(&mut two, false);
    assert_eq!(three, b">1\r\n$7\r\nmessage\r\n");
    assert_eq!(two, b"*1\r\n$7\r\nmessage\r\n");
    assert_eq!(parse_reply(&three, &l).unwrap(), Some((push, three.len())));
    let mut many = Vec::new();
    Reply::Many(vec![Reply::Integer(1), Reply::Integer(2)]).encode(&mut many);
    assert_eq!(many, b":1\r\n:2\r\n", "one reply after another");
    assert_eq!(parse_reply(b"*-1\r\n", &l).unwrap(), Some((Reply::NullArray, 5)));
    let (mut two, mut three) = (Vec::new(), Vec::new());
    Reply::NullArray.encode_as(&mut two, false);
    Reply::NullArray.encode_as(&mut three, true);
    assert_eq!(
        (&two[..], &three[..]),
        (&b"*-1\r\n"[..], &b"_\r\n"[..]),
        "the null array round-trips"
    );
    for (bad, what) in [
        (&b":x\r\n"[..], "invalid integer reply 'x'"),
        (b"$2\r\nabc\r\n", "not followed by CRLF"),
        (b"!3\r\nabc\r\n", "unexpected reply type '!'"),
        (b"?\r\n", "unknown reply type byte 0x3f"),
    ] {
        let e = parse_reply(bad, &l).unwrap_err();
        assert!(e.to_string().contains(what), "{e} for {bad:?}");
    }
    let mut deep = "*1\r\n".repeat(MAX_REPLY_DEPTH + 2);
    deep.push_str(":1\r\n");
    assert_eq!(
        parse_reply(deep.as_bytes(), &l).unwrap_err(),
        ProtocolError::TooDeep(MAX_REPLY_DEPTH)
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let small = Limits { max_bulk: 64, max_args: 8, max_inline: 64, unauthenticated: false };
        if let Ok(Some((_, used))) = parse_reply(&bytes, &small) {
            prop_assert!(used <= bytes.len());
            prop_assert_eq!(reply_len(&bytes, &small).unwrap(), Some(used));
        }
    }

    #[test]
    fn commands_read_back_as_arrays_of_bulks(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 0..6)) {
        let mut wire = Vec::new();
        encode_command(&args, &mut wire);
        let back = Reply::Array(args.into_iter().map(|a| Reply::Bulk(Some(a))).collect());
        prop_assert_eq!(parse_reply(&wire, &Limits::default()).unwrap(), Some((back, wire.len())));
    }
}
