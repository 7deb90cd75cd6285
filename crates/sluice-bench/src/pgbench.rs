//! PostgreSQL users as AppleS counts them: N users, each a closed loop on
//! its own connection running pgbench's TPC-B-like script (or the
//! select-only or simple-update built-ins). pgbench does the load; its
//! per-transaction log gives each user's throughput and latencies, from
//! which come U_f, V_l and the percentiles. Only transactions that finish in
//! the measured window (after a warm-up) count, so a proxy that tunes itself
//! at the start is measured once it has settled. With a rate the users are
//! an open system instead: transactions start on pgbench's schedule, and a
//! target that falls behind it queues them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_core::metrics::{latency_cv, unfairness, LatencyHistogram, TenantStats};

use crate::error::{BenchError, Result};

/// One pgbench run.
#[derive(Clone, Debug)]
pub struct PgbenchSpec {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub database: String,
    /// Users: connections, each a closed loop.
    pub users: usize,
    /// pgbench worker threads.
    pub threads: usize,
    pub warmup: Duration,
    pub measure: Duration,
    /// pgbench's `-M`: simple, extended or prepared.
    pub protocol: String,
    /// pgbench's `-b`: tpcb-like, simple-update or select-only.
    pub script: String,
    /// application_name of every connection (a proxy may name tenants by it).
    pub application_name: Option<String>,
    /// pgbench's `-R`: transactions a second for all the users together, on
    /// a schedule of pgbench's, whatever the target's speed (an open system;
    /// latency counts from the scheduled start). `None`: closed loops.
    pub rate: Option<f64>,
}

/// What the users got in the measured window.
#[derive(Clone, Debug)]
pub struct PgbenchResult {
    /// Per user: transactions finished and their latencies (µs).
    pub users: Vec<TenantStats>,
    pub seconds: f64,
    pub latency: LatencyHistogram,
    /// Transactions pgbench logged as failed or skipped (whole run).
    pub failed: u64,
    /// Transactions finished in the whole run, warm-up included.
    pub finished_in_run: u64,
}

impl PgbenchResult {
    /// Adds the users of a run that ran at the same time (another tenant).
    pub fn merge(&mut self, other: PgbenchResult) {
        self.users.extend(other.users);
        self.latency.merge(&other.latency);
        self.failed += other.failed;
        self.finished_in_run += other.finished_in_run;
    }

    pub fn transactions(&self) -> u64 {
        self.users.iter().map(|u| u.completed).sum()
    }
    pub fn tps(&self) -> f64 {
        self.transactions() as f64 / self.seconds
    }
    /// U_f across users (equal weights).
    pub fn unfairness(&self) -> f64 {
        unfairness(&self.users)
    }
    /// V_l: per-user latency CV, averaged.
    pub fn latency_cv(&self) -> f64 {
        latency_cv(&self.users)
    }
    /// A latency quantile, milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.latency.quantile(q) as f64 / 1e6
    }
}

/// Runs pgbench once and reads its per-transaction log from `log_dir`.
pub fn run(spec: &PgbenchSpec, log_dir: &Path) -> Result<PgbenchResult> {
    let prefix = log_dir.join("pgbench_log");
    let total = spec.warmup + spec.measure;
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut command = Command::new("pgbench");
    if let Some(name) = &spec.application_name {
        command.env("PGAPPNAME", name);
    }
    let output = command
        .args(["-h", &spec.host, "-p", &spec.port.to_string(), "-U", &spec.user])
        .args(["-c", &spec.users.to_string(), "-j", &spec.threads.to_string()])
        .args(["-T", &total.as_secs().max(1).to_string(), "-n", "-l"])
        .arg(format!("--log-prefix={}", prefix.display()))
        .args(spec.rate.map(|rate| format!("--rate={rate}")))
        .args(["-M", &spec.protocol, "-b", &spec.script, &spec.database])
        .output()
        .map_err(|e| BenchError::Tool(format!("cannot run pgbench: {e} (is postgresql-client installed?)")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(BenchError::Tool(format!(
            "pgbench against {}:{} failed: {}",
            spec.host,
            spec.port,
            tail.join(" | ")
        )));
    }
    let window = (started + spec.warmup, started + total);
    let mut result = PgbenchResult {
        users: vec![TenantStats::new(1.0); spec.users],
        seconds: spec.measure.as_secs_f64(),
        latency: LatencyHistogram::default(),
        failed: 0,
        finished_in_run: 0,
    };
    for entry in
        std::fs::read_dir(log_dir).map_err(|e| BenchError::Tool(format!("reading {}: {e}", log_dir.display())))?
    {
        let path = entry.map_err(|e| BenchError::Tool(e.to_string()))?.path();
        let text =
            std::fs::read_to_string(&path).map_err(|e| BenchError::Tool(format!("reading {}: {e}", path.display())))?;
        std::fs::remove_file(&path).map_err(|e| BenchError::Tool(format!("removing {}: {e}", path.display())))?;
        for line in text.lines() {
            let parsed = parse_line(line);
            if let Some(Line::Done { .. }) = parsed {
                result.finished_in_run += 1;
            }
            match parsed {
                Some(Line::Done {
                    client,
                    latency_us,
                    finished,
                }) if finished >= window.0 && finished < window.1 => {
                    if let Some(user) = result.users.get_mut(client) {
                        user.record(latency_us);
                        result.latency.record((latency_us * 1e3) as u64);
                    }
                }
                Some(Line::Failed) => result.failed += 1,
                Some(Line::Done { .. }) => {}
                None => {
                    return Err(BenchError::Tool(format!(
                        "{}: unexpected pgbench log line `{line}`",
                        path.display()
                    )))
                }
            }
        }
    }
    Ok(result)
}

/// One line of pgbench's per-transaction log.
#[derive(Debug, PartialEq)]
enum Line {
    Done {
        client: usize,
        latency_us: f64,
        finished: Duration,
    },
    /// A failed or skipped transaction.
    Failed,
}

/// `client_id transaction_no time script_no time_epoch time_us [lag]`,
/// where time is `failed` or `skipped` for transactions that did not finish.
fn parse_line(line: &str) -> Option<Line> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 6 {
        return None;
    }
    let client = f[0].parse().ok()?;
    let finished = Duration::from_secs(f[4].parse().ok()?) + Duration::from_micros(f[5].parse().ok()?);
    match f[2] {
        "failed" | "skipped" => Some(Line::Failed),
        t => Some(Line::Done {
            client,
            latency_us: t.parse().ok()?,
            finished,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_transaction_line() {
        let finished = Duration::from_secs(1_700_000_000) + Duration::from_micros(123_456);
        assert_eq!(
            parse_line("3 17 2510 0 1700000000 123456"),
            Some(Line::Done {
                client: 3,
                latency_us: 2510.0,
                finished
            })
        );
    }

    #[test]
    fn failed_transactions_are_told_apart_and_garbage_is_refused() {
        assert_eq!(parse_line("3 17 failed 0 1700000000 1"), Some(Line::Failed));
        assert_eq!(parse_line("3 17 2510"), None);
        assert_eq!(parse_line("x 17 2510 0 1700000000 1"), None);
    }
}
