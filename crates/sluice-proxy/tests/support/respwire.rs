//! A blocking raw RESP client that returns each reply's exact bytes, so
//! tests can check what the proxy relayed (RESP3 types included).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use sluice_resp::{encode_command, ReplyScanner};

pub struct RespConn {
    stream: TcpStream,
    buf: Vec<u8>,
    scanner: ReplyScanner,
}

impl RespConn {
    pub fn connect(addr: SocketAddr) -> RespConn {
        let stream = TcpStream::connect(addr).expect("connecting to the proxy");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("setting a read timeout");
        RespConn {
            stream,
            buf: Vec::new(),
            scanner: ReplyScanner::default(),
        }
    }

    pub fn send(&mut self, args: &[&str]) {
        let mut out = BytesMut::new();
        encode_command(args, &mut out);
        self.send_raw(&out);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("writing to the proxy");
    }

    /// The bytes of the next reply; `None` if the connection closed first.
    /// Panics if neither comes within the read timeout: a connection left
    /// open is not a closed one.
    pub fn reply(&mut self) -> Option<String> {
        let mut pos = 0;
        loop {
            let (n, reply) = self.scanner.advance(&self.buf[pos..]).expect("a well-formed reply");
            pos += n;
            if reply.is_some() {
                let bytes: Vec<u8> = self.buf.drain(..pos).collect();
                return Some(String::from_utf8_lossy(&bytes).into_owned());
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!("neither a reply nor the connection's end within the read timeout")
                }
                Err(_) => return None,
            }
        }
    }

    /// Sends a command and returns its reply's bytes.
    pub fn call(&mut self, args: &[&str]) -> String {
        self.send(args);
        self.reply()
            .unwrap_or_else(|| panic!("no reply to {args:?}: connection closed"))
    }

    /// Whether a reply arrives within `wait`.
    pub fn replies_within(&mut self, wait: Duration) -> bool {
        self.stream
            .set_read_timeout(Some(wait))
            .expect("setting a read timeout");
        let mut probe = [0u8; 1];
        let answered = matches!(self.stream.peek(&mut probe), Ok(n) if n > 0);
        self.stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("setting a read timeout");
        answered
    }
}
