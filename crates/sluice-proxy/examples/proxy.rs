//! Runs one proxy listener until Ctrl-C, for trying it by hand and for
//! measuring it before `sluice proxy` wraps it:
//!
//! ```text
//! cargo run --release -p sluice-proxy --example proxy -- redis 127.0.0.1:7000 127.0.0.1:6379 [P]
//! ```
//!
//! One runtime thread: the proxy's work per request is mostly system calls,
//! and on a small machine waking a second worker costs more than it brings.

use sluice_proxy::gate::{Gate, GateConfig};
use sluice_proxy::{Protocol, ProxyConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [protocol, listen, upstream, rest @ ..] = args.as_slice() else {
        return Err("usage: proxy <pg|redis> <listen addr> <upstream addr> [parallelism]".into());
    };
    let protocol = match protocol.as_str() {
        "pg" => Protocol::Pg,
        "redis" => Protocol::Redis,
        other => return Err(format!("unknown protocol `{other}`: pg or redis").into()),
    };
    let mut gate = GateConfig::default();
    if let Some(p) = rest.first() {
        gate.parallelism = p.parse().map_err(|e| format!("parallelism `{p}`: {e}"))?;
    }
    let config = ProxyConfig::new(listen.as_str(), upstream.as_str(), protocol);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    sluice_proxy::run(config, Gate::new(gate)?, shutdown).await?;
    Ok(())
}
