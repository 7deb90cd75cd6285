//! RCP against FIFO (part `rcp`) and the non-critical device bound swept
//! (part `bound`, RCP §7.6 and Fig. 11), on the emulated SSD.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use sluice_core::metrics::LatencyHistogram;
use sluice_core::Ctx;
use sluice_io::{enter, RcpConfig, Runtime, TaskKind};

use super::{data_file, random_offset, ratio, runtime, IoBench, Metrics, Ratio, Run, READ};

/// Foreground readers and background writers.
#[derive(Clone, Copy)]
struct Load {
    readers: usize,
    think: Option<Duration>,
    writers: usize,
    block: usize,
}

impl Load {
    fn heavy(b: &IoBench) -> Load {
        Load {
            readers: b.foreground_threads,
            think: None,
            writers: b.background_threads,
            block: b.background_block,
        }
    }

    /// One reader with 5 ms think time, as in RCP §7.6.
    fn light(b: &IoBench) -> Load {
        Load {
            readers: 1,
            think: Some(Duration::from_millis(5)),
            ..Load::heavy(b)
        }
    }
}

struct Outcome {
    fg: LatencyHistogram,
    fg_ios: u64,
    bg_bytes: u64,
    seconds: f64,
}

impl Outcome {
    fn metrics(&self) -> Metrics {
        let mut m = Metrics::new();
        if self.fg_ios > 0 {
            m.insert("fg_iops", self.fg_ios as f64 / self.seconds);
            m.insert("fg_mean_us", self.fg.mean() / 1e3);
            m.insert("fg_p50_us", self.fg.quantile(0.5) as f64 / 1e3);
            m.insert("fg_p99_us", self.fg.quantile(0.99) as f64 / 1e3);
            m.insert("fg_p999_us", self.fg.quantile(0.999) as f64 / 1e3);
        }
        if self.bg_bytes > 0 {
            m.insert("bg_mb_s", self.bg_bytes as f64 / self.seconds / 1e6);
        }
        m
    }
}

fn background_writer(
    rt: &Runtime,
    dir: &Path,
    i: usize,
    block: usize,
    stop: &AtomicBool,
    bytes: &AtomicU64,
) -> Result<()> {
    let f = rt.open(dir.join(format!("bg-{i}")), true)?;
    let buf = vec![0x5au8; block];
    let mut off = 0;
    while !stop.load(Ordering::Relaxed) {
        f.write_at(&buf, off)?;
        bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        off = (off + buf.len() as u64) % (8 << 20);
    }
    Ok(())
}

/// Runs `load` on `rt` for `seconds`.
fn run_load(rt: &Runtime, dir: &Path, load: Load, seconds: f64) -> Result<Outcome> {
    let path = dir.join("data");
    data_file(&path)?;
    let data = rt.open(&path, false)?;
    let stop = AtomicBool::new(false);
    let hist = Mutex::new(LatencyHistogram::default());
    let (fg_ios, bg_bytes) = (AtomicU64::new(0), AtomicU64::new(0));
    let bg = rt.register_background("writers", TaskKind::Compaction);
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let writers: Vec<_> = (0..load.writers)
            .map(|i| {
                let (bg, stop, bytes) = (bg.clone(), &stop, &bg_bytes);
                s.spawn(move || {
                    let _bg = bg.enter();
                    background_writer(rt, dir, i, load.block, stop, bytes)
                })
            })
            .collect();
        for i in 0..load.readers {
            let (f, stop, hist, ios) = (&data, &stop, &hist, &fg_ios);
            s.spawn(move || -> Result<()> {
                let mut local = LatencyHistogram::default();
                let mut buf = vec![0u8; READ];
                let mut rng = 0x9e3779b97f4a7c15u64 ^ (i as u64 + 1);
                while !stop.load(Ordering::Relaxed) {
                    let _req = enter(Ctx::new(0, 0));
                    let t = Instant::now();
                    f.read_at(&mut buf, random_offset(&mut rng))?;
                    local.record(t.elapsed().as_nanos() as u64);
                    ios.fetch_add(1, Ordering::Relaxed);
                    if let Some(think) = load.think {
                        std::thread::sleep(think);
                    }
                }
                hist.lock().expect("histogram").merge(&local);
                Ok(())
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().expect("writer thread")?;
        }
        Ok(())
    })?;
    Ok(Outcome {
        fg: hist.into_inner().expect("histogram"),
        fg_ios: fg_ios.into_inner(),
        bg_bytes: bg_bytes.into_inner(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Runs each configuration once, in a sub-directory of its own.
fn configs(b: &IoBench, dir: &Path, list: Vec<(String, RcpConfig, Load)>) -> Result<Vec<(String, Metrics)>> {
    list.into_iter()
        .map(|(name, rcp, load)| {
            let sub = dir.join(&name);
            std::fs::create_dir_all(&sub)?;
            let outcome = run_load(&runtime(rcp, true)?, &sub, load, b.seconds)?;
            Ok((name, outcome.metrics()))
        })
        .collect()
}

pub(super) fn round(b: &IoBench, dir: &Path) -> Result<Vec<(String, Metrics)>> {
    let (heavy, light) = (Load::heavy(b), Load::light(b));
    let on = RcpConfig::default;
    configs(
        b,
        dir,
        vec![
            ("fg-alone".into(), on(), Load { writers: 0, ..heavy }),
            ("rcp".into(), on(), heavy),
            ("fifo".into(), RcpConfig::off(), heavy),
            ("bg-alone-rcp".into(), on(), Load { readers: 0, ..heavy }),
            ("bg+light-fg-rcp".into(), on(), light),
            ("bg-alone-fifo".into(), RcpConfig::off(), Load { readers: 0, ..heavy }),
        ],
    )
}

/// Device bounds swept in part `bound`; 32 is the device's depth (no bound).
const BOUNDS: [usize; 6] = [1, 2, 4, 8, 16, 32];

pub(super) fn bound_round(b: &IoBench, dir: &Path) -> Result<Vec<(String, Metrics)>> {
    let list = BOUNDS
        .iter()
        .map(|&bound| {
            let rcp = RcpConfig {
                noncritical_device_bound: bound,
                ..RcpConfig::default()
            };
            (format!("bound-{bound:02}"), rcp, Load::light(b))
        })
        .collect();
    configs(b, dir, list)
}

pub(super) fn ratios(runs: &[Run]) -> Vec<Ratio> {
    let mut out = vec![
        ratio(
            runs,
            "fg p99.9: rcp / fg-alone (target <= 2)",
            ("rcp", "fg_p999_us"),
            ("fg-alone", "fg_p999_us"),
        ),
        ratio(
            runs,
            "fg p99.9: fifo / rcp (target >= 10)",
            ("fifo", "fg_p999_us"),
            ("rcp", "fg_p999_us"),
        ),
        ratio(
            runs,
            "bg MB/s: light fg / bg-alone, rcp (target >= 0.5)",
            ("bg+light-fg-rcp", "bg_mb_s"),
            ("bg-alone-rcp", "bg_mb_s"),
        ),
        ratio(
            runs,
            "bg MB/s: bg-alone rcp / bg-alone fifo (cost of the bound)",
            ("bg-alone-rcp", "bg_mb_s"),
            ("bg-alone-fifo", "bg_mb_s"),
        ),
    ];
    for bound in &BOUNDS[1..] {
        let name = format!("bound-{bound:02}");
        out.push(ratio(
            runs,
            &format!("bg MB/s: {name} / bound-01"),
            (&name, "bg_mb_s"),
            ("bound-01", "bg_mb_s"),
        ));
        out.push(ratio(
            runs,
            &format!("fg mean: {name} / bound-01"),
            (&name, "fg_mean_us"),
            ("bound-01", "fg_mean_us"),
        ));
    }
    out
}
