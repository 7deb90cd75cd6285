//! The optimizer against a simulated database whose throughput peaks at a
//! known P: service time grows with the number of requests inside,
//! s(n) = 5 ms · (1 + (n/16)²), so λ(P) = P / s(P) peaks at P = 16. The
//! model's matching point must give throughput close to that peak, its
//! refinement must keep the best P it measured, and the gradient limiter
//! must settle below the collapse.
//!
//! A request's service is a thread sleeping, not a tokio timer: tokio's
//! timer rounds every sleep up to its next 1 ms tick, which lengthened the
//! shortest service times by half and bent the curve the model fits.

use std::sync::Arc;
use std::time::Duration;

use sluice_proxy::gate::{Gate, GateConfig};
use sluice_proxy::optimizer::{
    self, Decision, DecisionLog, ModelConfig, OptimizerConfig, ParallelismMode, SloTargets, ZetaMode,
};
use tokio::sync::watch;
use tokio::task::JoinSet;

fn throughput(p: usize) -> f64 {
    p as f64 / service(p).as_secs_f64()
}

fn service(inside: usize) -> Duration {
    Duration::from_secs_f64(0.005 * (1.0 + (inside as f64 / 16.0).powi(2)))
}

/// `users` closed-loop users against the simulated database; they leave
/// when the set is dropped.
fn spawn_users(gate: &Gate, users: usize) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for u in 0..users {
        let gate = gate.clone();
        let tenant = gate.tenant(&format!("user{u}"));
        set.spawn(async move {
            loop {
                let slot = gate.admit(&tenant).await.unwrap();
                let service = service(gate.in_flight());
                tokio::task::spawn_blocking(move || std::thread::sleep(service))
                    .await
                    .unwrap();
                drop(slot);
            }
        });
    }
    set
}

/// The model, sampling for 600 ms after 100 ms of settling.
fn model(refine: bool) -> ModelConfig {
    ModelConfig {
        p0: 2,
        settle_ms: 100,
        sample_ms: 600,
        refine,
        ..ModelConfig::default()
    }
}

/// A gate letting in 64 and the optimizer choosing its P by `mode`.
fn start_optimizer(mode: ParallelismMode, model: ModelConfig) -> (Gate, DecisionLog, watch::Sender<bool>) {
    let gate = Gate::new(GateConfig {
        parallelism: 64,
        ..GateConfig::default()
    })
    .unwrap();
    let config = OptimizerConfig {
        period_ms: 50,
        parallelism: mode,
        zeta: ZetaMode::Fixed,
        model,
        ..OptimizerConfig::default()
    };
    let log = DecisionLog::default();
    let (stop, stopped) = watch::channel(false);
    let slo = SloTargets::new(Vec::new());
    tokio::spawn(optimizer::run(config, gate.clone(), log.clone(), slo, stopped));
    (gate, log, stop)
}

/// Waits until the log holds a decision `awaited` picks, for at most 20 s
/// (the machine may be loaded).
async fn until_decided(log: &DecisionLog, awaited: impl Fn(&Decision) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !log.recent().iter().any(&awaited) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The (P, λ) pairs a decision shows, as in "λ(2)=390/s λ(11)=1470/s".
fn measured(why: &str) -> Vec<(usize, f64)> {
    why.split_whitespace()
        .filter_map(|word| {
            let (p, rate) = word.strip_prefix("λ(")?.split_once(")=")?;
            Some((
                p.parse().ok()?,
                rate.trim_end_matches(';').strip_suffix("/s")?.parse().ok()?,
            ))
        })
        .collect()
}

/// How many samplings the model has begun.
fn samplings(log: &DecisionLog) -> usize {
    let begun = |d: &&Decision| d.why.contains("sampling throughput at P0");
    log.recent().iter().filter(begun).count()
}

/// Runs the optimizer with 64 users for `run_for`, and then until it has
/// made a decision that `awaited` picks.
async fn settled_p(
    mode: ParallelismMode,
    refine: bool,
    run_for: Duration,
    awaited: fn(&Decision) -> bool,
) -> (usize, DecisionLog) {
    let (gate, log, stop) = start_optimizer(mode, model(refine));
    let _users = spawn_users(&gate, 64);
    tokio::time::sleep(run_for).await;
    until_decided(&log, awaited).await;
    stop.send(true).unwrap();
    (gate.parallelism(), log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_matching_point_gives_near_peak_throughput() {
    let matching_point = |d: &Decision| d.knob == "matching_point";
    let (p, log) = settled_p(
        ParallelismMode::Model,
        false,
        Duration::from_millis(2_600),
        matching_point,
    )
    .await;
    let decisions = log.recent();
    assert!(
        decisions.iter().any(|d| d.knob == "matching_point"),
        "no matching point decided: {decisions:?}"
    );
    let peak = throughput(16);
    assert!(
        throughput(p) >= 0.85 * peak,
        "P = {p} gives {:.0}/s, peak {peak:.0}/s; decisions {decisions:?}",
        throughput(p)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gradient_limiter_backs_off_from_collapse() {
    let (p, log) = settled_p(ParallelismMode::Gradient, false, Duration::from_millis(3_000), |_| true).await;
    assert!(p < 64, "P = {p} never came down from 64: {:?}", log.recent());
    assert!(throughput(p) > throughput(64), "P = {p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refinement_keeps_the_best_measured_p() {
    let refined = |d: &Decision| d.why.contains("refined");
    let (p, log) = settled_p(ParallelismMode::Model, true, Duration::from_millis(4_200), refined).await;
    let decisions = log.recent();
    let Some(decision) = decisions.iter().rev().find(|d| refined(d)) else {
        panic!("no refinement decided: {decisions:?}")
    };
    // "model, refined: λ(2)=390/s λ(11)=1470/s ...": the measured samples.
    let measured = measured(&decision.why);
    // "model: C = 16; measuring [16, 32] to refine": C and 2C, less those
    // sampled already (2C may be the user count, C the middle sample).
    let refining = decisions
        .iter()
        .find_map(|d| {
            d.why
                .split_once("measuring [")?
                .1
                .split_once(']')
                .map(|(ps, _)| ps.split(", ").filter(|p| !p.is_empty()).count())
        })
        .expect("the refining samples are announced");
    assert_eq!(
        measured.len(),
        3 + refining,
        "three model samples and {refining} refining ones: {}",
        decision.why
    );
    // Which P measures best depends on the machine's load (the samples are
    // real time); that the best measured one is kept does not.
    let best = measured.iter().map(|&(_, rate)| rate).fold(0.0, f64::max);
    let kept = measured
        .iter()
        .find(|&&(sampled, _)| sampled == p)
        .map(|&(_, rate)| rate);
    assert_eq!(kept, Some(best), "{}", decision.why);
    assert_eq!(decision.value as usize, p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_leaving_while_sampled_leave_no_matching_point_behind() {
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, model(false));
    let users = spawn_users(&gate, 64);
    until_decided(&log, |d| d.why.contains("sampling throughput at P2")).await;
    drop(users);
    let abandoned = |d: &Decision| d.why.contains("the 64 users left while sampling; sampling abandoned");
    until_decided(&log, abandoned).await;
    let decisions = log.recent();
    assert!(decisions.iter().any(abandoned), "{decisions:?}");
    assert_eq!(gate.parallelism(), 64, "back to the P before sampling: {decisions:?}");
    assert!(
        !decisions.iter().any(|d| d.why.contains("matching point")),
        "a fit of a sample the users left halfway: {decisions:?}"
    );
    // Back again, the sampling goes on at P2: the fit has all three
    // samples, and P0 and P1 were not sampled again.
    let _users = spawn_users(&gate, 64);
    until_decided(&log, |d| d.why.contains("matching point")).await;
    stop.send(true).unwrap();
    let decisions = log.recent();
    let fitted = decisions.iter().find(|d| d.why.contains("matching point"));
    let sampled = fitted.map(|d| measured(&d.why)).unwrap_or_default();
    assert_eq!(sampled.len(), 3, "{decisions:?}");
    assert_eq!(sampled[2].0, 64, "{decisions:?}");
    assert_eq!(samplings(&log), 1, "{decisions:?}");
    let went_on = |d: &Decision| d.why.contains("the sampling for 64 users goes on at P2 = 64");
    assert!(decisions.iter().any(went_on), "{decisions:?}");
}

/// Runs shorter than a sampling (pgbench runs of 12 s against five
/// samples of 4 s, seen on PostgreSQL) each left the sampling at P2 and
/// the next began it again at P0: every run paid P = 2, none ended it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_shorter_than_a_sampling_end_it_between_them() {
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, model(true));
    let mut runs = 0;
    while !log.recent().iter().any(|d| d.why.starts_with("model, refined:")) {
        assert!(runs < 12, "no end to the sampling: {:?}", log.recent());
        let users = spawn_users(&gate, 64);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        drop(users);
        tokio::time::sleep(Duration::from_millis(200)).await;
        runs += 1;
    }
    stop.send(true).unwrap();
    let decisions = log.recent();
    assert_eq!(samplings(&log), 1, "{decisions:?}");
    assert!(runs >= 2, "a run of 1 s held a sampling of 3.5 s: {decisions:?}");
}

/// A sampling left longer ago than `rerun_ms` is begun afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_sampling_left_long_ago_is_begun_afresh() {
    let rerun = ModelConfig {
        rerun_ms: 500,
        ..model(false)
    };
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, rerun);
    let users = spawn_users(&gate, 64);
    until_decided(&log, |d| d.why.contains("sampling throughput at P1")).await;
    drop(users);
    until_decided(&log, |d| d.why.contains("left while sampling")).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _users = spawn_users(&gate, 64);
    until_decided(&log, |d| d.why.contains("matching point")).await;
    stop.send(true).unwrap();
    let decisions = log.recent();
    assert_eq!(samplings(&log), 2, "{decisions:?}");
    assert!(!decisions.iter().any(|d| d.why.contains("goes on at")), "{decisions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_back_from_a_pause_are_not_sampled_again() {
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, model(false));
    let users = spawn_users(&gate, 64);
    until_decided(&log, |d| d.why.contains("matching point")).await;
    let decided = gate.parallelism();
    drop(users);
    // Many settle times (100 ms) without demand, then the same users again,
    // connecting over more than one period (50 ms) as pgbench's do.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let _first = spawn_users(&gate, 16);
    tokio::time::sleep(Duration::from_millis(70)).await;
    let _rest = spawn_users(&gate, 48);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    stop.send(true).unwrap();
    assert_eq!(samplings(&log), 1, "{:?}", log.recent());
    assert_eq!(gate.parallelism(), decided);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demand_sampled_before_gets_its_matching_point_again() {
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, model(false));
    let users = spawn_users(&gate, 64);
    let fitted = |d: &Decision| d.why.contains("matching point");
    until_decided(&log, fitted).await;
    let for_64 = gate.parallelism();
    drop(users);
    let users = spawn_users(&gate, 16);
    until_decided(&log, |d| d.why.contains("λ(16)")).await;
    drop(users);
    let _users = spawn_users(&gate, 64);
    let recalled = |d: &Decision| d.why.contains("matched 64 users before");
    until_decided(&log, recalled).await;
    stop.send(true).unwrap();
    let decisions = log.recent();
    assert_eq!(
        samplings(&log),
        2,
        "64 users, then 16; 64 again recalled: {decisions:?}"
    );
    assert!(decisions.iter().any(recalled), "{decisions:?}");
    assert_eq!(gate.parallelism(), for_64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_run_the_users_cut_short_is_not_begun_again_on_their_return() {
    let rerun = ModelConfig {
        rerun_ms: 1_500,
        ..model(false)
    };
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, rerun);
    let users = spawn_users(&gate, 64);
    until_decided(&log, |d| d.why.contains("matching point")).await;
    let fitted = gate.parallelism();
    // The re-run after 1.5 s, cut short by the users leaving.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while samplings(&log) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no re-run: {:?}", log.recent());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(users);
    until_decided(&log, |d| d.why.contains("left while sampling")).await;
    let _users = spawn_users(&gate, 64);
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop.send(true).unwrap();
    assert_eq!(samplings(&log), 2, "{:?}", log.recent());
    assert_eq!(gate.parallelism(), fitted, "{:?}", log.recent());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_re_run_samples_only_around_the_held_p() {
    let rerun = ModelConfig {
        rerun_ms: 1_000,
        ..model(false)
    };
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, rerun);
    let _users = spawn_users(&gate, 64);
    until_decided(&log, |d| d.why.contains("matching point")).await;
    let held = gate.parallelism();
    let re_run = |d: &Decision| d.why.starts_with("model, re-run:");
    until_decided(&log, re_run).await;
    stop.send(true).unwrap();
    let decisions = log.recent();
    let Some(decision) = decisions.iter().find(|d| re_run(d)) else {
        panic!("no re-run: {decisions:?}")
    };
    let sampled: Vec<usize> = measured(&decision.why).iter().map(|&(p, _)| p).collect();
    let mut around = vec![(held / 2).max(1), held, (2 * held).min(64.max(held))];
    around.dedup();
    assert_eq!(sampled, around, "held {held}: {decisions:?}");
    let full = decisions
        .iter()
        .filter(|d| d.why.contains("users; sampling throughput at P0"));
    assert_eq!(full.count(), 1, "the re-run swept all of P again: {decisions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_users_to_contend_are_never_re_run() {
    let rerun = ModelConfig {
        rerun_ms: 300,
        ..model(false)
    };
    let (gate, log, stop) = start_optimizer(ParallelismMode::Model, rerun);
    let _users = spawn_users(&gate, 3);
    // Several re-run periods, each of which would sample if allowed to.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    stop.send(true).unwrap();
    let decisions = log.recent();
    assert!(
        decisions.iter().all(|d| !d.why.contains("sampling")),
        "3 users (P0 = 2) were sampled: {decisions:?}"
    );
    assert_eq!(gate.parallelism(), 64, "P stays above the users");
}

/// Closed-loop users of `tenant` whose requests take 5 ms inside.
fn spawn_tenant(gate: &Gate, tenant: &str, users: usize) {
    for _ in 0..users {
        let (gate, tenant) = (gate.clone(), gate.tenant(tenant));
        tokio::spawn(async move {
            loop {
                let slot = gate.admit(&tenant).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(slot);
            }
        });
    }
}

/// P = 4, and tenant ls starting at a tenth of the others' weight.
fn light_ls_gate() -> Gate {
    Gate::new(GateConfig {
        parallelism: 4,
        weights: [("ls".to_string(), 0.1)].into(),
        ..GateConfig::default()
    })
    .unwrap()
}

/// Starts the optimizer with fixed P and ζ and an SLO window of
/// `window_ms`.
fn start_slo_optimizer(gate: &Gate, slo: &SloTargets, log: &DecisionLog, window_ms: u64) -> watch::Sender<bool> {
    let config = OptimizerConfig {
        period_ms: 20,
        parallelism: ParallelismMode::Fixed,
        zeta: ZetaMode::Fixed,
        slo_window_ms: window_ms,
        ..OptimizerConfig::default()
    };
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(optimizer::run(config, gate.clone(), log.clone(), slo.clone(), stopped));
    stop
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_set_live_raises_the_tenants_share_until_met() {
    let gate = light_ls_gate();
    spawn_tenant(&gate, "ls", 2);
    for b in 0..8 {
        spawn_tenant(&gate, &format!("be{b}"), 2);
    }
    let (log, slo) = (DecisionLog::default(), SloTargets::new(Vec::new()));
    let stop = start_slo_optimizer(&gate, &slo, &log, 200);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let weight = |g: &Gate| g.snapshot().tenants.iter().find(|t| t.name == "ls").unwrap().weight;
    assert_eq!(weight(&gate), 0.1, "no target yet: the weight stays");
    let target = optimizer::Slo {
        tenant: "ls".into(),
        percentile: 99.0,
        target_ms: 25.0,
    };
    assert!(slo
        .set(optimizer::Slo {
            percentile: 100.0,
            ..target.clone()
        })
        .unwrap_err()
        .contains("percentile"));
    slo.set(target).unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    stop.send(true).unwrap();
    let raised = weight(&gate);
    assert!(
        raised > 1.0,
        "p99 of ls at weight 0.1 is ~100 ms, far above 25 ms; weight now {raised}: {:?}",
        log.recent()
    );
    assert!(log
        .recent()
        .iter()
        .any(|d| d.knob == "weight.ls" && d.why.contains("target 25")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_is_not_raised_on_windows_a_stall_decides() {
    // Requests take 5 ms inside, but every 300 ms the "disk" freezes for
    // 150 ms and none finishes (a WAL flush every commit waits for).
    let gate = light_ls_gate();
    let disk = Arc::new(tokio::sync::RwLock::new(()));
    for (tenant, users) in [("ls", 2), ("be", 8)] {
        for _ in 0..users {
            let (gate, tenant, disk) = (gate.clone(), gate.tenant(tenant), Arc::clone(&disk));
            tokio::spawn(async move {
                loop {
                    let slot = gate.admit(&tenant).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    drop(disk.read().await);
                    drop(slot);
                }
            });
        }
    }
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let _frozen = disk.write().await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    });
    let (log, slo) = (DecisionLog::default(), SloTargets::new(Vec::new()));
    slo.set(optimizer::Slo {
        tenant: "ls".into(),
        percentile: 99.0,
        target_ms: 25.0,
    })
    .unwrap();
    // Every 400 ms window holds the end of a freeze.
    let stop = start_slo_optimizer(&gate, &slo, &log, 400);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    stop.send(true).unwrap();
    let weight = gate.snapshot().tenants.iter().find(|t| t.name == "ls").unwrap().weight;
    assert!(
        weight <= 0.1,
        "ls misses by far, but through stalls: {:?}",
        log.recent()
    );
    assert!(
        log.recent()
            .iter()
            .any(|d| d.why.contains("not raised: no request finished for")),
        "holds are logged: {:?}",
        log.recent()
    );
}
