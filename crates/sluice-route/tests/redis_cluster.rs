//! The router in front of a real Redis 7 Cluster of three masters, started
//! here: the slot map read with CLUSTER SLOTS, every key on the node
//! CLUSTER KEYSLOT names, MGET over many slots split per slot, and slots
//! moved by `redis-cli --cluster reshard` while clients run followed
//! (MOVED, ASK) with no error reaching a client.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_resp::slot::slot;
use sluice_resp::Reply;
use sluice_route::Router;
use support::{bulk, start_router_from, under_ci, Client};

/// Redis servers killed when dropped.
struct Cluster {
    nodes: Vec<Child>,
    ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.kill();
            let _ = n.wait();
        }
    }
}

/// A port free now whose cluster bus port (port + 10000) is free too, and
/// neither handed out before in this process: the tests run at once, and
/// a port the kernel gives twice would put one test's node in the other's
/// cluster.
fn free_port() -> u16 {
    static HANDED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed = HANDED.lock().unwrap();
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let taken = |p: u16| handed.iter().any(|&h| h == p || h + 10000 == p || h == p + 10000);
        if port < 55000 && !taken(port) && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            handed.push(port);
            return port;
        }
    }
}

fn start_cluster() -> Option<Cluster> {
    start_cluster_with(0)
}

/// Three masters, each with `replicas` replicas in sync with it.
fn start_cluster_with(replicas: usize) -> Option<Cluster> {
    if Command::new("redis-server").arg("--version").output().is_err() {
        assert!(
            !under_ci(),
            "redis-server is missing under CI: scripts/test.sh installs it"
        );
        eprintln!("skipping: redis-server not installed");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3 * (1 + replicas)).map(|_| free_port()).collect();
    let nodes = ports
        .iter()
        .map(|p| {
            Command::new("redis-server")
                .args([
                    "--port",
                    &p.to_string(),
                    "--cluster-enabled",
                    "yes",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args([
                    "--cluster-config-file",
                    &format!("nodes-{p}.conf"),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-node-timeout",
                    "1000",
                    // A replica may take over however long it was apart
                    // from its master: the test kills a master at once.
                    "--cluster-replica-validity-factor",
                    "0",
                ])
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let cluster = Cluster {
        nodes,
        ports,
        _dir: dir,
    };
    for p in &cluster.ports {
        wait_for(|| TcpStream::connect(("127.0.0.1", *p)).is_ok(), "a node to listen");
    }
    let addrs: Vec<String> = cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stdout));
    for p in &cluster.ports {
        wait_for(
            || cli(*p, &["CLUSTER", "INFO"]).contains("cluster_state:ok"),
            "the cluster to be ok",
        );
        wait_for(
            || {
                let info = cli(*p, &["INFO", "replication"]);
                info.contains("role:master") || info.contains("master_link_status:up")
            },
            "the replicas to be in sync",
        );
    }
    Some(cluster)
}

fn wait_for(mut ready: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < Duration::from_secs(30), "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `staying` keys named `{prefix}:{i}`, then `moving` more in slots 0-199:
/// the slots the reshard below moves (redis-cli moves a node's lowest slots
/// first).
fn keys_partly_moving(prefix: &str, staying: usize, moving: usize) -> Vec<String> {
    let mut keys: Vec<String> = (0..staying).map(|i| format!("{prefix}:{i}")).collect();
    keys.extend(
        (0..)
            .map(|i| format!("{prefix}-moving:{i}"))
            .filter(|k| slot(k.as_bytes()) < 200)
            .take(moving),
    );
    keys
}

fn start_router(seed: u16) -> (SocketAddr, Arc<Router>) {
    start_router_from(&format!(
        "listen = \"127.0.0.1:0\"\n[cluster]\nseeds = [\"127.0.0.1:{seed}\"]\n[pool]\nsize = 8\n"
    ))
}

#[test]
fn keys_land_where_the_cluster_says_and_resharding_is_followed() {
    let Some(cluster) = start_cluster() else { return };
    let (router, state) = start_router(cluster.ports[0]);
    let mut c = Client::connect(router);
    // 300 keys, 40 of them in the slots the reshard below moves.
    let keys = keys_partly_moving("user", 260, 40);
    for k in &keys {
        assert_eq!(c.call(&["SET", k, k]), Reply::ok(), "{k}");
    }
    // Our slot is Redis's, and each key is on the node that owns its slot:
    // asked directly, without redirection, exactly one node has it.
    let mut nodes: Vec<Client> = cluster
        .ports
        .iter()
        .map(|p| Client::connect(([127, 0, 0, 1], *p).into()))
        .collect();
    for k in keys.iter().step_by(7) {
        assert_eq!(
            nodes[0].call(&["CLUSTER", "KEYSLOT", k]),
            Reply::Integer(slot(k.as_bytes()) as i64),
            "{k}"
        );
        let holders = nodes
            .iter_mut()
            .map(|n| n.call(&["GET", k]))
            .filter(|r| *r == bulk(k))
            .count();
        assert_eq!(holders, 1, "{k}");
    }
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let reply = c.call(&mget);
    let Reply::Array(values) = reply else {
        panic!("MGET answered {reply:?}")
    };
    assert_eq!(values, keys.iter().map(|k| bulk(k)).collect::<Vec<_>>());
    assert_eq!(c.call(&["MSET", "gone:1", "x", "gone:2", "y"]), Reply::ok());
    assert_eq!(c.call(&["DEL", "gone:1", "gone:2", "nobody"]), Reply::Integer(2));
    assert!(
        matches!(c.call(&["EVAL", "return 1", "2", "user:3", "user:4"]), Reply::Error(e) if e.starts_with("CROSSSLOT"))
    );

    // Clients keep reading and writing through the router while 200 slots
    // move from the first node to the second, one command at a time, and
    // one in pipelines of 32 commands (a run's commands answered with a
    // redirect are sent again on their own).
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let piped = {
        let (stop, errors) = (stop.clone(), errors.clone());
        // Keys of its own, half of them in the slots that move.
        let keys = keys_partly_moving("piped", 32, 32);
        std::thread::spawn(move || {
            let mut c = Client::connect(router);
            for batch in keys.chunks(16).cycle() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let mut out = Vec::new();
                for k in batch {
                    sluice_resp::encode_command(&["SET", k, &format!("{k}!")], &mut out);
                }
                for k in batch {
                    sluice_resp::encode_command(&["GET", k], &mut out);
                }
                c.send_raw(&out);
                let expected = batch
                    .iter()
                    .map(|_| Reply::ok())
                    .chain(batch.iter().map(|k| bulk(&format!("{k}!"))));
                for want in expected {
                    if c.reply().as_ref() != Some(&want) {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let (stop, errors, done, keys) = (stop.clone(), errors.clone(), done.clone(), keys.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(router);
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let k = &keys[i % keys.len()];
                    let ok = c.call(&["SET", k, k]) == Reply::ok() && c.call(&["GET", k]) == bulk(k);
                    if !ok {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 3;
                }
            })
        })
        .collect();
    let from = cli(cluster.ports[0], &["CLUSTER", "MYID"]);
    let to = cli(cluster.ports[1], &["CLUSTER", "MYID"]);
    let reshard = Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{}", cluster.ports[0])])
        .args([
            "--cluster-from",
            &from,
            "--cluster-to",
            &to,
            "--cluster-slots",
            "200",
            "--cluster-yes",
        ])
        .output()
        .unwrap();
    assert!(reshard.status.success(), "{}", String::from_utf8_lossy(&reshard.stdout));
    let after = done.load(Ordering::Relaxed);
    wait_for(
        || done.load(Ordering::Relaxed) > after + 1200,
        "commands after the reshard",
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    piped.join().unwrap();
    assert_eq!(
        errors.load(Ordering::Relaxed),
        0,
        "errors reached clients during the reshard"
    );
    assert!(
        state.stats.redirects.load(Ordering::Relaxed) > 0,
        "the move was seen and followed"
    );
    let reply = c.call(&mget);
    let Reply::Array(values) = reply else {
        panic!("MGET answered {reply:?}")
    };
    assert_eq!(
        values,
        keys.iter().map(|k| bulk(k)).collect::<Vec<_>>(),
        "every key readable after the move"
    );
    assert!(
        cli(
            cluster.ports[1],
            &["CLUSTER", "COUNTKEYSINSLOT", &slot(keys[299].as_bytes()).to_string()]
        ) != "0"
    );
}

/// A master killed, its replica promoted by the cluster: the router, whose
/// map still names the dead master, reads the map again and serves that
/// master's keys from the new one, with no restart.
#[test]
fn a_failover_is_followed_by_reading_the_slot_map_again() {
    let Some(mut cluster) = start_cluster_with(1) else {
        return;
    };
    let (router, state) = start_router(cluster.ports[0]);
    let mut c = Client::connect(router);
    let keys: Vec<String> = (0..60).map(|i| format!("fail:{i}")).collect();
    for k in &keys {
        assert_eq!(c.call(&["SET", k, k]), Reply::ok(), "{k}");
    }
    // The master that holds "fail:0" (a replica answers GET with MOVED).
    let victim = cluster
        .ports
        .iter()
        .position(|p| Client::connect(([127, 0, 0, 1], *p).into()).call(&["GET", "fail:0"]) == bulk("fail:0"))
        .expect("a master holds the key");
    // Replication is asynchronous: the replica must have every write
    // before its master dies (its offset caught up with the master's).
    wait_for(
        || {
            let info = cli(cluster.ports[victim], &["INFO", "replication"]);
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.trim().strip_prefix(name))
                    .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            };
            let replica = info
                .lines()
                .find_map(|l| l.split("offset=").nth(1)?.split(',').next()?.parse::<u64>().ok());
            field("master_repl_offset:").is_some_and(|m| replica == Some(m))
        },
        "the replica to have every write",
    );
    let survivor = cluster.ports[(victim + 1) % cluster.ports.len()];
    let _ = cluster.nodes[victim].kill();
    let _ = cluster.nodes[victim].wait();
    // The cluster serves the key again (redis-cli following MOVED).
    wait_for(
        || cli(survivor, &["-c", "GET", "fail:0"]) == "fail:0",
        "the replica to take over",
    );
    let started = Instant::now();
    while c.call(&["GET", "fail:0"]) != bulk("fail:0") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the promoted replica never served through the router"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let reply = c.call(&mget);
    let Reply::Array(values) = reply else {
        panic!("MGET answered {reply:?}")
    };
    assert_eq!(values, keys.iter().map(|k| bulk(k)).collect::<Vec<_>>());
    for shard in state.shards() {
        assert_eq!(shard.stats.in_flight.load(Ordering::Relaxed), 0, "{}", shard.name);
    }
}
