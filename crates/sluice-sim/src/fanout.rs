//! Requests that fan out over shards, the setting of cooperative request-order
//! scheduling (Jo et al., "Request-aware Cooperative I/O Scheduling for
//! Scale-out Database Applications", §2 and §5): a front end splits each
//! request into one sub-request per shard it touches, and the request
//! finishes when its slowest sub-request does.
//!
//! The model: `users` closed-loop clients, each with one request at a time;
//! a request picks `fanout` distinct shards out of `shards` at random and
//! asks each for a scan of a uniform number of records in
//! `ios_min..=ios_max`, one I/O per record, each I/O issued when the one
//! before it completes (a scan reads its records one after another). Each
//! shard is a device serving `depth` I/Os at once, each in an exponential
//! time of mean `service_us`, behind a `sluice-core` stage of limit `depth`
//! whose policy orders the I/Os waiting:
//!
//! - `fifo`: arrival order of the I/Os (the paper's noop and deadline);
//! - `fair`: round robin over clients, one I/O a turn (fair among the
//!   threads issuing I/O, as the paper's cfq is, without its time slices
//!   and idling: AppleS's `wrr` with ζ = 1 and each client its own tenant);
//! - `cfq`: Linux CFQ's time slices and anticipation over clients
//!   (`sluice_core::policy::cfq`, with CFQ's defaults);
//! - `coop`: the request order the front end stamps (§4.2).
//!
//! What is measured, per request after the first `2 × users` (the warm-up):
//! its latency, and the gap between its first and its last sub-request to
//! finish (the paper's Fig. 3). Each client draws its requests from a
//! stream of its own and each shard its service times from one of its own,
//! so every policy sees the same requests for a seed.
//!
//! Departure from the paper: its shards also serve most reads from memory
//! (the scan workload's "most requests are served from in-memory cache"),
//! which here would only scale every latency; the model keeps the I/O.

use std::fmt;
use std::str::FromStr;

use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::Serialize;
use sluice_core::device::FlatDevice;
use sluice_core::metrics::LatencyHistogram;
use sluice_core::policy::cfq::{Cfq, CfqOptions};
use sluice_core::policy::coop::{Coop, CoopOptions};
use sluice_core::policy::fifo::Fifo;
use sluice_core::policy::wrr::Wrr;
use sluice_core::time::to_ms;
use sluice_core::{Ctx, Job, Nanos, Policy, Stage};

use crate::engine::EventQueue;
use crate::workload::mix;

/// The shards, the clients and their requests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FanoutConfig {
    pub shards: usize,
    pub fanout: usize,
    pub users: usize,
    /// Records (I/Os) a sub-request reads, drawn uniformly in this range.
    pub ios_min: u32,
    pub ios_max: u32,
    /// I/Os a shard's device serves at once.
    pub depth: usize,
    /// Mean service time of one I/O, µs (exponential).
    pub service_us: f64,
    /// Mean time a client waits between its requests, µs (exponential).
    pub think_us: f64,
    /// Requests measured, after the warm-up.
    pub requests: u64,
    /// Every sub-request of a request reads the same number of records, as
    /// a range scan over hash-sharded keys does (each shard returns the
    /// scan's count); otherwise each draws its own.
    pub same_size: bool,
    /// A shard serves a sub-request's next I/O before any other waiting,
    /// as if it had waited for it at no cost once the one before completed:
    /// the paper's batching of one request's I/O at its best, a bound on
    /// what anticipation could add to request order. Otherwise the freed
    /// device goes to the I/O waiting before the next one is issued, as on
    /// a real shard, where CPU work comes between a scan's reads.
    pub batched: bool,
}

impl Default for FanoutConfig {
    /// The paper's scan experiment in shape: 4 shards, 64 clients, scans of
    /// 1 to 100 records spread over every shard; SSD-like I/O.
    fn default() -> Self {
        FanoutConfig {
            shards: 4,
            fanout: 4,
            users: 64,
            ios_min: 1,
            ios_max: 25,
            depth: 4,
            service_us: 100.0,
            think_us: 0.0,
            requests: 20_000,
            same_size: false,
            batched: false,
        }
    }
}

impl FanoutConfig {
    /// Checks that the model can run, naming the field that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.shards == 0 || self.users == 0 || self.depth == 0 || self.requests == 0 {
            return Err("shards, users, depth and requests must each be at least 1".into());
        }
        if !(1..=self.shards).contains(&self.fanout) {
            return Err(format!(
                "fanout must lie in 1..={} (the shards), got {}",
                self.shards, self.fanout
            ));
        }
        if self.ios_min == 0 || self.ios_min > self.ios_max {
            return Err(format!(
                "ios_min..=ios_max must be a range of at least 1, got {}..={}",
                self.ios_min, self.ios_max
            ));
        }
        let service_ok = self.service_us.is_finite() && self.service_us > 0.0;
        let think_ok = self.think_us.is_finite() && self.think_us >= 0.0;
        if !(service_ok && think_ok) {
            return Err("service_us must be positive and think_us not negative".into());
        }
        Ok(())
    }
}

/// How each shard orders the I/O waiting at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ShardPolicy {
    Fifo,
    Fair,
    Coop,
    Cfq,
}

impl ShardPolicy {
    pub const NAMES: [&'static str; 4] = ["fifo", "fair", "coop", "cfq"];

    fn build(self) -> Box<dyn Policy> {
        match self {
            ShardPolicy::Fifo => Box::new(Fifo::default()),
            ShardPolicy::Fair => Box::new(Wrr::fair()),
            ShardPolicy::Coop => Box::new(Coop::new(CoopOptions::default())),
            ShardPolicy::Cfq => Box::new(Cfq::new(CfqOptions::default())),
        }
    }
}

impl fmt::Display for ShardPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = *self as usize;
        f.pad(Self::NAMES[i])
    }
}

impl FromStr for ShardPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(ShardPolicy::Fifo),
            "fair" => Ok(ShardPolicy::Fair),
            "coop" => Ok(ShardPolicy::Coop),
            "cfq" => Ok(ShardPolicy::Cfq),
            _ => Err(format!("unknown shard policy `{s}`; known: {}", Self::NAMES.join(", "))),
        }
    }
}

/// What one run measured, in milliseconds of virtual time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FanoutStats {
    pub requests: u64,
    /// Requests finished per second of virtual time.
    pub throughput: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The gap between a request's first and last sub-request to finish.
    pub gap_mean_ms: f64,
    pub gap_p99_ms: f64,
}

/// One client's request in flight.
struct Request {
    ctx: Ctx,
    /// I/Os each shard's sub-request still has to make (0: done or untouched).
    left: Vec<u32>,
    /// Sub-requests not finished yet.
    open: usize,
    first_done: Option<Nanos>,
}

enum Event {
    /// The client sends its next request.
    Send(usize),
    /// An I/O of this client's sub-request at this shard completes.
    Done { shard: usize, user: usize },
    /// The shard's policy asked to be asked again now (it held I/O back).
    Wake(usize),
}

struct Shard {
    stage: Stage,
    /// The wake-up scheduled for the shard's policy, if any.
    wake: Option<Nanos>,
    /// Service times are drawn from the shard's own stream.
    rng: Pcg64Mcg,
}

/// Runs the model under `policy` with `seed`.
pub fn simulate(config: &FanoutConfig, policy: ShardPolicy, seed: u64) -> Result<FanoutStats, String> {
    config.validate()?;
    let mut model = Model {
        config,
        shards: (0..config.shards)
            .map(|s| Shard {
                stage: Stage::new(policy.build(), config.depth).expect("depth is at least 1"),
                wake: None,
                rng: Pcg64Mcg::seed_from_u64(mix(seed ^ mix(1_000_000 + s as u64))),
            })
            .collect(),
        requests: (0..config.users).map(|_| None).collect(),
        events: EventQueue::default(),
        seq: 0,
        now: 0,
    };
    let mut clients: Vec<Pcg64Mcg> = (0..config.users)
        .map(|u| Pcg64Mcg::seed_from_u64(mix(seed ^ mix(u as u64))))
        .collect();
    for user in 0..config.users {
        model.events.schedule(0, Event::Send(user));
    }
    let warmup = 2 * config.users as u64;
    let (mut next_id, mut finished) = (0u64, 0u64);
    let mut latency = LatencyHistogram::default();
    let mut gap = LatencyHistogram::default();
    let mut measured_from = None;
    while finished < config.requests {
        let Some((now, event)) = model.events.pop() else {
            unreachable!("every client always has its next request or an I/O scheduled");
        };
        model.now = now;
        match event {
            Event::Send(user) => {
                let rng = &mut clients[user];
                let mut left = vec![0; config.shards];
                let size = config.same_size.then(|| rng.gen_range(config.ios_min..=config.ios_max));
                for shard in sample(rng, config.shards, config.fanout).into_iter() {
                    left[shard] = size.unwrap_or_else(|| rng.gen_range(config.ios_min..=config.ios_max));
                }
                let touched: Vec<usize> = (0..config.shards).filter(|&s| left[s] > 0).collect();
                model.requests[user] = Some(Request {
                    ctx: Ctx::new(next_id, now).with_tenant(user as u32, 1.0),
                    left,
                    open: config.fanout,
                    first_done: None,
                });
                next_id += 1;
                for shard in touched {
                    model.issue(shard, user);
                }
            }
            Event::Done { shard, user } => {
                model.shards[shard].stage.complete().expect("an I/O was in service");
                let more = {
                    let request = model.requests[user].as_mut().expect("a request in flight");
                    request.left[shard] -= 1;
                    request.left[shard] > 0
                };
                if !(more && config.batched) {
                    // The freed device slot goes to the next I/O waiting here
                    // (batched, to this sub-request's next, issued below).
                    model.dispatch(shard);
                }
                if more {
                    model.issue(shard, user);
                    continue;
                }
                let request = model.requests[user].as_mut().expect("a request in flight");
                request.open -= 1;
                let first = *request.first_done.get_or_insert(now);
                if request.open > 0 {
                    continue;
                }
                let ctx = request.ctx;
                model.requests[user] = None;
                if ctx.id.0 >= warmup {
                    measured_from.get_or_insert(ctx.arrival);
                    latency.record(now - ctx.arrival);
                    gap.record(now - first);
                    finished += 1;
                }
                let think = exponential(&mut clients[user], config.think_us);
                model.events.schedule(now + think, Event::Send(user));
            }
            Event::Wake(shard) => {
                if model.shards[shard].wake == Some(now) {
                    model.shards[shard].wake = None;
                }
                model.dispatch(shard);
            }
        }
    }
    let span = model.now.saturating_sub(measured_from.unwrap_or(0)).max(1);
    Ok(FanoutStats {
        requests: finished,
        throughput: finished as f64 / (span as f64 / 1e9),
        mean_ms: to_ms(latency.mean()),
        p50_ms: to_ms(latency.quantile(0.5) as f64),
        p99_ms: to_ms(latency.quantile(0.99) as f64),
        gap_mean_ms: to_ms(gap.mean()),
        gap_p99_ms: to_ms(gap.quantile(0.99) as f64),
    })
}

/// The shards, the requests in flight and the events of one run.
struct Model<'a> {
    config: &'a FanoutConfig,
    shards: Vec<Shard>,
    /// Each client's request in flight.
    requests: Vec<Option<Request>>,
    events: EventQueue<Event>,
    /// Push order of the I/Os, for the policies' ties.
    seq: u64,
    now: Nanos,
}

impl Model<'_> {
    /// The next I/O of `user`'s sub-request at `shard` joins its queue.
    fn issue(&mut self, shard: usize, user: usize) {
        let ctx = self.requests[user].as_ref().expect("a request in flight").ctx;
        let job = Job::new(self.seq, ctx, 0, self.now).with_tag(user as u64);
        self.shards[shard].stage.push(job, self.now);
        self.seq += 1;
        self.dispatch(shard);
    }

    /// Starts the I/Os the shard's stage lets in now.
    fn dispatch(&mut self, index: usize) {
        let shard = &mut self.shards[index];
        while let Some(job) = shard.stage.dispatch(self.now, &FlatDevice::default()) {
            let service = exponential(&mut shard.rng, self.config.service_us).max(1);
            let user = job.tag as usize;
            self.events
                .schedule(self.now + service, Event::Done { shard: index, user });
        }
        if let Some(at) = shard.stage.wake_at().filter(|&at| at > self.now) {
            if shard.wake != Some(at) {
                shard.wake = Some(at);
                self.events.schedule(at, Event::Wake(index));
            }
        }
    }
}

/// An exponential draw of mean `mean_us` microseconds, in nanoseconds.
fn exponential(rng: &mut Pcg64Mcg, mean_us: f64) -> Nanos {
    (-(1.0 - rng.gen::<f64>()).ln() * mean_us * 1e3) as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> FanoutConfig {
        FanoutConfig {
            requests: 4_000,
            ..FanoutConfig::default()
        }
    }

    #[test]
    fn a_seed_gives_the_same_run() {
        let a = simulate(&small(), ShardPolicy::Coop, 7).unwrap();
        assert_eq!(a, simulate(&small(), ShardPolicy::Coop, 7).unwrap());
        assert_ne!(a, simulate(&small(), ShardPolicy::Coop, 8).unwrap());
    }

    #[test]
    fn request_order_cuts_the_tail_and_the_gap_without_costing_throughput() {
        let fifo = simulate(&small(), ShardPolicy::Fifo, 1).unwrap();
        let fair = simulate(&small(), ShardPolicy::Fair, 1).unwrap();
        let coop = simulate(&small(), ShardPolicy::Coop, 1).unwrap();
        assert!(coop.p99_ms < fifo.p99_ms, "coop {coop:?} fifo {fifo:?}");
        assert!(coop.p99_ms < fair.p99_ms, "coop {coop:?} fair {fair:?}");
        assert!(coop.gap_p99_ms < fifo.gap_p99_ms, "coop {coop:?} fifo {fifo:?}");
        // Every policy keeps each device busy: throughput is the same work.
        assert!(
            (coop.throughput / fifo.throughput - 1.0).abs() < 0.05,
            "coop {coop:?} fifo {fifo:?}"
        );
    }

    #[test]
    fn anticipation_idles_busy_shards_and_stretches_the_tail() {
        let fifo = simulate(&small(), ShardPolicy::Fifo, 2).unwrap();
        let cfq = simulate(&small(), ShardPolicy::Cfq, 2).unwrap();
        let coop = simulate(&small(), ShardPolicy::Coop, 2).unwrap();
        // The client with the slice reads one record at a time, and the
        // device waits for its next read while the other clients' wait.
        assert!(cfq.throughput < 0.5 * fifo.throughput, "cfq {cfq:?} fifo {fifo:?}");
        assert!(coop.p99_ms < 0.45 * cfq.p99_ms, "coop {coop:?} cfq {cfq:?}");
        assert_eq!(cfq.requests, 4_000, "every request finishes");
    }

    #[test]
    fn batching_one_requests_io_adds_little_to_request_order() {
        let batched = FanoutConfig {
            batched: true,
            ..small()
        };
        let coop = simulate(&small(), ShardPolicy::Coop, 4).unwrap();
        let coop_batched = simulate(&batched, ShardPolicy::Coop, 4).unwrap();
        // Request order already serves the earliest request's I/O next
        // whenever it waits; batching only closes the moment between one
        // of its reads and the next, which another request's I/O takes.
        let ratio = coop_batched.p99_ms / coop.p99_ms;
        assert!((0.9..=1.05).contains(&ratio), "{coop_batched:?} against {coop:?}");
        assert!(
            (coop_batched.throughput / coop.throughput - 1.0).abs() < 0.05,
            "{coop_batched:?} against {coop:?}"
        );
        assert_ne!(coop_batched, coop, "batching changed the order served");
    }

    #[test]
    fn one_shard_has_no_gap() {
        let config = FanoutConfig {
            shards: 1,
            fanout: 1,
            ..small()
        };
        let stats = simulate(&config, ShardPolicy::Fifo, 3).unwrap();
        assert_eq!(stats.requests, 4_000);
        assert!(stats.gap_p99_ms < 1e-3, "{stats:?}");
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |c: FanoutConfig| c.validate().unwrap_err();
        assert!(bad(FanoutConfig { fanout: 5, ..small() }).contains("fanout"));
        assert!(bad(FanoutConfig { ios_min: 0, ..small() }).contains("ios_min"));
        assert!(bad(FanoutConfig {
            service_us: -1.0,
            ..small()
        })
        .contains("service_us"));
        assert!("lifo"
            .parse::<ShardPolicy>()
            .unwrap_err()
            .contains("fifo, fair, coop, cfq"));
    }
}
