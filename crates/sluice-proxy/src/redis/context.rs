//! What every Redis session of one listener shares: the neutral context
//! ([`Context`], reached through `Deref`), the upstream connections that
//! clients in the default state share, and whether the server asks clients
//! to authenticate.

use std::ops::Deref;
use std::sync::Arc;

use super::mux::Mux;
use super::UpstreamAuth;
use crate::relay::Context;

pub(crate) struct RedisContext {
    pub common: Context,
    /// Upstream connections shared by clients in the default state.
    pub mux: Option<Mux>,
    pub upstream_auth: Arc<UpstreamAuth>,
}

impl Deref for RedisContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.common
    }
}
