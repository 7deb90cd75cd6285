//! The request context a client sends with a command: the `SLUICE.WITH`
//! protocol extension.
//!
//! ```text
//! SLUICE.WITH <request id | -> <budget ms | -> <tenant | -> [IOS <n>] <command> [args...]
//! ```
//!
//! A front end that splits one request over several shards (the cooperative
//! scheduling of Jo et al., §4.1) stamps the request with an id from one
//! global sequence, in arrival order, and sends it with every sub-request;
//! each shard runs the command with that id in its request context, so that
//! every I/O the command issues carries the global arrival order down to
//! the I/O queues (the `coop` policy serves them in that order). The
//! budget is the time left for the request, in milliseconds (a decimal);
//! the shard sets its deadline to its own arrival time plus the budget, so
//! shards need no clock agreement. The tenant names whose work it is. `-`
//! leaves a field out: the receiver's own id (a client that sends its
//! budget to `sluice route`, which stamps ids itself), no deadline, or the
//! connection's own tenant.
//!
//! `IOS n` says how many I/Os the request has left, this command's
//! included. A request may span several commands (TraQIOS's transaction:
//! reads with think time between them): its client sends each with the
//! same id, its budget left and its I/Os left, and the receiver counts
//! them as one request in its deadline policies (it arrives with the first
//! and finishes with the one that leaves no I/O), with an exact N rather
//! than one estimated from the command's kind.
//!
//! Each wrapped command gets exactly its own reply, and the wrapper leaves
//! no state on the connection, so pipelined and pooled connections stay
//! correct. A command without the wrapper runs with an id of the server's
//! own sequence, as before.
//!
//! ```
//! use sluice_resp::request_context::unwrap;
//!
//! let args: Vec<Vec<u8>> = ["SLUICE.WITH", "42", "2.5", "alice", "GET", "k"]
//!     .iter()
//!     .map(|a| a.as_bytes().to_vec())
//!     .collect();
//! let sent = unwrap(&args).unwrap().expect("a wrapped command");
//! assert_eq!((sent.id, sent.budget), (Some(42), Some(2_500_000)));
//! assert_eq!(sent.tenant, Some(&b"alice"[..]));
//! assert_eq!(sent.command, &args[4..]);
//! ```

/// The wrapper's command name (matched without regard to case, as Redis
/// matches command names).
pub const WRAPPER: &str = "SLUICE.WITH";

/// Most I/Os a request may say it has left.
pub const MAX_IOS: u32 = 1_000_000;

/// Longest tenant name the wrapper accepts.
pub const MAX_TENANT_LEN: usize = 64;

/// Longest budget accepted: a day, far beyond any request's patience, so
/// that a budget in the wrong unit is refused rather than kept.
const MAX_BUDGET_MS: f64 = 86_400_000.0;

/// A command with the context sent before it, its arguments owned
/// (`Vec<u8>`, a server's) or borrowed from the read buffer (`&[u8]`, a
/// relay's).
#[derive(Debug, PartialEq)]
pub struct Sent<'a, A = Vec<u8>> {
    /// The request id, in the sender's global arrival order; `None`: the
    /// receiver's own.
    pub id: Option<u64>,
    /// Time left for the request, in nanoseconds; `None`: no deadline.
    pub budget: Option<u64>,
    /// Whose work it is; `None`: the connection's tenant.
    pub tenant: Option<&'a [u8]>,
    /// The request's I/Os left, this command's included (`IOS n`); `None`:
    /// the request is this command alone.
    pub ios: Option<u32>,
    /// The command to run, its name first.
    pub command: &'a [A],
}

/// Splits a wrapped command into its context and the command; `Ok(None)`
/// for a command without the wrapper. Errors name the field that is wrong,
/// in the words of a Redis error reply (without the `ERR ` prefix).
pub fn unwrap<A: AsRef<[u8]>>(args: &[A]) -> Result<Option<Sent<'_, A>>, String> {
    let Some(name) = args.first() else {
        return Ok(None);
    };
    if !name.as_ref().eq_ignore_ascii_case(WRAPPER.as_bytes()) {
        return Ok(None);
    }
    let [_, id, budget, tenant, rest @ ..] = args else {
        return Err(format!(
            "wrong number of arguments for '{}' command (SLUICE.WITH <request id | -> <budget ms | -> <tenant | -> [IOS <n>] <command> [args...])",
            WRAPPER.to_ascii_lowercase()
        ));
    };
    let (ios, command) = match rest {
        [keyword, n, command @ ..] if keyword.as_ref().eq_ignore_ascii_case(b"IOS") => {
            (Some(parse_ios(n.as_ref())?), command)
        }
        _ => (None, rest),
    };
    if command.is_empty() {
        return Err(format!(
            "wrong number of arguments for '{}' command: no command after the request context",
            WRAPPER.to_ascii_lowercase()
        ));
    }
    if command[0].as_ref().eq_ignore_ascii_case(WRAPPER.as_bytes()) {
        return Err("SLUICE.WITH: a command may carry one request context, not a nested one".into());
    }
    Ok(Some(Sent {
        id: parse_id(id.as_ref())?,
        budget: parse_budget(budget.as_ref())?,
        tenant: parse_tenant(tenant.as_ref())?,
        ios,
        command,
    }))
}

fn parse_ios(field: &[u8]) -> Result<u32, String> {
    std::str::from_utf8(field)
        .ok()
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|n| (1..=MAX_IOS).contains(n))
        .ok_or_else(|| {
            format!(
                "SLUICE.WITH: IOS takes the request's I/Os left, 1 to {MAX_IOS}, got '{}'",
                shown(field)
            )
        })
}

fn parse_id(field: &[u8]) -> Result<Option<u64>, String> {
    if field == b"-" {
        return Ok(None);
    }
    std::str::from_utf8(field)
        .ok()
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "SLUICE.WITH: the request id must be '-' or an unsigned 64-bit integer, got '{}'",
                shown(field)
            )
        })
}

fn parse_budget(field: &[u8]) -> Result<Option<u64>, String> {
    if field == b"-" {
        return Ok(None);
    }
    let ms = std::str::from_utf8(field)
        .ok()
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|ms| (0.0..=MAX_BUDGET_MS).contains(ms));
    match ms {
        Some(ms) => Ok(Some((ms * 1e6).round() as u64)),
        None => Err(format!(
            "SLUICE.WITH: the budget must be '-' or milliseconds from 0 to {MAX_BUDGET_MS} (a decimal), got '{}'",
            shown(field)
        )),
    }
}

fn parse_tenant(field: &[u8]) -> Result<Option<&[u8]>, String> {
    if field == b"-" {
        return Ok(None);
    }
    if field.is_empty() || field.len() > MAX_TENANT_LEN || field.iter().any(|b| !b.is_ascii_graphic()) {
        return Err(format!(
            "SLUICE.WITH: the tenant must be '-' or 1 to {MAX_TENANT_LEN} printable ASCII characters, got '{}'",
            shown(field)
        ));
    }
    Ok(Some(field))
}

/// `command` wrapped in a request context: request `id`, `budget_ms` left
/// (`None`: no deadline) and `tenant` (`None`: the receiver's own), ready
/// for [`encode_command`](crate::encode_command).
///
/// ```
/// use sluice_resp::request_context::{unwrap, wrap};
///
/// let command: Vec<&[u8]> = vec![b"GET", b"k"];
/// let (id, budget) = (42.to_string(), "2.500".to_string());
/// let wire: Vec<Vec<u8>> = wrap(&id, Some(&budget), Some(b"alice"), &command).iter().map(|a| a.to_vec()).collect();
/// let sent = unwrap(&wire).unwrap().unwrap();
/// assert_eq!((sent.id, sent.budget, sent.tenant), (Some(42), Some(2_500_000), Some(&b"alice"[..])));
/// ```
pub fn wrap<'a>(
    id: &'a str,
    budget_ms: Option<&'a str>,
    tenant: Option<&'a [u8]>,
    command: &[&'a [u8]],
) -> Vec<&'a [u8]> {
    let mut wrapped: Vec<&[u8]> = vec![
        WRAPPER.as_bytes(),
        id.as_bytes(),
        budget_ms.map_or(b"-", str::as_bytes),
        tenant.unwrap_or(b"-"),
    ];
    wrapped.extend_from_slice(command);
    wrapped
}

/// A field as an error may quote it: printable, and not too long.
fn shown(field: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(&field[..field.len().min(32)])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if field.len() > 32 {
        format!("{text}...")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_command_without_the_wrapper_is_left_alone() {
        assert_eq!(unwrap(&args(&["GET", "k"])), Ok(None));
        assert_eq!(unwrap::<Vec<u8>>(&[]), Ok(None));
    }

    #[test]
    fn dashes_leave_the_budget_and_the_tenant_out() {
        let a = args(&["sluice.with", "7", "-", "-", "SET", "k", "v"]);
        let sent = unwrap(&a).unwrap().unwrap();
        assert_eq!((sent.id, sent.budget, sent.tenant), (Some(7), None, None));
        assert_eq!(sent.command, &a[4..]);
        let own_id = args(&["SLUICE.WITH", "-", "5", "-", "GET", "k"]);
        assert_eq!(unwrap(&own_id).unwrap().unwrap().id, None, "the receiver's own id");
    }

    #[test]
    fn a_request_of_several_commands_says_how_many_ios_it_has_left() {
        let a = args(&["SLUICE.WITH", "9", "12.5", "-", "ios", "3", "GET", "k"]);
        let sent = unwrap(&a).unwrap().unwrap();
        assert_eq!((sent.id, sent.ios, sent.command), (Some(9), Some(3), &a[6..]));
        let bare = args(&["SLUICE.WITH", "9", "-", "-", "GET", "ios"]);
        assert_eq!(unwrap(&bare).unwrap().unwrap().ios, None, "a key named ios is a key");
    }

    #[test]
    fn a_zero_budget_is_a_deadline_at_arrival() {
        let sent_args = args(&["SLUICE.WITH", "1", "0", "-", "GET", "k"]);
        assert_eq!(unwrap(&sent_args).unwrap().unwrap().budget, Some(0));
    }

    #[test]
    fn each_malformed_field_is_named() {
        let cases = [
            (vec!["SLUICE.WITH", "1", "-", "-"], "wrong number of arguments"),
            (vec!["SLUICE.WITH", "1", "-"], "wrong number of arguments"),
            (vec!["SLUICE.WITH", "-1", "-", "-", "GET", "k"], "request id"),
            (vec!["SLUICE.WITH", "1x", "-", "-", "GET", "k"], "request id"),
            (
                vec!["SLUICE.WITH", "18446744073709551616", "-", "-", "GET", "k"],
                "request id",
            ),
            (vec!["SLUICE.WITH", "1", "-5", "-", "GET", "k"], "budget"),
            (vec!["SLUICE.WITH", "1", "NaN", "-", "GET", "k"], "budget"),
            (vec!["SLUICE.WITH", "1", "1e3", "-", "GET", "k"], "budget"),
            (vec!["SLUICE.WITH", "1", "99999999999", "-", "GET", "k"], "budget"),
            (vec!["SLUICE.WITH", "1", "1.2.3", "-", "GET", "k"], "budget"),
            (vec!["SLUICE.WITH", "1", "-", "", "GET", "k"], "tenant"),
            (vec!["SLUICE.WITH", "1", "-", "a b", "GET", "k"], "tenant"),
            (
                vec!["SLUICE.WITH", "1", "-", "-", "SLUICE.WITH", "2", "-", "-", "GET", "k"],
                "nested",
            ),
            (vec!["SLUICE.WITH", "1", "-", "-", "IOS", "0", "GET", "k"], "IOS"),
            (vec!["SLUICE.WITH", "1", "-", "-", "IOS", "-2", "GET", "k"], "IOS"),
            (vec!["SLUICE.WITH", "1", "-", "-", "IOS", "1000001", "GET", "k"], "IOS"),
            (vec!["SLUICE.WITH", "1", "-", "-", "IOS", "x", "GET", "k"], "IOS"),
            (vec!["SLUICE.WITH", "1", "-", "-", "IOS", "3"], "no command"),
        ];
        for (words, field) in cases {
            let err = unwrap(&args(&words)).unwrap_err();
            assert!(err.contains(field), "{words:?}: {err}");
        }
        let long = "t".repeat(MAX_TENANT_LEN + 1);
        let err = unwrap(&args(&["SLUICE.WITH", "1", "-", &long, "GET", "k"])).unwrap_err();
        assert!(err.contains("tenant") && err.contains("..."), "{err}");
    }
}
