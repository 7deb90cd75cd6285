//! The router steering real `sluice serve` shards' compactions
//! (`[compaction]`): a synchronized schedule holds a shard's compaction
//! until every shard has debt, then runs them together and pays the debt;
//! the decisions reach `/stats`' snapshot; the router resumes every shard
//! when it stops; and a configuration it cannot steer is refused by name.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_core::controller::compaction_schedule::{Schedule, Why};
use sluice_kv::Options;
use sluice_resp::slot::slot;
use sluice_resp::Reply;
use sluice_route::compaction::Steering;
use sluice_route::config::Config;
use support::{start_router_from, start_shard_with, Client};

/// Small memtables, so that a few hundred KiB of writes leave a shard
/// with L0 at its compaction trigger.
fn small() -> Options {
    Options {
        memtable_bytes: 64 << 10,
        ..Options::default()
    }
}

/// The shard's compaction debt and whether its compaction is paused, read
/// from the shard itself.
fn state(shard: SocketAddr) -> (u64, bool) {
    let Reply::Bulk(Some(info)) = Client::connect(shard).call(&["INFO", "store", "background"]) else {
        panic!("INFO failed");
    };
    let info = String::from_utf8(info).unwrap();
    let field = |prefix: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {info}"))
            .to_string()
    };
    let debt = field("pending_compaction_bytes:").trim().parse().unwrap();
    let paused = field("compaction:").contains("paused=true");
    (debt, paused)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "still not: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes 4 KiB values to keys of shard `half` (0: slots 0-8191) until it
/// has compaction debt.
fn write_until_debt(router: &mut Client, shard: SocketAddr, half: u16, from: &mut u32) {
    let value = "v".repeat(4096);
    while state(shard).0 == 0 {
        for _ in 0..16 {
            let key = (*from..)
                .map(|i| format!("k{i}"))
                .find(|k| slot(k.as_bytes()) / 8192 == half)
                .unwrap();
            *from += 1;
            assert_eq!(router.call(&["SET", &key, &value]), Reply::ok());
        }
    }
}

#[test]
fn a_synchronized_schedule_holds_compaction_until_every_shard_has_debt() {
    let (a, _da) = start_shard_with("127.0.0.1:0", small());
    let (b, _db) = start_shard_with("127.0.0.1:0", small());
    let (addr, router) = start_router_from(&format!(
        "listen = \"127.0.0.1:0\"\n\
         [[shard]]\nname = \"a\"\naddr = \"{a}\"\nslots = \"0-8191\"\n\
         [[shard]]\nname = \"b\"\naddr = \"{b}\"\nslots = \"8192-16383\"\n\
         [compaction]\nschedule = \"synchronized\"\ninterval_ms = 20\n"
    ));
    wait_for("both shards paused outside a window", || state(a).1 && state(b).1);
    let mut c = Client::connect(addr);
    let mut next = 0;
    write_until_debt(&mut c, a, 0, &mut next);
    // Several decisions later, shard a still owes its compaction: the
    // window waits for b.
    std::thread::sleep(Duration::from_millis(300));
    let (debt, paused) = state(a);
    assert!(debt > 0 && paused, "a compacted alone: debt {debt}, paused {paused}");
    write_until_debt(&mut c, b, 1, &mut next);
    wait_for("both debts paid in one window", || {
        let (sa, sb) = (state(a), state(b));
        sa == (0, true) && sb == (0, true)
    });
    let snap = router
        .compaction
        .as_ref()
        .unwrap()
        .snapshot(vec!["a".into(), "b".into()]);
    for shard in ["a", "b"] {
        assert!(
            snap.decisions
                .iter()
                .any(|d| d.shard == shard && !d.paused && d.why == Why::Window),
            "no window opened on {shard}: {:?}",
            snap.decisions
        );
    }
    assert!(
        snap.width.is_some_and(|w| w == 1.0),
        "SETs touch one shard: {:?}",
        snap.width
    );
    // Per-node from here: every shard resumed at the next decision.
    router.compaction.as_ref().unwrap().set_schedule(Schedule::PerNode);
    wait_for("per-node resumes both", || !state(a).1 && !state(b).1);
    router.compaction.as_ref().unwrap().set_schedule(Schedule::Staggered);
    wait_for("staggered pauses both again", || state(a).1 && state(b).1);
}

#[test]
fn a_stopping_router_resumes_every_shard() {
    let (a, _da) = start_shard_with("127.0.0.1:0", small());
    let (b, _db) = start_shard_with("127.0.0.1:0", small());
    for shard in [a, b] {
        let set = Client::connect(shard).call(&["CONFIG", "SET", "compaction-paused", "yes"]);
        assert_eq!(set, Reply::ok());
    }
    let (_, router) = start_router_from(&format!(
        "listen = \"127.0.0.1:0\"\n\
         [[shard]]\nname = \"a\"\naddr = \"{a}\"\nslots = \"0-8191\"\n\
         [[shard]]\nname = \"b\"\naddr = \"{b}\"\nslots = \"8192-16383\"\n"
    ));
    // What `sluice route` does when it stops.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(Steering::resume_all(&router.shards(), Duration::from_secs(2)));
    assert!(!state(a).1 && !state(b).1, "a shard left paused");
}

#[test]
fn a_compaction_schedule_it_cannot_steer_is_refused_by_name() {
    let shards = "listen = \"127.0.0.1:0\"\n[[shard]]\nname = \"r\"\naddr = \"127.0.0.1:1\"\nslots = \"0-16383\"\n";
    let refused = |toml: &str| Config::from_toml(toml).err().unwrap().to_string();
    let e = refused(&format!("{shards}kind = \"redis\"\n[compaction]\n"));
    assert!(e.contains("shard \"r\" is kind = \"redis\""), "{e}");
    let e = refused("listen = \"x:1\"\n[cluster]\nseeds = [\"127.0.0.1:7000\"]\n[compaction]\n");
    assert!(e.contains("Redis Cluster"), "{e}");
    let e = refused(&format!("{shards}[compaction]\nschedule = \"nightly\"\n"));
    assert!(e.contains("nightly") && e.contains("per-node"), "{e}");
    let e = refused(&format!("{shards}[compaction]\ninterval_ms = 0\n"));
    assert!(e.contains("compaction.interval_ms"), "{e}");
    let e = refused(&format!("{shards}[compaction]\nsync_width = -1\n"));
    assert!(e.contains("compaction.sync_width"), "{e}");
    let e = refused(&format!("{shards}[compaction]\ndebt_bound_mb = 0\n"));
    assert!(e.contains("compaction.debt_bound_mb"), "{e}");
    let e = refused(&format!("{shards}[compaction]\nrate = 5\n"));
    assert!(e.contains("rate"), "{e}");
}
