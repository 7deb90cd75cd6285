//! The admin port's dashboard in a real browser: headless Chromium, driven
//! over its DevTools protocol, loads the page from a running proxy, the
//! page draws what `/stats` says, fetches nothing from anywhere else, and
//! shows a change of P within 2 s (it reads `/stats` every second).

mod support;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::service::{get_json, post_json, Service};
use support::wait_for;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// Headless Chromium with a private profile, one page open at `url`, and a
/// DevTools connection to that page.
struct Browser {
    child: Child,
    page: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn open(chromium: &Path, url: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium)
            .args([
                "--headless=new",
                // Root in a container has no user namespaces to sandbox with.
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromium.display()));
        // Chromium prints where its DevTools listen, then keeps writing its
        // own noise to stderr; a thread drains it so that it never blocks.
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(at) = line.split("DevTools listening on ").nth(1) {
                    let _ = tx.send(at.trim().to_string());
                }
            }
        });
        let browser_ws = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("Chromium announces its DevTools address");
        let devtools: std::net::SocketAddr = browser_ws
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let page_ws = wait_for("the page's DevTools target", || {
            get_json(devtools, "/json/list")
                .as_array()?
                .iter()
                .find(|t| t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(url)))
                .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_string))
        });
        let (page, _) = tungstenite::connect(page_ws.as_str()).expect("connecting to the page");
        Browser {
            child,
            page,
            next_id: 1,
            _profile: profile,
        }
    }

    /// Evaluates `expression` in the page; its value as JSON.
    fn eval(&mut self, expression: &str) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let call = json!({"id": id, "method": "Runtime.evaluate",
                          "params": {"expression": expression, "returnByValue": true}});
        self.page.send(Message::text(call.to_string())).unwrap();
        loop {
            let Message::Text(text) = self.page.read().unwrap() else {
                continue;
            };
            let reply: Value = serde_json::from_str(text.as_str()).unwrap();
            if reply["id"] == id {
                assert!(reply["result"]["exceptionDetails"].is_null(), "{expression}: {reply}");
                return reply["result"]["result"]["value"].clone();
            }
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pixels of the canvas `id` that something was drawn on.
fn drawn(browser: &mut Browser, id: &str) -> u64 {
    browser
        .eval(&format!(
            "(() => {{ const c = document.getElementById('{id}'); \
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; \
             let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }})()"
        ))
        .as_u64()
        .unwrap()
}

#[test]
fn the_dashboard_draws_the_proxy_and_follows_a_change_of_p() {
    let Some(chromium) = support::require("chromium") else {
        return;
    };
    // No database: the upstream is dialled only when a client connects.
    let service = Service::start(
        r#"
        [proxy]
        listen = "127.0.0.1:0"
        upstream = "127.0.0.1:1"
        protocol = "redis"
        [admin]
        listen = "127.0.0.1:0"
        [gate]
        parallelism = 16
        [optimizer]
        parallelism = "fixed"
        zeta = "fixed"
        "#,
    );
    let admin = service.addresses.admin.unwrap();
    let url = format!("http://{admin}/");
    let mut browser = Browser::open(&chromium, &url);
    let text = |b: &mut Browser, id: &str| b.eval(&format!("document.getElementById('{id}')?.textContent ?? null"));

    wait_for("P in the page", || {
        (text(&mut browser, "parallelism") == "16").then_some(())
    });
    wait_for("two samples on the chart", || {
        (browser
            .eval("Number(document.getElementById('gate-chart')?.dataset.points ?? 0)")
            .as_u64()
            >= Some(4))
        .then_some(())
    });
    assert!(drawn(&mut browser, "gate-chart") > 100, "the P and ζ chart is drawn");
    assert_eq!(
        text(&mut browser, "status").as_str().map(|s| s.starts_with("updated")),
        Some(true)
    );

    assert_eq!(post_json(admin, "/gate", r#"{"parallelism": 7}"#), 200);
    let changed = Instant::now();
    wait_for("P = 7 in the page", || {
        (text(&mut browser, "parallelism") == "7").then_some(())
    });
    let took = changed.elapsed();
    assert!(
        took <= Duration::from_secs(2),
        "the page showed the new P after {took:?}"
    );

    let foreign = browser
        .eval("performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith(location.origin))");
    assert_eq!(foreign, json!([]), "the page fetched from elsewhere");
}
