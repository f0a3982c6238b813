//! What this process has seen of each Redis server a Redlock uses: its
//! identity, and whether it restarted lately.
//!
//! # Restarted masters
//!
//! A master that restarted without its data forgot the locks it held: were it
//! counted at once, a second client could make a quorum with it while the
//! first still holds the lock on the others. The algorithm asks operators to
//! keep a crashed master down for one TTL; here the client does it. Each
//! server's identity (`run_id` and uptime, from `INFO server`) is checked when
//! a client opened a new connection to it since the last check (a restart
//! closes every connection, so whatever ran on the restarted server ran on a
//! new one: see [`Client::last_connect`]) — never on the common path. A master
//! whose `run_id` changed, or whose uptime is below the longest TTL this
//! process uses with it, does not count toward a quorum until that TTL has
//! passed since it was first seen changed (or since its restart, from its
//! uptime). It still takes, extends and releases keys: it just has no vote.
//! What a server was seen to be is shared by every Redlock of the process
//! that names it.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::client::Client;
use crate::error::ErrorKind;
use crate::sync::LockUnpoisoned;

/// What this process has seen of one Redis server (see the module
/// documentation). Atomics only: nothing for `fork()` to wait for.
pub(super) struct Server {
    /// The last [`Client::last_connect`] number the server was checked after.
    checked: AtomicU64,
    /// A hash of the `run_id` last seen (0: not seen yet).
    run_id: AtomicU64,
    /// Until when it has no vote, in nanoseconds after [`base`] (0: never).
    kept_out_until: AtomicU64,
    /// When it last answered a request, after a check found it the server
    /// seen before, in nanoseconds after [`base`] (0: never).
    last_answer: AtomicU64,
    /// The longest TTL (ms) of the Redlocks of this process on this server.
    max_ttl_ms: AtomicU64,
}

impl Server {
    /// A server not seen yet, used with TTLs up to `max_ttl_ms`.
    pub(super) fn new(max_ttl_ms: u64) -> Self {
        Self {
            checked: AtomicU64::new(0),
            run_id: AtomicU64::new(0),
            kept_out_until: AtomicU64::new(0),
            last_answer: AtomicU64::new(0),
            max_ttl_ms: AtomicU64::new(max_ttl_ms),
        }
    }

    /// The server `client` talks to (one per URL and process).
    pub(super) fn of(client: &Client) -> Arc<Server> {
        hold_across_forks();
        SERVERS
            .lock_unpoisoned()
            .get_or_insert_with(HashMap::new)
            .entry(client.redacted_url().to_owned())
            .or_insert_with(|| Arc::new(Server::new(0)))
            .clone()
    }

    /// Notes that keys on this server may live `ttl`.
    pub(super) fn uses(&self, ttl: Duration) {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.max_ttl_ms.fetch_max(ttl_ms, Ordering::AcqRel);
    }

    /// Checks the server's identity if `client` opened a connection since
    /// the last check (one `INFO server` within `budget`). True when the
    /// server is checked: it was (or the server refuses `INFO`, when
    /// restarts cannot be seen), false when the check could not be made.
    pub(super) fn check(&self, client: &Client, budget: Budget, label: &str) -> bool {
        let opened = client.last_connect();
        if opened <= self.checked.load(Ordering::Acquire) {
            return true;
        }
        if budget.is_spent() {
            return false;
        }
        let info = client.run_within(budget, label, |c| {
            redis::cmd("INFO").arg("server").query::<String>(c)
        });
        match info {
            Ok(text) => {
                let (run_id, uptime) = parse_info(&text);
                self.seen(run_id, uptime, Instant::now());
            }
            // Refused (an ACL without `info`): restarts cannot be seen.
            Err(e) if matches!(e.kind(), ErrorKind::Auth | ErrorKind::Redis) => {}
            Err(_) => return false,
        }
        self.checked.fetch_max(opened, Ordering::AcqRel);
        true
    }

    /// Notes that the server answered a request at `now`.
    pub(super) fn answered(&self, now: Instant) {
        self.last_answer
            .store(nanos_since_base(now), Ordering::Release);
    }

    /// Notes what `INFO server` said at `now`: the server's `run_id` and
    /// uptime (either may be missing from an unusual server).
    ///
    /// A server seen for the first time, or the same as before, is kept out
    /// until one max TTL after it started, if that is still to come. One
    /// whose `run_id` changed is kept out for one max TTL from now, unless
    /// it started after the one seen before last answered (by its uptime):
    /// then it restarted in place, and one max TTL from its start is enough.
    /// (Whole seconds of uptime, rounded down: the start may be up to a
    /// second earlier than counted, never later.)
    pub(super) fn seen(&self, run_id: Option<&str>, uptime: Option<Duration>, now: Instant) {
        let max_ttl = Duration::from_millis(self.max_ttl_ms.load(Ordering::Acquire));
        // Read before the run_id is swapped: an answer of the new server is
        // only noted after a check that came after the swap.
        let last_answer = match self.last_answer.load(Ordering::Acquire) {
            0 => None,
            nanos => Some(base() + Duration::from_nanos(nanos)),
        };
        let changed = run_id.is_some_and(|id| {
            let mut h = DefaultHasher::new();
            id.hash(&mut h);
            let hash = h.finish() | 1;
            let before = self.run_id.swap(hash, Ordering::AcqRel);
            before != 0 && before != hash
        });
        let since_answer = last_answer.map(|t| now.saturating_duration_since(t));
        let restarted_in_place = match (uptime, since_answer) {
            (Some(up), Some(gap)) => up + Duration::from_secs(1) <= gap,
            _ => false,
        };
        let until = if changed && !restarted_in_place {
            Some(now + max_ttl)
        } else {
            uptime
                .filter(|up| *up < max_ttl)
                .map(|up| now + (max_ttl - up))
        };
        if let Some(until) = until {
            self.kept_out_until
                .fetch_max(nanos_since_base(until), Ordering::AcqRel);
        }
    }

    /// Until when the server has no vote, if that is after `now`.
    pub(super) fn kept_out(&self, now: Instant) -> Option<Instant> {
        let nanos = self.kept_out_until.load(Ordering::Acquire);
        let until = base() + Duration::from_nanos(nanos);
        (nanos != 0 && until > now).then_some(until)
    }
}

/// `t` in nanoseconds after [`base`] (at least 1: 0 means never).
fn nanos_since_base(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(base()).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The instant `Server`'s times count from.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `run_id` and `uptime_in_seconds` of an `INFO server` reply.
fn parse_info(text: &str) -> (Option<&str>, Option<Duration>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let uptime = field("uptime_in_seconds")
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs);
    (field("run_id"), uptime)
}

type Registry = HashMap<String, Arc<Server>>;

/// The servers seen by this process, by redacted URL.
static SERVERS: Mutex<Option<Registry>> = Mutex::new(None);

// What was seen of the servers stays true in a forked child.
crate::fork::hold_mutex_across_forks!(hold_across_forks, Option<Registry>, &SERVERS);

#[cfg(test)]
mod tests {
    use super::*;

    fn server(max_ttl: Duration) -> Server {
        Server::new(max_ttl.as_millis() as u64)
    }

    #[test]
    fn info_fields_are_read() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        assert_eq!(
            parse_info(text),
            (Some("abc123"), Some(Duration::from_secs(42)))
        );
        assert_eq!(parse_info("# Server\r\n"), (None, None));
    }

    #[test]
    fn a_restarted_server_is_kept_out_for_one_ttl() {
        let ttl = Duration::from_secs(10);
        let now = Instant::now();
        // First seen, up for long: votes.
        let s = server(ttl);
        s.seen(Some("a"), Some(Duration::from_secs(3600)), now);
        assert_eq!(s.kept_out(now), None);
        // The same server again: still votes.
        s.seen(Some("a"), Some(Duration::from_secs(3601)), now);
        assert_eq!(s.kept_out(now), None);
        // Another run_id: kept out for one ttl from now, whatever its uptime.
        s.seen(Some("b"), Some(Duration::from_secs(3600)), now);
        let until = s.kept_out(now).expect("kept out");
        assert!(until >= now + ttl - Duration::from_millis(1));
        assert_eq!(s.kept_out(now + ttl + Duration::from_millis(1)), None);

        // Another run_id, started 3 s ago, after the last answer of the one
        // before (5 s ago): restarted in place, kept out for the 7 s left.
        let s = server(ttl);
        s.seen(Some("a"), Some(Duration::from_secs(3600)), now);
        s.answered(now);
        let later = now + Duration::from_secs(5);
        s.seen(Some("b"), Some(Duration::from_secs(3)), later);
        let left = s.kept_out(later).expect("kept out") - later;
        assert!(
            left <= Duration::from_secs(7) && left > Duration::from_millis(6990),
            "{left:?}"
        );
        // Up for 4.x s (4 counted), the last answer 5 s ago: it may have
        // started before that answer, so it may have been swapped in
        // since: one ttl from now.
        let s = server(ttl);
        s.seen(Some("a"), Some(Duration::from_secs(3600)), now);
        s.answered(now);
        s.seen(Some("b"), Some(Duration::from_secs(4)), later);
        let left = s.kept_out(later).expect("kept out") - later;
        assert!(left > Duration::from_millis(9990), "{left:?}");

        // First seen 4 s after it started: kept out for the 6 s left.
        let s = server(ttl);
        s.seen(Some("c"), Some(Duration::from_secs(4)), now);
        let until = s.kept_out(now).expect("kept out");
        let left = until - now;
        assert!(
            left <= Duration::from_secs(6) && left > Duration::from_millis(5990),
            "{left:?}"
        );
    }
}
