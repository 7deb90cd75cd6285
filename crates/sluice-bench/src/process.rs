//! What a process has used, from /proc (any process) and getrusage (this
//! one): CPU time, its threads' context switches, resident memory. The
//! benchmarks charge a target's process with what it used per operation,
//! and watch a server's memory across runs.

use anyhow::{anyhow, Context, Result};

/// CPU seconds (user plus system) and context switches of a process (each
/// one a sleep and a wake-up, or a preemption), so far or, after
/// [`Usage::since`], per transaction.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    pub cpu_s: f64,
    pub switches: f64,
}

impl Usage {
    pub fn of(pid: u32) -> Result<Usage> {
        Ok(Usage {
            cpu_s: cpu_seconds(pid)?,
            switches: context_switches(pid)?,
        })
    }

    /// What was used from `before` to `self`, per transaction.
    pub fn since(&self, before: &Usage, transactions: u64) -> Usage {
        let n = transactions.max(1) as f64;
        Usage {
            cpu_s: (self.cpu_s - before.cpu_s) / n,
            switches: (self.switches - before.switches) / n,
        }
    }
}

/// User plus system CPU seconds of process `pid` so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("process {pid}"))?;
    // The command name may hold spaces: fields count from after its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("/proc/{pid}/stat: no command field"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .zip(f.get(12).and_then(|s| s.parse::<f64>().ok()))
        .map(|(u, s)| u + s)
        .ok_or_else(|| anyhow!("/proc/{pid}/stat: no CPU times"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// Voluntary and involuntary context switches of all threads of `pid`.
fn context_switches(pid: u32) -> Result<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("process {pid}"))?;
    let mut switches = 0.0;
    for task in tasks {
        // A thread that ended meanwhile has nothing left to count.
        let Ok(status) = std::fs::read_to_string(task?.path().join("status")) else {
            continue;
        };
        switches += status
            .lines()
            .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(switches)
}

/// CPU time (user plus system) this process has used, seconds.
pub fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid start.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// A memory field (`VmRSS:`, `VmHWM:`) of process `pid` ("self" for this
/// one) in MiB; NaN where /proc does not say.
pub fn status_mib(pid: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_cpu_and_memory() {
        let pid = std::process::id();
        let usage = Usage::of(pid).unwrap();
        assert!(usage.cpu_s >= 0.0 && usage.switches >= 0.0);
        assert!(own_cpu_seconds() >= 0.0);
        assert!(status_mib("self", "VmRSS:") > 0.0);
        assert!(status_mib("self", "NoSuchField:").is_nan());
        let e = cpu_seconds(u32::MAX).unwrap_err().to_string();
        assert!(e.contains("process"), "{e}");
    }
}
