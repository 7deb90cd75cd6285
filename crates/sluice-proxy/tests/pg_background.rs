//! `[postgres.background]` against a real PostgreSQL 15: the checkpoint
//! (and, when asked, autovacuum) settings steered through `ALTER SYSTEM` by a role with only the
//! documented grants, given back at a clean stop and after a kill, and
//! every fault (missing grants, a pinned setting, an unreachable server)
//! named in `/stats` while the proxy serves on.

mod support;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::certs::self_signed;
use support::servers::PgServer;
use support::service::Service;
use support::wait_for;

const ROLE: &str = "sluice_steer";

/// The role of the module doc: pg_monitor, ALTER SYSTEM on the four
/// checkpoint settings, pg_reload_conf(); no superuser.
fn create_role(pg: &PgServer, grants: bool) {
    let mut sql = format!("CREATE ROLE {ROLE} LOGIN;");
    if grants {
        sql.push_str(&format!(
            "GRANT pg_monitor TO {ROLE};\
             GRANT ALTER SYSTEM ON PARAMETER checkpoint_completion_target, max_wal_size, checkpoint_timeout, \
             wal_compression TO {ROLE};\
             GRANT EXECUTE ON FUNCTION pg_reload_conf() TO {ROLE};"
        ));
    }
    psql_ok(pg, &sql);
}

fn psql_ok(pg: &PgServer, sql: &str) -> String {
    let out = pg.psql(sql);
    assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `name=value (source)` for each steered setting, by name.
fn steered(pg: &PgServer) -> String {
    shown(
        pg,
        "'checkpoint_completion_target', 'max_wal_size', 'checkpoint_timeout', 'wal_compression'",
    )
}

/// `name=value (source)` for each setting named (quoted, comma-separated),
/// by name.
fn shown(pg: &PgServer, names: &str) -> String {
    psql_ok(
        pg,
        &format!(
            "SELECT string_agg(name || '=' || setting || coalesce(unit, '') || ' (' || source || ')', ', ' ORDER BY name) \
             FROM pg_settings WHERE name IN ({names})"
        ),
    )
}

fn settings_text(pg: &PgServer, conninfo_user: &str, port: u16, state_file: &Path) -> String {
    format!(
        r#"
        [proxy]
        listen = "127.0.0.1:0"
        upstream = "{upstream}"
        protocol = "pg"
        [admin]
        listen = "127.0.0.1:0"
        [postgres.background]
        conninfo = "host=127.0.0.1 port={port} user={conninfo_user} dbname=postgres"
        state_file = "{state}"
        trace_file = "{trace}"
        interval_ms = 100
        [postgres.background.checkpoint]
        max_recovery_wal_mib = 190
        timeout_s = 120
        "#,
        upstream = pg.addr(),
        state = state_file.display(),
        trace = state_file.with_extension("trace").display()
    )
}

/// Waits until the steered settings read `expected`.
fn wait_for_settings(pg: &PgServer, what: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = steered(pg);
        if now == expected {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {now}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the steering sets with no load: the busy target, max_wal_size for
/// a 190 MiB bound (11 segments of 16 MiB: a trigger point of 5 under
/// 0.9, which 10 segments give), the configured timeout, full-page images compressed
/// with the server's fastest method, all through ALTER SYSTEM.
const STEERED: &str = "checkpoint_completion_target=0.9 (configuration file), \
                       checkpoint_timeout=120s (configuration file), \
                       max_wal_size=160MB (configuration file), \
                       wal_compression=lz4 (configuration file)";

/// Before: the defaults (max_wal_size as initdb writes it into
/// postgresql.conf), but checkpoint_timeout set by an earlier ALTER
/// SYSTEM, which must come back as it was (not reset to the default).
const BEFORE: &str = "checkpoint_completion_target=0.9 (default), \
                      checkpoint_timeout=600s (configuration file), \
                      max_wal_size=1024MB (configuration file), \
                      wal_compression=off (default)";

/// Through the proxy: the proxy serves whatever the steering does.
fn query_through(service: &Service) -> String {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p"])
        .arg(service.addresses.proxy.port().to_string())
        .args(["-U", "postgres", "-d", "postgres", "-XAtqc", "SELECT 40 + 2"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A server with the steering role and the settings of [`BEFORE`], and a
/// directory for the state file.
fn server_as_before() -> Option<(PgServer, tempfile::TempDir)> {
    let pg = PgServer::start()?;
    create_role(&pg, true);
    psql_ok(&pg, "ALTER SYSTEM SET checkpoint_timeout = '10min'");
    psql_ok(&pg, "SELECT pg_reload_conf()");
    wait_for_settings(&pg, "the earlier ALTER SYSTEM", BEFORE);
    Some((pg, tempfile::tempdir().unwrap()))
}

#[test]
fn steers_checkpoints_and_gives_every_setting_back() {
    let Some((pg, dir)) = server_as_before() else { return };
    let state = dir.path().join("state.json");
    let mut service = Service::start(&settings_text(&pg, ROLE, pg.port, &state));
    wait_for_settings(&pg, "the steered settings", STEERED);
    assert!(state.exists(), "the originals are recorded while settings are changed");
    assert_eq!(service.status(), "steering");
    let stats = service.stats();
    let decisions = stats["decisions"].as_array().unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d["knob"] == "postgres.max_wal_size" && d["value"] == 160.0),
        "{decisions:?}"
    );
    assert!(
        stats["postgres_background"]["recovery_debt_mib"].as_f64().is_some(),
        "{stats}"
    );
    assert_eq!(query_through(&service), "42");
    every_grafana_metric_is_served(&service);
    service.stop();
    assert_eq!(steered(&pg), BEFORE, "a clean stop gives every setting back");
    assert!(!state.exists(), "and removes the state file");
    replays_as_it_ran(&state.with_extension("trace"), "postgres.max_wal_size", 160.0);
}

/// The run's trace decides again, interval by interval, as it ran, and
/// its first interval set `knob` to `value`.
fn replays_as_it_ran(path: &Path, knob: &str, value: f64) {
    let file = std::fs::File::open(path).expect("the run was traced");
    let trace = sluice_sim::replay::Trace::read(std::io::BufReader::new(file)).unwrap();
    assert!(!trace.steps.is_empty(), "an interval was traced");
    assert!(
        trace.steps[0]
            .decided
            .iter()
            .any(|d| d.knob == knob && d.value == value),
        "{:?}",
        trace.steps[0]
    );
    let done = trace.replay().unwrap();
    assert_eq!(done.steps, trace.steps.len());
}

/// The Grafana dashboard draws only metrics the admin port serves (with
/// the steering on, a tenant seen and decisions made, every one appears).
fn every_grafana_metric_is_served(service: &Service) {
    let admin = service.addresses.admin.unwrap();
    let metrics = support::service::get_text(admin, "/metrics");
    let grafana = include_str!("../../../docs/grafana-dashboard.json");
    let mut names: Vec<&str> = grafana
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("sluice_"))
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "docs/grafana-dashboard.json draws {name}, which /metrics lacks:\n{metrics}"
        );
    }
}

/// The child process of `a_killed_proxy_is_undone_at_its_next_start`:
/// steers until killed. Ignored, so that it runs only as that child.
#[test]
#[ignore = "the child process of a_killed_proxy_is_undone_at_its_next_start"]
fn steering_child() {
    let text = std::env::var("SLUICE_STEERING_CHILD").expect("run by its parent test");
    let _service = Service::start(&text);
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn a_killed_proxy_is_undone_at_its_next_start() {
    let Some((pg, dir)) = server_as_before() else { return };
    let state = dir.path().join("state.json");
    let text = settings_text(&pg, ROLE, pg.port, &state);
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "steering_child", "--nocapture"])
        .env("SLUICE_STEERING_CHILD", &text)
        .spawn()
        .unwrap();
    wait_for_settings(&pg, "the child's steering", STEERED);
    child.kill().unwrap(); // SIGKILL: nothing is given back.
    child.wait().unwrap();
    assert_eq!(steered(&pg), STEERED, "a killed proxy leaves its settings");
    assert!(state.exists());

    // The next start restores the originals from the state file before it
    // steers; had it taken the steered values for the originals, the clean
    // stop below would leave them.
    let mut service = Service::start(&text);
    wait_for("steering again", || (service.status() == "steering").then_some(()));
    service.stop();
    assert_eq!(steered(&pg), BEFORE, "the settings from before the killed run");
    assert!(!state.exists());
}

#[test]
fn a_role_without_the_grants_is_told_what_to_grant_and_the_proxy_serves_on() {
    let Some(pg) = PgServer::start() else { return };
    create_role(&pg, false);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let service = Service::start(&settings_text(&pg, ROLE, pg.port, &state));
    wait_for("the refusal", || {
        service.status().starts_with("not steering").then_some(())
    });
    let status = service.status();
    for says in [
        "role sluice_steer lacks",
        "ALTER SYSTEM on checkpoint_completion_target",
        "pg_monitor",
        "GRANT",
    ] {
        assert!(status.contains(says), "{status}");
    }
    assert_eq!(query_through(&service), "42");
    assert!(!state.exists(), "nothing recorded, nothing changed");
    assert!(steered(&pg).contains("(default)"));
}

#[test]
fn a_server_that_forbids_alter_system_gets_checkpoints_timed_alone() {
    let Some(pg) = PgServer::start() else { return };
    psql_ok(
        &pg,
        &format!("CREATE ROLE {ROLE} LOGIN; GRANT pg_monitor, pg_checkpoint TO {ROLE};"),
    );
    // A small WAL budget, so that a test's worth of WAL makes a checkpoint
    // due: the server's trigger point is 64 MiB / 1.9 = 33.7 MiB, and the
    // controller asks for a checkpoint in a lull from half of it.
    psql_ok(&pg, "ALTER SYSTEM SET max_wal_size = '64MB'");
    psql_ok(&pg, "SELECT pg_reload_conf()");
    wait_for("the reload", || {
        steered(&pg).contains("max_wal_size=64MB").then_some(())
    });
    let before = steered(&pg);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let mut service = Service::start(&settings_text(&pg, ROLE, pg.port, &state));
    wait_for("timing alone", || {
        service
            .status()
            .starts_with("steering: timing CHECKPOINT alone")
            .then_some(())
    });
    // About 22 MiB of WAL: due for the controller, short of the server's
    // own trigger. No foreground: a lull.
    psql_ok(
        &pg,
        "CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 90000) g",
    );
    let asked = wait_for("a CHECKPOINT", || {
        let stats = service.stats();
        let decisions = stats["decisions"].as_array().unwrap().clone();
        decisions.into_iter().find(|d| d["knob"] == "postgres.CHECKPOINT")
    });
    assert!(asked["value"].as_f64().unwrap() >= 16.0, "{asked}");
    assert!(asked["why"].as_str().unwrap().contains("lull"), "{asked}");
    wait_for("the debt cleared", || {
        let debt = service.stats()["postgres_background"]["recovery_debt_mib"].as_f64();
        debt.filter(|d| *d < 5.0)
    });
    assert_eq!(query_through(&service), "42");
    assert!(!state.exists(), "nothing to record: no setting is changed");
    service.stop();
    assert_eq!(steered(&pg), before, "no setting changed");
    let file = std::fs::File::open(state.with_extension("trace")).expect("the run was traced");
    let trace = sluice_sim::replay::Trace::read(std::io::BufReader::new(file)).unwrap();
    assert!(trace.header.timing_alone);
    assert!(trace.steps.iter().all(|s| s.observation.server_trigger_point.is_some()));
    assert_eq!(trace.replay().unwrap().steps, trace.steps.len());
}

#[test]
fn a_setting_pinned_on_the_command_line_is_named() {
    let Some(pg) = PgServer::start_with_settings(&["max_wal_size=2GB"]) else {
        return;
    };
    create_role(&pg, true);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let service = Service::start(&settings_text(&pg, ROLE, pg.port, &state));
    wait_for("the refusal", || {
        service.status().starts_with("not steering").then_some(())
    });
    let status = service.status();
    assert!(
        status.contains("max_wal_size (pg_settings.source = command line)"),
        "{status}"
    );
    assert_eq!(query_through(&service), "42");
    assert!(steered(&pg).contains("checkpoint_completion_target=0.9 (default)"));
}

#[test]
fn a_wal_segment_size_other_than_the_servers_is_named() {
    let Some(pg) = PgServer::start() else { return };
    create_role(&pg, true);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let text = settings_text(&pg, ROLE, pg.port, &state) + "wal_segment_mib = 64\n";
    let service = Service::start(&text);
    wait_for("the refusal", || {
        service.status().starts_with("not steering").then_some(())
    });
    let status = service.status();
    assert!(
        status.contains("WAL segments are 16 MiB, not the 64 MiB of wal_segment_mib"),
        "{status}"
    );
    assert_eq!(query_through(&service), "42");
    assert!(!state.exists(), "nothing recorded, nothing changed");
}

#[test]
fn an_unreachable_server_is_waited_for_and_the_proxy_serves_on() {
    let Some(pg) = PgServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut service = Service::start(&settings_text(&pg, ROLE, closed, &state));
    wait_for("the wait", || {
        service.status().starts_with("waiting for PostgreSQL").then_some(())
    });
    assert!(service.status().contains("cannot connect"), "{}", service.status());
    assert_eq!(query_through(&service), "42");
    service.stop();
    assert!(!state.exists());
}

/// A server that takes TCP connections only inside TLS is steered: with
/// the connection string alone (its `sslmode` prefers TLS, checking no
/// certificate, as libpq's does; by host name or by address), and with
/// `[proxy.upstream_tls]`
/// checking the certificate, which a certificate of another issuer fails,
/// named in `/stats`.
#[test]
fn a_server_reached_only_inside_tls_is_steered() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, other) = (self_signed(dir.path(), "server"), self_signed(dir.path(), "other"));
    let Some(pg) = PgServer::start_tls(&cert) else { return };
    create_role(&pg, true);
    let state = dir.path().join("state.json");
    let plain = settings_text(&pg, ROLE, pg.port, &state);
    let checked = |ca: &Path| {
        format!(
            "{plain}\n[proxy.upstream_tls]\nmode = \"verify-full\"\nca = \"{}\"\n",
            ca.display()
        )
    };
    // An address without a host name is the name TLS checks.
    let by_address = plain.replace("host=127.0.0.1", "hostaddr=127.0.0.1");
    for text in [plain.clone(), by_address, checked(&cert.cert)] {
        let mut service = Service::start(&text);
        wait_for("steering", || (service.status() == "steering").then_some(()));
        service.stop();
        assert!(steered(&pg).contains("(default)"), "given back");
    }
    let mut service = Service::start(&checked(&other.cert));
    wait_for("the certificate refused", || {
        service.status().starts_with("waiting for PostgreSQL").then_some(())
    });
    assert!(service.status().contains("certificate"), "{}", service.status());
    service.stop();
    assert!(!state.exists(), "nothing recorded, nothing changed");
}

/// The vacuum controller's settings as `pg_settings` shows them
/// (`backend_flush_after` in pages of 8 kB).
fn autovacuum_pace(pg: &PgServer) -> String {
    shown(
        pg,
        "'autovacuum_vacuum_cost_limit', 'autovacuum_vacuum_cost_delay', 'backend_flush_after'",
    )
}

fn with_vacuum(text: String) -> String {
    format!("{text}\n[postgres.background.vacuum]\nbusy_cost_limit = 500\nlight_cost_limit = 3000\n")
}

#[test]
fn steers_autovacuum_when_asked_and_gives_it_back() {
    let Some((pg, dir)) = server_as_before() else { return };
    psql_ok(
        &pg,
        &format!(
            "GRANT ALTER SYSTEM ON PARAMETER autovacuum_vacuum_cost_limit, autovacuum_vacuum_cost_delay, \
             backend_flush_after TO {ROLE}"
        ),
    );
    // A setting counted in pages, set before: it must come back as it was.
    psql_ok(&pg, "ALTER SYSTEM SET backend_flush_after = '512kB'");
    psql_ok(&pg, "SELECT pg_reload_conf()");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !autovacuum_pace(&pg).contains("backend_flush_after=648kB (configuration file)") {
        assert!(Instant::now() < deadline, "not reloaded: {}", autovacuum_pace(&pg));
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = autovacuum_pace(&pg);
    assert!(before.contains("autovacuum_vacuum_cost_limit=-1 (default)"), "{before}");
    // As a killed run that steered checkpoints alone leaves the server: a
    // changed timeout, and a state file that names the three settings.
    let state = dir.path().join("state.json");
    let system = psql_ok(&pg, "SELECT system_identifier FROM pg_control_system()");
    std::fs::write(
        &state,
        format!(
            r#"{{"system": "{system}", "originals": [
                {{"name": "checkpoint_completion_target", "altered": null}},
                {{"name": "max_wal_size", "altered": null}},
                {{"name": "checkpoint_timeout", "altered": "600s"}}]}}"#
        ),
    )
    .unwrap();
    psql_ok(&pg, "ALTER SYSTEM SET checkpoint_timeout = '77s'");
    psql_ok(&pg, "SELECT pg_reload_conf()");
    let mut service = Service::start(&with_vacuum(settings_text(&pg, ROLE, pg.port, &state)));
    // No vacuum runs on the test's server, and nothing rests (no rate has
    // been seen): the next starts its table unpaced, its writes flushed
    // every 256 kB (32 pages).
    let paced = "autovacuum_vacuum_cost_delay=0ms (configuration file), \
                   autovacuum_vacuum_cost_limit=3000 (configuration file), \
                   backend_flush_after=328kB (configuration file)";
    let deadline = Instant::now() + Duration::from_secs(20);
    while autovacuum_pace(&pg) != paced {
        assert!(Instant::now() < deadline, "not steered: {}", autovacuum_pace(&pg));
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = service.stats();
    assert!(
        stats["postgres_background"]["vacuums_running"].as_u64().is_some(),
        "{stats}"
    );
    let metrics = support::service::get_text(service.addresses.admin.unwrap(), "/metrics");
    assert!(
        metrics.contains(r#"controller="vacuum",knob="postgres.autovacuum_vacuum_cost_limit""#),
        "{metrics}"
    );
    assert_eq!(query_through(&service), "42");
    service.stop();
    assert_eq!(
        autovacuum_pace(&pg),
        before,
        "a clean stop gives autovacuum's pace back, which the killed run's file did not name"
    );
    assert_eq!(steered(&pg), BEFORE, "and the killed run's timeout");
    replays_as_it_ran(
        &state.with_extension("trace"),
        "postgres.autovacuum_vacuum_cost_limit",
        3000.0,
    );
}

#[test]
fn vacuum_steering_without_its_grants_is_named() {
    let Some((pg, dir)) = server_as_before() else { return };
    let state = dir.path().join("state.json");
    let service = Service::start(&with_vacuum(settings_text(&pg, ROLE, pg.port, &state)));
    wait_for("the refusal", || {
        service.status().starts_with("not steering").then_some(())
    });
    let status = service.status();
    assert!(
        status.contains("ALTER SYSTEM on autovacuum_vacuum_cost_limit"),
        "{status}"
    );
    assert!(
        !status.contains("ALTER SYSTEM on checkpoint"),
        "those are granted: {status}"
    );
    assert_eq!(query_through(&service), "42");
    assert_eq!(steered(&pg), BEFORE, "nothing changed");
}
