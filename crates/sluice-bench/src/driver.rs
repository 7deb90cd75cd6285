//! The drivers: load a workload's records, then run tenants (each a
//! workload, a number of client threads and a weight) side by side for a
//! time, recording latency per tenant, per operation kind and per 1 s and
//! 10 s interval (YCSB's status intervals; the background-tasks paper
//! plots 10 s ones). Every 100 ms the caller gets a tick with the p99 of
//! all operations since the last one, which is what a controller reads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_core::metrics::LatencyHistogram;

use crate::error::Result;
use crate::target::{Client, Target};
use crate::ycsb::{key, Generator, Op, Workload};

const TICK: Duration = Duration::from_millis(100);
/// Ticks per interval of `series` (1 s) and `series_10s` (10 s).
const INTERVAL_TICKS: [u32; 2] = [10, 100];

#[derive(Clone, Debug)]
pub struct TenantSpec {
    pub name: String,
    pub workload: Workload,
    pub threads: usize,
    pub weight: f64,
    /// Operations per second for the tenant (YCSB's `-target`), shared by
    /// its threads; `None` runs closed-loop as fast as replies come.
    pub target_ops: Option<f64>,
    /// Operations a thread sends together before it reads their replies
    /// (a pipeline; 1: one at a time). Each counts the whole batch's time
    /// as its latency.
    pub pipeline: usize,
}

impl TenantSpec {
    /// `n` users (`user0`, `user1`, ...), each a tenant of its own with
    /// one closed-loop thread running `workload`: users as AppleS counts
    /// them.
    pub fn users(n: usize, workload: &Workload) -> Vec<TenantSpec> {
        (0..n)
            .map(|i| TenantSpec {
                name: format!("user{i}"),
                workload: workload.clone(),
                threads: 1,
                weight: 1.0,
                target_ops: None,
                pipeline: 1,
            })
            .collect()
    }
}

/// One interval of one tenant.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    /// End of the interval, seconds since the run started.
    pub t: f64,
    pub ops: u64,
    pub mean_us: f64,
    pub p99_us: f64,
    /// p99 of the interval's reads alone (0 without reads).
    pub read_p99_us: f64,
}

#[derive(Clone, Debug, Default)]
pub struct TenantResult {
    pub name: String,
    pub ops: u64,
    pub reads: LatencyHistogram,
    pub writes: LatencyHistogram,
    pub all: LatencyHistogram,
    /// Per 1 s interval.
    pub series: Vec<Interval>,
    /// Per 10 s interval.
    pub series_10s: Vec<Interval>,
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
    /// The open 1 s and 10 s intervals: every operation, and reads.
    intervals: [LatencyHistogram; 2],
    read_intervals: [LatencyHistogram; 2],
}

impl Acc {
    fn record(&mut self, ns: u64, is_read: bool) {
        self.result.ops += 1;
        self.result.all.record(ns);
        self.intervals.iter_mut().for_each(|h| h.record(ns));
        if is_read {
            self.read_intervals.iter_mut().for_each(|h| h.record(ns));
            self.result.reads.record(ns);
        } else {
            self.result.writes.record(ns);
        }
    }

    /// At tick `n` (`elapsed` seconds in): closes the intervals that end.
    fn close_intervals(&mut self, n: u32, elapsed: f64) {
        for (i, every) in INTERVAL_TICKS.into_iter().enumerate() {
            if !n.is_multiple_of(every) {
                continue;
            }
            let h = std::mem::take(&mut self.intervals[i]);
            let reads = std::mem::take(&mut self.read_intervals[i]);
            let series = if i == 0 {
                &mut self.result.series
            } else {
                &mut self.result.series_10s
            };
            series.push(Interval {
                t: elapsed,
                ops: h.count(),
                mean_us: h.mean() / 1e3,
                p99_us: h.quantile(0.99) as f64 / 1e3,
                read_p99_us: reads.quantile(0.99) as f64 / 1e3,
            });
        }
    }
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
                let client = target.client_of(&spec.name)?;
                let (acc, window, stop, next_id) = (&accs[ti], &window, &stop, &next_id);
                let tenant = (ti as u32, spec.weight);
                let depth = spec.pipeline.max(1);
                let pace = spec
                    .target_ops
                    .map(|ops| Duration::from_secs_f64((spec.threads * depth) as f64 / ops.max(1e-3)));
                let shared = Shared {
                    acc,
                    window,
                    stop,
                    next_id,
                };
                workers.push(s.spawn(move || client_loop(client, g, tenant, (pace, depth), shared)));
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

/// The caller's ticks and the intervals, until `seconds` have passed.
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
        for acc in accs {
            lock(acc).close_intervals(n, elapsed);
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
    (every, depth): (Option<Duration>, usize),
    Shared {
        acc,
        window,
        stop,
        next_id,
    }: Shared,
) -> Result<()> {
    let mut next = Instant::now();
    let mut batch = Vec::with_capacity(depth);
    while !stop.load(Ordering::Relaxed) {
        if let Some(every) = every {
            pace(&mut next, every);
        }
        batch.clear();
        batch.extend((0..depth).map(|_| {
            let op = g.next_op();
            let value = matches!(op, Op::Update(_) | Op::Insert(_) | Op::ReadModifyWrite(_)).then(|| g.value());
            (op, value.unwrap_or_default())
        }));
        client.begin(next_id.fetch_add(1, Ordering::Relaxed), tenant, weight);
        let t = Instant::now();
        client.run(&batch)?;
        let ns = t.elapsed().as_nanos() as u64;
        let mut acc = lock(acc);
        let mut window = lock(window);
        for (op, _) in &batch {
            acc.record(ns, matches!(op, Op::Read(_) | Op::Scan(..)));
            window.record(ns);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_second_and_ten_second_intervals_close_on_their_ticks() {
        let mut acc = Acc::default();
        for n in 1..=100u32 {
            acc.record(u64::from(n) * 1_000, n % 2 == 0);
            acc.close_intervals(n, f64::from(n) / 10.0);
        }
        let r = &acc.result;
        assert_eq!(r.series.len(), 10);
        assert!(r.series.iter().all(|i| i.ops == 10));
        // The first second's reads: 2, 4, ..., 10 µs.
        assert!((r.series[0].read_p99_us - 10.0).abs() < 0.1, "{:?}", r.series[0]);
        assert_eq!(r.series[9].t, 10.0);
        assert_eq!(r.series_10s.len(), 1);
        assert_eq!(r.series_10s[0].ops, 100);
        assert!(
            (r.series_10s[0].mean_us - 50.5).abs() < 0.5,
            "{}",
            r.series_10s[0].mean_us
        );
        assert_eq!((r.ops, r.reads.count(), r.writes.count()), (100, 50, 50));
    }
}
