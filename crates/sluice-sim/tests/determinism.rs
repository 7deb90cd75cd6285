//! The same experiment file and seed give byte-identical output, whatever
//! the number of threads; and the simulated disk behaves like the model.

use sluice_core::device::{SeekDisk, SeekDiskConfig};
use sluice_core::{PolicyOptions, PolicySpec};
use sluice_sim::report::write_all;
use sluice_sim::sweep::run_experiment;
use sluice_sim::{simulate, Experiment, TraqiosWorkload};

const SMALL: &str = r#"
    name = "small"
    seeds = 2
    policies = ["edf", "sstf", "fd-scan", "ssedv", "traqios", "scan", "fifo"]
    [sweep]
    values = [0.3, 0.9]
    [workload]
    transactions = 200
    ios = [1, 100]
"#;

fn files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn output_is_byte_identical_across_runs_and_thread_counts() {
    let exp = Experiment::parse(SMALL, "small").unwrap();
    let tmp = std::env::temp_dir().join(format!("sluice-determinism-{}", std::process::id()));
    let mut outputs = Vec::new();
    for threads in [1, 2, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let result = pool.install(|| run_experiment(&exp, &|_| {}));
        let dir = tmp.join(format!("run{}", outputs.len()));
        write_all(&result, &dir).unwrap();
        outputs.push(files(&dir));
    }
    std::fs::remove_dir_all(&tmp).unwrap();
    assert_eq!(outputs[0].len(), 7, "runs.csv, summary.csv, result.json and 4 charts");
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[1], outputs[2]);
}

#[test]
fn different_seeds_give_different_workloads() {
    let disk = SeekDisk::new(SeekDiskConfig::default()).unwrap();
    let w = TraqiosWorkload {
        transactions: 300,
        ios: [1, 50],
        ..Default::default()
    };
    let o = PolicyOptions::default();
    let a = simulate(disk.clone(), &w, PolicySpec::Edf, &o, 1).unwrap();
    let b = simulate(disk.clone(), &w, PolicySpec::Edf, &o, 2).unwrap();
    assert_ne!(a, b);
    assert_eq!(a, simulate(disk, &w, PolicySpec::Edf, &o, 1).unwrap());
}

#[test]
fn every_policy_sees_the_same_transactions() {
    // Same seed: the same accesses reach the disk, whatever the order.
    let disk = SeekDisk::new(SeekDiskConfig::default()).unwrap();
    let w = TraqiosWorkload {
        transactions: 300,
        ios: [1, 50],
        cache_hit: 0.2,
        ..Default::default()
    };
    let o = PolicyOptions::default();
    let counts: Vec<(u64, u64)> = PolicySpec::NAMES
        .iter()
        .map(|p| {
            let s = simulate(disk.clone(), &w, p.parse().unwrap(), &o, 9).unwrap();
            (s.ios, s.cache_hits)
        })
        .collect();
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "{counts:?}");
}

#[test]
fn fifo_keeps_the_disk_as_busy_as_the_utilization_says() {
    // At random order the disk's busy fraction is the offered load ρ (the
    // exact C̄ makes the model's mean access time the real one).
    let disk = SeekDisk::new(SeekDiskConfig {
        avg_access: sluice_core::device::AvgAccess::Exact,
        ..SeekDiskConfig::default()
    })
    .unwrap();
    let w = TraqiosWorkload {
        transactions: 4000,
        ios: [1, 40],
        utilization: 0.5,
        ..Default::default()
    };
    let s = simulate(disk, &w, PolicySpec::Fifo, &PolicyOptions::default(), 3).unwrap();
    assert!((s.disk_busy - 0.5).abs() < 0.05, "busy {}", s.disk_busy);
    assert_eq!(s.transactions, 4000);
}

#[test]
fn state_grows_with_transactions_in_the_system_not_with_the_run() {
    let disk = SeekDisk::new(SeekDiskConfig::default()).unwrap();
    let o = PolicyOptions::default();
    let run = |n| {
        let w = TraqiosWorkload {
            transactions: n,
            ios: [1, 20],
            utilization: 0.5,
            ..Default::default()
        };
        simulate(
            disk.clone(),
            &w,
            PolicySpec::Traqios(sluice_core::budget::Budgeting::Exp),
            &o,
            4,
        )
        .unwrap()
    };
    let (short, long) = (run(1_000), run(50_000));
    assert_eq!(long.transactions, 50_000);
    assert!(long.peak_transactions < 60, "peak {}", long.peak_transactions);
    assert!(long.peak_transactions <= short.peak_transactions * 3);
}

/// Queuing a late transaction's accesses with their issue time as deadline
/// (what a request context sent over the wire gives) changes the order
/// EDF serves late accesses in, and nothing TraQIOS decides: an access
/// with no slack has priority 1/C however late it is.
#[test]
fn late_deadlines_at_issue_move_edf_and_not_traqios() {
    let disk = SeekDisk::new(SeekDiskConfig::default()).unwrap();
    let kept = TraqiosWorkload {
        transactions: 400,
        ios: [1, 50],
        utilization: 0.95,
        ..Default::default()
    };
    let at_issue = TraqiosWorkload {
        late_deadline: sluice_sim::workload::LateDeadline::Issue,
        ..kept.clone()
    };
    let o = PolicyOptions::default();
    let run = |w: &TraqiosWorkload, p: PolicySpec| simulate(disk.clone(), w, p, &o, 5).unwrap();
    assert_ne!(run(&kept, PolicySpec::Edf), run(&at_issue, PolicySpec::Edf));
    let traqios: PolicySpec = "traqios".parse().unwrap();
    assert_eq!(run(&kept, traqios), run(&at_issue, traqios));
}
