//! Private PostgreSQL 15 and Redis 7 servers: a temporary directory, a free
//! port on 127.0.0.1, stopped (process group killed) when dropped.
//!
//! PostgreSQL refuses to run as root, and tests here often run as root: the
//! server programs then run as the `postgres` system user, which owns the
//! temporary directory.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice_proxy::pg::tls::TlsConfig;

use super::require;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// The SCRAM user the tests authenticate as.
pub const PG_USER: &str = "alice";
pub const PG_PASSWORD: &str = "secret";
/// A user who logs in with a cleartext password (PG_PASSWORD), which the
/// raw test client can send.
pub const PG_CLEARTEXT_USER: &str = "bob";
/// A user whose password (PG_PASSWORD) is stored and asked as md5.
pub const PG_MD5_USER: &str = "carol";

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port on 127.0.0.1");
    listener.local_addr().expect("local address of a bound socket").port()
}

/// The uid and gid to run PostgreSQL as: `postgres` when we are root.
fn pg_owner() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("running id");
        assert!(
            out.status.success(),
            "running as root needs a `postgres` system user (from the postgresql package)"
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("id prints a number")
    };
    Some((id("-u"), id("-g")))
}

/// A server process in its own process group, killed with it on drop.
struct Process {
    child: Child,
    name: &'static str,
}

impl Process {
    fn spawn(mut command: Command, name: &'static str, log: &Path) -> Process {
        let log = fs::File::create(log).expect("creating a server log file");
        let err = log.try_clone().expect("cloning a file handle");
        command.stdin(Stdio::null()).stdout(log).stderr(err).process_group(0);
        let child = command.spawn().unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Process { child, name }
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Asks the server to stop with `signal`, then kills its whole group.
    fn stop(&mut self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill only sends signals to our own child's process group.
        unsafe { libc::kill(pid, signal) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.exited() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above; the group is gone already in the usual case.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        if let Err(e) = self.child.wait() {
            eprintln!("waiting for {}: {e}", self.name);
        }
    }
}

/// A command for `program` that runs as `owner` (uid, gid) when given.
fn as_owner(program: &Path, owner: Option<(u32, u32)>) -> Command {
    let mut command = Command::new(program);
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
    command
}

/// How a PostgreSQL server is started, kept to start it again.
struct Launch {
    program: PathBuf,
    args: Vec<OsString>,
    owner: Option<(u32, u32)>,
    log: PathBuf,
}

impl Launch {
    /// Starts the server and waits until it answers on its socket.
    fn spawn(&self, socket_dir: &Path, port: u16) -> Process {
        let mut command = as_owner(&self.program, self.owner);
        command.args(&self.args);
        let mut process = Process::spawn(command, "postgres", &self.log);
        wait_until(&mut process, &self.log, || {
            psql_socket(socket_dir, port, "SELECT 1").status.success()
        });
        process
    }
}

/// Waits until `ready` holds, failing with the server's log if it exits or
/// takes too long.
fn wait_until(process: &mut Process, log: &Path, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        let log_text = || fs::read_to_string(log).unwrap_or_default();
        assert!(
            !process.exited(),
            "{} exited during startup:\n{}",
            process.name,
            log_text()
        );
        assert!(
            Instant::now() < deadline,
            "{} not ready after 30 s:\n{}",
            process.name,
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A private PostgreSQL 15 on 127.0.0.1 with a SCRAM user `alice` and a
/// cleartext-password user `bob` (password `secret`) over TCP, and trust for `postgres` over TCP and for
/// everyone over the Unix socket in the temporary directory. Started with
/// TLS ([`PgServer::start_tls`]), it takes TCP connections only inside TLS.
pub struct PgServer {
    process: Process,
    launch: Launch,
    pub port: u16,
    socket_dir: PathBuf,
    _dir: tempfile::TempDir,
}

impl PgServer {
    /// Starts one, or returns `None` (outside CI) when PostgreSQL 15 is not
    /// installed.
    pub fn start() -> Option<PgServer> {
        PgServer::start_with(None, None, &[])
    }

    /// Starts one with `settings` (`name=value`) on its command line, where
    /// `ALTER SYSTEM` cannot override them.
    pub fn start_with_settings(settings: &[&str]) -> Option<PgServer> {
        PgServer::start_with(None, None, settings)
    }

    /// Starts one with TLS (`ssl = on`, this certificate and key) that
    /// refuses TCP connections outside TLS (only `hostssl` lines).
    pub fn start_tls(cert: &TlsConfig) -> Option<PgServer> {
        PgServer::start_with(Some(cert), None, &[])
    }

    /// As [`PgServer::start_tls`], and a TCP login as `postgres` needs a
    /// client certificate for that user chaining to `client_ca` (pg_hba
    /// `cert`).
    pub fn start_tls_client_certs(cert: &TlsConfig, client_ca: &Path) -> Option<PgServer> {
        PgServer::start_with(Some(cert), Some(client_ca), &[])
    }

    fn start_with(tls: Option<&TlsConfig>, client_ca: Option<&Path>, extra: &[&str]) -> Option<PgServer> {
        let initdb = require(&format!("{PG_BIN}/initdb"))?;
        let postgres = require(&format!("{PG_BIN}/postgres"))?;
        require("psql")?;
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let owner = pg_owner();
        if let Some((uid, gid)) = owner {
            chown(dir.path(), Some(uid), Some(gid)).expect("giving the temporary directory to postgres");
        }
        let data = dir.path().join("data");
        let mut init = as_owner(&initdb, owner);
        init.arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]);
        let out = init.output().expect("running initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let host = if tls.is_some() { "hostssl" } else { "host" };
        let cert_login = match client_ca {
            Some(_) => "hostssl all postgres 127.0.0.1/32 cert\n",
            None => "",
        };
        let hba = format!(
            "local all all trust\n{cert_login}{host} all {PG_USER} 127.0.0.1/32 scram-sha-256\n{host} all {PG_CLEARTEXT_USER} 127.0.0.1/32 password\n{host} all {PG_MD5_USER} 127.0.0.1/32 md5\n{host} all all 127.0.0.1/32 trust\n"
        );
        fs::write(data.join("pg_hba.conf"), hba).expect("writing pg_hba.conf");
        let mut settings = vec![
            "listen_addresses=127.0.0.1".to_string(),
            "fsync=off".into(),
            "synchronous_commit=off".into(),
            "full_page_writes=off".into(),
            "max_connections=60".into(),
        ];
        settings.extend(extra.iter().map(|s| s.to_string()));
        if let Some(tls) = tls {
            settings.extend([
                "ssl=on".into(),
                "ssl_cert_file=server.crt".into(),
                "ssl_key_file=server.key".into(),
            ]);
            let mut files = vec![(tls.cert.as_path(), "server.crt"), (tls.key.as_path(), "server.key")];
            if let Some(ca) = client_ca {
                settings.push("ssl_ca_file=client_ca.crt".into());
                files.push((ca, "client_ca.crt"));
            }
            for (from, to) in files {
                let to = data.join(to);
                fs::copy(from, &to).expect("copying the certificate into the data directory");
                // PostgreSQL refuses a key others can read.
                fs::set_permissions(&to, fs::Permissions::from_mode(0o600)).expect("chmod 600");
                if let Some((uid, gid)) = owner {
                    chown(&to, Some(uid), Some(gid)).expect("giving the certificate to postgres");
                }
            }
        }
        let port = free_port();
        let mut args: Vec<OsString> = vec!["-D".into(), data.into(), "-p".into(), port.to_string().into()];
        settings.push(format!("unix_socket_directories={}", dir.path().display()));
        for setting in settings {
            args.extend(["-c".into(), setting.into()]);
        }
        let launch = Launch {
            program: postgres,
            args,
            owner,
            log: dir.path().join("postgres.log"),
        };
        let socket_dir = dir.path().to_path_buf();
        let process = launch.spawn(&socket_dir, port);
        let pg = |sql: &str| psql_socket(&socket_dir, port, sql);
        for (user, encryption) in [
            (PG_USER, "scram-sha-256"),
            (PG_CLEARTEXT_USER, "scram-sha-256"),
            (PG_MD5_USER, "md5"),
        ] {
            let created = pg(&format!(
                "SET password_encryption = '{encryption}'; CREATE ROLE {user} LOGIN PASSWORD '{PG_PASSWORD}'"
            ));
            assert!(
                created.status.success(),
                "creating {user}: {}",
                String::from_utf8_lossy(&created.stderr)
            );
        }
        Some(PgServer {
            process,
            launch,
            port,
            socket_dir,
            _dir: dir,
        })
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The path of the server's Unix socket.
    pub fn socket_path(&self) -> String {
        format!("{}/.s.PGSQL.{}", self.socket_dir.display(), self.port)
    }

    /// Kills the server at once, every process of it with SIGKILL, as a
    /// crash or the OOM killer would: no backend says goodbye to its client.
    pub fn kill(&mut self) {
        self.process.stop(libc::SIGKILL);
    }

    /// Starts the killed server again on its port and data directory
    /// (PostgreSQL recovers from its WAL) and waits until it answers.
    pub fn start_again(&mut self) {
        self.process = self.launch.spawn(&self.socket_dir, self.port);
    }

    /// Stops the server (a fast shutdown) and starts it again as a hot
    /// standby with no primary to follow: it serves reads and reports
    /// `in_hot_standby` on until it is promoted (`SELECT pg_promote()`).
    pub fn restart_as_standby(&mut self) {
        self.process.stop(libc::SIGINT);
        let signal = self.socket_dir.join("data").join("standby.signal");
        fs::write(&signal, "").expect("writing standby.signal");
        if let Some((uid, gid)) = self.launch.owner {
            chown(&signal, Some(uid), Some(gid)).expect("giving standby.signal to postgres");
        }
        self.process = self.launch.spawn(&self.socket_dir, self.port);
    }

    /// Runs SQL as `postgres` over the Unix socket, around the proxy.
    pub fn psql(&self, sql: &str) -> Output {
        psql_socket(&self.socket_dir, self.port, sql)
    }
}

fn psql_socket(dir: &Path, port: u16, sql: &str) -> Output {
    Command::new("psql")
        .arg("-h")
        .arg(dir)
        .args([
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-XAtq",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("running psql")
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGQUIT: immediate shutdown; the data directory is thrown away.
        self.process.stop(libc::SIGQUIT);
    }
}

/// A private Redis 7 on 127.0.0.1 and a Unix socket, with no persistence
/// and an ACL user `alice` (password `secret`).
pub struct RedisServer {
    process: Process,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one, or returns `None` (outside CI) when Redis is not installed.
    pub fn start() -> Option<RedisServer> {
        Self::start_on(free_port())
    }

    /// Starts one on `port` (say, where an earlier one was stopped).
    pub fn start_on(port: u16) -> Option<RedisServer> {
        let program = require("redis-server")?;
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let mut command = Command::new(program);
        command.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]);
        command.arg("--dir").arg(dir.path());
        command.arg("--unixsocket").arg(dir.path().join("redis.sock"));
        let log = dir.path().join("redis.log");
        let mut process = Process::spawn(command, "redis-server", &log);
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_until(&mut process, &log, || {
            redis_call(addr, "PING").is_some_and(|r| r == "+PONG")
        });
        let acl = redis_call(addr, "ACL SETUSER alice on >secret ~* &* +@all");
        assert_eq!(acl.as_deref(), Some("+OK"), "creating the ACL user alice");
        Some(RedisServer { process, port, dir })
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The path of its Unix socket.
    pub fn socket_path(&self) -> String {
        self.dir.path().join("redis.sock").display().to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.process.stop(libc::SIGTERM);
    }
}

/// One inline command and its one-line reply, or `None` if the server is
/// not answering yet.
fn redis_call(addr: SocketAddr, command: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).ok()?;
    Some(line.trim_end().to_string())
}
