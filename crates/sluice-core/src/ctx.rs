//! Request context: what Sluice knows about the request a unit of work
//! belongs to. It is the `ctx` of the cooperative-scheduling paper's
//! `ctx_begin/ctx_end` and of RCP's enlightenment API (§4.1); for TraQIOS it
//! carries the transaction's arrival time A_i, deadline D_i and estimated I/O
//! length N_i (§2).

use crate::time::Nanos;

/// Request id, assigned in global arrival order (the cooperative paper's
/// request-order stamp).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RequestId(pub u64);

/// A tenant: a user of the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TenantId(pub u32);

/// Whether a user waits for the work (foreground) or nobody does yet
/// (background: flush, compaction, checkpoint).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Class {
    #[default]
    Foreground,
    Background,
}

/// The context of one request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ctx {
    pub id: RequestId,
    pub tenant: TenantId,
    pub class: Class,
    /// When the request arrived (A_i).
    pub arrival: Nanos,
    /// Its deadline or SLA (D_i), if it has one.
    pub deadline: Option<Nanos>,
    /// Estimated number of I/Os (N_i, "as estimated by the query optimizer").
    pub est_ios: u32,
    /// Weight phi of its tenant in fair sharing.
    pub weight: f64,
}

impl Ctx {
    /// A foreground request with no deadline, weight 1 and one estimated I/O.
    pub fn new(id: u64, arrival: Nanos) -> Self {
        Ctx {
            id: RequestId(id),
            tenant: TenantId::default(),
            class: Class::Foreground,
            arrival,
            deadline: None,
            est_ios: 1,
            weight: 1.0,
        }
    }

    pub fn with_deadline(mut self, deadline: Nanos) -> Self {
        self.deadline = Some(deadline);
        self
    }

    pub fn with_est_ios(mut self, n: u32) -> Self {
        self.est_ios = n.max(1);
        self
    }

    pub fn with_tenant(mut self, tenant: u32, weight: f64) -> Self {
        self.tenant = TenantId(tenant);
        self.weight = weight;
        self
    }

    /// The deadline, or "never" for requests without one, so that
    /// deadline-ordered policies put them last.
    pub fn deadline_or_max(&self) -> Nanos {
        self.deadline.unwrap_or(Nanos::MAX)
    }
}
