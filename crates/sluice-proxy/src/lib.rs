//! `sluice proxy`: per-tenant admission control and fair scheduling (AppleS)
//! in front of unmodified PostgreSQL and Redis. How a request flows through
//! these files: docs/ARCHITECTURE.md, "The proxy: `sluice proxy`".
//!
//! | file | what | source |
//! |---|---|---|
//! | [`gate`] | admission: per-tenant queues, weighted round robin with quota ζ, P slots (a request waiting on its client parks its slot), refusals, per-tenant wait and latency | AppleS §3.3 |
//! | [`optimizer`] | drives sluice-core's optimizer (P by the three-sample model or gradient, ζ by U_f/V_l feedback, SLO weights) on the gate, with live SLO targets and the decision log | AppleS §4.3, §5.3 |
//! | [`listener`] | the listener: one session per client, graceful drain | – |
//! | `workers` | the threads sessions run on: an event loop each, a session kept on one | – |
//! | [`pg`], [`redis`] | each protocol's framing (PostgreSQL's in `pg::frame`; RESP's is the shared codec, `sluice-resp`), what one request is and its context (`pg::context`, `redis::context`); TLS for PostgreSQL clients (`pg::tls`) and to the server (`pg::upstream_tls`); PostgreSQL backends and opt-in transaction pooling (`pg::pool`), with the prepared statements it keeps for clients (`pg::prepared`) the passwords it opens backends with (`pg::auth_file`, answered by `pg::password`), and the logins it answers itself, their passwords judged by `pg::verifier` (SCRAM-SHA-256 in `pg::scram`) | PostgreSQL's protocol v3; RESP2 and RESP3; PgBouncer's transaction mode |
//! | `relay`, `buffer` | what sessions of both protocols share, knowing no protocol: the neutral context, asking the gate, the two-direction drive loop, the `Backlog`; read buffers | – |
//! | [`race`] | a session's branches raced in one task, each polled only when its own waker fired | – |
//! | `client` | where clients connect (TCP, and a Unix socket file if configured) and who a client is | – |
//! | `socket` | a plain connection: TCP, or a Unix socket (the upstream's when it is a path; clients' on `listen_unix`) | – |
//! | `pg::background` | `[postgres.background]`: PostgreSQL's checkpoint settings steered by sluice-core's checkpoint controller through `ALTER SYSTEM`, recorded and given back | programmable background tasks §V-B, §VI |
//! | [`stats`] | per-tenant session counters (errors, refusals, pass-through) | – |
//! | [`config`], [`settings`] | the listener's settings; the whole TOML file | – |
//! | [`admin`] | Prometheus `/metrics`, JSON `/stats`, live changes | OpenMetrics |
//! | [`service`] | everything started, reloaded and stopped together | – |
//!
//! Departures and limits: a PostgreSQL client has its own upstream
//! connection (TLS or plain as `[proxy.upstream_tls]` says, whatever the
//! client's is) unless transaction pooling is chosen (`pool = "transaction"`: a backend per request, from a
//! pool of the same login's; `pg::pool` says what it measured and what
//! session state it loses); a Redis client shares a
//! few batched upstream connections until its first command that reads or
//! changes session state, and has its own from then on (`redis::shared`; one per client,
//! the design this replaced, cost two reads and two writes per command). Sessions run on worker
//! threads, one event loop each (`workers`), as many as
//! `ProxyConfig::worker_threads` says by protocol and pool mode. P counts requests the
//! database works on: a PostgreSQL session waiting on its client inside a
//! transaction parks its slot after `idle_in_transaction_release_ms` and
//! takes it back, even above P, when the client goes on (see [`gate`] and
//! `pg::session`), so that clients that think inside transactions do not
//! shut others out, and a client driving several connections from one
//! thread with blocking calls (pgbench -M prepared with fewer threads than
//! clients) does not deadlock against its own open transactions at any P.
//! `idle_in_transaction_timeout_ms` ends such sessions (25P03) when set.
//! Before login a PostgreSQL client is bounded: a startup packet of 10,000
//! bytes, other messages of 64 KiB, `login_timeout_ms` to complete the
//! login; `max_client_conn` bounds the clients of a listener in either
//! protocol, refused in their protocol beyond it (`listener`). A Redis
//! session reads its server's replies as they come, whatever its client
//! does, and holds them for the client in a bounded backlog
//! (`relay::Backlog`): a client that stops reading holds no slot, and
//! past the bound only its own new commands wait; a transaction takes its
//! slot at EXEC, not MULTI; where the server asks for AUTH, a client is
//! held to Redis's own bounds until it has authenticated
//! (`redis::UpstreamAuth`). Tenants, once seen, are kept until the proxy
//! restarts, but for tenants named by their connection, forgotten when it
//! closes.

pub mod admin;
mod buffer;
mod client;
pub mod config;
pub mod gate;
pub mod listener;
pub mod optimizer;
pub mod pg;
pub mod race;
pub mod redis;
mod relay;
pub mod service;
pub mod settings;
mod socket;
pub mod stats;
mod workers;

pub use config::{PoolMode, Protocol, ProxyConfig, TenantKey, DEFAULT_MAX_CLIENT_CONN};
pub use listener::{run, Proxy, ProxyError};
pub use stats::{Stats, TenantSnapshot};
