//! The shards of `sluice bench route`: `sluice serve` processes, each on
//! its own emulated device, restarted with each policy; and the router in
//! front of them.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sluice_route::config::Config;
use sluice_route::Router;

/// The emulated device of every shard.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Device {
    pub read_us: f64,
    pub channels: u32,
    /// coop's starvation guard, ms.
    pub coop_starvation_ms: f64,
    /// RCP's mechanisms on (the default): without them every I/O takes one
    /// FIFO path, and background I/O holds the device as long as a read.
    pub rcp: bool,
}

/// The shard processes, stopped when dropped.
pub(crate) struct Shards {
    /// The `sluice` binary that serves them.
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub ports: Vec<u16>,
    pub device: Device,
    /// Each shard's workers: as many as the users, so that every request
    /// the router sends can be in the shard's I/O queues at once, for the
    /// policy to order.
    pub workers: usize,
    /// Each shard's memtable, MiB (`sluice serve --memtable-mb`); `None`:
    /// its default.
    pub memtable_mb: Option<u32>,
    /// Each shard's block cache, MiB (`sluice serve --block-cache-mb`).
    pub block_cache_mb: u32,
    children: Vec<Child>,
}

impl Shards {
    pub fn new(exe: PathBuf, dir: PathBuf, shards: usize, device: Device, workers: usize) -> Result<Shards> {
        Ok(Shards {
            exe,
            dir,
            ports: (0..shards).map(|_| free_port()).collect::<Result<_>>()?,
            device,
            workers,
            memtable_mb: None,
            // Far below a shard's data, so that scans read the device.
            block_cache_mb: 1,
            children: Vec::new(),
        })
    }

    /// (Re)starts every shard with I/O policy `policy` ([`policy_variant`]'s
    /// form).
    pub fn start(&mut self, policy: &str) -> Result<()> {
        self.stop();
        let runtime = self.dir.join(format!("runtime-{policy}.toml"));
        let (name, setting) = policy_variant(policy)?;
        let starvation_ms = setting.filter(|_| name == "coop");
        let idle = setting
            .filter(|_| name == "cfq")
            .map(|ms| format!("cfq = {{ idle_ms = {ms} }}\n"));
        std::fs::write(
            &runtime,
            format!(
                "[device]\nkind = \"emulated\"\ndepth = {ch}\n[device.profile]\nmodel = \"ssd\"\nchannels = {ch}\nread_us = {r}\n[rcp]\nenabled = {rcp}\npolicy = \"{name}\"\navg_access_ms = {c}\n[rcp.options]\ncoop = {{ starvation_ms = {s} }}\n{idle}",
                ch = self.device.channels,
                r = self.device.read_us,
                rcp = self.device.rcp,
                // C̄ for slack (traqios): a read, as the device serves it.
                c = self.device.read_us / 1e3,
                s = starvation_ms.unwrap_or(self.device.coop_starvation_ms),
                idle = idle.unwrap_or_default(),
            ),
        )?;
        for (i, port) in self.ports.iter().enumerate() {
            let process = ServeProcess {
                exe: &self.exe,
                runtime: &runtime,
                block_cache_mb: self.block_cache_mb,
                workers: self.workers,
                memtable_mb: self.memtable_mb,
            };
            let child = spawn_serve(
                &process,
                *port,
                &self.dir.join(format!("shard-{i}")),
                &self.dir.join(format!("shard-{i}.log")),
            )?;
            self.children.push(child);
        }
        for port in &self.ports {
            wait_listening(*port)?;
        }
        Ok(())
    }

    fn stop(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The router, serving from a thread of its own, with the slots split
    /// evenly over the shards and a connection a user to each.
    /// `tenants` are names with the budget of each request, ms.
    /// With `steered`, the router steers the shards' compactions
    /// (`[compaction]`, per-node until the bench sets a schedule).
    pub fn router(&self, users: usize, tenants: &[(&str, f64)], steered: bool) -> Result<(SocketAddr, Arc<Router>)> {
        let per = 16384 / self.ports.len();
        let mut toml = format!("listen = \"127.0.0.1:0\"\n[pool]\nsize = {}\n", users.max(1) + 8);
        for (i, port) in self.ports.iter().enumerate() {
            let hi = if i + 1 == self.ports.len() {
                16383
            } else {
                (i + 1) * per - 1
            };
            toml.push_str(&format!(
                "[[shard]]\nname = \"s{i}\"\naddr = \"127.0.0.1:{port}\"\nslots = \"{}-{hi}\"\n",
                i * per
            ));
        }
        for (name, budget_ms) in tenants {
            toml.push_str(&format!("[[tenant]]\nname = \"{name}\"\nbudget_ms = {budget_ms}\n"));
        }
        if steered {
            toml.push_str("[compaction]\nschedule = \"per-node\"\n");
        }
        Ok(sluice_route::spawn(Config::from_toml(&toml)?)?)
    }

    /// Waits until no shard has flush or compaction work left from the load
    /// (their INFO's `backlog_bytes` and `pending_compaction_bytes`), so that
    /// the first run measured does not share the devices with the load's
    /// compactions.
    pub fn settle(&self) -> Result<()> {
        let started = Instant::now();
        loop {
            let mut backlog = 0u64;
            let texts: Vec<String> = self.ports.iter().map(|&port| info(port)).collect::<Result<_>>()?;
            for text in &texts {
                backlog += text
                    .lines()
                    .filter_map(|l| l.split("backlog_bytes=").nth(1))
                    .filter_map(|rest| rest.split(',').next()?.trim().parse::<u64>().ok())
                    .sum::<u64>();
                backlog += text
                    .lines()
                    .filter_map(|l| l.strip_prefix("pending_compaction_bytes:"))
                    .filter_map(|n| n.trim().parse::<u64>().ok())
                    .sum::<u64>();
            }
            if backlog == 0 {
                for (i, text) in texts.iter().enumerate() {
                    let levels: Vec<&str> = text
                        .lines()
                        .filter(|l| l.starts_with("level"))
                        .map(|l| l.trim())
                        .collect();
                    eprintln!("shard {i}: {}", levels.join(" "));
                }
                // The load and its compactions left dirty pages that the
                // kernel writes back over minutes, taking the real disk from
                // the emulated devices' reads at random: written now.
                eprintln!("writing dirty pages back (sync)");
                // SAFETY: sync(2) takes no arguments and cannot fail.
                unsafe { libc::sync() };
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(300) {
                bail!("the shards still had {backlog} bytes of flush and compaction to do after 300 s");
            }
            eprintln!(
                "waiting for the load's flushes and compactions: {:.1} MiB left",
                backlog as f64 / 1048576.0
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How a `sluice serve` process is started ([`spawn_serve`]).
pub(crate) struct ServeProcess<'a> {
    /// The `sluice` binary.
    pub exe: &'a Path,
    /// Its sluice-io configuration.
    pub runtime: &'a Path,
    pub block_cache_mb: u32,
    pub workers: usize,
    /// Memtables, MiB; `None`: its default.
    pub memtable_mb: Option<u32>,
}

/// Starts `sluice serve` as `p` says, without syncing its WAL, on `port`
/// and the store in `dir`; its log goes to `log`.
pub(crate) fn spawn_serve(p: &ServeProcess, port: u16, dir: &Path, log: &Path) -> Result<Child> {
    Command::new(p.exe)
        .args(["serve", "--port", &port.to_string(), "--no-sync"])
        .args(p.memtable_mb.map(|mb| format!("--memtable-mb={mb}")))
        .args(["--block-cache-mb", &p.block_cache_mb.to_string()])
        .args(["--workers", &p.workers.clamp(1, u16::MAX.into()).to_string()])
        // Every worker serves at once, each ready socket on a worker of its
        // own: every request waits on the device, and the shard's I/O
        // policy needs them all in flight to order.
        .args(["--active-workers", &p.workers.clamp(1, u16::MAX.into()).to_string()])
        .arg("--dir")
        .arg(dir)
        .arg("--runtime")
        .arg(p.runtime)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .context("starting sluice serve")
}

pub(crate) fn wait_listening(port: u16) -> Result<()> {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("sluice serve on port {port} did not start within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

pub(crate) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A `sluice serve`'s INFO text.
pub(crate) fn info(port: u16) -> Result<String> {
    use sluice_kv::resp::{encode_command, parse_reply, Limits, Reply};
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    let mut out = Vec::new();
    encode_command(&["INFO"], &mut out);
    stream.write_all(&out)?;
    let mut buf = Vec::new();
    loop {
        if let Some((reply, _)) = parse_reply(&buf, &Limits::default())? {
            return match reply {
                Reply::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
                other => bail!("sluice serve on port {port} answered INFO with {other:?}"),
            };
        }
        let mut chunk = [0u8; 16384];
        let n = stream.read(&mut chunk)?;
        ensure!(n > 0, "sluice serve on port {port} closed the connection during INFO");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A policy as `--policies` names it: a sluice-core policy; `coop@MS`,
/// coop with its starvation guard at MS milliseconds in place of
/// `--coop-starvation-ms`, so that guards can be compared in one run; or
/// `cfq@MS`, cfq with its anticipation window at MS milliseconds (0: none).
pub fn policy_variant(policy: &str) -> Result<(&str, Option<f64>)> {
    let Some((name, ms)) = policy.split_once('@') else {
        policy.parse::<sluice_core::PolicySpec>()?;
        return Ok((policy, None));
    };
    let (what, zero_allowed) = match name {
        "coop" => (
            "the starvation guard after @ must be a positive number of milliseconds",
            false,
        ),
        "cfq" => ("the anticipation window after @ must be 0 or more milliseconds", true),
        _ => bail!("`{policy}`: only coop (its starvation guard) and cfq (its anticipation window) take @MS"),
    };
    let ms: f64 = ms
        .parse()
        .ok()
        .filter(|ms: &f64| ms.is_finite() && (*ms > 0.0 || (zero_allowed && *ms == 0.0)))
        .with_context(|| format!("`{policy}`: {what}"))?;
    Ok((name, Some(ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variant_names_its_setting_and_bad_ones_are_refused() {
        assert_eq!(policy_variant("fifo").unwrap(), ("fifo", None));
        assert_eq!(policy_variant("coop@5000").unwrap(), ("coop", Some(5000.0)));
        assert_eq!(policy_variant("cfq@0").unwrap(), ("cfq", Some(0.0)));
        for (bad, says) in [
            ("fifo@10", "only coop (its starvation guard) and cfq"),
            (
                "coop@",
                "the starvation guard after @ must be a positive number of milliseconds",
            ),
            ("coop@0", "the starvation guard after @"),
            (
                "cfq@-1",
                "the anticipation window after @ must be 0 or more milliseconds",
            ),
            ("nosuch", "nosuch"),
        ] {
            let err = format!("{:#}", policy_variant(bad).unwrap_err());
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
