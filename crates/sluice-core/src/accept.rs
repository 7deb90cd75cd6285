//! What a listener does when an accept fails, and when a client is one
//! too many.
//!
//! A server that runs out of file descriptors fails every accept until a
//! connection closes; the connection it cannot take stays in the backlog,
//! so the listener stays ready. Retrying at once spins a core and floods
//! the log. Every listener of Sluice (`sluice serve`, the proxy, the
//! router) therefore pauses after such a failure, doubling the pause while
//! failures continue, and reports them at most once a second with the
//! count since the last report. A failure that concerns one connection
//! only (it went away before it was accepted) needs no pause.
//!
//! A client beyond the listener's bound is told so and closed. Its
//! refusal waits for it to close (up to a moment) before closing too,
//! since closing with the client's bytes unread would reset the
//! connection, and the reset can reach the client before the refusal.
//! Each such wait holds a descriptor, so a flood of refused clients could
//! take the descriptors the clients served need: [`Refusals`] bounds how
//! many wait at once, and the others close as soon as they are told.
//!
//! ```
//! use std::io;
//! use std::time::{Duration, Instant};
//! use sluice_core::accept::AcceptBackoff;
//!
//! let mut backoff = AcceptBackoff::new(Duration::from_millis(10), Duration::from_secs(1));
//! let out_of_fds = io::Error::from_raw_os_error(libc::EMFILE);
//! let now = Instant::now();
//! assert_eq!(backoff.failed(now, &out_of_fds), (Duration::from_millis(10), Some(1)));
//! assert_eq!(backoff.failed(now, &out_of_fds), (Duration::from_millis(20), None));
//! let gone = io::Error::from(io::ErrorKind::ConnectionAborted);
//! assert_eq!(backoff.failed(now, &gone), (Duration::ZERO, None), "no pause: the next is fine");
//! backoff.succeeded();
//! let later = now + Duration::from_secs(1);
//! assert_eq!(backoff.failed(later, &out_of_fds), (Duration::from_millis(10), Some(3)));
//! ```

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Failures are reported at most once this often.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// A listener's pause after failed accepts and its rate-limited report.
#[derive(Debug, Clone)]
pub struct AcceptBackoff {
    first: Duration,
    longest: Duration,
    next: Duration,
    /// Failures not reported yet.
    unreported: u64,
    reported_at: Option<Instant>,
}

impl AcceptBackoff {
    /// Pauses of `first`, doubling up to `longest` while accepts fail.
    pub fn new(first: Duration, longest: Duration) -> AcceptBackoff {
        AcceptBackoff {
            first,
            longest: longest.max(first),
            next: first,
            unreported: 0,
            reported_at: None,
        }
    }

    /// An accept failed at `now` with `e`: how long to pause before the
    /// next accept (zero if `e` concerns one connection only), and the
    /// failures to report now (this one and those not reported before it),
    /// if a report is due.
    pub fn failed(&mut self, now: Instant, e: &io::Error) -> (Duration, Option<u64>) {
        let pause = if one_connection(e) {
            Duration::ZERO
        } else {
            let pause = self.next;
            self.next = (self.next * 2).min(self.longest);
            pause
        };
        self.unreported += 1;
        let due = (self.reported_at).is_none_or(|at| now.saturating_duration_since(at) >= REPORT_EVERY);
        if !due {
            return (pause, None);
        }
        self.reported_at = Some(now);
        (pause, Some(std::mem::take(&mut self.unreported)))
    }

    /// An accept succeeded: the next failure pauses briefly again.
    pub fn succeeded(&mut self) {
        self.next = self.first;
    }
}

impl Default for AcceptBackoff {
    /// The proxy's and the router's: 10 ms, doubling to 1 s.
    fn default() -> Self {
        AcceptBackoff::new(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// Refusals that wait for their client to close, at most [`Refusals::WAITING`]
/// at once.
#[derive(Debug, Clone, Default)]
pub struct Refusals(Arc<AtomicUsize>);

/// One refusal under way; it counts among the waiting until dropped.
#[derive(Debug)]
pub struct Refusal {
    waiting: Arc<AtomicUsize>,
    /// Whether this one may wait for its client to close.
    pub may_wait: bool,
}

impl Refusals {
    /// Refusals that wait at once, at most.
    pub const WAITING: usize = 16;

    /// A refusal begins.
    pub fn begin(&self) -> Refusal {
        let before = self.0.fetch_add(1, Ordering::Relaxed);
        Refusal {
            waiting: self.0.clone(),
            may_wait: before < Self::WAITING,
        }
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether an accept error concerns one connection only (it went away
/// before it was accepted; Linux also passes on a pending network error
/// of the new socket), so that accepting the next needs no pause.
pub fn one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) || matches!(
        e.raw_os_error(),
        Some(
            libc::EPROTO
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pauses_double_to_the_longest_and_reports_come_once_a_second() {
        let mut backoff = AcceptBackoff::new(ms(10), ms(1000));
        let out_of_fds = io::Error::from_raw_os_error(libc::EMFILE);
        let start = Instant::now();
        let mut pauses = Vec::new();
        let mut reports = Vec::new();
        // 300 failures in a row, 10 ms apart.
        for i in 0..300 {
            let (pause, report) = backoff.failed(start + ms(10 * i), &out_of_fds);
            pauses.push(pause);
            reports.extend(report);
        }
        assert_eq!(&pauses[..8], &[10, 20, 40, 80, 160, 320, 640, 1000].map(ms));
        assert!(pauses[8..].iter().all(|&p| p == ms(1000)));
        assert_eq!(reports, [1, 100, 100], "the first at once, then each second's count");
        backoff.succeeded();
        assert_eq!(
            backoff.failed(start + ms(3005), &out_of_fds),
            (ms(10), Some(100)),
            "a success starts the pauses again"
        );
    }

    #[test]
    fn only_errors_of_one_connection_skip_the_pause() {
        assert!(one_connection(&io::ErrorKind::ConnectionAborted.into()));
        assert!(one_connection(&io::Error::from_raw_os_error(libc::EPROTO)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!one_connection(&io::Error::from_raw_os_error(libc::ENOMEM)));
        let mut backoff = AcceptBackoff::new(ms(10), ms(100));
        let now = Instant::now();
        backoff.failed(now, &io::Error::from_raw_os_error(libc::EMFILE));
        let (pause, _) = backoff.failed(now, &io::ErrorKind::ConnectionReset.into());
        assert_eq!(pause, Duration::ZERO);
        let (pause, _) = backoff.failed(now, &io::Error::from_raw_os_error(libc::EMFILE));
        assert_eq!(pause, ms(20), "a lost connection leaves the doubling where it was");
    }

    #[test]
    fn refusals_beyond_the_bound_do_not_wait_and_a_finished_one_frees_its_place() {
        let refusals = Refusals::default();
        let first: Vec<Refusal> = (0..Refusals::WAITING).map(|_| refusals.begin()).collect();
        assert!(first.iter().all(|r| r.may_wait));
        let over = refusals.begin();
        assert!(!over.may_wait);
        drop(over);
        assert!(!refusals.begin().may_wait, "still full");
        drop(first);
        assert!(refusals.begin().may_wait);
    }

    #[test]
    fn a_longest_below_the_first_pause_is_the_first() {
        let mut backoff = AcceptBackoff::new(ms(10), ms(1));
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        let now = Instant::now();
        assert_eq!((backoff.failed(now, &e).0, backoff.failed(now, &e).0), (ms(10), ms(10)));
    }
}
