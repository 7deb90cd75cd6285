//! `sluice bench deadline --via serve`: the same transactions through
//! `sluice serve`, the deadline reaching the store's I/O queues over the
//! wire.
//!
//! The store holds one record per cylinder, each alone in a data block of
//! exactly one cylinder's bytes, all in one table ([`build_store`]): a GET
//! of record `c` reads cylinder `c` and nothing else (the block cache is
//! off, the table's index and filter are in memory), so a transaction's
//! reads land where the workload's generator put them, as the simulator
//! assumes. Each run starts `sluice serve` on that store with the emulated
//! seek disk of depth 1 and the policy under test; each transaction is a
//! client connection that sends its reads as
//!
//! ```text
//! SLUICE.WITH <transaction id> <budget left, ms> - IOS <reads left> GET <record>
//! ```
//!
//! with its think time between them, so that the store runs each read as
//! part of one request with the transaction's deadline and an exact count
//! of the reads it has left (M of §3.2.2), and its policies count the
//! transaction in the system from its first read to its last.
//!
//! What the wire adds to the runtime's own run, and how the prediction
//! counts it: each read's round trip over loopback TCP and its parsing,
//! which [`round_trip`] measures before the runs and which is think time
//! from the disk's side (the store's K̄ and the simulator's think time
//! both include it); and a late transaction's reads, which carry a budget
//! of 0 (the time left is never negative), so the store queues them with
//! their arrival as deadline, which the simulator is told to do too
//! (`LateDeadline::Issue`).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sluice_core::device::SeekDiskProfile;
use sluice_core::{Ctx, Nanos};
use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options};
use sluice_sim::workload::Generator;
use sluice_sim::TraqiosWorkload;

use super::wall::{fine_timer, seek_disk, Measured, LEAD};
use crate::route::shards::{free_port, info, spawn_serve, wait_listening, ServeProcess};
use crate::target::{Resp, RespClient};

/// Bytes of a data block around its one entry: the entry's two lengths
/// (4 bytes each) and the block's checksum (4), as `sluice_kv::sstable`
/// lays them out.
const BLOCK_OVERHEAD: u64 = 12;

/// Workers of each `sluice serve`: at least as many as transactions in
/// the system at once at the highest utilization swept, so that every
/// read waiting is in the store's I/O queue for the policy to order.
const WORKERS: usize = 256;

/// The record on `cylinder`.
fn record(cylinder: u64) -> String {
    format!("c{cylinder:07}")
}

/// Writes the store of `disk` into `dir`: record `c` alone in a data block
/// of `bytes_per_cylinder` bytes at offset `c · bytes_per_cylinder` of one
/// table, which is checked.
pub(super) fn build_store(dir: &Path, disk: &SeekDiskProfile) -> Result<()> {
    let key_len = record(0).len() as u64;
    ensure!(
        disk.bytes_per_cylinder >= 64,
        "--via serve needs cylinders of at least 64 bytes, one record each"
    );
    let stored = disk.bytes_per_cylinder - BLOCK_OVERHEAD - key_len;
    // The stored value is the string's type tag and its bytes.
    let value = sluice_kv::string_value(&vec![b'r'; (stored - 1) as usize]);
    let options = Options {
        // Smaller than any entry: each block holds exactly one.
        block_bytes: 64,
        memtable_bytes: (disk.cylinders * disk.bytes_per_cylinder * 2) as usize,
        sync: false,
        background: false,
        ..Options::default()
    };
    let db = Db::open(Runtime::new(RuntimeConfig::default())?, dir, options)?;
    for c in 0..disk.cylinders {
        db.put(record(c).as_bytes(), &value)?;
    }
    db.flush()?;
    let tables = db.stats().levels.iter().map(|(n, _)| n).sum::<usize>();
    ensure!(tables == 1, "the store's records went into {tables} tables, not one");
    drop(db);
    // The footer's first field is where the data blocks end.
    let table = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .context("the store has no table")?;
    let bytes = std::fs::read(&table)?;
    let footer = bytes
        .len()
        .checked_sub(52)
        .context("the table is shorter than its footer")?;
    let data_end = u64::from_le_bytes(bytes[footer..footer + 8].try_into()?);
    ensure!(
        data_end == disk.cylinders * disk.bytes_per_cylinder,
        "the table's data blocks end at {data_end}, not at {} cylinders of {} bytes: the layout is not one record a cylinder",
        disk.cylinders,
        disk.bytes_per_cylinder
    );
    Ok(())
}

/// A `sluice serve` on the store, stopped when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `think_ms`: K̄, the time between a transaction's reads as the
    /// store sees it.
    fn start(exe: &Path, store: &Path, d: &SeekDiskProfile, policy: &str, think_ms: f64) -> Result<Server> {
        let runtime = store.with_extension(format!("runtime-{policy}.toml"));
        std::fs::write(
            &runtime,
            format!(
                "[device]\nkind = \"emulated\"\ndepth = 1\n[device.profile]\nmodel = \"seek-disk\"\n\
                 cylinders = {}\na_ms = {}\nb = {}\nbytes_per_cylinder = {}\n\
                 [rcp]\npolicy = \"{policy}\"\ncritical_slots = {}\nthink_ms = {}\n",
                d.cylinders,
                d.a_ms,
                d.b,
                d.bytes_per_cylinder,
                WORKERS + 1,
                think_ms,
            ),
        )?;
        let port = free_port()?;
        let log = store.with_extension("log");
        let process = ServeProcess {
            exe,
            runtime: &runtime,
            block_cache_mb: 0,
            workers: WORKERS,
            memtable_mb: None,
        };
        let child = spawn_serve(&process, port, store, &log)?;
        let server = Server { child, port };
        wait_listening(port)?;
        // The device is the transactions' alone: the sweeper would walk
        // every record.
        let mut control = server.client()?;
        control.call(&[b"CONFIG", b"SET", b"expiry-paused", b"yes"])?;
        control.reply()?;
        Ok(server)
    }

    fn client(&self) -> Result<RespClient> {
        Resp::new(("127.0.0.1", self.port))?.connect().map_err(Into::into)
    }

    /// How long I/Os held the device, ns.
    fn device_held(&self) -> Result<u64> {
        let text = info(self.port)?;
        text.lines()
            .find_map(|l| l.strip_prefix("device_held_us:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|us| us * 1000)
            .context("INFO has no device_held_us")
    }
}

/// The mean round trip of a command that reads nothing (PING) to `sluice
/// serve` (`exe`) on `store`, ms: what each read adds to a transaction's
/// time besides the disk.
pub(super) fn round_trip(exe: &Path, store: &Path, disk: &SeekDiskProfile) -> Result<f64> {
    const TRIPS: u32 = 2000;
    let server = Server::start(exe, store, disk, "fifo", 0.0)?;
    let mut c = server.client()?;
    let started = Instant::now();
    for _ in 0..TRIPS {
        c.call(&[b"PING"])?;
        c.reply()?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e3 / f64::from(TRIPS))
}

/// Runs the workload's transactions through `sluice serve` (`exe`) on the
/// store in `store`; `wire_ms` is [`round_trip`]'s.
pub(super) fn measure(
    disk: &SeekDiskProfile,
    exe: &Path,
    store: &Path,
    policy: &str,
    w: &TraqiosWorkload,
    seed: u64,
    wire_ms: f64,
) -> Result<Measured> {
    let think_ms = (w.think_ms[0] + w.think_ms[1]) / 2.0 + wire_ms;
    let server = Server::start(exe, store, disk, policy, think_ms)?;
    let idle: Mutex<Vec<RespClient>> = Mutex::new((0..WORKERS).map(|_| server.client()).collect::<Result<_>>()?);
    let avg = w.avg_access(&seek_disk(disk)?);
    let mut arrivals = Generator::new(w, avg, seed);
    let draws = Arc::new(Generator::new(w, avg, seed));
    let clock = Instant::now();
    let now = || clock.elapsed().as_nanos() as Nanos;
    let start = now() + LEAD.as_nanos() as Nanos;
    let held_before = server.device_held()?;
    let finished = std::thread::scope(|s| {
        let mut threads = Vec::new();
        while let Some(at) = arrivals.next_arrival() {
            let wait = (start + at).saturating_sub(now());
            std::thread::sleep(Duration::from_nanos(wait));
            let t = arrivals.arrive();
            let mut ctx = t.ctx;
            ctx.arrival += start;
            ctx.deadline = ctx.deadline.map(|d| d + start);
            let (draws, idle, server, now) = (draws.clone(), &idle, &server, &now);
            let mut rng = t.rng;
            threads.push(s.spawn(move || -> Result<(Ctx, Nanos)> {
                fine_timer();
                let taken = idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
                let mut conn = match taken {
                    Some(c) => c,
                    None => server.client()?,
                };
                let id = ctx.id.0.to_string();
                let mut last = None;
                for i in 0..t.actual_ios {
                    std::thread::sleep(Duration::from_nanos(draws.think(&mut rng)));
                    let Some(cylinder) = draws.access(last, &mut rng) else {
                        continue;
                    };
                    last = Some(cylinder);
                    let left_ms = ctx.deadline.map_or(0, |d| d.saturating_sub(now())) as f64 / 1e6;
                    let (budget, left, key) = (
                        format!("{left_ms:.3}"),
                        (t.actual_ios - i).to_string(),
                        record(cylinder),
                    );
                    conn.call(&[
                        b"SLUICE.WITH",
                        id.as_bytes(),
                        budget.as_bytes(),
                        b"-",
                        b"IOS",
                        left.as_bytes(),
                        b"GET",
                        key.as_bytes(),
                    ])?;
                    if conn.reply()? != 1 {
                        bail!("sluice serve has no record {key}");
                    }
                }
                let done = now();
                idle.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
                Ok((ctx, done))
            }));
        }
        threads
            .into_iter()
            .map(|t| t.join().expect("a transaction's thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    let held = server.device_held()? - held_before;
    Ok(Measured::of(&finished, start, held))
}

/// Where the store goes: a directory of its own under the benchmark's.
pub(super) fn store_dir(dir: &Path) -> PathBuf {
    dir.join("store")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_lies_alone_on_its_cylinder() {
        let dir = tempfile::tempdir().unwrap();
        let disk = SeekDiskProfile {
            cylinders: 50,
            bytes_per_cylinder: 4096,
            ..SeekDiskProfile::default()
        };
        // The layout is checked against the table's footer as it is built.
        build_store(&store_dir(dir.path()), &disk).unwrap();
        let tiny = SeekDiskProfile {
            bytes_per_cylinder: 16,
            ..disk
        };
        let err = build_store(&dir.path().join("tiny"), &tiny).unwrap_err();
        assert!(err.to_string().contains("at least 64 bytes"), "{err}");
    }
}
