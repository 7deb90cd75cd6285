//! Room in the open-file limit for a server's clients. A server out of
//! descriptors refuses nobody clearly: new clients wait in the listen
//! backlog until they give up, and the connections the server opens to
//! its shards or its database fail. So at start, as redis-server does,
//! each server raises its soft limit toward what its clients need (up to
//! the hard limit), and where it cannot reach that, says how many fit:
//! the router and `sluice serve` then take that many (they refuse the next
//! in RESP) and the proxy warns. A bound the user left unset is a default,
//! not a request: the proxy lowers it to what fits without a warning.

/// Descriptors a server keeps besides its clients' and its upstream
/// connections: listeners, the admin port, files, the runtime's own
/// (redis-server reserves 32 too).
const OWN: u64 = 32;

/// What `clients` clients need of the open-file limit, each taking
/// `per_client` descriptors beside `upstream` ones.
pub struct Need<'a> {
    /// The setting that says how many clients, named in the warning.
    pub setting: &'a str,
    pub clients: usize,
    /// Whether the user set `clients`; a default that does not fit is
    /// lowered without a warning.
    pub asked: bool,
    pub per_client: u64,
    pub upstream: u64,
}

impl Need<'_> {
    /// Raises the soft limit as far as it goes toward the need; the clients
    /// that fit, with a warning on stderr if fewer than the user `asked`
    /// for. `clients` 0 (no limit) and a limit that cannot be read are left
    /// as they are.
    pub fn fit(&self) -> usize {
        let Need {
            setting,
            clients,
            asked,
            per_client,
            upstream,
        } = *self;
        let wanted = clients as u64 * per_client + upstream + OWN;
        let limit = match rlimit::increase_nofile_limit(wanted) {
            Ok(limit) => limit,
            Err(e) => {
                eprintln!("warning: cannot raise the open-file limit ({e})");
                return clients;
            }
        };
        let fit = fits(limit, per_client, upstream);
        if clients == 0 || fit >= clients {
            return clients;
        }
        if !asked {
            return fit;
        }
        let upstream = match upstream {
            0 => String::new(),
            n => format!(", {n} for upstream connections"),
        };
        let descriptors = if per_client == 1 { "descriptor" } else { "descriptors" };
        eprintln!(
            "warning: {setting} {clients} does not fit in the open-file limit of {limit} (ulimit -n): \
             {fit} clients do, at {per_client} {descriptors} a client{upstream} and {OWN} for the server's own; \
             raise the limit or lower {setting}"
        );
        fit
    }
}

/// Clients that fit in `limit` descriptors beside `upstream` and our own
/// (at least 1, so that a server with too low a limit still serves one).
fn fits(limit: u64, per_client: u64, upstream: u64) -> usize {
    (limit.saturating_sub(upstream + OWN) / per_client.max(1)).max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_fit_beside_the_upstream_connections_and_our_own() {
        assert_eq!(fits(1024, 1, 64), 928);
        assert_eq!(fits(1024, 2, 0), 496);
        assert_eq!(fits(64, 1, 64), 1, "one at least");
    }
}
