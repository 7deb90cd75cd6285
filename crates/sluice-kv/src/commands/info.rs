//! `INFO [section...]`: Redis's `key:value` sections that clients and
//! tools read (server, clients, memory, persistence, stats, replication,
//! cluster), and Sluice's own: the
//! tenants (requests, errors, latency and deadlines missed), the
//! background tasks (work done, backlog, knobs) and the store's levels.
//! With no section, or `default`, `all` or `everything`, every section; a
//! section it does not have is left out, as Redis leaves it out.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::shared::Shared;

/// The Redis version whose replies `sluice serve` follows: clients read
/// `redis_version` to decide which commands and reply shapes to expect.
const REDIS_VERSION: &str = "7.0.0";

type Section = fn(&Shared, &mut String);

const SECTIONS: &[(&str, &str, Section)] = &[
    ("server", "Server", server),
    ("clients", "Clients", clients),
    ("memory", "Memory", memory),
    ("persistence", "Persistence", persistence),
    ("stats", "Stats", stats),
    ("replication", "Replication", replication),
    ("cluster", "Cluster", cluster),
    ("tenants", "Tenants", tenants),
    ("background", "Background", background),
    ("store", "Store", store),
];

pub(super) fn info(shared: &Shared, asked: &[Vec<u8>]) -> String {
    let asked: Vec<String> = asked
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let every = asked.is_empty()
        || asked
            .iter()
            .any(|a| matches!(a.as_str(), "default" | "all" | "everything"));
    let mut s = String::new();
    for (name, title, write) in SECTIONS {
        if every || asked.iter().any(|a| a == name) {
            if !s.is_empty() {
                s.push_str("\r\n");
            }
            let _ = write!(s, "# {title}\r\n");
            write(shared, &mut s);
        }
    }
    s
}

fn server(shared: &Shared, s: &mut String) {
    let _ = write!(
        s,
        "redis_version:{REDIS_VERSION}\r\nsluice_version:{}\r\nredis_mode:standalone\r\narch_bits:{}\r\n\
         process_id:{}\r\nuptime_in_seconds:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        usize::BITS,
        std::process::id(),
        shared.started.elapsed().as_secs()
    );
}

/// One server, not a Redis Cluster node (`sluice route` is the cluster's
/// front; clients that read this decide how to connect).
fn cluster(_: &Shared, s: &mut String) {
    s.push_str("cluster_enabled:0\r\n");
}

fn clients(shared: &Shared, s: &mut String) {
    let _ = write!(s, "connected_clients:{}\r\n", shared.clients.load(Ordering::Relaxed));
    let _ = write!(s, "maxclients:{}\r\n", shared.options.max_clients);
    let _ = write!(s, "blocked_clients:{}\r\n", shared.waiters.blocked());
}

/// The process's resident memory: the store does not count its own
/// allocations, and what Redis calls `used_memory` is what tools chart.
fn memory(_: &Shared, s: &mut String) {
    let rss = resident_bytes().unwrap_or(0);
    let _ = write!(
        s,
        "used_memory:{rss}\r\nused_memory_human:{:.2}M\r\nused_memory_rss:{rss}\r\n",
        rss as f64 / f64::from(1 << 20)
    );
}

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// A server alone: no replicas, no primary.
fn replication(_: &Shared, s: &mut String) {
    s.push_str("role:master\r\nconnected_slaves:0\r\n");
}

fn persistence(shared: &Shared, s: &mut String) {
    // The WAL is Redis's append-only file: synced before each write is
    // acknowledged unless the server runs with --no-sync.
    // The store is open (and recovered) before the server listens.
    let _ = write!(s, "loading:0\r\naof_enabled:{}\r\n", u8::from(shared.db.options().sync));
}

fn stats(shared: &Shared, s: &mut String) {
    let _ = write!(
        s,
        "total_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\n",
        shared.next_client.load(Ordering::Relaxed) - 1,
        shared.commands.load(Ordering::Relaxed),
        shared.rejected.load(Ordering::Relaxed),
        shared.expired_keys.load(Ordering::Relaxed)
    );
}

fn tenants(shared: &Shared, s: &mut String) {
    shared.with_tenants(|tenants| {
        for t in tenants.filter(|t| t.ops > 0) {
            let _ = write!(
                s,
                "tenant_{}:ops={},errors={},mean_us={:.1},p99_us={:.1},deadlines={},missed={}\r\n",
                t.name,
                t.ops,
                t.errors,
                t.latency.mean() / 1e3,
                t.latency.quantile(0.99) as f64 / 1e3,
                t.deadlines,
                t.missed
            );
        }
    });
}

fn background(shared: &Shared, s: &mut String) {
    let db = &shared.db;
    for task in [db.flush_task(), db.compaction_task(), &shared.expiry_task] {
        let st = task.stats();
        let rate = st
            .knobs
            .rate_bytes
            .map_or("unlimited".to_string(), |r| format!("{r:.0}"));
        let _ = write!(
            s,
            "{}:bytes={},ios={},backlog_bytes={},rate_bytes={},paused={}\r\n",
            st.kind, st.bytes, st.ios, st.backlog_bytes, rate, st.knobs.paused
        );
    }
}

fn store(shared: &Shared, s: &mut String) {
    let stats = shared.db.stats();
    for (level, (tables, bytes)) in stats.levels.iter().enumerate() {
        let _ = write!(s, "level{level}:tables={tables},bytes={bytes}\r\n");
    }
    let _ = write!(
        s,
        "l0_slowdown_tables:{}\r\nmemtable_bytes:{}\r\nimmutable_memtables:{}\r\npending_compaction_bytes:{}\r\ndevice_held_us:{}\r\n",
        // From this many L0 tables on, writes are slowed: what a controller
        // that holds compaction back must stay under.
        shared.db.options().l0_slowdown_trigger,
        stats.memtable_bytes,
        stats.immutables,
        stats.pending_compaction_bytes,
        // Each I/O from its dispatch to its completion, summed: at depth
        // 1, the time the device was busy.
        shared.db.runtime().device_held() / 1000
    );
}
