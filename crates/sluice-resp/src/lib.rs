//! RESP, the Redis protocol, in one place for every part of Sluice that
//! speaks it: `sluice serve` parses requests and encodes replies; the
//! router parses requests from its clients, encodes sub-requests to its
//! shards and parses their replies; the bench drivers encode commands and
//! parse replies.
//!
//! Requests are arrays of bulk strings (what every client library sends)
//! or inline commands (what `telnet` and `redis-cli` in a pipe may send);
//! replies are the five RESP2 types, and in RESP3 (after `HELLO 3`) also
//! the null, the map and the double. Hand-written because the protocol's message
//! boundaries are the point: both parsers are incremental (they return
//! `None` until a whole message is buffered) and bounded (lengths are
//! checked against limits before anything is allocated), so one peer's
//! malformed or oversized input is an error for that peer alone.
//!
//! ```
//! use sluice_resp::{encode_command, parse, parse_reply, Limits, Reply};
//!
//! let mut wire = Vec::new();
//! encode_command(&["GET", "k"], &mut wire);
//! let (args, used) = parse(&wire, &Limits::default()).unwrap().unwrap();
//! assert_eq!((args, used), (vec![b"GET".to_vec(), b"k".to_vec()], wire.len()));
//!
//! let mut reply = Vec::new();
//! Reply::Array(vec![Reply::Bulk(Some(b"v".to_vec())), Reply::Bulk(None)]).encode(&mut reply);
//! assert_eq!(parse_reply(&reply[..5], &Limits::default()).unwrap(), None, "not whole yet");
//! let (back, used) = parse_reply(&reply, &Limits::default()).unwrap().unwrap();
//! assert_eq!((back, used), (Reply::Array(vec![Reply::Bulk(Some(b"v".to_vec())), Reply::Bulk(None)]), reply.len()));
//! ```

/// Sizes a request may not exceed.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_args: usize,
    pub max_bulk: usize,
    pub max_inline: usize,
    /// These are the limits before authentication ([`Limits::before_auth`]);
    /// an array or bulk over them is named "unauthenticated", as Redis
    /// names it, so that the client learns it has to authenticate first.
    pub unauthenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_args: 1 << 20,
            max_bulk: 512 << 20,
            max_inline: 64 << 10,
            unauthenticated: false,
        }
    }
}

impl Limits {
    /// For replies a relay passes on: a server's replies are as large as
    /// the data asked for (an LRANGE of millions of elements), so only the
    /// protocol's own bounds apply.
    pub fn relay() -> Limits {
        Limits {
            max_args: i64::MAX as usize,
            max_bulk: i64::MAX as usize,
            max_inline: 1 << 20,
            unauthenticated: false,
        }
    }

    /// Redis's limits for a client that has not authenticated yet: at most
    /// 10 arguments of at most 16 KiB, so that whoever can connect without
    /// the password cannot make the server buffer a large request.
    pub fn before_auth(self) -> Limits {
        Limits {
            max_args: self.max_args.min(10),
            max_bulk: self.max_bulk.min(16 << 10),
            max_inline: self.max_inline,
            unauthenticated: true,
        }
    }

    /// How an array or bulk length over these limits is named.
    fn over(&self) -> &'static str {
        if self.unauthenticated {
            "unauthenticated"
        } else {
            "invalid"
        }
    }
}

/// Why a request cannot be parsed; the connection is answered and closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

fn err<T>(what: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(what.into()))
}

/// Buffers up to this size are parsed in one pass (see [`parse`]).
const ONE_PASS: usize = 64 << 10;

/// A request's arguments and the bytes it took from the buffer.
pub type Request = (Vec<Vec<u8>>, usize);

/// One request from the front of `buf`: its arguments and the bytes it
/// took, or `None` if `buf` does not yet hold all of it.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        // A large request arrives in many reads: it is found whole first
        // without copying anything, and its arguments are copied once. A
        // small one is parsed in one pass: copying it again costs less
        // than walking it twice.
        Some(b'*') if buf.len() <= ONE_PASS => parse_array(buf, limits, true),
        Some(b'*') => match parse_array(buf, limits, false)? {
            None => Ok(None),
            Some(_) => parse_array(buf, limits, true),
        },
        Some(_) => parse_inline(buf, limits),
    }
}

/// How a request line ends: array headers with CRLF; inline commands, as
/// Redis reads them, at the first LF, a CR before it dropped (what `nc` or
/// a shell's `echo` send).
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    Crlf,
    Lf,
}

/// The line starting at `at` (without its ending) and the offset after it.
fn line(buf: &[u8], at: usize, max: usize, ending: Ending) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = &buf[at.min(buf.len())..];
    let end = match ending {
        Ending::Crlf => memchr::memchr_iter(b'\n', rest)
            .find(|&n| n > 0 && rest[n - 1] == b'\r')
            .map(|n| (n - 1, n + 1)),
        Ending::Lf => memchr::memchr(b'\n', rest).map(|n| (n, n + 1)),
    };
    let (text, next) = match end {
        Some((n, after)) => (&rest[..n], Some(at + after)),
        None => (rest, None),
    };
    // A CR before an inline line's LF belongs to the ending; so may a
    // trailing CR whose LF has not arrived yet.
    let text = match (ending, next) {
        (Ending::Lf, _) | (_, None) => text.strip_suffix(b"\r").unwrap_or(text),
        (Ending::Crlf, Some(_)) => text,
    };
    // Judged the same whether the ending has arrived or not, so that how the
    // bytes were split never decides between a request and an error.
    if text.len() > max {
        return err(format!("request line longer than {max} bytes"));
    }
    Ok(next.map(|next| (text, next)))
}

/// A length: decimal digits, with an optional sign.
fn number(digits: &[u8], what: &str) -> Result<i64, ProtocolError> {
    let (negative, body) = match digits {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, digits),
    };
    let value = (!body.is_empty())
        .then_some(body)
        .and_then(|body| {
            body.iter().try_fold(0i64, |n, &d| {
                d.is_ascii_digit()
                    .then(|| n.checked_mul(10)?.checked_add(i64::from(d - b'0')))
                    .flatten()
            })
        })
        .map(|n| if negative { -n } else { n });
    value.map_or_else(|| err(format!("invalid {what} length")), Ok)
}

/// The array request at the front of `buf`; its arguments are copied only
/// if `build` (otherwise they are left empty and only its end is found).
fn parse_array(buf: &[u8], limits: &Limits, build: bool) -> Result<Option<Request>, ProtocolError> {
    let Some((head, mut at)) = line(buf, 1, 32, Ending::Crlf)? else {
        return Ok(None);
    };
    let count = number(head, "multibulk")?;
    if count > limits.max_args as i64 {
        return err(format!("{} multibulk length", limits.over()));
    }
    let mut args = Vec::with_capacity(if build { count.clamp(0, 1024) as usize } else { 0 });
    for _ in 0..count.max(0) {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&c) => return err(format!("expected '$', got '{}'", c as char)),
        }
        let Some((len, start)) = line(buf, at + 1, 32, Ending::Crlf)? else {
            return Ok(None);
        };
        let len = number(len, "bulk")?;
        if len < 0 {
            return err("invalid bulk length");
        }
        if len > limits.max_bulk as i64 {
            return err(format!("{} bulk length", limits.over()));
        }
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return err("bulk string not terminated by CRLF");
        }
        if build {
            args.push(buf[start..end].to_vec());
        }
        at = end + 2;
    }
    Ok(Some((args, at)))
}

fn parse_inline(buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
    let Some((text, next)) = line(buf, 0, limits.max_inline, Ending::Lf)? else {
        return Ok(None);
    };
    let args: Vec<Vec<u8>> = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|a| !a.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if args.len() > limits.max_args {
        return err(format!("inline request with more than {} arguments", limits.max_args));
    }
    Ok(Some((args, next)))
}

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
    /// Field-value pairs: a map in RESP3, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// A floating-point number as the server writes it out (Redis: `%.17g`,
    /// `inf`, `-inf`): a double in RESP3, a bulk string in RESP2.
    Double(Vec<u8>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    pub fn error(message: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {message}"))
    }

    /// In RESP2, the protocol of every connection until it says `HELLO 3`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_as(out, false);
    }

    /// In RESP3 if `resp3`: a null is `_` and a map `%`; otherwise RESP2.
    pub fn encode_as(&self, out: &mut Vec<u8>, resp3: bool) {
        match self {
            Reply::Simple(s) => line_reply(out, b'+', s),
            Reply::Error(e) => line_reply(out, b'-', e),
            Reply::Integer(n) => header(out, b':', *n),
            Reply::Bulk(None) if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Bulk(None) => out.extend_from_slice(b"$-1\r\n"),
            Reply::Bulk(Some(b)) => put_bulk(out, b),
            Reply::Double(text) if resp3 => {
                out.push(b',');
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Double(text) => put_bulk(out, text),
            Reply::Array(items) => {
                header(out, b'*', items.len() as i64);
                for i in items {
                    i.encode_as(out, resp3);
                }
            }
            Reply::Map(pairs) => {
                let header = if resp3 {
                    format!("%{}\r\n", pairs.len())
                } else {
                    format!("*{}\r\n", 2 * pairs.len())
                };
                out.extend_from_slice(header.as_bytes());
                for (k, v) in pairs {
                    k.encode_as(out, resp3);
                    v.encode_as(out, resp3);
                }
            }
        }
    }
}

/// Replies nested deeper than this are refused: the parser recurses once
/// a level, and no command Sluice relays nests more than a few.
const MAX_REPLY_DEPTH: usize = 64;

/// One reply from the front of `buf`: the reply and the bytes it took, or
/// `None` if `buf` does not yet hold all of it. `limits` bounds its bulk
/// strings (`max_bulk`) and the elements of each array (`max_args`).
/// RESP3's null (`_`) reads as a null bulk, its map (`%`) as
/// [`Reply::Map`] and its double (`,`) as [`Reply::Double`]; other RESP3
/// types are refused, as Sluice never asks a server for them.
pub fn parse_reply(buf: &[u8], limits: &Limits) -> Result<Option<(Reply, usize)>, ProtocolError> {
    // A large reply arrives in many reads: its end is found first without
    // copying anything, so each read costs a walk over the reply's headers,
    // and its bytes are copied once, when it is whole.
    if reply_at(buf, 0, limits, 0, false)?.is_none() {
        return Ok(None);
    }
    Ok(reply_at(buf, 0, limits, 0, true)?.map(|(reply, used)| (reply.expect("built"), used)))
}

/// The length of the reply at the front of `buf`, or `None` if `buf` does
/// not yet hold all of it: what a relay needs to pass a reply on as it
/// came, without building it.
pub fn reply_len(buf: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
    Ok(reply_at(buf, 0, limits, 0, false)?.map(|(_, used)| used))
}

/// The byte ranges of the elements of the array reply `buf` holds whole,
/// or `None` if it is not an array: what a relay needs to splice elements
/// of several replies into one without building them.
pub fn array_items(buf: &[u8], limits: &Limits) -> Result<Option<Vec<std::ops::Range<usize>>>, ProtocolError> {
    if buf.first() != Some(&b'*') {
        return Ok(None);
    }
    let Some((text, mut at)) = line(buf, 1, limits.max_inline, Ending::Crlf)? else {
        return err("incomplete array reply");
    };
    let count = number(text, "multibulk")?;
    if count < 0 {
        return Ok(None);
    }
    if count > limits.max_args as i64 {
        return err("invalid multibulk length");
    }
    let mut items = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let Some((_, end)) = reply_at(buf, at, limits, 1, false)? else {
            return err("incomplete array reply");
        };
        items.push(at..end);
        at = end;
    }
    Ok(Some(items))
}

/// The reply at `at` and the offset after it; the reply itself only if
/// `build` (otherwise only where it ends is found).
fn reply_at(
    buf: &[u8],
    at: usize,
    limits: &Limits,
    depth: usize,
    build: bool,
) -> Result<Option<(Option<Reply>, usize)>, ProtocolError> {
    let Some(&tag) = buf.get(at) else {
        return Ok(None);
    };
    if depth > MAX_REPLY_DEPTH {
        return err(format!("reply nested deeper than {MAX_REPLY_DEPTH} levels"));
    }
    let Some((text, next)) = line(buf, at + 1, limits.max_inline, Ending::Crlf)? else {
        return Ok(None);
    };
    let text_owned = || String::from_utf8_lossy(text).into_owned();
    let done = |reply: &dyn Fn() -> Reply, end: usize| Ok(Some((build.then(reply), end)));
    match tag {
        b'+' => done(&|| Reply::Simple(text_owned()), next),
        b'-' => done(&|| Reply::Error(text_owned()), next),
        b':' => match std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()) {
            Some(n) => done(&|| Reply::Integer(n), next),
            None => err(format!("invalid integer reply '{}'", text_owned())),
        },
        b'_' => done(&|| Reply::Bulk(None), next),
        b',' => done(&|| Reply::Double(text.to_vec()), next),
        b'$' => {
            let len = number(text, "bulk")?;
            if len < 0 {
                return done(&|| Reply::Bulk(None), next);
            }
            if len > limits.max_bulk as i64 {
                return err("invalid bulk length");
            }
            let end = next + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return err("bulk string not terminated by CRLF");
            }
            done(&|| Reply::Bulk(Some(buf[next..end].to_vec())), end + 2)
        }
        b'*' | b'%' => {
            let count = number(text, "multibulk")?;
            if count < 0 {
                return done(&|| Reply::Bulk(None), next);
            }
            let per = if tag == b'%' { 2 } else { 1 };
            if count.saturating_mul(per) > limits.max_args as i64 {
                return err("invalid multibulk length");
            }
            let mut items = Vec::with_capacity(if build { (count * per).min(1024) as usize } else { 0 });
            let mut at = next;
            for _ in 0..count * per {
                let Some((item, after)) = reply_at(buf, at, limits, depth + 1, build)? else {
                    return Ok(None);
                };
                items.extend(item);
                at = after;
            }
            if !build {
                return Ok(Some((None, at)));
            }
            let reply = if tag == b'%' {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            } else {
                Reply::Array(items)
            };
            Ok(Some((Some(reply), at)))
        }
        other => err(format!("unexpected reply type '{}'", other as char)),
    }
}

/// A command as clients send it: an array of bulk strings.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    header(out, b'*', args.len() as i64);
    for a in args {
        put_bulk(out, a.as_ref());
    }
}

fn put_bulk(out: &mut Vec<u8>, b: &[u8]) {
    header(out, b'$', b.len() as i64);
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// `tag`, `n` in decimal, CRLF, written in place: a relay writes several
/// a command, and formatting each through `format!` would show.
fn header(out: &mut Vec<u8>, tag: u8, n: i64) {
    out.push(tag);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A one-line reply; CR and LF would end it early, so they become spaces.
fn line_reply(out: &mut Vec<u8>, tag: u8, text: &str) {
    out.push(tag);
    out.extend(text.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_request(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        out
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
        assert_eq!(
            parse(b"*1\n$4\nPING\n", &l).unwrap(),
            None,
            "array lines still end at CRLF"
        );
    }

    #[test]
    fn malformed_requests_are_named_errors() {
        let l = Limits::default();
        for (bad, what) in [
            (&b"*1\r\n:3\r\n"[..], "expected '$', got ':'"),
            (b"*x\r\n", "invalid multibulk length"),
            (b"*1\r\n$-5\r\n", "invalid bulk length"),
            (b"*1\r\n$1\r\nab\r\n", "not terminated by CRLF"),
        ] {
            let e = parse(bad, &l).unwrap_err();
            assert!(e.to_string().contains(what), "{e} for {bad:?}");
        }
        let small = Limits {
            max_bulk: 4,
            max_args: 2,
            max_inline: 8,
            unauthenticated: false,
        };
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
        // Found by fuzz/fuzz_targets/kv_resp_request.rs: inline requests
        // were bounded in bytes but not in arguments.
        let e = parse(b"a b c\r\n", &small).unwrap_err();
        assert!(e.to_string().contains("more than 2 arguments"), "{e}");
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
        assert_eq!(parse(b"*10\r\n$16384\r\n", &l), Ok(None), "at the limits, more to come");
        let e = parse(b"*1\r\n$-1\r\n", &l).unwrap_err();
        assert_eq!(e.to_string(), "Protocol error: invalid bulk length");
        let small = Limits {
            max_args: 2,
            ..Limits::default()
        };
        assert_eq!(small.before_auth().max_args, 2, "never above the configured limits");
    }

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
        assert_eq!(parse_reply(&out, &l).unwrap(), Some((map, out.len())));
        assert_eq!(parse_reply(b"*-1\r\n", &l).unwrap(), Some((Reply::Bulk(None), 5)));
        for (bad, what) in [
            (&b":x\r\n"[..], "invalid integer reply"),
            (b"$2\r\nabc\r\n", "not terminated by CRLF"),
            (b"!3\r\n", "unexpected reply type '!'"),
        ] {
            let e = parse_reply(bad, &l).unwrap_err();
            assert!(e.to_string().contains(what), "{e} for {bad:?}");
        }
        let mut array = Vec::new();
        Reply::Array(vec![
            Reply::Integer(1),
            Reply::Bulk(Some(b"xy".to_vec())),
            Reply::Bulk(None),
        ])
        .encode(&mut array);
        assert_eq!(reply_len(&array, &l).unwrap(), Some(array.len()));
        assert_eq!(reply_len(&array[..array.len() - 1], &l).unwrap(), None);
        let items = array_items(&array, &l).unwrap().unwrap();
        let pieces: Vec<&[u8]> = items.into_iter().map(|r| &array[r]).collect();
        assert_eq!(pieces, vec![&b":1\r\n"[..], b"$2\r\nxy\r\n", b"$-1\r\n"]);
        assert_eq!(array_items(b"+OK\r\n", &l).unwrap(), None);
        let deep = "*1\r\n".repeat(MAX_REPLY_DEPTH + 2);
        assert!(parse_reply(deep.as_bytes(), &l)
            .unwrap_err()
            .to_string()
            .contains("nested"));
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
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let small = Limits { max_bulk: 64, max_args: 8, max_inline: 64, unauthenticated: false };
            if let Ok(Some((_, used))) = parse(&bytes, &small) {
                prop_assert!(used <= bytes.len());
            }
            if let Ok(Some((_, used))) = parse_reply(&bytes, &small) {
                prop_assert!(used <= bytes.len());
            }
        }
    }
}
