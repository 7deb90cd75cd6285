//! The RESP2 server behind `sluice serve`: one thread per connection, each
//! command run inside a sluice-io request context tagged with the
//! connection's tenant, so that the store's I/O for it is foreground work
//! of that tenant. A tenant is the connection, or the user it names with
//! `AUTH user password`.
//!
//! Departure from DESIGN.md's choice of tokio for network code: sluice-io
//! keeps the request context on the calling thread (RCP's enlightenment
//! API, `ctx_begin/ctx_end`), and the store blocks in its I/O; a thread per
//! connection keeps each request on one thread from parse to reply.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use slab::Slab;
use sluice_core::metrics::LatencyHistogram;
use sluice_core::Ctx;

use crate::commands::{execute, Session};
use crate::keyspace::KeyLocks;
use crate::resp::{parse, Limits, Reply};
use crate::Db;

/// Stripes of the per-key write locks: enough that unrelated keys rarely
/// share one among a few hundred connections.
const KEY_LOCK_STRIPES: usize = 1024;

#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    pub limits: Limits,
    /// If set, clients must `AUTH` with it before any other command.
    pub password: Option<String>,
}

/// What a tenant has done, for `INFO`.
pub(crate) struct TenantStats {
    pub name: String,
    pub ops: u64,
    pub errors: u64,
    pub latency: LatencyHistogram,
}

pub(crate) struct Shared {
    pub db: Arc<Db>,
    pub options: ServerOptions,
    /// Per-key write locks for read-modify-write commands.
    pub locks: KeyLocks,
    /// Live tenants by name and id; a connection's own tenant is forgotten
    /// when it closes, so connection churn does not grow the server.
    tenants: Mutex<(HashMap<String, u32>, Slab<TenantStats>)>,
    next_request: AtomicU64,
    next_client: AtomicU64,
    clock: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The id of the tenant named `name`, registering it on first use.
    pub fn tenant(&self, name: &str) -> u32 {
        let mut t = lock(&self.tenants);
        if let Some(&id) = t.0.get(name) {
            return id;
        }
        let id = t.1.insert(TenantStats {
            name: name.to_string(),
            ops: 0,
            errors: 0,
            latency: LatencyHistogram::coarse(),
        }) as u32;
        t.0.insert(name.to_string(), id);
        id
    }

    /// Drops a tenant and its statistics.
    fn forget(&self, tenant: u32) {
        let mut t = lock(&self.tenants);
        if let Some(stats) = t.1.try_remove(tenant as usize) {
            t.0.remove(&stats.name);
        }
    }

    fn record(&self, tenant: u32, nanos: u64, failed: bool) {
        let mut t = lock(&self.tenants);
        if let Some(s) = t.1.get_mut(tenant as usize) {
            s.ops += 1;
            s.errors += u64::from(failed);
            s.latency.record(nanos);
        }
    }

    /// Runs `f` on every live tenant's statistics.
    pub fn with_tenants<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &TenantStats>) -> R) -> R {
        f(&mut lock(&self.tenants).1.iter().map(|(_, t)| t))
    }
}

pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    pub fn bind(addr: impl ToSocketAddrs, db: Arc<Db>, options: ServerOptions) -> std::io::Result<Server> {
        Ok(Server {
            listener: TcpListener::bind(addr)?,
            shared: Arc::new(Shared {
                db,
                options,
                locks: KeyLocks::new(KEY_LOCK_STRIPES),
                tenants: Mutex::new((HashMap::new(), Slab::new())),
                next_request: AtomicU64::new(0),
                next_client: AtomicU64::new(1),
                clock: Instant::now(),
            }),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until the listener fails.
    pub fn run(self) -> std::io::Result<()> {
        for stream in self.listener.incoming() {
            let stream = stream?;
            let shared = self.shared.clone();
            std::thread::spawn(move || connection(&shared, stream));
        }
        Ok(())
    }
}

/// Serves one client until it quits, disconnects or breaks the protocol
/// (answered with the protocol error, then closed); then forgets the
/// tenant named by the connection (a tenant named by AUTH stays).
fn connection(shared: &Shared, stream: TcpStream) {
    let client = shared.next_client.fetch_add(1, Ordering::Relaxed);
    let own = shared.tenant(&format!("client-{client}"));
    let mut session = Session {
        tenant: own,
        authenticated: shared.options.password.is_none(),
        quit: false,
    };
    serve(shared, &mut session, stream);
    shared.forget(own);
}

fn serve(shared: &Shared, session: &mut Session, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let (mut buf, mut chunk, mut out) = (Vec::new(), vec![0u8; 64 << 10], Vec::new());
    while !session.quit {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        let used = match serve_buffered(shared, session, &buf, &mut out) {
            Ok(used) => used,
            Err(reply) => {
                reply.encode(&mut out);
                session.quit = true;
                buf.len()
            }
        };
        buf.drain(..used);
        if stream.write_all(&out).is_err() {
            return;
        }
        out.clear();
    }
}

/// Runs every whole request in `buf`, appending replies to `out`; returns
/// the bytes used, or the protocol error that ends the connection.
fn serve_buffered(shared: &Shared, session: &mut Session, buf: &[u8], out: &mut Vec<u8>) -> Result<usize, Reply> {
    let mut used = 0;
    while !session.quit {
        let parsed = parse(&buf[used..], &shared.options.limits).map_err(Reply::error)?;
        let Some((args, n)) = parsed else { break };
        used += n;
        if args.is_empty() {
            continue;
        }
        let started = Instant::now();
        let id = shared.next_request.fetch_add(1, Ordering::Relaxed);
        let arrival = shared.clock.elapsed().as_nanos() as u64;
        let reply = {
            let _ctx = sluice_io::enter(Ctx::new(id, arrival).with_tenant(session.tenant, 1.0));
            execute(shared, session, &args)
        };
        let failed = matches!(reply, Reply::Error(_));
        shared.record(session.tenant, started.elapsed().as_nanos() as u64, failed);
        reply.encode(out);
    }
    Ok(used)
}
