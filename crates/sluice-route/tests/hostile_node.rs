//! Cluster nodes that misbehave, each a few lines here (no Redis needed):
//! one answers every command with a redirect to a new address, and the
//! router takes up at most `MAX_NODES` nodes, then refuses the redirect by
//! name, and goes on answering; one is still learning of a failover and
//! answers `CLUSTERDOWN` a few times, and the router waits it out.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use sluice_resp::{parse, Limits, Reply};
use sluice_route::router::MAX_NODES;
use support::{start_router_from, Client};

/// Answers CLUSTER SLOTS with every slot its own, anything else with what
/// `answer` gives for the count of such commands before it.
fn serve(mut stream: TcpStream, port: u16, next: Arc<AtomicU32>, answer: fn(u32) -> String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Ok(Some((args, used))) = parse(&buf, &Limits::default()) {
            buf.drain(..used);
            let mut out = Vec::new();
            if args[0].eq_ignore_ascii_case(b"cluster") {
                let node = Reply::Array(vec![
                    Reply::Bulk(Some(b"127.0.0.1".to_vec())),
                    Reply::Integer(i64::from(port)),
                ]);
                Reply::Array(vec![Reply::Array(vec![Reply::Integer(0), Reply::Integer(16383), node])]).encode(&mut out);
            } else {
                out.extend_from_slice(answer(next.fetch_add(1, Ordering::Relaxed)).as_bytes());
            }
            if stream.write_all(&out).is_err() {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Starts a node answering as [`serve`] does; returns its port and the
/// count of commands it answered with `answer`.
fn start_node(answer: fn(u32) -> String) -> (u16, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let next = Arc::new(AtomicU32::new(0));
    let issued = Arc::clone(&next);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let next = Arc::clone(&next);
            std::thread::spawn(move || serve(stream, port, next, answer));
        }
    });
    (port, issued)
}

fn cluster_config(port: u16) -> String {
    format!("listen = \"127.0.0.1:0\"\n[cluster]\nseeds = [\"127.0.0.1:{port}\"]\n")
}

#[test]
fn redirects_to_ever_new_nodes_stop_at_the_node_limit() {
    // `MOVED 0` to an address never named before (nothing listens there).
    let (port, issued) = start_node(|n| format!("-MOVED 0 127.0.{}.{}:9\r\n", n / 250, n % 250 + 1));
    let (addr, router) = start_router_from(&cluster_config(port));
    let refused = AtomicU32::new(0);
    // "k" hashes to slot 12539, which the node keeps: every GET meets a
    // new redirect. Clients at once, since each redirect to nowhere is
    // tried again after pauses (a node may be unreachable for a moment in
    // a failover).
    std::thread::scope(|scope| {
        for _ in 0..32 {
            scope.spawn(|| {
                let mut client = Client::connect(addr);
                while issued.load(Ordering::Relaxed) < MAX_NODES as u32 + 50 {
                    match client.call(&["GET", "k"]) {
                        Reply::Error(e) if e.contains("is not taken up") => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Reply::Error(_) => {}
                        other => panic!("a redirect to nowhere answered {other:?}"),
                    }
                }
            });
        }
    });
    let refused = refused.into_inner();
    assert!(refused >= 40, "the limit was never met: {refused} refused");
    assert!(
        router.shards().len() <= MAX_NODES,
        "{} nodes kept",
        router.shards().len()
    );
    assert_eq!(Client::connect(addr).call(&["PING"]), Reply::Simple("PONG".into()));
}

#[test]
fn a_node_still_learning_of_a_failover_is_waited_out() {
    let (port, issued) = start_node(|n| {
        if n < 2 {
            "-CLUSTERDOWN The cluster is down\r\n".into()
        } else {
            "$1\r\nv\r\n".into()
        }
    });
    let (addr, _router) = start_router_from(&cluster_config(port));
    let mut client = Client::connect(addr);
    assert_eq!(client.call(&["GET", "k"]), Reply::Bulk(Some(b"v".to_vec())));
    assert_eq!(issued.load(Ordering::Relaxed), 3, "sent once and twice again");
    // A node that stays down is answered as it answers, after the retries.
    let (down, _) = start_node(|_| "-CLUSTERDOWN The cluster is down\r\n".into());
    let (addr, _router) = start_router_from(&cluster_config(down));
    let mut client = Client::connect(addr);
    assert_eq!(
        client.call(&["GET", "k"]),
        Reply::Error("CLUSTERDOWN The cluster is down".into())
    );
}
