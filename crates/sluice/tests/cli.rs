//! The `sluice` command as a user meets it: help, errors, and a small run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).output().unwrap()
}

/// A scratch directory of this test process, removed however the test
/// ends.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("sluice-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

#[test]
fn help_explains_every_option() {
    let top = String::from_utf8(sluice(&["--help"]).stdout).unwrap();
    assert!(top.contains("sim") && top.contains("bench"), "{top}");
    let sim = String::from_utf8(sluice(&["sim", "--help"]).stdout).unwrap();
    for opt in ["--out", "--jobs", "--seeds", "--transactions", "--quiet", "<FILE>"] {
        assert!(sim.contains(opt), "sim --help lacks {opt}");
    }
    let bench = String::from_utf8(sluice(&["bench", "sim", "--help"]).stdout).unwrap();
    for opt in ["--policies", "--utilization", "--repeat", "--max-steal"] {
        assert!(bench.contains(opt), "bench sim --help lacks {opt}");
    }
}

#[test]
fn model_fits_samples_and_names_bad_ones() {
    let out = sluice(&["model", "512=1025", "2=859", "32=1670"]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{table}");
    assert!(table.contains("P0 = 2 (λ 859/s), P2 = 512 (λ 1025/s)"), "{table}");
    for (args, says) in [
        (&["model", "2=859", "32", "512=1025"][..], "`32` is not P=THROUGHPUT"),
        (&["model", "2=859", "512=1025"][..], "3 values required"),
        (&["model", "2=859", "32=1", "32=2"][..], "P = 32 is given twice"),
    ] {
        let out = sluice(args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(err.contains(says) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn bad_experiment_files_get_one_line_naming_the_field() {
    let dir = scratch("bad");
    let cases = [
        (
            "unknown.toml",
            "policies = [\"edf\"]\nspeed = 3\n[sweep]\nvalues = [0.5]\n",
            "unknown field `speed`",
        ),
        (
            "util.toml",
            "policies = [\"edf\"]\n[sweep]\nvalues = [0.5, 1.5]\n",
            "utilization",
        ),
        ("empty.toml", "policies = []\n[sweep]\nvalues = [0.5]\n", "policies"),
        (
            "range.toml",
            "policies = [\"edf\"]\n[sweep]\nfrom = 0.9\nto = 0.2\nstep = 0.1\n",
            "exceeds",
        ),
        ("syntax.toml", "policies = [\"edf\"\n", "line"),
    ];
    for (name, text, needle) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = sluice(&["sim", path.to_str().unwrap(), "--out", dir.join("o").to_str().unwrap()]);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{name} accepted");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(needle) && err.contains(name), "{name}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = sluice(&["sim", dir.join("missing.toml").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr).unwrap().contains("cannot read"));
}

#[test]
fn a_small_experiment_prints_tables_and_writes_files() {
    let dir = scratch("ok");
    let file = dir.join("tiny.toml");
    std::fs::write(
        &file,
        "policies = [\"edf\", \"sstf\", \"traqios\"]\nseeds = 2\n[sweep]\nvalues = [0.3, 0.9]\n[workload]\ntransactions = 100\nios = [1, 50]\n",
    )
    .unwrap();
    let out_dir = dir.join("out");
    let out = sluice(&[
        "sim",
        file.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--jobs",
        "2",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("normalized to EDF") && table.contains("normalized to SSTF"),
        "{table}"
    );
    assert!(table.contains("traqios"));
    for f in [
        "runs.csv",
        "summary.csv",
        "result.json",
        "tardiness_vs_edf.svg",
        "tardiness_vs_sstf.svg",
        "miss_ratio.svg",
    ] {
        assert!(out_dir.join(f).exists(), "{f} missing");
    }
    let runs = std::fs::read_to_string(out_dir.join("runs.csv")).unwrap();
    assert_eq!(
        runs.lines().count(),
        1 + 2 * 3 * 2,
        "header + points x policies x seeds"
    );
}

#[test]
fn a_small_demo_runs_every_mode_and_writes_its_report() {
    let dir = scratch("demo");
    let out = dir.join("out");
    let o = sluice(&[
        "demo",
        "--records",
        "2000",
        "--seconds",
        "2",
        "--tenants",
        "2",
        "--target-ops",
        "100",
        "--out",
        out.to_str().unwrap(),
        "--dir",
        dir.join("stores").to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for mode in ["fifo", "sluice", "settled"] {
        assert!(
            text.lines().any(|l| l.starts_with(mode) && l.contains("tenant-2")),
            "{mode}: {text}"
        );
    }
    assert!(text.contains("sluice / settled = "), "{text}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("read_ccdf.svg") && out.join("read_ccdf.svg").exists());
    let store = std::fs::read_to_string(out.join("store.csv")).unwrap();
    for mode in ["fifo", "sluice", "settled"] {
        let rows: Vec<&str> = store.lines().filter(|l| l.starts_with(&format!("{mode},"))).collect();
        assert!(rows.len() >= 10, "a row a tick for {mode}: {store}");
        // The controller's rate is there in its mode only.
        assert_eq!(
            rows.iter().all(|r| !r.ends_with(',')),
            mode == "sluice",
            "{mode}: {rows:?}"
        );
    }
    let stores = dir.join("stores");
    let used = sluice(&["demo", "--records", "2000", "--dir", stores.to_str().unwrap()]);
    assert!(!used.status.success());
    assert!(
        String::from_utf8_lossy(&used.stderr).contains("not empty; the demo loads fresh stores there"),
        "{}",
        String::from_utf8_lossy(&used.stderr)
    );
    let bad = sluice(&["demo", "--records", "10"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--records must be at least 1000"));
    let bad = sluice(&["demo", "--field-length", "0"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--field-length must lie in 1..=100000"));
}

#[test]
fn an_apples_scenario_prints_its_runs_and_refuses_what_it_cannot_use() {
    let dir = scratch("apples");
    let file = dir.join("tiny.toml");
    std::fs::write(
        &file,
        "kind = \"apples\"\nseeds = 2\nbaseline = \"open\"\n[defaults]\nseconds = 3.0\nwarmup = 1.0\n\
         [[run]]\nname = \"P 16\"\nparallelism = 16\noptimizer = { parallelism = \"fixed\" }\n\
         [[run]]\nname = \"open\"\noptimizer = { parallelism = \"fixed\" }\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = sluice(&["sim", path]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{table}{}", String::from_utf8_lossy(&out.stderr));
    assert!(table.contains("| P 16 |") && table.contains("against open"), "{table}");
    let out = sluice(&["sim", path, "--out", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("takes --seeds and --quiet only"));
    std::fs::write(&file, "kind = \"apples\"\n[[run]]\nname = \"a\"\nusers = 5\n").unwrap();
    let out = sluice(&["sim", path]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("run `a`"), "{out:?}");
}

/// `sluice serve --script-time-limit` stops a script that runs past it,
/// and refuses a limit of 0 by name.
#[test]
fn serve_stops_a_script_at_its_time_limit() {
    use std::io::{Read, Write};
    let out = sluice(&["serve", "--dir", "unused", "--script-time-limit", "0"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success() && err.contains("--script-time-limit"), "{err}");
    let dir = scratch("script-limit");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--dir", dir.to_str().unwrap(), "--port", &port.to_string()])
        .args(["--script-time-limit", "300"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut conn = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(e) if started.elapsed() > std::time::Duration::from_secs(30) => panic!("serve never listened: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    conn.write_all(b"EVAL \"while true do end\" 0\r\n").unwrap();
    let mut reply = Vec::new();
    let mut chunk = [0u8; 512];
    while !reply.ends_with(b"\r\n") {
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "the server closed the connection");
        reply.extend_from_slice(&chunk[..n]);
    }
    let _ = server.kill();
    let _ = server.wait();
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.starts_with("-ERR the script ran past its time limit of 300ms"),
        "{reply}"
    );
}

#[test]
fn replay_decides_a_trace_again_and_names_where_it_parts() {
    use sluice_core::controller::trace::{Step, TraceHeader};
    use sluice_core::controller::{
        CheckpointControllerConfig, CheckpointObservation, PostgresControllers, VacuumControllerConfig,
        VacuumObservation,
    };

    let dir = scratch("replay");
    // The vacuum paced alone, so that its limit follows the load.
    let vacuum = VacuumControllerConfig {
        flush_after_kib: 0,
        ..Default::default()
    };
    let header = TraceHeader::postgres(CheckpointControllerConfig::default(), Some(vacuum));
    let mut live = PostgresControllers::new(header.checkpoint, header.vacuum).unwrap();
    let mut lines = vec![serde_json::to_string(&header).unwrap()];
    for i in 0..30u64 {
        let foreground_rate = if i < 15 { 800.0 } else { 40.0 };
        let observation = CheckpointObservation {
            foreground_rate,
            wal_since_redo: i << 24,
            checkpoint_running: false,
            since_checkpoint_start: i * 1_000_000_000,
            wal_position: None,
            server_trigger_point: None,
        };
        let vacuum_observation = VacuumObservation {
            foreground_rate,
            vacuums_running: u32::from(i >= 5),
        };
        let decided = live.decide(observation, Some(vacuum_observation));
        let step = Step::new(observation, Some(vacuum_observation), &decided, true);
        lines.push(serde_json::to_string(&step).unwrap());
    }
    let trace = dir.join("run.trace");
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let out = sluice(&["replay", trace.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said} {}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("30 intervals") && said.contains("the same"), "{said}");

    // The rest fell at interval 15: a replay that sees the load stay up
    // keeps the busy target where the live run hurried.
    let hurried = lines[16].clone();
    lines[16] = lines[16].replacen("\"foreground_rate\":40.0", "\"foreground_rate\":800.0", 1);
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let out = sluice(&["replay", trace.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("interval 15 (line 17) decided otherwise"), "{err}");
    assert!(
        err.contains("recorded:\n  postgres.checkpoint_completion_target = 0.5"),
        "{err}"
    );

    // The same for the vacuum: one that started at interval 5 is spread.
    lines[16] = hurried;
    lines[6] = lines[6].replacen("\"vacuums_running\":1", "\"vacuums_running\":0", 1);
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let out = sluice(&["replay", trace.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interval 5 (line 7) decided otherwise"), "{err}");
    assert!(
        err.contains("recorded:\n  postgres.autovacuum_vacuum_cost_limit = 200"),
        "{err}"
    );

    let out = sluice(&["replay", dir.join("missing.trace").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cannot open"), "{err}");
}

/// Under an open-file limit too low for its 10,000 clients, `sluice route`
/// says how many fit and takes that many: the next is told so in RESP, a
/// flood of more is refused as cleanly, and those it took are served.
#[test]
fn route_takes_the_clients_its_open_file_limit_has_room_for() {
    let dir = scratch("route-fds");
    let port = free_port();
    let config = dir.join("route.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\n[pool]\nmax_watching = 16\n\
             [[shard]]\nname = \"a\"\naddr = \"127.0.0.1:9\"\nslots = \"0-16383\"\n"
        ),
    )
    .unwrap();
    let (_router, said) = start_under_nofile(&["route", "--config", config.to_str().unwrap()], 200);
    // 200 descriptors less 64 for the shard's pool, 16 for its watching
    // clients and 32 of its own.
    assert!(
        said.contains("max_clients 10000 does not fit") && said.contains("88 clients do"),
        "{said}"
    );
    takes_then_refuses(port, 88);
}

/// `sluice serve` does the same with its `--max-clients`.
#[test]
fn serve_takes_the_clients_its_open_file_limit_has_room_for() {
    let dir = scratch("serve-fds");
    let port = free_port();
    let args = ["serve", "--dir", dir.to_str().unwrap(), "--port", &port.to_string()];
    let (_server, said) = start_under_nofile(&args, 200);
    // 200 descriptors less 32 for its own: listener, poller, the store's files.
    assert!(
        said.contains("--max-clients 10000 does not fit") && said.contains("168 clients do"),
        "{said}"
    );
    takes_then_refuses(port, 168);
}

/// `sluice proxy` lowers the default `max_client_conn` to what its
/// open-file limit fits without a word (two descriptors a PostgreSQL
/// client), and keeps a bound the user set, with a warning.
#[test]
fn proxy_fits_its_default_client_bound_quietly_and_warns_of_one_set() {
    use std::io::Read;
    let dir = scratch("proxy-fds");
    let port = free_port();
    let base = format!("[proxy]\nlisten = \"127.0.0.1:{port}\"\nupstream = \"127.0.0.1:9\"\nprotocol = \"pg\"\n");
    let config = dir.join("default.toml");
    std::fs::write(&config, &base).unwrap();
    let (proxy, said) = start_under_nofile(&["proxy", "--config", config.to_str().unwrap()], 200);
    assert!(!said.contains("warning"), "{said}");
    // 200 descriptors less 32 of its own, two a client.
    let _taken: Vec<_> = (0..84)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let mut refused = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    refused
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut told = Vec::new();
    refused.read_to_end(&mut told).unwrap();
    let told = String::from_utf8_lossy(&told);
    assert!(
        told.contains("53300") && told.contains("max_client_conn = 84"),
        "{told}"
    );
    drop(proxy);

    let config = dir.join("set.toml");
    std::fs::write(&config, format!("{base}max_client_conn = 10000\n")).unwrap();
    let (_proxy, said) = start_under_nofile(&["proxy", "--config", config.to_str().unwrap()], 200);
    assert!(
        said.contains("max_client_conn 10000 does not fit") && said.contains("84 clients do"),
        "{said}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `sluice args` under an open-file limit of `nofile`, once it has said
/// it listens; what it said on stderr until then.
fn start_under_nofile(args: &[&str], nofile: u64) -> (Running, String) {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args(args).stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe, and nothing else runs in the
    // child between fork and exec.
    unsafe {
        command.pre_exec(move || rlimit::setrlimit(rlimit::Resource::NOFILE, nofile, nofile));
    }
    let mut child = Running(command.spawn().unwrap());
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains(" on 127.0.0.1:") {
        assert!(stderr.read_line(&mut said).unwrap() > 0, "it ended: {said}");
    }
    // Whatever it logs later goes on draining, so that it never blocks.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, said)
}

/// The server on `port` serves `fit` clients, tells a flood of 300 more
/// that the clients are too many, and serves the first ones still.
fn takes_then_refuses(port: u16, fit: usize) {
    use std::io::{Read, Write};
    let connect = || {
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        c
    };
    let ping = |c: &mut std::net::TcpStream| {
        c.write_all(b"PING\r\n").unwrap();
        let mut reply = [0u8; 7];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
    };
    let mut served: Vec<_> = (0..fit).map(|_| connect()).collect();
    for c in &mut served {
        ping(c);
    }
    let flood: Vec<_> = (0..300).map(|_| connect()).collect();
    for mut c in flood {
        let mut told = String::new();
        c.read_to_string(&mut told).unwrap();
        assert_eq!(told, "-ERR max number of clients reached\r\n");
    }
    for c in &mut served {
        ping(c);
    }
}

/// A child process, stopped however the test ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
