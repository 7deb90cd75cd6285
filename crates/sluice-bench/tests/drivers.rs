//! The drivers against sluice-kv embedded and over RESP (sluice-kv's own
//! server): the same workload loads and runs on both, every tenant makes
//! progress, and the records loaded are there.

use std::sync::Arc;

use sluice_bench::{load, run, Embedded, Resp, Target, TenantSpec, Workload};
use sluice_io::{Runtime, RuntimeConfig};
use sluice_kv::{Db, Options, Server, ServerOptions};

fn store() -> (Arc<Db>, Runtime, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let options = Options {
        memtable_bytes: 256 << 10,
        sync: false,
        ..Options::default()
    };
    (Arc::new(Db::open(rt.clone(), dir.path(), options).unwrap()), rt, dir)
}

fn tenants(records: u64) -> Vec<TenantSpec> {
    ['A', 'E']
        .iter()
        .map(|&w| TenantSpec {
            name: format!("tenant-{w}"),
            workload: Workload::core(w, records).unwrap(),
            threads: 2,
            weight: 1.0,
            target_ops: (w == 'E').then_some(200.0),
            // Tenant A pipelines: over RESP, four commands a write.
            pipeline: if w == 'A' { 4 } else { 1 },
        })
        .collect()
}

fn load_and_run(target: &dyn Target) {
    let workload = Workload::core('A', 2000).unwrap();
    load(target, &workload, 4, 1).unwrap();
    let mut client = target.client().unwrap();
    assert!(client.read(&sluice_bench::ycsb::key(0)).unwrap());
    assert!(client.read(&sluice_bench::ycsb::key(1999)).unwrap());
    assert_eq!(client.scan(&sluice_bench::ycsb::key(0), 10).unwrap(), 10);
    let mut ticks = 0;
    let results = run(target, &tenants(2000), 1.2, 7, &mut |t| {
        ticks += 1;
        assert!(t.elapsed > 0.0);
    })
    .unwrap();
    assert!(ticks >= 10, "{ticks} ticks in 1.2 s");
    for r in &results {
        assert!(r.ops > 0, "{} made no progress", r.name);
        assert_eq!(r.all.count(), r.ops);
        assert_eq!(r.series.len(), 1, "{}: one whole 1 s interval", r.name);
    }
    assert!(results[0].writes.count() > 0 && results[1].reads.count() > 0);
    assert_eq!(
        results[0].ops % 4,
        0,
        "tenant A's operations are counted by pipelines of 4"
    );
    let paced = results[1].ops as f64 / 1.2;
    assert!(paced < 260.0, "tenant E is paced at 200 ops/s, ran {paced:.0}");
}

#[test]
fn ycsb_runs_embedded() {
    let (db, runtime, _dir) = store();
    load_and_run(&Embedded { db, runtime });
}

#[test]
fn ycsb_runs_over_resp() {
    let (db, _rt, _dir) = store();
    let server = Server::bind("127.0.0.1:0", db, ServerOptions::default()).unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || server.run());
    load_and_run(&Resp::new(addr).unwrap());
}
