//! `sluice bench deadline`: TraQIOS on real I/O, each run beside the
//! simulator's prediction for the same transactions.
//!
//! The workload is TraQIOS's (§4, Table 1; `sluice_sim::workload`): Poisson
//! arrivals at a utilization, each transaction a sequence of reads with
//! think time between them and an SLA deadline
//! `A + N·C̄·(1 + U[0, SlackFactor_max])`. Here the reads are real: each
//! transaction is a thread that enters its request context on a sluice-io
//! [`Runtime`] ([`Runtime::enter`], deadline and N in its [`Ctx`]) and
//! reads 4 KiB blocks of a real file on an emulated seek disk of depth 1,
//! which serves in dispatch order and holds each read for the disk's
//! `a + b·√d` from where the head is. The runtime's dispatch runs the
//! policy under test with the head where the last read left it, and
//! counts each transaction's reads (M of §3.2.2) as it issues them.
//!
//! For every run the simulator (`sluice_sim::simulate`) runs the same
//! transactions (one seed gives both the same arrivals, lengths,
//! deadlines, think times and cylinders, through the workload's one
//! generator) under the same policy, in virtual time: its tardiness is the
//! prediction, the run's the measurement.
//!
//! What wall time adds that the simulator does not model, and which the
//! report's "busy" column shows: each read's completion is a thread waking
//! from a timed sleep and the next read's dispatch a thread unparked, so
//! the disk idles a few tens of microseconds between reads, and think
//! times overshoot by a timer's slack (set to 1 µs on the transactions'
//! threads). The default disk is the paper's scaled by 1/4 (a = 1 ms,
//! b = 0.075, so C̄ = 2.37 ms) and transactions are shorter (1–40 reads)
//! so that a sweep takes minutes rather than hours; the think time is
//! scaled with the disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_core::device::{DeviceProfile, SeekDisk, SeekDiskProfile};
use sluice_core::time::to_ms;
use sluice_core::{Ctx, Nanos, PolicyOptions, PolicySpec};
use sluice_io::{DeviceConfig, DeviceKind, RcpConfig, Runtime, RuntimeConfig};
use sluice_sim::workload::{Generator, LateDeadline};
use sluice_sim::TraqiosWorkload;

use crate::harness::{self, paired_ratios, split_by_steal, Spread};
use crate::steal;

mod serve;
mod wall;

use wall::{fine_timer, seek_disk, Measured, LEAD};

/// Bytes per cylinder of the emulated disk: one read of 4 KiB each.
const BLOCK: u64 = 4096;

/// Where the transactions' reads go.
#[derive(Clone, Debug, Default)]
pub enum Via {
    /// Straight to a sluice-io runtime in this process, each transaction a
    /// thread in its request context.
    #[default]
    Runtime,
    /// Through `sluice serve` (this binary, the path given), each
    /// transaction a client connection (see `serve.rs`).
    Serve(PathBuf),
}

/// The benchmark's settings (`sluice bench deadline --help`).
#[derive(Clone, Debug)]
pub struct DeadlineBench {
    /// Policies compared; the first is the baseline of the ratios.
    pub policies: Vec<String>,
    pub utilizations: Vec<f64>,
    /// Seconds of arrivals per run (the run lasts until the last
    /// transaction finishes).
    pub seconds: f64,
    /// Rounds; round r runs seed r + 1 under every policy.
    pub rounds: usize,
    pub disk: SeekDiskProfile,
    /// Reads per transaction, think time and slack factor; `transactions`
    /// and `utilization` are set per run.
    pub workload: TraqiosWorkload,
    pub max_steal: f64,
    /// Where the disk's backing file goes (default: a temporary directory).
    pub dir: Option<PathBuf>,
    pub via: Via,
}

impl Default for DeadlineBench {
    fn default() -> Self {
        DeadlineBench {
            policies: ["edf", "sstf", "fifo", "traqios"].map(String::from).to_vec(),
            utilizations: vec![0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9],
            seconds: 15.0,
            rounds: 3,
            disk: SeekDiskProfile {
                cylinders: 1000,
                a_ms: 1.0,
                b: 0.075,
                bytes_per_cylinder: BLOCK,
            },
            workload: TraqiosWorkload {
                ios: [1, 40],
                think_ms: [0.0, 0.25],
                slack_factor_max: 4.0,
                ..TraqiosWorkload::default()
            },
            max_steal: 0.10,
            dir: None,
            via: Via::Runtime,
        }
    }
}

/// One run: a policy at a utilization in a round, measured and predicted.
#[derive(Clone, Debug, Serialize)]
pub struct DeadlineRun {
    pub round: usize,
    pub utilization: f64,
    pub policy: String,
    pub steal: f64,
    pub transactions: u64,
    pub tardiness_ms: f64,
    pub predicted_tardiness_ms: f64,
    pub miss_ratio: f64,
    pub predicted_miss_ratio: f64,
    /// Fraction of the run the emulated disk spent on reads.
    pub busy: f64,
    pub predicted_busy: f64,
}

impl harness::Run for DeadlineRun {
    fn round(&self) -> usize {
        self.round
    }
    fn target(&self) -> &str {
        &self.policy
    }
    fn steal(&self) -> f64 {
        self.steal
    }
}

impl DeadlineBench {
    fn check(&self) -> Result<SeekDisk> {
        if self.policies.is_empty() {
            bail!("--policies: name at least one policy");
        }
        for p in &self.policies {
            p.parse::<PolicySpec>().with_context(|| format!("--policies: '{p}'"))?;
        }
        if self.utilizations.is_empty() {
            bail!("--utilizations: give at least one");
        }
        for &u in &self.utilizations {
            if !(u > 0.0 && u <= 1.0) {
                bail!("--utilizations: each must lie in (0, 1], got {u}");
            }
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0) {
            bail!("--seconds must be a positive number, got {}", self.seconds);
        }
        if self.rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        let disk = seek_disk(&self.disk)?;
        self.workload_on(&disk)
            .validate(disk.cylinders())
            .map_err(|e| anyhow::anyhow!("workload {}: {}", e.field, e.problem))?;
        Ok(disk)
    }

    /// The workload with its data over the whole of `disk`, as the backing
    /// file lies.
    fn workload_on(&self, disk: &SeekDisk) -> TraqiosWorkload {
        TraqiosWorkload {
            layout_cylinders: disk.cylinders(),
            ..self.workload.clone()
        }
    }

    /// The workload of one run: enough transactions for `seconds` of
    /// arrivals at `utilization`.
    fn workload_at(&self, utilization: f64, disk: &SeekDisk) -> TraqiosWorkload {
        let mut w = TraqiosWorkload {
            utilization,
            transactions: 1,
            ..self.workload_on(disk)
        };
        let per_ns = w.arrival_rate(w.avg_access(disk));
        w.transactions = ((per_ns * self.seconds * 1e9).round() as u64).max(1);
        w
    }
}

/// Runs every round and returns the report.
pub fn run(b: &DeadlineBench) -> Result<String> {
    let disk = b.check()?;
    let tmp;
    let dir: &Path = match &b.dir {
        Some(d) => d,
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path()
        }
    };
    let data = dir.join("seek-disk.data");
    // Through the server, what each read adds besides the disk, ms.
    let wire_ms = match &b.via {
        Via::Runtime => {
            std::fs::write(
                &data,
                vec![0u8; (b.disk.cylinders * b.disk.bytes_per_cylinder) as usize],
            )
            .with_context(|| format!("creating {}", data.display()))?;
            0.0
        }
        Via::Serve(exe) => {
            serve::build_store(&serve::store_dir(dir), &b.disk)?;
            let wire_ms = serve::round_trip(exe, &serve::store_dir(dir), &b.disk)?;
            eprintln!("sluice serve's round trip: {wire_ms:.3} ms a read, counted as think time in the prediction");
            wire_ms
        }
    };
    let mut runs = Vec::new();
    let total = b.rounds * b.utilizations.len() * b.policies.len();
    for round in 0..b.rounds {
        for (ui, &u) in b.utilizations.iter().enumerate() {
            let w = b.workload_at(u, &disk);
            // The same transactions as the simulator sees them through the
            // server: each read's round trip is think time, and a late
            // read is queued with its arrival as deadline (see serve.rs).
            let predicted_w = match &b.via {
                Via::Runtime => w.clone(),
                Via::Serve(_) => TraqiosWorkload {
                    think_ms: w.think_ms.map(|t| t + wire_ms),
                    late_deadline: LateDeadline::Issue,
                    ..w.clone()
                },
            };
            // Rotated each round and point, so that no policy always runs
            // first after a change of load.
            let shift = round + ui;
            for k in 0..b.policies.len() {
                let policy = &b.policies[(k + shift) % b.policies.len()];
                let seed = round as u64 + 1;
                let (measured, steal) = steal::during(|| match &b.via {
                    Via::Runtime => measure(b, policy, &w, seed, &data),
                    Via::Serve(exe) => serve::measure(&b.disk, exe, &serve::store_dir(dir), policy, &w, seed, wire_ms),
                });
                let measured = measured?;
                let spec: PolicySpec = policy.parse()?;
                let predicted =
                    sluice_sim::simulate(disk.clone(), &predicted_w, spec, &PolicyOptions::default(), seed)?;
                let r = DeadlineRun {
                    round,
                    utilization: u,
                    policy: policy.clone(),
                    steal,
                    transactions: w.transactions,
                    tardiness_ms: measured.tardiness_ms,
                    predicted_tardiness_ms: predicted.avg_tardiness_ms,
                    miss_ratio: measured.miss_ratio,
                    predicted_miss_ratio: predicted.miss_ratio,
                    busy: measured.busy,
                    predicted_busy: predicted.disk_busy,
                };
                eprintln!(
                    "[{}/{total}] round {} ρ={u} {policy}: tardiness {:.2} ms (predicted {:.2}), missed {:.1}% ({:.1}%), busy {:.2} ({:.2}), steal {:.1}%",
                    runs.len() + 1,
                    round + 1,
                    r.tardiness_ms,
                    r.predicted_tardiness_ms,
                    100.0 * r.miss_ratio,
                    100.0 * r.predicted_miss_ratio,
                    r.busy,
                    r.predicted_busy,
                    100.0 * steal
                );
                runs.push(r);
            }
        }
    }
    Ok(report(b, &runs, wire_ms))
}

/// Runs the workload's transactions on a fresh runtime over `data`.
fn measure(b: &DeadlineBench, policy: &str, w: &TraqiosWorkload, seed: u64, data: &Path) -> Result<Measured> {
    let profile = DeviceProfile::SeekDisk(b.disk);
    let config = RuntimeConfig {
        device: DeviceConfig {
            kind: DeviceKind::Emulated,
            depth: 1,
            profile: Some(profile),
        },
        rcp: RcpConfig {
            policy: policy.into(),
            // Every transaction may have its read queued at once.
            critical_slots: w.transactions as usize + 1,
            think_ms: (w.think_ms[0] + w.think_ms[1]) / 2.0,
            ..RcpConfig::default()
        },
    };
    let rt = Runtime::new(config)?;
    let file = rt.open(data, false)?;
    let disk = seek_disk(&b.disk)?;
    let avg = w.avg_access(&disk);
    let mut arrivals = Generator::new(w, avg, seed);
    let draws = Arc::new(Generator::new(w, avg, seed));
    let start = rt.now() + LEAD.as_nanos() as Nanos;
    let finished = std::thread::scope(|s| {
        let mut threads = Vec::new();
        while let Some(at) = arrivals.next_arrival() {
            sleep_until(&rt, start + at);
            let t = arrivals.arrive();
            // The schedule's times, not the thread's: a late start counts
            // against the run, as it would against a client's deadline.
            let mut ctx = t.ctx;
            ctx.arrival += start;
            ctx.deadline = ctx.deadline.map(|d| d + start);
            let (rt, file, draws) = (&rt, &file, draws.clone());
            let mut rng = t.rng;
            threads.push(s.spawn(move || -> Result<(Ctx, Nanos)> {
                fine_timer();
                let _request = rt.enter(ctx);
                let mut buf = [0u8; BLOCK as usize];
                let mut last = None;
                for _ in 0..t.actual_ios {
                    std::thread::sleep(Duration::from_nanos(draws.think(&mut rng)));
                    if let Some(cylinder) = draws.access(last, &mut rng) {
                        last = Some(cylinder);
                        file.read_at(&mut buf, cylinder * b.disk.bytes_per_cylinder)?;
                    }
                }
                Ok((ctx, rt.now()))
            }));
        }
        threads
            .into_iter()
            .map(|t| t.join().expect("a transaction's thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    Ok(Measured::of(&finished, start, rt.device_held()))
}

fn sleep_until(rt: &Runtime, at: Nanos) {
    let now = rt.now();
    if at > now {
        std::thread::sleep(Duration::from_nanos(at - now));
    }
}

/// The report: tardiness measured and predicted at each utilization,
/// ratios to the baseline paired by round, TraQIOS against the best of the
/// others, the EDF/SSTF crossover, and the first round on its own.
fn report(b: &DeadlineBench, runs: &[DeadlineRun], wire_ms: f64) -> String {
    let (kept, set_aside) = split_by_steal(runs, b.max_steal);
    let via = match b.via {
        Via::Runtime => "on a sluice-io runtime".to_string(),
        Via::Serve(_) => format!(
            "through sluice serve (each read's round trip, {wire_ms:.3} ms, and late reads queued by their arrival, in the prediction too)"
        ),
    };
    let mut out = format!(
        "# sluice bench deadline, {via}: {} rounds, disk a = {} ms, b = {}, {} cylinders (C̄ = {:.2} ms), {}–{} reads per transaction, {} s of arrivals per run\n\n",
        b.rounds,
        b.disk.a_ms,
        b.disk.b,
        b.disk.cylinders,
        to_ms({
            let disk = seek_disk(&b.disk).expect("checked");
            b.workload_on(&disk).avg_access(&disk) as f64
        }),
        b.workload.ios[0],
        b.workload.ios[1],
        b.seconds,
    );
    if !set_aside.is_empty() {
        out += &format!(
            "{} of {} runs set aside for CPU steal above {:.0}%.\n\n",
            set_aside.len(),
            runs.len(),
            100.0 * b.max_steal
        );
    }
    let at = |u: f64| -> Vec<&DeadlineRun> { kept.iter().copied().filter(|r| r.utilization == u).collect() };
    let base = &b.policies[0];

    out += "## Average tardiness, ms: measured / predicted (medians over rounds)\n\n";
    let mut header = vec!["ρ".to_string()];
    header.extend(b.policies.iter().cloned());
    header.push("busy (measured / predicted)".into());
    let rows: Vec<Vec<String>> = b
        .utilizations
        .iter()
        .map(|&u| {
            let runs = at(u);
            let mut row = vec![format!("{u}")];
            for p in &b.policies {
                let of = |f: fn(&DeadlineRun) -> f64| {
                    Spread::of(runs.iter().filter(|r| &r.policy == p).map(|r| f(r))).median
                };
                row.push(format!(
                    "{:.2} / {:.2}",
                    of(|r| r.tardiness_ms),
                    of(|r| r.predicted_tardiness_ms)
                ));
            }
            let busy = |f: fn(&DeadlineRun) -> f64| Spread::of(runs.iter().map(|r| f(r))).median;
            row.push(format!("{:.2} / {:.2}", busy(|r| r.busy), busy(|r| r.predicted_busy)));
            row
        })
        .collect();
    out += &harness::markdown_table(&header, &rows);

    out += &format!("\n## Tardiness ÷ {base}'s, paired by round: measured median [range] · predicted median\n\n");
    out += &ratio_table(b, &kept, true);

    if let Some(candidate) = b.policies.iter().find(|p| p.starts_with("traqios")) {
        out += &format!(
            "\n## {candidate} ÷ the best other policy, paired by round: measured median [range] · predicted median\n\n"
        );
        let header = vec!["ρ".to_string(), format!("{candidate} ÷ best other")];
        let rows: Vec<Vec<String>> = b
            .utilizations
            .iter()
            .map(|&u| {
                let runs = at(u);
                let m = against_best(&runs, candidate, |r| r.tardiness_ms);
                let p = against_best(&runs, candidate, |r| r.predicted_tardiness_ms);
                vec![format!("{u}"), format!("{} · {}", shown(&m, true), shown(&p, false))]
            })
            .collect();
        out += &harness::markdown_table(&header, &rows);
    }

    if b.policies.iter().any(|p| p == "edf") && b.policies.iter().any(|p| p == "sstf") {
        let curve = |f: fn(&DeadlineRun) -> f64| -> Vec<(f64, f64)> {
            b.utilizations
                .iter()
                .map(|&u| (u, Spread::of(ratios(&at(u), "sstf", "edf", f)).median))
                .collect()
        };
        let show = |c: Option<f64>| c.map_or("not within the sweep".to_string(), |u| format!("ρ = {u:.2}"));
        out += &format!(
            "\nEDF/SSTF crossover (SSTF ÷ EDF falls through 1): measured {}, predicted {}.\n",
            show(crossover(&curve(|r| r.tardiness_ms))),
            show(crossover(&curve(|r| r.predicted_tardiness_ms)))
        );
    }

    out += &format!("\n## The first round alone (what one run shows): tardiness ÷ {base}'s, measured · predicted\n\n");
    let first: Vec<&DeadlineRun> = runs.iter().filter(|r| r.round == 0).collect();
    out += &ratio_table(b, &first, false);
    out
}

/// Each policy's tardiness over the baseline's at each utilization, paired
/// by round: measured (with its range, if `range`) and predicted.
fn ratio_table(b: &DeadlineBench, runs: &[&DeadlineRun], range: bool) -> String {
    let base = &b.policies[0];
    let others = &b.policies[1..];
    let mut header = vec!["ρ".to_string()];
    header.extend(others.iter().map(|p| format!("{p} ÷ {base}")));
    let rows: Vec<Vec<String>> = b
        .utilizations
        .iter()
        .map(|&u| {
            let at: Vec<&DeadlineRun> = runs.iter().copied().filter(|r| r.utilization == u).collect();
            let mut row = vec![format!("{u}")];
            for p in others {
                let m = ratios(&at, p, base, |r| r.tardiness_ms);
                let pr = ratios(&at, p, base, |r| r.predicted_tardiness_ms);
                row.push(format!("{} · {}", shown(&m, range), shown(&pr, false)));
            }
            row
        })
        .collect();
    harness::markdown_table(&header, &rows)
}

/// `target`'s value over `baseline`'s in the same round, where the
/// baseline's is above zero (no tardiness: no ratio).
fn ratios(runs: &[&DeadlineRun], target: &str, baseline: &str, value: fn(&DeadlineRun) -> f64) -> Vec<f64> {
    paired_ratios(runs, target, baseline, |r| Some(value(r)))
        .into_iter()
        .filter(|x| x.is_finite())
        .collect()
}

/// `candidate`'s value over the lowest of the other policies' in the same
/// round.
fn against_best(runs: &[&DeadlineRun], candidate: &str, value: fn(&DeadlineRun) -> f64) -> Vec<f64> {
    let rounds: std::collections::BTreeSet<usize> = runs.iter().map(|r| r.round).collect();
    rounds
        .into_iter()
        .filter_map(|round| {
            let this_round = runs.iter().filter(|r| r.round == round);
            let mine = this_round.clone().find(|r| r.policy == candidate).map(|r| value(r))?;
            let best = this_round
                .filter(|r| r.policy != candidate)
                .map(|r| value(r))
                .fold(f64::INFINITY, f64::min);
            (best > 0.0 && best.is_finite()).then(|| mine / best)
        })
        .collect()
}

/// A spread as the report shows it: the median, and the range when asked.
fn shown(values: &[f64], range: bool) -> String {
    if values.is_empty() {
        return "–".into();
    }
    let s = Spread::of(values.iter().copied());
    if range && values.len() > 1 {
        format!("{:.2} [{:.2}–{:.2}]", s.median, s.min, s.max)
    } else {
        format!("{:.2}", s.median)
    }
}

/// Where a curve of (utilization, SSTF ÷ EDF) first falls through 1, by
/// linear interpolation between the swept points; `None` if it never does.
fn crossover(curve: &[(f64, f64)]) -> Option<f64> {
    curve
        .iter()
        .filter(|(_, r)| r.is_finite())
        .collect::<Vec<_>>()
        .windows(2)
        .find_map(|w| {
            let ((u0, r0), (u1, r1)) = (*w[0], *w[1]);
            (r0 > 1.0 && r1 <= 1.0).then(|| u0 + (r0 - 1.0) / (r0 - r1) * (u1 - u0))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crossover_is_interpolated_where_the_ratio_falls_through_one() {
        let c = crossover(&[(0.3, 1.4), (0.5, 1.2), (0.7, 0.8), (0.9, 0.6)]).unwrap();
        assert!((c - 0.6).abs() < 1e-9, "{c}");
        assert_eq!(crossover(&[(0.3, 0.9), (0.5, 0.8)]), None, "below 1 throughout");
        assert_eq!(crossover(&[(0.3, f64::NAN), (0.5, 1.2)]), None);
    }

    #[test]
    fn a_short_sweep_measures_and_predicts_every_policy() {
        let b = DeadlineBench {
            policies: vec!["edf".into(), "traqios".into()],
            utilizations: vec![0.5],
            seconds: 0.3,
            rounds: 1,
            ..DeadlineBench::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let report = run(&DeadlineBench {
            dir: Some(dir.path().to_path_buf()),
            ..b
        })
        .unwrap();
        assert!(report.contains("traqios ÷ edf"), "{report}");
        assert!(report.contains("traqios ÷ the best other"), "{report}");
    }

    #[test]
    fn the_workload_lies_over_the_whole_disk_whatever_its_size() {
        for cylinders in [500, 2000] {
            let b = DeadlineBench {
                disk: SeekDiskProfile {
                    cylinders,
                    ..DeadlineBench::default().disk
                },
                ..DeadlineBench::default()
            };
            let disk = b.check().unwrap();
            assert_eq!(b.workload_at(0.5, &disk).layout_cylinders, cylinders);
        }
    }

    #[test]
    fn bad_settings_name_the_flag() {
        for (b, flag) in [
            (
                DeadlineBench {
                    policies: vec!["nope".into()],
                    ..DeadlineBench::default()
                },
                "--policies",
            ),
            (
                DeadlineBench {
                    utilizations: vec![1.5],
                    ..DeadlineBench::default()
                },
                "--utilizations",
            ),
            (
                DeadlineBench {
                    seconds: 0.0,
                    ..DeadlineBench::default()
                },
                "--seconds",
            ),
            (
                DeadlineBench {
                    rounds: 0,
                    ..DeadlineBench::default()
                },
                "--rounds",
            ),
        ] {
            let err = run(&b).unwrap_err().to_string();
            assert!(err.contains(flag), "{flag}: {err}");
        }
    }
}
