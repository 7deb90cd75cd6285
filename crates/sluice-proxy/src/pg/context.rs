//! What every PostgreSQL session of one listener shares: the protocol's
//! neutral context ([`Context`], reached through `Deref`), the cancel
//! registry, TLS on either side, the backends of transaction pooling and
//! the limits on logins and on clients idle inside a transaction.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use super::cancel::CancelRegistry;
use super::pool::Pool;
use super::upstream_tls::UpstreamTls;
use crate::relay::Context;

/// The listener's limits on PostgreSQL sessions (see the module's doc).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub login_timeout: Duration,
    /// How long a request waits on its client inside a transaction before
    /// its slot is parked.
    pub idle_release: Duration,
    /// How long it may wait so before the session is ended; `None`: for
    /// ever.
    pub idle_timeout: Option<Duration>,
}

pub(crate) struct PgContext {
    pub common: Context,
    pub cancels: Arc<CancelRegistry>,
    /// TLS for clients that send an SSLRequest, if configured.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// TLS to the server, if configured.
    pub upstream_tls: Option<Arc<UpstreamTls>>,
    /// Under transaction pooling: the idle backends.
    pub pool: Option<Arc<Pool>>,
    pub limits: Limits,
}

impl Deref for PgContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.common
    }
}
