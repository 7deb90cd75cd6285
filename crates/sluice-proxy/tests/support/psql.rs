//! psql through the proxy.

use std::process::{Command, Output};

use super::proxy::ProxyHandle;
use super::run_with_stdin;

/// Runs psql through the proxy with `script` on stdin.
pub fn psql(proxy: &ProxyHandle, user: &str, password: Option<&str>, script: &str) -> Output {
    psql_with(proxy, user, password, "prefer", script)
}

/// Runs psql with an sslmode (disable, prefer, require, ...).
pub fn psql_with(proxy: &ProxyHandle, user: &str, password: Option<&str>, ssl_mode: &str, script: &str) -> Output {
    run_with_stdin(psql_command(proxy, user, password, ssl_mode), script)
}

/// psql through the proxy, to be given more settings before it is run
/// ([`run_with_stdin`]).
pub fn psql_command(proxy: &ProxyHandle, user: &str, password: Option<&str>, ssl_mode: &str) -> Command {
    let mut command = Command::new("psql");
    command.env("PGSSLMODE", ssl_mode);
    command.args([
        "-h",
        "127.0.0.1",
        "-p",
        &proxy.addr.port().to_string(),
        "-U",
        user,
        "-d",
        "postgres",
    ]);
    command.args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-w"]);
    match password {
        Some(p) => command.env("PGPASSWORD", p),
        None => command.env_remove("PGPASSWORD"),
    };
    command
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
