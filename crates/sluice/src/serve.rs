//! `sluice serve`: sluice-kv behind its RESP server, on a sluice-io
//! runtime (the page cache by default, or any device a runtime TOML file
//! describes: O_DIRECT, an emulated SSD, disk or cloud volume).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options, Server, ServerOptions};

/// Serve a sluice-kv store over RESP (the Redis protocol)
#[derive(Args)]
#[command(
    long_about = "Serve a sluice-kv store over RESP2 and RESP3 (after HELLO 3), the Redis protocol.\n\n\
    Commands: GET, SET (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL), SETEX, PSETEX, GETSET, \
    SETNX, STRLEN, APPEND, GETDEL, GETEX, INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, DEL, UNLINK, EXISTS, TOUCH, MGET, \
    MSET, TYPE; HSET, HMSET, HSETNX, HGET, HMGET, HGETALL, HKEYS, HVALS, HSTRLEN, HDEL, HEXISTS, HLEN, HINCRBY, HINCRBYFLOAT, HSCAN; SADD, SREM, SCARD, SISMEMBER, SMISMEMBER, SMEMBERS, SINTER, SUNION, SDIFF, SINTERCARD, SINTERSTORE, SUNIONSTORE, SDIFFSTORE, SMOVE, SPOP, SRANDMEMBER, SSCAN; ZADD (NX, XX, GT, LT, \
    CH, INCR), ZINCRBY, ZREM, ZCARD, ZSCORE, ZRANK, ZREVRANK, ZRANGE (BYSCORE, BYLEX, REV, LIMIT, \
    WITHSCORES), ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZCOUNT, ZLEXCOUNT, ZMSCORE, ZREMRANGEBYSCORE, ZREMRANGEBYLEX, ZREMRANGEBYRANK, ZPOPMIN, ZPOPMAX, BZPOPMIN, BZPOPMAX, ZSCAN; LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP (with a count), LLEN, \
    LINDEX, LRANGE, LSET, LTRIM, LMOVE, RPOPLPUSH, LMPOP, BLPOP, BRPOP, BLMPOP, BLMOVE, BRPOPLPUSH, LREM, LINSERT, LPOS (a blocked client holds no worker); XADD (NOMKSTREAM, MAXLEN, MINID), XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XREAD (COUNT, BLOCK; not consumer groups); SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB (a subscriber holds no worker; one that leaves 32 MiB of messages unread is closed); \
    KEYS, SCAN (MATCH, COUNT, TYPE), DBSIZE, FLUSHDB, FLUSHALL; EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, \
    EXPIRETIME, PEXPIRETIME, PERSIST; MULTI, EXEC, DISCARD, WATCH, UNWATCH; EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT (LOAD, \
    EXISTS, FLUSH): Lua 5.1 scripts, each run atomically (redis.call and its kin, cjson, \
    cmsgpack, bit, struct, read-only globals); CLIENT (ID, \
    SETNAME, GETNAME, SETINFO, INFO); PING, ECHO, INFO [section], AUTH, HELLO, SELECT 0, QUIT; \
    CONFIG GET/SET (flush-*, compaction-* and expiry-*: rate-bytes, rate-iops, paused, critical; the \
    background tasks' knobs, changed while they run; shard-slots: the hash slots this store serves \
    behind sluice route, which the router sets, a script's command on a key of another slot refused); \
    COMMAND (COUNT, INFO, LIST, GETKEYS, \
    DOCS: arity, flags, key positions as Redis 7 gives them); \
    SLUICE.WITH (a request context); and RANGE start end [count] (string keys start <= key \
    < end; an empty end is unbounded). Keys may not start with byte 0xff (reserved); a value \
    holds at most 16 MiB. \
    Every command runs as foreground work of its tenant: the connection, or the user named \
    by AUTH user password. Flush, compaction and the expiry sweeper (which deletes values \
    past their deadline, as Redis's active expiry does) run as background tasks; INFO reports \
    tenants, background tasks and levels.\n\n\
    A connection costs a few KiB and no thread: one worker per core (--active-workers) takes \
    every connection ready at once from one poller and runs their commands in turn, as an \
    event loop does; a worker about to block on the disk or a lock hands its turn to another \
    of the pool (--workers), so that no client waits on another's I/O. A write is \
    acknowledged once the WAL is synced; one sync covers every connection waiting.\n\n\
    A failed write to disk (a full disk) stops writes, each refused with the cause, until a \
    retry succeeds; then they resume. A client beyond --max-clients is told so in RESP and \
    closed, as redis-server does. Accept errors (out of file descriptors) are logged and \
    backed off. Logs go to stderr (RUST_LOG sets the level; info by default).\n\n\
    Example: sluice serve --dir data --port 6380, then redis-cli -p 6380 set k v"
)]
pub struct ServeArgs {
    /// Directory of the store (created if missing)
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    #[arg(long, default_value_t = 6380)]
    pub port: u16,
    /// Require AUTH with this password
    #[arg(long)]
    pub password: Option<String>,
    /// sluice-io runtime configuration (TOML: [device], [rcp]); default: the page cache, RCP on
    #[arg(long)]
    pub runtime: Option<PathBuf>,
    /// Memtable size, MiB
    #[arg(long, default_value_t = 4)]
    pub memtable_mb: usize,
    /// Block cache size, MiB
    #[arg(long, default_value_t = 8)]
    pub block_cache_mb: usize,
    /// Acknowledge writes before the WAL is synced
    #[arg(long)]
    pub no_sync: bool,
    /// Commands in progress at once, each on a worker thread (connections take no thread of
    /// their own): the workers beyond --active-workers take over from those blocked on the
    /// disk; default: 4 per core. On a slow device, as many as the clients give the I/O
    /// scheduler requests to order
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: Option<u16>,
    /// Workers serving connections at once while none blocks; default: one per core. Set it
    /// to --workers when every request waits on the device: each ready connection then gets a
    /// worker of its own at once
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub active_workers: Option<u16>,
    /// Longest a Lua script (EVAL, EVALSHA) runs before it is stopped with an error, in
    /// milliseconds: a script holds every writer while it runs
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub script_time_limit: u64,
    /// Clients connected at once, as Redis's maxclients: the next is told "max number of
    /// clients reached" and closed. Lowered, with a warning, to what the open-file limit
    /// (ulimit -n) has room for
    #[arg(long, default_value_t = sluice_resp::MAX_CLIENTS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_clients: u32,
}

pub fn run(args: ServeArgs) -> Result<()> {
    limit_malloc_arenas();
    // Accept failures, writes stopped by a full disk and their resumption
    // are logged; RUST_LOG chooses more or less.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let config = match &args.runtime {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            RuntimeConfig::from_toml(&text).with_context(|| format!("in {}", p.display()))?
        }
        None => RuntimeConfig::default(),
    };
    let options = Options {
        memtable_bytes: args.memtable_mb << 20,
        block_cache_bytes: args.block_cache_mb << 20,
        sync: !args.no_sync,
        drop_expired: true,
        ..Options::default()
    };
    let db = Db::open(Runtime::new(config)?, &args.dir, options)
        .with_context(|| format!("opening the store in {}", args.dir.display()))?;
    // Room for the clients in the open-file limit, as far as the hard limit
    // allows; a store's files are among the server's own descriptors.
    let max_clients = crate::fd_limit::Need {
        setting: "--max-clients",
        clients: args.max_clients as usize,
        asked: true,
        per_client: 1,
        upstream: 0,
    }
    .fit();
    let server_options = ServerOptions {
        password: args.password,
        max_clients,
        workers: args.workers.map_or_else(sluice_kv::default_workers, usize::from),
        active_workers: args.active_workers.map_or_else(sluice_kv::cores, usize::from),
        script_time_limit: std::time::Duration::from_millis(args.script_time_limit),
        ..ServerOptions::default()
    };
    let addr = (args.bind.as_str(), args.port);
    let server = Server::bind(addr, Arc::new(db), server_options)
        .with_context(|| format!("listening on {}:{}", args.bind, args.port))?;
    eprintln!("sluice serve: {} on {}", args.dir.display(), server.local_addr()?);
    server.run().context("starting the server")
}

/// glibc gives each thread that allocates concurrently an arena of its own,
/// up to 8 per core, and returns little of a fragmented arena to the kernel.
/// The server's commands run on many threads (its workers); with a thread
/// per connection, under YCSB-A (16 connections) its RSS kept rising with the operations run (46.8 to 60.5 MiB over 4.7M
/// operations) while the store's budget stayed fixed; with two arenas it stays
/// flat (docs/BENCHMARKS.md, "sluice serve memory"). Allocation is not where
/// the server's time goes (same benchmark). A MALLOC_ARENA_MAX set in the
/// environment is the user's choice and is left to glibc.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; it is called
        // before the server starts its threads.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}
