//! The configuration file of `sluice proxy`: one TOML file
//! with a section per part — `[proxy]` (listener, upstream, protocol, tenant
//! key), `[admin]` (the HTTP port and who may use it), `[gate]` (P, ζ, queues, weights) and
//! `[optimizer]` (how P, ζ and SLO weights are tuned) and `[postgres.background]`
//! (PostgreSQL's checkpoints and autovacuum steered, off unless present). `docs/proxy.example.toml`
//! documents every field. Errors name the file and the field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::ProxyConfig;
use crate::gate::GateConfig;
use crate::optimizer::OptimizerConfig;
use crate::pg::background::PostgresConfig;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub proxy: ProxyConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub gate: GateConfig,
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    #[serde(default)]
    pub postgres: PostgresConfig,
}

#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where the admin HTTP port listens; localhost unless told otherwise.
    /// Empty: no admin port.
    pub listen: String,
    /// The bearer token every request must carry, written in the file.
    pub token: Option<String>,
    /// A file holding the token (surrounding whitespace ignored), read at
    /// start: the settings file can then be shared without the secret.
    pub token_file: Option<PathBuf>,
    /// Host names and addresses clients reach the port by, besides loopback
    /// and the host of `listen`; "*" accepts any.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) whose browser pages may call the
    /// port; a request from any other page is refused.
    pub allowed_origins: Vec<String>,
    /// Tenants the admin port may bring into being (a weight or an SLO for
    /// a name the proxy has not seen), so that the gate, `/stats` and
    /// `/metrics` stay bounded.
    pub max_tenants: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:9187".into(),
            token: None,
            token_file: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_tenants: 1000,
        }
    }
}

/// Written by hand so that the token never reaches a log.
impl std::fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("token_file", &self.token_file)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_tenants", &self.max_tenants)
            .finish()
    }
}

impl AdminConfig {
    /// Rejects settings that would leave the port open or unusable, naming
    /// the field. The token file is read later, when the port starts.
    pub fn validate(&self) -> Result<(), String> {
        if self.listen.trim().is_empty() {
            return Ok(());
        }
        match (&self.token, &self.token_file) {
            (Some(_), Some(_)) => return Err("admin.token and admin.token_file: set one, not both".into()),
            (Some(token), None) => check_token(token).map_err(|e| format!("admin.token {e}"))?,
            (None, None) if !is_loopback(&self.listen) => {
                return Err(format!(
                    "admin.listen = {:?} is not a loopback address: set admin.token_file (or admin.token) \
                     so that the admin port requires a bearer token",
                    self.listen
                ))
            }
            _ => {}
        }
        for origin in &self.allowed_origins {
            if !(origin.starts_with("http://") || origin.starts_with("https://")) {
                return Err(format!(
                    "admin.allowed_origins: {origin:?} is not an origin (scheme://host[:port])"
                ));
            }
        }
        Ok(())
    }
}

/// Shortest token accepted: a shorter one is more likely a placeholder
/// ("changeme") than a secret.
const MIN_TOKEN_LEN: usize = 16;

/// Checks a bearer token; the error completes a sentence naming its source.
pub fn check_token(token: &str) -> Result<(), String> {
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces (it is sent in a header)".into());
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "must be at least {MIN_TOKEN_LEN} characters (e.g. `openssl rand -hex 32`), got {}",
            token.len()
        ));
    }
    Ok(())
}

/// Whether `listen` (host:port) is reachable only from this machine.
pub fn is_loopback(listen: &str) -> bool {
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return addr.ip().is_loopback();
    }
    let host = listen.rsplit_once(':').map_or(listen, |(host, _)| host);
    host.eq_ignore_ascii_case("localhost")
}

impl Settings {
    /// Parses and checks settings from TOML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let settings: Settings = toml::from_str(text).map_err(|e| e.to_string())?;
        settings.proxy.validate().map_err(|e| format!("[proxy]: {e}"))?;
        settings.admin.validate()?;
        settings.gate.validate()?;
        settings.optimizer.validate()?;
        if let Some(background) = &settings.postgres.background {
            background.validate()?;
        }
        Ok(settings)
    }

    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimizer::ParallelismMode;

    const MINIMAL: &str = "[proxy]\nlisten = '127.0.0.1:6432'\nupstream = '127.0.0.1:5432'\nprotocol = 'pg'\n";

    #[test]
    fn a_minimal_file_gets_the_defaults() {
        let s = Settings::parse(MINIMAL).unwrap();
        assert_eq!(s.admin.listen, "127.0.0.1:9187");
        assert_eq!(s.gate.parallelism, 16);
        assert_eq!(s.optimizer.parallelism, ParallelismMode::Model);
    }

    #[test]
    fn the_example_file_parses() {
        let example = include_str!("../../../docs/proxy.example.toml");
        let s = Settings::parse(example).unwrap();
        assert_eq!(s.gate.weights.get("analytics"), Some(&0.5));
        assert_eq!(s.optimizer.slo.len(), 1);
        assert!(s.postgres.background.is_none(), "steering PostgreSQL is opt-in");
        // The commented-out section parses as written, uncommented.
        let section = example
            .split_once("# [postgres.background]")
            .unwrap()
            .1
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let s = Settings::parse(&format!("{MINIMAL}[postgres.background]\n{section}")).unwrap();
        let background = s.postgres.background.unwrap();
        assert_eq!(background.checkpoint.max_recovery_wal_mib, 1024);
        assert_eq!(background.vacuum.unwrap().busy_cost_limit, 200);
    }

    #[test]
    fn errors_name_the_field() {
        let err = |extra: &str| Settings::parse(&format!("{MINIMAL}{extra}")).unwrap_err();
        assert!(err("[gate]\nparallelism = 0\n").contains("gate.parallelism"));
        assert!(err("[gate]\nparalelism = 4\n").contains("paralelism"));
        assert!(err("[gate.weights]\nbob = -1\n").contains("gate.weights.bob"));
        assert!(err("[optimizer]\nparallelism = 'magic'\n").contains("magic"));
        assert!(err("[[optimizer.slo]]\ntenant = 'a'\npercentile = 100\ntarget_ms = 5\n").contains("percentile"));
        let token = "token = '0123456789abcdef'";
        assert!(err(&format!("[admin]\n{token}\ntoken_file = '/t'\n")).contains("admin.token_file"));
        assert!(err("[admin]\ntoken = 'has a space in it, long'\n").contains("admin.token"));
        assert!(err("[admin]\nallowed_origins = ['evil.example.com']\n").contains("admin.allowed_origins"));
        assert!(err("[admin]\nlisten = 'sluice.internal:9187'\n").contains("admin.token"));
        assert!(!format!(
            "{:?}",
            Settings::parse(&format!("{MINIMAL}[admin]\n{token}\n")).unwrap()
        )
        .contains("0123"));
        assert!(
            Settings::parse("[proxy]\nlisten = ''\nupstream = 'x:1'\nprotocol = 'redis'\n")
                .unwrap_err()
                .contains("listen")
        );
    }
}
