//! A cluster node that answers every command with a redirect to a new
//! address: the router takes up at most `MAX_NODES` nodes, then refuses the
//! redirect by name, and goes on answering. No Redis needed: the node is a
//! few lines here.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use sluice_resp::{parse, Limits, Reply};
use sluice_route::router::MAX_NODES;
use support::{start_router_from, Client};

/// Answers CLUSTER SLOTS with every slot its own, anything else with
/// `MOVED 0` to an address never named before (nothing listens there).
fn serve(mut stream: TcpStream, port: u16, next: Arc<AtomicU32>) {
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
                let n = next.fetch_add(1, Ordering::Relaxed);
                let addr = format!("127.0.{}.{}:9", n / 250, n % 250 + 1);
                out.extend_from_slice(format!("-MOVED 0 {addr}\r\n").as_bytes());
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

#[test]
fn redirects_to_ever_new_nodes_stop_at_the_node_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let next = Arc::new(AtomicU32::new(0));
    let issued = Arc::clone(&next);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let next = Arc::clone(&next);
            std::thread::spawn(move || serve(stream, port, next));
        }
    });
    let (addr, router) = start_router_from(&format!(
        "listen = \"127.0.0.1:0\"\n[cluster]\nseeds = [\"127.0.0.1:{port}\"]\n"
    ));
    let mut client = Client::connect(addr);
    let mut refused = 0;
    // "k" hashes to slot 12539, which the node keeps: every GET meets a
    // new redirect.
    while issued.load(Ordering::Relaxed) < MAX_NODES as u32 + 50 {
        match client.call(&["GET", "k"]) {
            Reply::Error(e) if e.contains("is not taken up") => refused += 1,
            Reply::Error(_) => {}
            other => panic!("a redirect to nowhere answered {other:?}"),
        }
    }
    assert!(refused >= 40, "the limit was never met: {refused} refused");
    assert!(
        router.shards().len() <= MAX_NODES,
        "{} nodes kept",
        router.shards().len()
    );
    assert_eq!(client.call(&["PING"]), Reply::Simple("PONG".into()));
}
