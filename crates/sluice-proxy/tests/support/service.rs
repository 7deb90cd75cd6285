//! `sluice proxy`'s whole service (listener, gate, controllers, admin
//! port) from settings text, on its own runtime thread, and its admin port
//! read over plain HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

use serde_json::Value;
use sluice_proxy::service::{self, Addresses};
use sluice_proxy::settings::Settings;

/// The service on its own runtime thread; `stop` is a clean stop (what
/// SIGTERM does in `sluice proxy`) and waits until `service::run` returns.
pub struct Service {
    pub addresses: Addresses,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Service {
    pub fn start(text: &str) -> Service {
        let settings = Settings::parse(text).unwrap();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (_reload_tx, reload) = tokio::sync::mpsc::channel(1);
                service::run(settings, None, reload, started_tx, async {
                    let _ = stopped.await;
                })
                .await
            })
        });
        let addresses = started_rx.blocking_recv().expect("the service starts");
        Service {
            addresses,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn stats(&self) -> Value {
        let admin = self.addresses.admin.expect("an admin port");
        get_json(admin, "/stats")
    }

    /// `postgres_background.status` in `/stats`.
    /// `postgres_background.status` in `/stats`.
    pub fn status(&self) -> String {
        self.stats()["postgres_background"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            self.thread.take().unwrap().join().unwrap().unwrap();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}

/// GETs `path` and parses the body as JSON.
pub fn get_json(addr: SocketAddr, path: &str) -> Value {
    let body = get(addr, path);
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)))
}

/// GETs `path`; the body as text.
pub fn get_text(addr: SocketAddr, path: &str) -> String {
    String::from_utf8(get(addr, path)).unwrap()
}

/// GETs `path`; the body, read by its Content-Length: not every server
/// closes after `Connection: close` (Chromium's DevTools port does not).
fn get(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut conn = BufReader::new(TcpStream::connect(addr).unwrap());
    write!(
        conn.get_mut(),
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut length = None;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok();
            }
        }
    }
    let mut body = vec![0; length.expect("a Content-Length")];
    conn.read_exact(&mut body).unwrap();
    body
}

/// Sends `body` to `path` with POST; returns the status code.
pub fn post_json(addr: SocketAddr, path: &str, body: &str) -> u16 {
    let mut conn = TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    reply[9..12].parse().unwrap()
}
