//! The proxy under test, on its own runtime thread so that tests can use
//! blocking clients and programs freely.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use sluice_proxy::gate::{Gate, GateConfig};
use sluice_proxy::{Protocol, Proxy, ProxyConfig, Stats, TenantKey, TenantSnapshot};
use tokio::sync::oneshot;

pub struct ProxyHandle {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    pub gate: Gate,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ProxyHandle {
    /// Starts a proxy on a free port in front of `upstream`.
    pub fn start(protocol: Protocol, upstream: &str, tenant_key: TenantKey, gate: GateConfig) -> ProxyHandle {
        let mut config = ProxyConfig::new("127.0.0.1:0", upstream, protocol);
        config.tenant_key = tenant_key;
        ProxyHandle::start_with(config, gate)
    }

    /// Starts a proxy with `config`, on a free port whatever it says.
    pub fn start_with(mut config: ProxyConfig, gate: GateConfig) -> ProxyHandle {
        config.listen = "127.0.0.1:0".into();
        config.drain_timeout_secs = 5;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("building the proxy's runtime");
            runtime.block_on(async {
                let gate = Gate::new(gate).expect("a valid gate configuration");
                let proxy = Proxy::bind(config, gate.clone()).await.expect("binding the proxy");
                let addr = proxy.local_addr().expect("the proxy's address");
                ready_tx
                    .send((addr, proxy.stats(), gate))
                    .expect("the test waits for the proxy");
                let shutdown = async {
                    let _ = stopped.await;
                };
                proxy.run(shutdown).await.expect("running the proxy");
            });
        });
        let (addr, stats, gate) = ready_rx.recv().expect("the proxy started");
        ProxyHandle {
            addr,
            stats,
            gate,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The session counters of one tenant.
    pub fn tenant(&self, name: &str) -> Option<TenantSnapshot> {
        self.stats.snapshot().into_iter().find(|t| &*t.tenant == name)
    }

    /// Takes one of the gate's slots for `tenant`, as a request inside the
    /// database would, until the slot is dropped.
    pub fn hold_slot(&self, tenant: &str) -> sluice_proxy::gate::Slot {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("building a runtime to wait at the gate");
        runtime
            .block_on(self.gate.admit(&self.gate.tenant(tenant)))
            .expect("a slot for the holder")
    }

    /// What the gate recorded for one tenant (admissions, latencies).
    pub fn gate_tenant(&self, name: &str) -> Option<sluice_proxy::gate::TenantSnapshot> {
        self.gate.snapshot().tenants.into_iter().find(|t| t.name == name)
    }

    /// Shuts the proxy down gracefully; false if its thread panicked.
    pub fn shutdown(&mut self) -> bool {
        if let Some(stop) = self.stop.take() {
            // The proxy may have stopped on its own already.
            let _ = stop.send(());
        }
        self.thread.take().is_none_or(|thread| thread.join().is_ok())
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        // A panic of the proxy thread fails the test through its own
        // assertions; panicking again while unwinding would abort.
        self.shutdown();
    }
}

/// A gate that lets `parallelism` requests in and refuses after `wait_ms`.
pub fn gate(parallelism: usize, queue_limit: usize, wait_ms: u64) -> GateConfig {
    GateConfig {
        parallelism,
        queue_limit,
        wait_timeout: std::time::Duration::from_millis(wait_ms),
        ..GateConfig::default()
    }
}
