//! What the drivers run against: sluice-kv embedded in the process (every
//! operation inside a sluice-io request context of its tenant), or any
//! server speaking RESP2 over TCP (`sluice serve`, Redis), one connection
//! per client thread.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;

use sluice_core::Ctx;
use sluice_kv::resp::{encode_command, parse_reply, Limits, Reply};
use sluice_kv::Db;

use crate::error::{BenchError, Result};
use crate::ycsb::Op;

/// A client: one per driver thread.
pub trait Client: Send {
    /// Reads `key`; whether it was found.
    fn read(&mut self, key: &[u8]) -> Result<bool>;
    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Reads up to `count` records from `start`; how many there were.
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize>;
    /// Marks the start of a request of `tenant` (a no-op over the network,
    /// where the server assigns tenants).
    fn begin(&mut self, _id: u64, _tenant: u32, _weight: f64) {}
    /// Runs `ops`, each with the value it writes (empty for a read); a
    /// client that can pipeline sends them all before it reads a reply.
    fn run(&mut self, ops: &[(Op, Vec<u8>)]) -> Result<()> {
        for (op, value) in ops {
            match op {
                Op::Read(k) => self.read(k).map(drop)?,
                Op::Scan(k, n) => self.scan(k, *n).map(drop)?,
                Op::Update(k) | Op::Insert(k) => self.write(k, value)?,
                Op::ReadModifyWrite(k) => {
                    self.read(k)?;
                    self.write(k, value)?;
                }
            }
        }
        Ok(())
    }
}

/// Makes clients.
pub trait Target: Sync {
    fn client(&self) -> Result<Box<dyn Client>>;
    /// A client of the tenant `tenant`: over the network, named after it
    /// where the target names clients ([`Resp::naming_clients`]).
    fn client_of(&self, _tenant: &str) -> Result<Box<dyn Client>> {
        self.client()
    }
}

/// sluice-kv in this process.
pub struct Embedded {
    pub db: Arc<Db>,
    /// The runtime's clock, for request arrival times.
    pub runtime: sluice_io::Runtime,
}

struct EmbeddedClient {
    db: Arc<Db>,
    runtime: sluice_io::Runtime,
    ctx: Option<sluice_io::CtxGuard>,
}

impl Target for Embedded {
    fn client(&self) -> Result<Box<dyn Client>> {
        Ok(Box::new(EmbeddedClient {
            db: self.db.clone(),
            runtime: self.runtime.clone(),
            ctx: None,
        }))
    }
}

impl Client for EmbeddedClient {
    fn begin(&mut self, id: u64, tenant: u32, weight: f64) {
        self.ctx = None;
        let ctx = Ctx::new(id, self.runtime.now()).with_tenant(tenant, weight);
        self.ctx = Some(sluice_io::enter(ctx));
    }

    fn read(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.db.get(key)?.is_some())
    }

    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put(key, value)?)
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize> {
        Ok(self.db.scan(start, None, count)?.len())
    }
}

/// A RESP2 server at an address.
pub struct Resp {
    pub addr: std::net::SocketAddr,
    /// Clients name themselves after their tenant (`CLIENT SETNAME`).
    named: bool,
}

impl Resp {
    pub fn new(addr: impl ToSocketAddrs) -> Result<Resp> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| BenchError::Protocol("the address resolved to nothing".into()))?;
        Ok(Resp { addr, named: false })
    }

    /// Each client names itself after its tenant with `CLIENT SETNAME`,
    /// as `sluice route` tells tenants apart.
    pub fn naming_clients(self) -> Resp {
        Resp { named: true, ..self }
    }
}

/// One connection to a RESP server.
pub(crate) struct RespClient {
    stream: TcpStream,
    /// Bytes read and not yet parsed into a reply.
    buf: Vec<u8>,
}

impl Target for Resp {
    fn client(&self) -> Result<Box<dyn Client>> {
        Ok(Box::new(self.connect()?))
    }

    fn client_of(&self, tenant: &str) -> Result<Box<dyn Client>> {
        let mut client = self.connect()?;
        if self.named {
            client.call(&[b"CLIENT", b"SETNAME", tenant.as_bytes()])?;
            client.reply()?;
        }
        Ok(Box::new(client))
    }
}

impl Resp {
    pub(crate) fn connect(&self) -> Result<RespClient> {
        let stream = TcpStream::connect(self.addr)?;
        stream.set_nodelay(true)?;
        Ok(RespClient {
            stream,
            buf: Vec::with_capacity(16 << 10),
        })
    }
}

impl RespClient {
    /// Sends one command.
    pub(crate) fn call(&mut self, args: &[&[u8]]) -> Result<()> {
        let mut req = Vec::new();
        encode_command(args, &mut req);
        Ok(self.stream.write_all(&req)?)
    }

    /// Reads one reply; returns the number of elements (bulk: 1 or 0 for
    /// nil; array: its length, 0 for nil; status and integer: 1).
    pub(crate) fn reply(&mut self) -> Result<usize> {
        loop {
            let parsed = parse_reply(&self.buf, &Limits::default()).map_err(|e| BenchError::Protocol(e.to_string()))?;
            if let Some((reply, used)) = parsed {
                self.buf.drain(..used);
                return match reply {
                    Reply::Error(e) => Err(BenchError::Server(e)),
                    Reply::Bulk(None) | Reply::NullArray => Ok(0),
                    Reply::Array(items) | Reply::Set(items) | Reply::Push(items) | Reply::Many(items) => {
                        Ok(items.len())
                    }
                    Reply::Map(pairs) => Ok(2 * pairs.len()),
                    Reply::Simple(_) | Reply::Integer(_) | Reply::Bulk(Some(_)) | Reply::Double(_) => Ok(1),
                };
            }
            let mut chunk = [0u8; 16 << 10];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(BenchError::Protocol("the server closed the connection".into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

impl Client for RespClient {
    fn read(&mut self, key: &[u8]) -> Result<bool> {
        self.call(&[b"GET", key])?;
        Ok(self.reply()? == 1)
    }

    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.call(&[b"SET", key, value])?;
        self.reply().map(drop)
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize> {
        self.call(&[b"RANGE", start, b"", count.to_string().as_bytes()])?;
        Ok(self.reply()? / 2)
    }

    fn run(&mut self, ops: &[(Op, Vec<u8>)]) -> Result<()> {
        let mut req = Vec::new();
        let mut replies = 0;
        for (op, value) in ops {
            match op {
                Op::Read(k) => encode_command(&[&b"GET"[..], k], &mut req),
                Op::Scan(k, n) => encode_command(&[&b"RANGE"[..], k, b"", n.to_string().as_bytes()], &mut req),
                Op::Update(k) | Op::Insert(k) => encode_command(&[&b"SET"[..], k, value], &mut req),
                // The write waits for the read, as a read-modify-write must:
                // what is pipelined before it goes first.
                Op::ReadModifyWrite(k) => {
                    self.stream.write_all(&std::mem::take(&mut req))?;
                    (0..std::mem::take(&mut replies)).try_for_each(|_| self.reply().map(drop))?;
                    self.read(k)?;
                    self.write(k, value)?;
                    continue;
                }
            }
            replies += 1;
        }
        self.stream.write_all(&req)?;
        (0..replies).try_for_each(|_| self.reply().map(drop))
    }
}
