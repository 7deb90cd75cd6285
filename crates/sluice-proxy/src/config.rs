//! The proxy's settings: where to listen, which server to forward to,
//! which protocol it speaks and what names a tenant. The gate's own
//! settings (P, ζ, queue bounds) live in
//! [`crate::gate::GateConfig`]; the caller builds the [`crate::gate::Gate`]
//! and hands it to [`crate::listener::Proxy::bind`].

use std::path::PathBuf;

use serde::Deserialize;
use thiserror::Error;

use crate::socket::Address;

/// The protocol spoken on both sides of the proxy.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// PostgreSQL wire protocol v3.
    #[serde(alias = "postgres", alias = "postgresql")]
    Pg,
    /// Redis RESP2, and RESP3 after HELLO 3.
    Redis,
}

/// What a connection's tenant is named after; each tenant has its own
/// queue and weight at the gate.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TenantKey {
    /// PostgreSQL: the startup message's user. Redis: the AUTH (or HELLO
    /// AUTH) user once the server accepted it; "default" before.
    #[default]
    User,
    /// PostgreSQL only: the database (which defaults to the user).
    Database,
    /// PostgreSQL only: the startup message's application_name.
    ApplicationName,
    /// Redis only: the name set by CLIENT SETNAME (or HELLO SETNAME) once
    /// accepted; "default" before.
    ClientName,
    /// The client's IP address; over the Unix socket `unix:UID`, its OS
    /// user id.
    ClientAddress,
    /// Every connection its own tenant, named by peer address and port (as
    /// AppleS did); over the Unix socket `unix:UID#N`, N the connection's
    /// number.
    Connection,
}

/// PostgreSQL: how long a client keeps a server connection (see `pg::pool`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PoolMode {
    /// The backend a client logged in on, for its whole session: session
    /// semantics untouched.
    #[default]
    Session,
    /// A backend per request, taken from a pool of those with the same
    /// login and returned at ReadyForQuery 'I'. Named prepared statements
    /// carry over (see `pg::prepared`); other session state set outside a
    /// transaction block does not.
    Transaction,
}

/// Settings of one proxy listener.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Address to listen on, such as "127.0.0.1:6432".
    pub listen: String,
    /// A Unix socket file to listen on as well, such as
    /// "/tmp/.s.PGSQL.6432" (what `psql -h /tmp -p 6432` connects to; see
    /// `client`).
    #[serde(default)]
    pub listen_unix: Option<PathBuf>,
    /// The server to forward to, such as "127.0.0.1:5432", or on the same
    /// host the path of its Unix socket, such as
    /// "/var/run/postgresql/.s.PGSQL.5432" (see `socket`).
    pub upstream: String,
    pub protocol: Protocol,
    #[serde(default)]
    pub tenant_key: TenantKey,
    /// How long a graceful shutdown waits for requests in flight before it
    /// closes the connections that still have one.
    #[serde(default = "default_drain_timeout_secs")]
    pub drain_timeout_secs: u64,
    /// Redis: upstream connections, per worker thread, shared by the
    /// worker's clients whose session is still in its default state (see
    /// `redis::shared`); 0 gives every client its own from the start.
    #[serde(default = "default_shared_upstreams")]
    pub shared_upstreams: usize,
    /// Worker threads, each an event loop keeping the sessions it is given
    /// (see `workers`); 0 chooses by protocol and pool mode (see
    /// [`ProxyConfig::worker_threads`]).
    #[serde(default)]
    pub threads: usize,
    /// PostgreSQL: TLS for clients that ask for it (`[proxy.tls]`).
    #[serde(default)]
    pub tls: Option<crate::pg::tls::TlsConfig>,
    /// PostgreSQL: TLS to the server (`[proxy.upstream_tls]`); plain
    /// without it.
    #[serde(default)]
    pub upstream_tls: Option<crate::pg::upstream_tls::UpstreamTlsConfig>,
    /// PostgreSQL: session (default) or transaction pooling.
    #[serde(default)]
    pub pool: PoolMode,
    /// PostgreSQL transaction pooling: a pooled backend idle longer than
    /// this is closed (besides those beyond P, see `pg::pool`), and the
    /// server's answers to a login it let in are given to later logins for
    /// at most this long (see `pg::pool::Pool::welcome`).
    #[serde(default = "default_server_idle_timeout_secs")]
    pub server_idle_timeout_secs: u64,
    /// PostgreSQL transaction pooling: named prepared statements one
    /// backend keeps for clients (see `pg::prepared`); at least 1.
    #[serde(default = "default_max_prepared_statements")]
    pub max_prepared_statements: usize,
    /// PostgreSQL transaction pooling: passwords or their hashes, in
    /// PgBouncer's `"user" "secret"` format, for opening server connections where
    /// the server asks one (see `pg::auth_file`), and for judging the
    /// passwords of logins answered from the pool (see `pg::verifier`).
    #[serde(default)]
    pub auth_file: Option<PathBuf>,
    /// Client connections the listener keeps at once; one more is refused
    /// (PostgreSQL: FATAL 53300 "sorry, too many clients already"; Redis:
    /// "-ERR max number of clients reached") and closed. 0: no limit.
    /// Unset: [`DEFAULT_MAX_CLIENT_CONN`], or as many as the open-file
    /// limit fits where that is fewer (see [`ProxyConfig::max_client_conn`]).
    #[serde(default)]
    pub max_client_conn: Option<usize>,
    /// The largest message (PostgreSQL) or bulk string (Redis) a client may
    /// send once logged in: the proxy holds a message whole before it goes
    /// on, so this bounds what one client can make it hold. Larger is a
    /// protocol error naming the bound, and the client is closed. 0: the
    /// server's own bound (PostgreSQL's 1 GiB, Redis's 512 MiB).
    #[serde(default)]
    pub max_message_bytes: usize,
    /// PostgreSQL: how long a client has to complete its login (startup
    /// packets, TLS handshake, authentication), as PostgreSQL's
    /// authentication_timeout; at least 1.
    #[serde(default = "default_login_timeout_ms")]
    pub login_timeout_ms: u64,
    /// PostgreSQL: how long a request waits on its client inside a
    /// transaction before its slot stops counting toward P (see
    /// `pg::session`); 0 parks it at once.
    #[serde(default = "default_idle_in_transaction_release_ms")]
    pub idle_in_transaction_release_ms: u64,
    /// PostgreSQL: a session that waits on its client inside a transaction
    /// this long is ended with FATAL 25P03, as PostgreSQL's
    /// idle_in_transaction_session_timeout; 0 (the default): never.
    #[serde(default)]
    pub idle_in_transaction_timeout_ms: u64,
}

/// Far more clients than a database serves at once, while a flood of
/// connections is still refused before it runs the proxy out of file
/// descriptors or memory (an idle PostgreSQL client costs about 10 KiB).
pub const DEFAULT_MAX_CLIENT_CONN: usize = 10_000;

/// PostgreSQL's default authentication_timeout, one minute.
fn default_login_timeout_ms() -> u64 {
    60_000
}

/// See `pg::session` for why 10 ms.
fn default_idle_in_transaction_release_ms() -> u64 {
    10
}

/// PgBouncer's default for its `max_prepared_statements`.
fn default_max_prepared_statements() -> usize {
    200
}

fn default_server_idle_timeout_secs() -> u64 {
    30
}

fn default_shared_upstreams() -> usize {
    2
}

fn default_drain_timeout_secs() -> u64 {
    30
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("tenant_key `{key:?}` does not apply to protocol `{protocol:?}` (PostgreSQL: user, database, application_name, client_address, connection; Redis: user, client_name, client_address, connection)")]
    KeyNotForProtocol { key: TenantKey, protocol: Protocol },
    #[error("{field} is empty: it needs a host:port address (or, for the upstream, a Unix socket's path)")]
    EmptyAddress { field: &'static str },
    #[error("{field} applies to protocol `Pg` only, not `{protocol:?}`")]
    PgOnly { field: &'static str, protocol: Protocol },
    #[error("listen_unix is empty: give the socket file's path, such as \"/tmp/.s.PGSQL.6432\", or leave it out")]
    EmptyUnixPath,
    #[error("max_prepared_statements must be at least 1")]
    NoPreparedStatements,
    #[error("upstream_tls needs a host:port upstream: PostgreSQL does not speak TLS on its Unix socket `{0}`")]
    TlsOverUnixSocket(String),
    #[error("auth_file is read only by transaction pooling: set pool = \"transaction\" or remove it (a client of session pooling logs in on its own server connection)")]
    AuthFileWithoutPool,
    #[error("login_timeout_ms must be at least 1 (PostgreSQL's authentication_timeout is 60000 ms)")]
    NoLoginTime,
    #[error("idle_in_transaction_release_ms ({release}) must be below idle_in_transaction_timeout_ms ({timeout}), or the session ends before its slot is ever released")]
    ReleaseAfterIdleTimeout { release: u64, timeout: u64 },
}

impl ProxyConfig {
    /// A configuration with the default tenant key and drain timeout.
    pub fn new(listen: impl Into<String>, upstream: impl Into<String>, protocol: Protocol) -> Self {
        ProxyConfig {
            listen: listen.into(),
            listen_unix: None,
            upstream: upstream.into(),
            protocol,
            tenant_key: TenantKey::default(),
            drain_timeout_secs: default_drain_timeout_secs(),
            shared_upstreams: default_shared_upstreams(),
            threads: 0,
            tls: None,
            upstream_tls: None,
            pool: PoolMode::Session,
            server_idle_timeout_secs: default_server_idle_timeout_secs(),
            max_prepared_statements: default_max_prepared_statements(),
            auth_file: None,
            max_client_conn: None,
            max_message_bytes: 0,
            login_timeout_ms: default_login_timeout_ms(),
            idle_in_transaction_release_ms: default_idle_in_transaction_release_ms(),
            idle_in_transaction_timeout_ms: 0,
        }
    }

    /// The clients the listener keeps at once: as configured, else
    /// [`DEFAULT_MAX_CLIENT_CONN`] (the binary lowers an unset bound to what
    /// the open-file limit fits before it starts the proxy).
    pub fn max_client_conn(&self) -> usize {
        self.max_client_conn.unwrap_or(DEFAULT_MAX_CLIENT_CONN)
    }

    /// The worker threads: as configured, else one for Redis and for
    /// PostgreSQL under transaction pooling, and one per core for
    /// PostgreSQL with a backend per client. Measured on 2 cores shared
    /// with the database and its clients: redis-benchmark (50 clients) ran
    /// at 0.79–0.93× direct with one thread and 0.60–0.69× with two, the
    /// second costing more in context switches than it gave (with an event
    /// loop per worker and lanes per worker, two still ran at 0.83–0.99×
    /// one). Under transaction pooling (pgbench, 8 to 512 users) one thread
    /// ran level with two (0.99× paired by round, 0.82–1.18) on 10–11%
    /// less CPU per transaction and a third fewer context switches, about
    /// as many as PgBouncer's: the answers of P pooled backends keep one
    /// event loop busy. With a backend per client one thread's rounds were
    /// less even (0.98×, 0.82–1.07; 0.90× in an earlier run): a lone
    /// thread, descheduled among PostgreSQL's hundreds of backends, stalls
    /// every session. docs/BENCHMARKS.md, "One event loop under
    /// transaction pooling (run TH1)".
    pub fn worker_threads(&self) -> usize {
        match (self.threads, self.protocol, self.pool) {
            (0, Protocol::Redis, _) | (0, Protocol::Pg, PoolMode::Transaction) => 1,
            (0, Protocol::Pg, PoolMode::Session) => std::thread::available_parallelism().map_or(1, |n| n.get()),
            (n, _, _) => n,
        }
    }

    /// Checks what serde cannot: that the tenant key fits the protocol and
    /// that the addresses are given.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [("listen", &self.listen), ("upstream", &self.upstream)] {
            if value.trim().is_empty() {
                return Err(ConfigError::EmptyAddress { field });
            }
        }
        if self.listen_unix.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(ConfigError::EmptyUnixPath);
        }
        for (field, set) in [
            ("tls", self.tls.is_some()),
            ("upstream_tls", self.upstream_tls.is_some()),
            ("pool = \"transaction\"", self.pool == PoolMode::Transaction),
            ("auth_file", self.auth_file.is_some()),
        ] {
            if set && self.protocol != Protocol::Pg {
                return Err(ConfigError::PgOnly {
                    field,
                    protocol: self.protocol,
                });
            }
        }
        if let (Address::Unix(_), Some(_)) = (Address::parse(&self.upstream), &self.upstream_tls) {
            return Err(ConfigError::TlsOverUnixSocket(self.upstream.clone()));
        }
        if self.max_prepared_statements == 0 {
            return Err(ConfigError::NoPreparedStatements);
        }
        if self.auth_file.is_some() && self.pool != PoolMode::Transaction {
            return Err(ConfigError::AuthFileWithoutPool);
        }
        if self.login_timeout_ms == 0 {
            return Err(ConfigError::NoLoginTime);
        }
        let (release, timeout) = (self.idle_in_transaction_release_ms, self.idle_in_transaction_timeout_ms);
        if timeout != 0 && release >= timeout {
            return Err(ConfigError::ReleaseAfterIdleTimeout { release, timeout });
        }
        let fits = match self.tenant_key {
            TenantKey::Database | TenantKey::ApplicationName => self.protocol == Protocol::Pg,
            TenantKey::ClientName => self.protocol == Protocol::Redis,
            TenantKey::User | TenantKey::ClientAddress | TenantKey::Connection => true,
        };
        if fits {
            Ok(())
        } else {
            Err(ConfigError::KeyNotForProtocol {
                key: self.tenant_key,
                protocol: self.protocol,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_from_toml_with_defaults() {
        let config: ProxyConfig =
            toml::from_str("listen = '127.0.0.1:6432'\nupstream = '127.0.0.1:5432'\nprotocol = 'postgres'\n").unwrap();
        assert_eq!(
            config,
            ProxyConfig::new("127.0.0.1:6432", "127.0.0.1:5432", Protocol::Pg)
        );
        let redis: ProxyConfig =
            toml::from_str("listen = ':1'\nupstream = ':2'\nprotocol = 'redis'\ntenant_key = 'client_name'\n").unwrap();
        assert_eq!(redis.tenant_key, TenantKey::ClientName);
        assert!(
            toml::from_str::<ProxyConfig>("listen = ':1'\nupstream = ':2'\nprotocol = 'redis'\nport = 3\n").is_err()
        );
        let tls: ProxyConfig = toml::from_str(
            "listen = ':1'\nupstream = 'db:5432'\nprotocol = 'pg'\n[upstream_tls]\nmode = 'verify-full'\nca = 'ca.pem'\n",
        )
        .unwrap();
        let upstream_tls = tls.upstream_tls.expect("the [upstream_tls] table");
        assert_eq!(upstream_tls.mode, crate::pg::upstream_tls::SslMode::VerifyFull);
        assert_eq!(upstream_tls.ca, Some("ca.pem".into()));
        let mut unix: ProxyConfig =
            toml::from_str("listen = ':1'\nlisten_unix = '/tmp/.s.PGSQL.1'\nupstream = ':2'\nprotocol = 'pg'\n")
                .unwrap();
        assert_eq!(unix.listen_unix, Some("/tmp/.s.PGSQL.1".into()));
        unix.listen_unix = Some("".into());
        assert_eq!(unix.validate(), Err(ConfigError::EmptyUnixPath));
    }

    #[test]
    fn worker_threads_default_by_protocol_and_pool_mode() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut config = ProxyConfig::new("127.0.0.1:6432", "127.0.0.1:5432", Protocol::Pg);
        assert_eq!(config.worker_threads(), cores, "a backend per client: one per core");
        config.pool = PoolMode::Transaction;
        assert_eq!(config.worker_threads(), 1, "transaction pooling: one event loop");
        config.threads = 3;
        assert_eq!(config.worker_threads(), 3, "a configured count wins");
        let redis = ProxyConfig::new("127.0.0.1:6379", "127.0.0.1:6380", Protocol::Redis);
        assert_eq!(redis.worker_threads(), 1);
    }

    #[test]
    fn rejects_a_tenant_key_of_the_other_protocol() {
        let mut config = ProxyConfig::new("127.0.0.1:6379", "127.0.0.1:6380", Protocol::Redis);
        config.tenant_key = TenantKey::Database;
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("does not apply to protocol `Redis`"), "{err}");
        config.tenant_key = TenantKey::ClientName;
        assert_eq!(config.validate(), Ok(()));
        config.tls = Some(crate::pg::tls::TlsConfig {
            cert: "c.pem".into(),
            key: "k.pem".into(),
        });
        assert_eq!(
            config.validate(),
            Err(ConfigError::PgOnly {
                field: "tls",
                protocol: Protocol::Redis
            })
        );
        config.tls = None;
        config.upstream_tls = Some(crate::pg::upstream_tls::UpstreamTlsConfig {
            mode: crate::pg::upstream_tls::SslMode::Require,
            ..Default::default()
        });
        let err = config.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "upstream_tls applies to protocol `Pg` only, not `Redis`"
        );
        config.upstream_tls = None;
        config.pool = PoolMode::Transaction;
        let err = config.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "pool = \"transaction\" applies to protocol `Pg` only, not `Redis`"
        );
        config.pool = PoolMode::Session;
        config.max_prepared_statements = 0;
        assert_eq!(config.validate(), Err(ConfigError::NoPreparedStatements));
        config.max_prepared_statements = 1;
        config.auth_file = Some("users.txt".into());
        assert_eq!(
            config.validate(),
            Err(ConfigError::PgOnly {
                field: "auth_file",
                protocol: Protocol::Redis
            })
        );
        config.protocol = Protocol::Pg;
        config.tenant_key = TenantKey::User;
        assert_eq!(config.validate(), Err(ConfigError::AuthFileWithoutPool));
        config.pool = PoolMode::Transaction;
        assert_eq!(config.validate(), Ok(()));
        config.login_timeout_ms = 0;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.starts_with("login_timeout_ms must be at least 1"), "{err}");
        config.login_timeout_ms = 1;
        config.idle_in_transaction_timeout_ms = 10;
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.starts_with("idle_in_transaction_release_ms (10) must be below idle_in_transaction_timeout_ms (10)"),
            "{err}"
        );
        config.idle_in_transaction_release_ms = 0;
        assert_eq!(config.validate(), Ok(()));
        config.upstream = " ".into();
        assert_eq!(config.validate(), Err(ConfigError::EmptyAddress { field: "upstream" }));
    }

    #[test]
    fn a_unix_socket_upstream_is_taken_without_tls() {
        let socket = "/run/postgresql/.s.PGSQL.5432";
        let mut config = ProxyConfig::new("127.0.0.1:6432", socket, Protocol::Pg);
        assert_eq!(config.validate(), Ok(()));
        config.upstream_tls = Some(crate::pg::upstream_tls::UpstreamTlsConfig::default());
        let err = config.validate().unwrap_err().to_string();
        assert!(err.starts_with("upstream_tls needs a host:port upstream"), "{err}");
        let redis = ProxyConfig::new("127.0.0.1:6379", "/run/redis.sock", Protocol::Redis);
        assert_eq!(redis.validate(), Ok(()));
    }
}
