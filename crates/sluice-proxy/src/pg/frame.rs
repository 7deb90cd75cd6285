//! PostgreSQL wire protocol v3 framing for the proxy: the untyped packets
//! of the startup phase (StartupMessage,
//! SSLRequest, GSSENCRequest, CancelRequest) and the typed messages after it
//! (one tag byte, then a big-endian i32 length that counts itself).
//!
//! Written by hand because the proxy needs only message boundaries and a
//! few fields (startup parameters, BackendKeyData, ReadyForQuery's status);
//! a client library would decode and re-encode everything the proxy relays.
//!
//! Lengths are checked before anything is buffered: a typed message must
//! count at least its own 4 length bytes and at most [`MAX_MESSAGE_LEN`];
//! a startup packet must fit PostgreSQL's own limit of 10,000 bytes. A bad
//! length is an error naming the message and the length; nothing panics.

use bytes::{BufMut, BytesMut};
use thiserror::Error;

/// Longest typed message accepted: PostgreSQL's own limit for a message
/// (`PQ_LARGE_MESSAGE_LIMIT` is 1 GiB - 1).
pub const MAX_MESSAGE_LEN: usize = 1 << 30;
/// Longest startup packet, as PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`.
pub const MAX_STARTUP_LEN: usize = 10_000;

const PROTOCOL_3: u32 = 3 << 16;
const SSL_REQUEST: u32 = 1234 << 16 | 5679;
const GSSENC_REQUEST: u32 = 1234 << 16 | 5680;
const CANCEL_REQUEST: u32 = 1234 << 16 | 5678;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PgError {
    #[error("invalid length {len} in message '{}' (a length counts its own 4 bytes)", char::from(*.tag).escape_default())]
    BadLength { tag: u8, len: i64 },
    #[error("message '{}' of {len} bytes exceeds the limit of {MAX_MESSAGE_LEN}", char::from(*.tag).escape_default())]
    TooLong { tag: u8, len: usize },
    #[error("invalid startup packet length {0} (must be 8 to {MAX_STARTUP_LEN})")]
    BadStartupLength(i64),
    #[error("unsupported frontend protocol {major}.{minor}: the proxy speaks 3.x")]
    UnsupportedProtocol { major: u16, minor: u16 },
    #[error("invalid {what} packet: {problem}")]
    BadPacket { what: &'static str, problem: &'static str },
}

impl PgError {
    /// The SQLSTATE PostgreSQL itself reports for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            PgError::UnsupportedProtocol { .. } => "0A000",
            _ => "08P01",
        }
    }
}

/// The header of a typed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub tag: u8,
    /// Bytes of the whole message, tag included.
    pub len: usize,
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The header of the typed message at the start of `buf`, once its five
/// bytes are there (the message itself may still be incomplete).
pub fn parse_header(buf: &[u8]) -> Result<Option<Header>, PgError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = be_i32(&buf[1..5]);
    if len < 4 {
        return Err(PgError::BadLength { tag, len: len.into() });
    }
    let len = len as usize + 1;
    if len > MAX_MESSAGE_LEN {
        return Err(PgError::TooLong { tag, len });
    }
    Ok(Some(Header { tag, len }))
}

/// A secret identifying one backend, for CancelRequest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendKey {
    pub pid: u32,
    pub secret: u32,
}

impl BackendKey {
    /// The key in a BackendKeyData message's body.
    pub fn from_body(body: &[u8]) -> Option<BackendKey> {
        let pid = body.get(0..4)?;
        let secret = body.get(4..8)?;
        Some(BackendKey {
            pid: be_i32(pid) as u32,
            secret: be_i32(secret) as u32,
        })
    }

    /// The key as a BackendKeyData message's body.
    pub fn to_body(&self) -> [u8; 8] {
        let mut body = [0u8; 8];
        body[0..4].copy_from_slice(&self.pid.to_be_bytes());
        body[4..8].copy_from_slice(&self.secret.to_be_bytes());
        body
    }

    /// The CancelRequest packet for this key.
    pub fn cancel_request(&self) -> [u8; 16] {
        let mut packet = [0u8; 16];
        packet[0..4].copy_from_slice(&16u32.to_be_bytes());
        packet[4..8].copy_from_slice(&CANCEL_REQUEST.to_be_bytes());
        packet[8..16].copy_from_slice(&self.to_body());
        packet
    }
}

/// The SSLRequest packet: a client asking the server for TLS.
pub fn ssl_request() -> [u8; 8] {
    let mut packet = [0u8; 8];
    packet[0..4].copy_from_slice(&8u32.to_be_bytes());
    packet[4..8].copy_from_slice(&SSL_REQUEST.to_be_bytes());
    packet
}

/// The startup parameters the proxy names tenants by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartupParams {
    pub user: Option<String>,
    pub database: Option<String>,
    pub application_name: Option<String>,
}

/// A packet of the startup phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Startup {
    Ssl,
    GssEnc,
    Cancel(BackendKey),
    /// A StartupMessage; its bytes are relayed to the server unchanged.
    Message(StartupParams),
}

/// The startup packet at the start of `buf` and its length, once complete.
pub fn parse_startup(buf: &[u8]) -> Result<Option<(Startup, usize)>, PgError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = be_i32(buf);
    if !(8..=MAX_STARTUP_LEN as i32).contains(&len) {
        return Err(PgError::BadStartupLength(len.into()));
    }
    let len = len as usize;
    let Some(packet) = buf.get(..len) else {
        return Ok(None);
    };
    let code = be_i32(&packet[4..8]) as u32;
    let startup = match code {
        SSL_REQUEST => Startup::Ssl,
        GSSENC_REQUEST => Startup::GssEnc,
        CANCEL_REQUEST => {
            let key = BackendKey::from_body(&packet[8..])
                .filter(|_| len == 16)
                .ok_or(PgError::BadPacket {
                    what: "CancelRequest",
                    problem: "it must be 16 bytes long",
                })?;
            Startup::Cancel(key)
        }
        code if code >> 16 == PROTOCOL_3 >> 16 => Startup::Message(parse_params(&packet[8..])?),
        code => {
            return Err(PgError::UnsupportedProtocol {
                major: (code >> 16) as u16,
                minor: code as u16,
            })
        }
    };
    Ok(Some((startup, len)))
}

/// StartupMessage parameters: NUL-terminated name and value pairs, ended by
/// an empty name.
fn parse_params(mut body: &[u8]) -> Result<StartupParams, PgError> {
    let bad = |problem| PgError::BadPacket {
        what: "StartupMessage",
        problem,
    };
    let mut params = StartupParams::default();
    let cstr = |body: &mut &[u8]| -> Result<String, PgError> {
        let end = body
            .iter()
            .position(|&b| b == 0)
            .ok_or(bad("a parameter is not NUL-terminated"))?;
        let s = String::from_utf8_lossy(&body[..end]).into_owned();
        *body = &body[end + 1..];
        Ok(s)
    };
    loop {
        let name = cstr(&mut body)?;
        if name.is_empty() {
            break;
        }
        let value = cstr(&mut body)?;
        match name.as_str() {
            "user" => params.user = Some(value),
            "database" => params.database = Some(value),
            "application_name" => params.application_name = Some(value),
            _ => {}
        }
    }
    if !body.is_empty() {
        return Err(bad("bytes follow the terminating NUL"));
    }
    Ok(params)
}

/// Appends a StartupMessage for protocol 3.0 with `params`.
pub fn write_startup(out: &mut BytesMut, params: &[(&str, &str)]) {
    let body: usize = params.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>() + 1;
    out.put_u32((8 + body) as u32);
    out.put_u32(PROTOCOL_3);
    for (k, v) in params {
        out.put_slice(k.as_bytes());
        out.put_u8(0);
        out.put_slice(v.as_bytes());
        out.put_u8(0);
    }
    out.put_u8(0);
}

/// The tags of the whole messages at the start of `buf`, in order (the
/// proxy's own messages, which are well formed).
pub fn tags(mut buf: &[u8]) -> impl Iterator<Item = u8> + '_ {
    std::iter::from_fn(move || {
        let header = parse_header(buf).ok()??;
        buf = buf.get(header.len..)?;
        Some(header.tag)
    })
}

/// Appends a typed message.
pub fn write_message(out: &mut BytesMut, tag: u8, body: &[u8]) {
    write_message_parts(out, tag, &[body]);
}

/// Appends a typed message whose body is `parts` one after the other.
pub fn write_message_parts(out: &mut BytesMut, tag: u8, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    out.reserve(len + 5);
    out.put_u8(tag);
    out.put_u32((len + 4) as u32);
    for part in parts {
        out.put_slice(part);
    }
}

/// Appends an ErrorResponse with severity, SQLSTATE and message. NUL bytes,
/// which would end a field early, are dropped from the message.
pub fn write_error(out: &mut BytesMut, severity: &str, sqlstate: &str, message: &str) {
    let mut body = BytesMut::with_capacity(message.len() + 32);
    for (field, value) in [(b'S', severity), (b'V', severity), (b'C', sqlstate), (b'M', message)] {
        body.put_u8(field);
        body.extend(value.bytes().filter(|&b| b != 0));
        body.put_u8(0);
    }
    body.put_u8(0);
    write_message(out, b'E', &body);
}

/// Appends a ReadyForQuery with transaction status `status` ('I', 'T', 'E').
pub fn write_ready_for_query(out: &mut BytesMut, status: u8) {
    write_message(out, b'Z', &[status]);
}

/// A field of an ErrorResponse body (`b'C'` the SQLSTATE, `b'M'` the
/// message), if it has one.
pub fn error_field(body: &[u8], field: u8) -> Option<&str> {
    let mut fields = body.split(|&b| b == 0);
    fields
        .find(|f| f.first() == Some(&field))
        .and_then(|f| std::str::from_utf8(&f[1..]).ok())
}

#[cfg(test)]
mod tests;
