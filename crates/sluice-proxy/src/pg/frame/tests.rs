use bytes::BytesMut;
use proptest::prelude::*;

use super::*;

#[test]
fn parses_startup_ssl_gssenc_and_cancel_packets() {
    let mut out = BytesMut::new();
    write_startup(
        &mut out,
        &[
            ("user", "alice"),
            ("database", "shop"),
            ("application_name", "web"),
            ("x", "y"),
        ],
    );
    let (startup, len) = parse_startup(&out).unwrap().unwrap();
    assert_eq!(len, out.len());
    let params = StartupParams {
        user: Some("alice".into()),
        database: Some("shop".into()),
        application_name: Some("web".into()),
    };
    assert_eq!(startup, Startup::Message(params));
    assert_eq!(parse_startup(&out[..len - 1]).unwrap(), None);

    let ssl = [0, 0, 0, 8, 4, 210, 22, 47];
    assert_eq!(parse_startup(&ssl).unwrap(), Some((Startup::Ssl, 8)));
    assert_eq!(ssl_request(), ssl);
    let gss = [0, 0, 0, 8, 4, 210, 22, 48];
    assert_eq!(parse_startup(&gss).unwrap(), Some((Startup::GssEnc, 8)));
    let key = BackendKey {
        pid: 77,
        secret: 0x8000_0001,
    };
    assert_eq!(
        parse_startup(&key.cancel_request()).unwrap(),
        Some((Startup::Cancel(key), 16))
    );
}

#[test]
fn bad_startup_packets_are_named() {
    let err = |b: &[u8]| parse_startup(b).unwrap_err().to_string();
    assert_eq!(
        err(&[0, 0, 0, 3]),
        "invalid startup packet length 3 (must be 8 to 10000)"
    );
    assert_eq!(
        err(&[0xff, 0xff, 0xff, 0xfe]),
        "invalid startup packet length -2 (must be 8 to 10000)"
    );
    assert_eq!(
        err(&[0, 1, 0, 0]),
        "invalid startup packet length 65536 (must be 8 to 10000)"
    );
    assert_eq!(
        err(&[0, 0, 0, 8, 0, 2, 0, 0]),
        "unsupported frontend protocol 2.0: the proxy speaks 3.x"
    );
    assert_eq!(
        err(&[0, 0, 0, 10, 0, 3, 0, 0, b'u', b's']),
        "invalid StartupMessage packet: a parameter is not NUL-terminated"
    );
    assert_eq!(
        err(&[0, 0, 0, 12, 4, 210, 22, 46, 0, 0, 0, 1]),
        "invalid CancelRequest packet: it must be 16 bytes long"
    );
    assert_eq!(PgError::UnsupportedProtocol { major: 2, minor: 0 }.sqlstate(), "0A000");
    assert_eq!(PgError::BadStartupLength(3).sqlstate(), "08P01");
}

#[test]
fn typed_message_lengths_are_checked() {
    assert_eq!(parse_header(b"Q\0\0").unwrap(), None);
    assert_eq!(
        parse_header(b"Q\0\0\0\x09SEL").unwrap(),
        Some(Header { tag: b'Q', len: 10 })
    );
    assert_eq!(
        parse_header(b"Q\0\0\0\x03").unwrap_err().to_string(),
        "invalid length 3 in message 'Q' (a length counts its own 4 bytes)"
    );
    assert_eq!(
        parse_header(b"Q\xff\xff\xff\xff").unwrap_err(),
        PgError::BadLength { tag: b'Q', len: -1 }
    );
    assert!(parse_header(b"d\x7f\xff\xff\xff")
        .unwrap_err()
        .to_string()
        .contains("exceeds the limit of 1073741824"));
}

#[test]
fn tags_name_the_whole_messages_in_order() {
    let mut out = BytesMut::new();
    write_message(&mut out, b'P', b"\0SELECT 1\0\0\0");
    write_message(&mut out, b'S', b"");
    write_message(&mut out, b'Q', b"SELECT 1\0");
    assert_eq!(tags(&out).collect::<Vec<_>>(), b"PSQ");
    assert_eq!(
        tags(&out[..out.len() - 1]).collect::<Vec<_>>(),
        b"PS",
        "a cut message is not one"
    );
}

#[test]
fn error_response_carries_severity_sqlstate_and_message() {
    let mut out = BytesMut::new();
    write_error(&mut out, "ERROR", "53300", "queue full\0!");
    let header = parse_header(&out).unwrap().unwrap();
    assert_eq!((header.tag, header.len), (b'E', out.len()));
    assert_eq!(error_field(&out[5..], b'C'), Some("53300"));
    assert!(out.windows(12).any(|w| w == b"Mqueue full!"));
    let mut rfq = BytesMut::new();
    write_ready_for_query(&mut rfq, b'I');
    assert_eq!(&rfq[..], b"Z\0\0\0\x05I");
}

proptest! {
    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_startup(&input);
        let _ = parse_header(&input);
    }

    #[test]
    fn typed_messages_round_trip(messages in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..64)), 1..8)) {
        let mut out = BytesMut::new();
        for (tag, body) in &messages {
            write_message(&mut out, *tag, body);
        }
        let mut pos = 0;
        for (tag, body) in &messages {
            let header = parse_header(&out[pos..]).unwrap().unwrap();
            prop_assert_eq!(header.tag, *tag);
            prop_assert_eq!(&out[pos + 5..pos + header.len], &body[..]);
            pos += header.len;
        }
        prop_assert_eq!(pos, out.len());
    }

    #[test]
    fn startup_parameters_round_trip(user in "[a-z]{1,10}", db in "[a-z_]{0,10}", app in "[ -~]{0,20}") {
        let mut out = BytesMut::new();
        write_startup(&mut out, &[("user", &user), ("database", &db), ("application_name", &app)]);
        let (startup, len) = parse_startup(&out).unwrap().unwrap();
        prop_assert_eq!(len, out.len());
        let expected = StartupParams { user: Some(user), database: Some(db), application_name: Some(app) };
        prop_assert_eq!(startup, Startup::Message(expected));
    }
}
