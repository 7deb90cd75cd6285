//! `sluice proxy` as one service: the listener, the gate, the optimizer,
//! the steering of PostgreSQL's checkpoints (if configured) and the admin
//! port started together from [`Settings`], reloaded on request without
//! dropping connections, and stopped gracefully (the listener drains
//! requests in flight before the optimizer and admin port stop, and the
//! steering gives PostgreSQL's settings back before `run` returns).

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::{self, Admin};
use crate::config::ProxyConfig;
use crate::gate::Gate;
use crate::listener::Proxy;
use crate::optimizer::{self, DecisionLog, ParallelismMode, SloTargets, ZetaMode};
use crate::pg::background::{self, BackgroundStatus};
use crate::settings::Settings;

/// Where a running service listens.
#[derive(Clone, Copy, Debug)]
pub struct Addresses {
    pub proxy: SocketAddr,
    pub admin: Option<SocketAddr>,
}

/// Runs until `shutdown` completes. Each message on `reload` re-reads
/// `settings_path` and applies what can change live. `started` hears the
/// bound addresses once both ports listen.
pub async fn run(
    settings: Settings,
    settings_path: Option<PathBuf>,
    mut reload: tokio::sync::mpsc::Receiver<()>,
    started: tokio::sync::oneshot::Sender<Addresses>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let gate = Gate::new(settings.gate.clone())?;
    let proxy = Proxy::bind(settings.proxy.clone(), gate.clone())
        .await
        .map_err(|e| e.to_string())?;
    let decisions = DecisionLog::default();
    let slo_targets = SloTargets::new(settings.optimizer.slo.clone());
    let (stop, stopped) = watch::channel(false);
    let background_status = BackgroundStatus::default();
    let admin = Admin {
        gate: gate.clone(),
        stats: proxy.stats(),
        decisions: decisions.clone(),
        slo_targets: slo_targets.clone(),
        background: settings
            .postgres
            .background
            .is_some()
            .then(|| background_status.clone()),
    };
    let admin_addr = start_admin(&settings, admin, stopped.clone()).await?;
    let proxy_addr = proxy.local_addr().map_err(|e| e.to_string())?;
    let steering = settings.postgres.background.clone().map(|config| {
        tokio::spawn(background::run(
            config,
            settings.proxy.upstream_tls.clone(),
            gate.clone(),
            decisions.clone(),
            background_status,
            stopped.clone(),
        ))
    });
    tokio::spawn(optimizer::run(
        settings.optimizer.clone(),
        gate.clone(),
        decisions,
        slo_targets.clone(),
        stopped,
    ));
    let _ = started.send(Addresses {
        proxy: proxy_addr,
        admin: admin_addr,
    });
    let reloading = async {
        while reload.recv().await.is_some() {
            match settings_path.as_deref().map(Settings::load) {
                Some(Ok(new)) => apply(&gate, &slo_targets, &settings, &new),
                Some(Err(e)) => tracing::error!("reload refused, settings unchanged: {e}"),
                None => tracing::warn!("reload asked but the proxy was started without a settings file"),
            }
        }
        std::future::pending::<()>().await
    };
    let served = tokio::select! {
        served = proxy.run(shutdown) => served,
        () = reloading => unreachable!("reloading never ends"),
    };
    let _ = stop.send(true);
    if let Some(steering) = steering {
        let _ = steering.await;
    }
    served.map_err(|e| e.to_string())
}

async fn start_admin(
    settings: &Settings,
    admin: Admin,
    mut stopped: watch::Receiver<bool>,
) -> Result<Option<SocketAddr>, String> {
    if settings.admin.listen.trim().is_empty() {
        return Ok(None);
    }
    let rules = admin::Rules::new(&settings.admin)?;
    let listener = TcpListener::bind(&settings.admin.listen)
        .await
        .map_err(|e| format!("cannot listen on the admin address {}: {e}", settings.admin.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let stop = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        if let Err(e) = admin::serve(listener, admin, rules, stop).await {
            tracing::error!("admin port stopped: {e}");
        }
    });
    Ok(Some(addr))
}

/// Applies what a reload may change while connections stay open: weights,
/// strict tenants, SLO targets, and P and ζ where the optimizer does not
/// tune them. Listener, upstream, protocol, tenant key, queue bounds and the
/// optimizer's other settings need a restart; a change there is reported,
/// not applied.
fn apply(gate: &Gate, slo_targets: &SloTargets, old: &Settings, new: &Settings) {
    for (tenant, &weight) in &new.gate.weights {
        if let Err(e) = gate.set_weight(tenant, weight) {
            tracing::error!("reload: {e}");
        }
    }
    if new.optimizer.parallelism == ParallelismMode::Fixed {
        if let Err(e) = gate.set_parallelism(new.gate.parallelism) {
            tracing::error!("reload: {e}");
        }
    }
    if new.optimizer.zeta == ZetaMode::Fixed {
        if let Err(e) = gate.set_zeta(new.gate.zeta) {
            tracing::error!("reload: {e}");
        }
    }
    gate.set_strict(&new.gate.strict);
    if let Err(e) = slo_targets.replace(new.optimizer.slo.clone()) {
        tracing::error!("reload: {e}");
    }
    // An unset max_client_conn was given, at start, what the open-file
    // limit fitted: unset again, it is no change.
    let proxy = ProxyConfig {
        max_client_conn: new.proxy.max_client_conn.or(old.proxy.max_client_conn),
        ..new.proxy.clone()
    };
    if old.proxy != proxy || old.admin != new.admin || old.postgres != new.postgres {
        tracing::warn!("reload: [proxy], [admin] and [postgres] changes take effect at the next start");
    }
    tracing::info!("settings reloaded");
}
