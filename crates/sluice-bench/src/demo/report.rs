//! What each mode of the demo measured, its table, and its HTML report: a
//! CCDF of read latency per mode (in "nines": 1 is the 90th percentile, 3
//! the 99.9th) and read p99 over time, as SVG beside `report.html`.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use sluice_core::metrics::{median, LatencyHistogram};
use sluice_sim::report::{line_chart, Series};

use crate::driver::TenantResult;

/// One mode's outcome.
pub struct ModeResult {
    pub mode: &'static str,
    pub tenants: Vec<TenantResult>,
    pub seconds: f64,
    pub backlog_end: u64,
    pub compacted_bytes: u64,
    /// The store at every tick (0.1 s).
    pub store: Vec<StoreSample>,
    pub l0_stop: usize,
}

/// The store and its background work at one tick: what a write stall
/// builds from (`store.csv`).
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreSample {
    /// Seconds since the mode began.
    pub t: f64,
    pub l0_tables: usize,
    /// Memtables frozen and waiting for their flush.
    pub immutables: usize,
    /// Compaction backlog, bytes.
    pub pending_bytes: u64,
    /// Bytes compacted since the mode began.
    pub compacted_bytes: u64,
    /// Non-critical pieces, KiB (0: whole I/Os).
    pub piece_kb: u64,
    /// The background rate the controller set, bytes/s; none without it.
    pub rate: Option<f64>,
}

impl ModeResult {
    /// The most L0 tables seen at once.
    fn max_l0(&self) -> usize {
        self.store.iter().map(|s| s.l0_tables).max().unwrap_or(0)
    }

    /// Compaction backlog at the end of each second, bytes.
    fn backlog_per_second(&self) -> Vec<u64> {
        self.store.iter().skip(9).step_by(10).map(|s| s.pending_bytes).collect()
    }

    /// Read p99 of each second, ms: the tenants' p99s averaged (each
    /// tenant reads a few hundred times a second, so one tenant's p99 is
    /// its few slowest reads).
    fn read_p99_per_second(&self) -> Vec<f64> {
        let seconds = self.tenants.iter().map(|t| t.series.len()).min().unwrap_or(0);
        (0..seconds)
            .map(|k| {
                let sum: f64 = self.tenants.iter().map(|t| t.series[k].read_p99_us).sum();
                sum / self.tenants.len() as f64 / 1e3
            })
            .collect()
    }
}

/// FIFO burns the load's compaction backlog at full speed, then its reads
/// find fewer tables: Sluice's per-second read p99 against FIFO's during
/// that burst and after it (from the second after FIFO's backlog first
/// reached zero), each the median over its seconds.
fn burst_lines(s: &mut String, fifo: &ModeResult, sluice: &ModeResult) {
    let Some(end) = fifo.backlog_per_second().iter().position(|&b| b == 0) else {
        let _ = writeln!(
            s,
            "FIFO's compaction backlog never reached zero: its burst lasted the run"
        );
        return;
    };
    let (f, q) = (fifo.read_p99_per_second(), sluice.read_p99_per_second());
    let n = f.len().min(q.len());
    let cut = (end + 1).min(n);
    let mid = |v: &[f64]| median(v.iter().copied());
    let (df, dq) = (mid(&f[..cut]), mid(&q[..cut]));
    let _ = write!(
        s,
        "read p99 per second, median: during FIFO's burst (seconds 1-{}) \
         fifo {df:.2} ms, sluice {dq:.2} ms, sluice / fifo = {:.2}",
        end + 1,
        dq / df
    );
    if cut == n {
        s.push_str("; the run ended with the burst\n");
        return;
    }
    let (af, aq) = (mid(&f[cut..n]), mid(&q[cut..n]));
    let _ = writeln!(
        s,
        "; after it fifo {af:.2} ms, sluice {aq:.2} ms, sluice / fifo = {:.2} (target <= 1.1)",
        aq / af
    );
}

/// Every tenant's reads of a mode together.
fn reads(m: &ModeResult) -> LatencyHistogram {
    let mut all = LatencyHistogram::default();
    for t in &m.tenants {
        all.merge(&t.reads);
    }
    all
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub fn table(modes: &[ModeResult]) -> String {
    let mut s = String::from("\nmode      tenant       ops/s   read mean   read p99  read p99.9  write p99   (ms)\n");
    for m in modes {
        for t in &m.tenants {
            let _ = writeln!(
                s,
                "{:<9} {:<10} {:>7.0} {:>11.2} {:>10.2} {:>11.2} {:>10.2}",
                m.mode,
                t.name,
                t.ops as f64 / m.seconds,
                t.reads.mean() / 1e6,
                ms(t.reads.quantile(0.99)),
                ms(t.reads.quantile(0.999)),
                ms(t.writes.quantile(0.99)),
            );
        }
    }
    s.push_str("\nmode      backlog at end  compacted during run  max L0 tables (stop trigger)\n");
    for m in modes {
        let _ = writeln!(
            s,
            "{:<9} {:>10.1} MiB {:>16.1} MiB {:>12} ({})",
            m.mode,
            m.backlog_end as f64 / 1048576.0,
            m.compacted_bytes as f64 / 1048576.0,
            m.max_l0(),
            m.l0_stop
        );
    }
    if let [fifo, sluice, settled] = modes {
        let p99 = |m: &ModeResult| ms(reads(m).quantile(0.99));
        let mean = |m: &ModeResult| reads(m).mean() / 1e6;
        let _ = writeln!(
            s,
            "\nread mean, all tenants: fifo {:.2} ms, sluice {:.2} ms, settled {:.2} ms\n\
             read p99, all tenants: fifo {:.2} ms, sluice {:.2} ms, settled {:.2} ms\n\
             sluice / settled = {:.2} (target <= 1.5); fifo / settled = {:.2}",
            mean(fifo),
            mean(sluice),
            mean(settled),
            p99(fifo),
            p99(sluice),
            p99(settled),
            p99(sluice) / p99(settled),
            p99(fifo) / p99(settled)
        );
        burst_lines(&mut s, fifo, sluice);
    }
    s
}

const NINES: [f64; 8] = [0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999];

/// A mode's read latency (ms) at each of `NINES`: the CCDF's points.
fn ccdf(m: &ModeResult) -> Vec<(f64, f64)> {
    let h = reads(m);
    NINES.iter().map(|&q| (q, ms(h.quantile(q)))).collect()
}

/// Writes the plots and `report.html` into `out`; returns the files.
pub fn write(out: &Path, modes: &[ModeResult]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)?;
    let ccdf: Series = modes
        .iter()
        .map(|m| {
            let points = ccdf(m).into_iter().map(|(q, lat)| (lat, -(1.0 - q).log10())).collect();
            (m.mode.to_string(), points)
        })
        .collect();
    let over_time: Series = modes
        .iter()
        .map(|m| {
            let seconds = m.tenants[0].series.iter().map(|i| i.t);
            (m.mode.to_string(), seconds.zip(m.read_p99_per_second()).collect())
        })
        .collect();
    let ccdf_svg = out.join("read_ccdf.svg");
    line_chart(
        &ccdf_svg,
        "Read latency CCDF",
        "latency (ms)",
        "nines (1 = p90, 3 = p99.9)",
        &ccdf,
    )?;
    let time_svg = out.join("read_p99_over_time.svg");
    line_chart(
        &time_svg,
        "Read p99 per second (the tenants' averaged)",
        "seconds into the run",
        "read p99 (ms)",
        &over_time,
    )?;
    let html = out.join("report.html");
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>sluice demo</title>\
         <h1>sluice demo</h1><p>YCSB on sluice-kv, emulated cloud volume; \
         fifo and sluice run right after loading, with flush and compaction active; \
         settled runs after compaction caught up.</p><pre>{}</pre>\
         <img src=read_ccdf.svg><img src=read_p99_over_time.svg>",
        table(modes).replace('<', "&lt;")
    );
    std::fs::write(&html, body)?;
    let csv = out.join("series.csv");
    std::fs::write(&csv, series_csv(modes))?;
    let store_csv = out.join("store.csv");
    std::fs::write(&store_csv, store_csv_text(modes))?;
    let ccdf_csv = out.join("read_ccdf.csv");
    std::fs::write(&ccdf_csv, ccdf_csv_text(modes))?;
    Ok(vec![html, ccdf_svg, time_svg, csv, store_csv, ccdf_csv])
}

/// The store at every tick, one row each (the rate is empty where no
/// controller runs).
fn store_csv_text(modes: &[ModeResult]) -> String {
    let mut s = String::from("mode,t_s,l0_tables,immutables,pending_mib,compacted_mib,piece_kb,rate_mb_s\n");
    let mib = |b: u64| b as f64 / 1048576.0;
    for m in modes {
        for x in &m.store {
            let rate = x.rate.map(|r| format!("{:.1}", r / 1e6)).unwrap_or_default();
            let _ = writeln!(
                s,
                "{},{:.1},{},{},{:.1},{:.1},{},{rate}",
                m.mode,
                x.t,
                x.l0_tables,
                x.immutables,
                mib(x.pending_bytes),
                mib(x.compacted_bytes),
                x.piece_kb
            );
        }
    }
    s
}

/// The CCDF's points, one row per mode and quantile.
fn ccdf_csv_text(modes: &[ModeResult]) -> String {
    let mut s = String::from("mode,quantile,read_ms\n");
    for m in modes {
        for (q, lat) in ccdf(m) {
            let _ = writeln!(s, "{},{q},{lat:.3}", m.mode);
        }
    }
    s
}

/// Every tenant's 1 s and 10 s intervals, one row each.
fn series_csv(modes: &[ModeResult]) -> String {
    let mut s = String::from("mode,tenant,interval_s,end_s,ops,mean_us,p99_us,read_p99_us\n");
    for m in modes {
        for t in &m.tenants {
            for (len, series) in [(1, &t.series), (10, &t.series_10s)] {
                for i in series {
                    let _ = writeln!(
                        s,
                        "{},{},{len},{:.1},{},{:.1},{:.1},{:.1}",
                        m.mode, t.name, i.t, i.ops, i.mean_us, i.p99_us, i.read_p99_us
                    );
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Interval;

    /// A mode whose one tenant read at `p99_ms` in each second, with
    /// `backlog` MiB owed at the end of each.
    fn mode(name: &'static str, p99_ms: &[f64], backlog: &[u64]) -> ModeResult {
        let series = p99_ms
            .iter()
            .enumerate()
            .map(|(k, &p)| Interval {
                t: k as f64 + 1.0,
                ops: 100,
                mean_us: 500.0,
                p99_us: p * 1e3,
                read_p99_us: p * 1e3,
            })
            .collect();
        ModeResult {
            mode: name,
            tenants: vec![TenantResult {
                series,
                ..TenantResult::default()
            }],
            seconds: p99_ms.len() as f64,
            backlog_end: 0,
            compacted_bytes: 0,
            store: backlog
                .iter()
                .flat_map(|mib| [mib << 20; 10])
                .map(|pending_bytes| StoreSample {
                    pending_bytes,
                    ..StoreSample::default()
                })
                .collect(),
            l0_stop: 12,
        }
    }

    #[test]
    fn the_burst_ends_where_fifo_first_owes_nothing() {
        let fifo = mode("fifo", &[9.0, 6.0, 2.0, 2.0, 2.0], &[50, 0, 0, 0, 0]);
        let sluice = mode("sluice", &[3.0, 3.0, 2.0, 2.4, 2.2], &[80, 60, 40, 20, 0]);
        let mut s = String::new();
        burst_lines(&mut s, &fifo, &sluice);
        assert!(
            s.contains("during FIFO's burst (seconds 1-2) fifo 9.00 ms, sluice 3.00 ms"),
            "{s}"
        );
        assert!(
            s.contains("after it fifo 2.00 ms, sluice 2.20 ms, sluice / fifo = 1.10"),
            "{s}"
        );
    }

    #[test]
    fn a_burst_as_long_as_the_run_is_said_to_be() {
        let fifo = mode("fifo", &[9.0, 6.0], &[50, 10]);
        let mut s = String::new();
        burst_lines(&mut s, &fifo, &fifo);
        assert!(s.contains("never reached zero"), "{s}");
    }
}
