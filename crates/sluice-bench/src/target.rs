//! What the drivers run against: sluice-kv embedded in the process (every
//! operation inside a sluice-io request context of its tenant), or any
//! server speaking RESP2 over TCP (`sluice serve`, Redis), one connection
//! per client thread.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;

use sluice_core::Ctx;
use sluice_kv::resp::encode_command;
use sluice_kv::Db;

use crate::error::{BenchError, Result};

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
}

/// Makes clients.
pub trait Target: Sync {
    fn client(&self) -> Result<Box<dyn Client>>;
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
}

impl Resp {
    pub fn new(addr: impl ToSocketAddrs) -> Result<Resp> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| BenchError::Protocol("the address resolved to nothing".into()))?;
        Ok(Resp { addr })
    }
}

struct RespClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: String,
}

impl Target for Resp {
    fn client(&self) -> Result<Box<dyn Client>> {
        let s = TcpStream::connect(self.addr)?;
        s.set_nodelay(true)?;
        Ok(Box::new(RespClient {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            line: String::new(),
        }))
    }
}

impl RespClient {
    fn call(&mut self, args: &[&[u8]]) -> Result<()> {
        let mut req = Vec::new();
        encode_command(args, &mut req);
        Ok(self.writer.write_all(&req)?)
    }

    /// Reads one reply; returns the number of elements (bulk: 1 or 0 for
    /// nil; array: its length; status: 1), skipping their contents.
    fn reply(&mut self) -> Result<usize> {
        self.line.clear();
        self.reader.read_line(&mut self.line)?;
        let (tag, rest) = self.line.split_at(self.line.len().min(1));
        let rest = rest.trim_end().to_string();
        let n = || rest.parse::<i64>().map_err(|_| BenchError::Protocol(self.line.clone()));
        match tag {
            "+" | ":" => Ok(1),
            "-" => Err(BenchError::Server(rest)),
            "$" => match n()? {
                len if len < 0 => Ok(0),
                len => {
                    let mut skip = vec![0; len as usize + 2];
                    self.reader.read_exact(&mut skip)?;
                    Ok(1)
                }
            },
            "*" => {
                let items = n()?.max(0) as usize;
                for _ in 0..items {
                    self.reply()?;
                }
                Ok(items)
            }
            _ => Err(BenchError::Protocol(self.line.clone())),
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
}
