//! The drivers: load a workload's records, then run tenants (each a
//! workload, a number of client threads and a weight) side by side for a
//! time, recording latency per tenant, per operation kind and per 1 s
//! interval. Every 100 ms the caller gets a tick with the p99 of all
//! operations since the last one, which is what a controller reads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_core::metrics::LatencyHistogram;

use crate::error::Result;
use crate::target::{Client, Target};
use crate::ycsb::{key, Generator, Op, Workload};

const TICK: Duration = Duration::from_millis(100);
const TICKS_PER_INTERVAL: u32 = 10;

#[derive(Clone, Debug)]
pub struct TenantSpec {
    pub name: String,
    pub workload: Workload,
    pub threads: usize,
    pub weight: f64,
    /// Operations per second for the tenant (YCSB's `-target`), shared by
    /// its threads; `None` runs closed-loop as fast as replies come.
    pub target_ops: Option<f64>,
}

/// One 1 s interval of one tenant.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    /// End of the interval, seconds since the run started.
    pub t: f64,
    pub ops: u64,
    pub mean_us: f64,
    pub p99_us: f64,
}

#[derive(Clone, Debug, Default)]
pub struct TenantResult {
    pub name: String,
    pub ops: u64,
    pub reads: LatencyHistogram,
    pub writes: LatencyHistogram,
    pub all: LatencyHistogram,
    pub series: Vec<Interval>,
}

/// What the caller sees every 100 ms.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    pub elapsed: f64,
    /// p99 of every operation since the previous tick, nanoseconds.
    pub window_p99: Option<u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes the workload's `record_count` records with `threads` clients.
pub fn load(target: &dyn Target, workload: &Workload, threads: usize, seed: u64) -> Result<()> {
    let threads = threads.max(1) as u64;
    let n = workload.record_count;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<()> {
                    let mut client = target.client()?;
                    let records = Arc::new(AtomicU64::new(n));
                    let mut g = Generator::new(workload.clone(), seed ^ t, records)?;
                    for i in (t * n / threads)..((t + 1) * n / threads) {
                        client.begin(i, 0, 1.0);
                        client.write(&key(i), &g.value())?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("load thread panicked"))
    })
}

/// A tenant's running totals.
#[derive(Default)]
struct Acc {
    result: TenantResult,
    interval: LatencyHistogram,
}

/// Runs `tenants` for `seconds`; `tick` is called every 100 ms.
pub fn run(
    target: &dyn Target,
    tenants: &[TenantSpec],
    seconds: f64,
    seed: u64,
    tick: &mut dyn FnMut(Tick),
) -> Result<Vec<TenantResult>> {
    let accs: Vec<Mutex<Acc>> = tenants.iter().map(|_| Mutex::new(Acc::default())).collect();
    let window = Mutex::new(LatencyHistogram::default());
    let (stop, next_id) = (AtomicBool::new(false), AtomicU64::new(0));
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let mut workers = Vec::new();
        for (ti, spec) in tenants.iter().enumerate() {
            let records = Arc::new(AtomicU64::new(spec.workload.record_count));
            for th in 0..spec.threads {
                let seed = seed ^ ((ti as u64) << 32) ^ th as u64;
                let g = Generator::new(spec.workload.clone(), seed, records.clone())?;
                let client = target.client()?;
                let (acc, window, stop, next_id) = (&accs[ti], &window, &stop, &next_id);
                let tenant = (ti as u32, spec.weight);
                let pace = spec
                    .target_ops
                    .map(|ops| Duration::from_secs_f64(spec.threads as f64 / ops.max(1e-3)));
                let shared = Shared {
                    acc,
                    window,
                    stop,
                    next_id,
                };
                workers.push(s.spawn(move || client_loop(client, g, tenant, pace, shared)));
            }
        }
        ticks(started, seconds, &accs, &window, tick);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("client thread panicked"))
    })?;
    Ok(tenants
        .iter()
        .zip(accs)
        .map(|(spec, acc)| {
            let mut r = acc.into_inner().unwrap_or_else(|e| e.into_inner()).result;
            r.name = spec.name.clone();
            r
        })
        .collect())
}

/// The caller's ticks and the 1 s intervals, until `seconds` have passed.
fn ticks(
    started: Instant,
    seconds: f64,
    accs: &[Mutex<Acc>],
    window: &Mutex<LatencyHistogram>,
    tick: &mut dyn FnMut(Tick),
) {
    let mut n = 0u32;
    while started.elapsed().as_secs_f64() < seconds {
        std::thread::sleep(TICK);
        n += 1;
        let w = std::mem::take(&mut *lock(window));
        let elapsed = started.elapsed().as_secs_f64();
        tick(Tick {
            elapsed,
            window_p99: (w.count() > 0).then(|| w.quantile(0.99)),
        });
        if n.is_multiple_of(TICKS_PER_INTERVAL) {
            for acc in accs {
                let mut a = lock(acc);
                let h = std::mem::take(&mut a.interval);
                a.result.series.push(Interval {
                    t: elapsed,
                    ops: h.count(),
                    mean_us: h.mean() / 1e3,
                    p99_us: h.quantile(0.99) as f64 / 1e3,
                });
            }
        }
    }
}

/// What a client thread shares with the run.
struct Shared<'a> {
    acc: &'a Mutex<Acc>,
    window: &'a Mutex<LatencyHistogram>,
    stop: &'a AtomicBool,
    next_id: &'a AtomicU64,
}

/// Sleeps until the next slot of a paced client. A client more than a
/// second behind its schedule drops the missed slots instead of bursting.
fn pace(next: &mut Instant, every: Duration) {
    let now = Instant::now();
    if *next > now {
        std::thread::sleep(*next - now);
    } else if now - *next > Duration::from_secs(1) {
        *next = now;
    }
    *next += every;
}

fn client_loop(
    mut client: Box<dyn Client>,
    mut g: Generator,
    (tenant, weight): (u32, f64),
    every: Option<Duration>,
    Shared {
        acc,
        window,
        stop,
        next_id,
    }: Shared,
) -> Result<()> {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Some(every) = every {
            pace(&mut next, every);
        }
        let op = g.next_op();
        let value = matches!(op, Op::Update(_) | Op::Insert(_) | Op::ReadModifyWrite(_)).then(|| g.value());
        client.begin(next_id.fetch_add(1, Ordering::Relaxed), tenant, weight);
        let t = Instant::now();
        let is_read = match &op {
            Op::Read(k) => client.read(k).map(|_| true)?,
            Op::Scan(k, n) => client.scan(k, *n).map(|_| true)?,
            Op::Update(k) | Op::Insert(k) => client.write(k, value.as_deref().unwrap_or_default()).map(|()| false)?,
            Op::ReadModifyWrite(k) => {
                client.read(k)?;
                client.write(k, value.as_deref().unwrap_or_default()).map(|()| false)?
            }
        };
        let ns = t.elapsed().as_nanos() as u64;
        let mut a = lock(acc);
        a.result.ops += 1;
        a.result.all.record(ns);
        a.interval.record(ns);
        if is_read {
            a.result.reads.record(ns);
        } else {
            a.result.writes.record(ns);
        }
        drop(a);
        lock(window).record(ns);
    }
    Ok(())
}
