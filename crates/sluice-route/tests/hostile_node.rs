//! Cluster nodes that misbehave, each a few lines here (no Redis needed):
//! one answers every command with a redirect to a new address, and the
//! router takes up at most `MAX_NODES` nodes, then refuses the redirect by
//! name, and goes on answering; one is still learning of a failover and
//! answers `CLUSTERDOWN` a few times, and the router waits it out, but
//! never sends a pipelined command again behind a later one of its slot
//! that ran; a Redis that closes the connection partway through a
//! client's pipeline leaves the commands it answered answered.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use sluice_resp::{encode_command, parse, Limits, Reply};
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

/// `commands` written in one go, so that the router reads them together
/// and runs them as one run; their replies.
fn pipelined(addr: std::net::SocketAddr, commands: &[&[&str]]) -> Vec<Reply> {
    let mut client = Client::connect(addr);
    let mut out = Vec::new();
    for c in commands {
        encode_command(c, &mut out);
    }
    client.send_raw(&out);
    commands.iter().map(|_| client.reply().expect("a reply")).collect()
}

#[test]
fn clusterdown_in_a_run_is_sent_again_only_if_no_later_command_of_its_slot_ran() {
    let first_down = |n: u32| {
        if n == 0 {
            "-CLUSTERDOWN The cluster is down\r\n".into()
        } else {
            "+OK\r\n".into()
        }
    };
    // The second SET of the same key ran once the node recovered: sending
    // the first again would leave k = 1, so the client is told.
    let (port, issued) = start_node(first_down);
    let (addr, _router) = start_router_from(&cluster_config(port));
    let replies = pipelined(addr, &[&["SET", "k", "1"], &["SET", "k", "2"]]);
    assert_eq!(
        replies,
        [Reply::Error("CLUSTERDOWN The cluster is down".into()), Reply::ok()]
    );
    assert_eq!(issued.load(Ordering::Relaxed), 2, "nothing sent again");
    // Keys of different slots: the first is sent again, and succeeds.
    let (port, issued) = start_node(first_down);
    let (addr, _router) = start_router_from(&cluster_config(port));
    let replies = pipelined(addr, &[&["SET", "a", "1"], &["SET", "b", "2"]]);
    assert_eq!(replies, [Reply::ok(), Reply::ok()]);
    assert_eq!(issued.load(Ordering::Relaxed), 3, "the first sent again");
}

#[test]
fn a_redis_closing_partway_through_a_run_leaves_what_it_answered_answered() {
    // Reads the whole pipeline, answers its first three commands, then
    // closes its side cleanly.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let mut commands = 0;
            while commands < 5 {
                let Ok(n) = stream.read(&mut chunk) else { break };
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Ok(Some((_, used))) = parse(&buf, &Limits::default()) {
                    buf.drain(..used);
                    commands += 1;
                }
            }
            let _ = stream.write_all(&b"+OK\r\n".repeat(3));
            let _ = stream.shutdown(std::net::Shutdown::Write);
            while stream.read(&mut chunk).is_ok_and(|n| n > 0) {}
        }
    });
    let (addr, _router) = start_router_from(&format!(
        "listen = \"127.0.0.1:0\"\n[[shard]]\nname = \"a\"\naddr = \"127.0.0.1:{port}\"\nslots = \"0-16383\"\nkind = \"redis\"\n"
    ));
    let sets: Vec<[String; 3]> = (0..5).map(|i| ["SET".into(), format!("k{i}"), "v".into()]).collect();
    let commands: Vec<Vec<&str>> = sets.iter().map(|c| c.iter().map(String::as_str).collect()).collect();
    let commands: Vec<&[&str]> = commands.iter().map(Vec::as_slice).collect();
    let replies = pipelined(addr, &commands);
    assert_eq!(replies[..3], [Reply::ok(), Reply::ok(), Reply::ok()], "{replies:?}");
    for reply in &replies[3..] {
        assert!(
            matches!(reply, Reply::Error(e) if e.contains(&format!("shard a (127.0.0.1:{port}) failed"))),
            "{reply:?}"
        );
    }
}
