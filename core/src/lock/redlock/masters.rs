//! The masters of a Redlock: asked in parallel, each within a time budget,
//! and counted against the quorum — unless one restarted lately.
//!
//! # Budgets
//!
//! A master that has not answered within the budget counts as not answering
//! (a `Timeout` error whose outcome is unknown: the command may still run);
//! its round trip's socket timeouts end with that budget too, and until its
//! thread is done the master is skipped (at most one abandoned request per
//! master).
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
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock, mpsc};
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockUnpoisoned;

/// The least time a master is given to answer one request.
pub const MIN_MASTER_BUDGET: Duration = Duration::from_millis(50);

/// States of one request to a master (see [`Masters::ask`]).
const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// Independent Redis masters, one vote each.
pub(super) struct Masters {
    clients: Vec<Client>,
    /// Per master: what was seen of the server (shared process-wide).
    servers: Vec<Arc<Server>>,
    /// Per master: the pid of a process that gave up waiting for a request
    /// still in flight there (0: none). A pid, so that a forked child does not
    /// inherit its parent's.
    abandoned: Vec<Arc<AtomicU32>>,
    /// How long each master has to answer one request.
    budget: Duration,
    /// `redlock "name"`, for messages.
    label: String,
}

/// The replies of one request to every master, and for each whether the
/// server's identity was checked since the connection it ran on was opened
/// (see the module documentation); a master not checked has no vote.
pub(super) struct Asked<T> {
    /// One reply per master, in order.
    pub(super) replies: Vec<Result<T>>,
    checked: Vec<bool>,
}

impl Masters {
    /// The masters of `clients`: at least one, each a distinct server (a
    /// master listed twice would vote twice: one server could make a quorum
    /// on its own; two names of one host, e.g. localhost and 127.0.0.1,
    /// cannot be told apart here). `ttl` is the lock's: a master that
    /// restarted is kept out of quorums for the longest TTL the process uses
    /// with it.
    pub(super) fn new(
        clients: Vec<Client>,
        budget: Duration,
        ttl: Duration,
        label: &str,
    ) -> Result<Self> {
        if clients.is_empty() {
            return Err(Error::invalid("Redlock needs at least one Redis URL"));
        }
        for (i, a) in clients.iter().enumerate() {
            if let Some(b) = clients[..i]
                .iter()
                .find(|b| b.same_as(a) || b.redacted_url() == a.redacted_url())
            {
                return Err(Error::invalid(format!(
                    "Redlock masters must be distinct servers: {} is listed twice",
                    b.redacted_url()
                )));
            }
        }
        let servers: Vec<Arc<Server>> = clients.iter().map(Server::of).collect();
        for server in &servers {
            server.uses(ttl);
        }
        Ok(Self {
            abandoned: clients.iter().map(|_| Arc::default()).collect(),
            servers,
            clients,
            budget,
            label: label.to_owned(),
        })
    }

    /// Notes that keys on these masters may live `ttl` (an extend): a
    /// master that restarts is kept out of quorums that long.
    pub(super) fn uses_ttl(&self, ttl: Duration) {
        for server in &self.servers {
            server.uses(ttl);
        }
    }

    /// The masters' clients, in order.
    pub(super) fn clients(&self) -> &[Client] {
        &self.clients
    }

    /// Votes needed: N/2 + 1.
    pub(super) fn quorum(&self) -> usize {
        self.clients.len() / 2 + 1
    }

    /// How long each master has to answer one request.
    pub(super) fn budget(&self) -> Duration {
        self.budget
    }

    /// The longest command timeout of the masters: what a call may spend
    /// past its wait (see `budget.rs`).
    pub(super) fn command_timeout(&self) -> Duration {
        self.clients
            .iter()
            .map(Client::command_timeout)
            .max()
            .unwrap_or_default()
    }

    /// Runs `op` on every master in parallel, each within the master budget
    /// from now; one result per master, in order (see [`Self::ask`]).
    pub(super) fn on_each<T, F>(&self, op: F) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &Client) -> Result<T> + Send + Sync + 'static,
    {
        self.ask(Budget::unbounded(), move |i, c, _| op(i, c))
    }

    /// Runs `op` on every master in parallel, each within the master budget
    /// and within `within` (the call's budget); `op` gets the budget of its
    /// round trips. A master that has not answered by then counts as not
    /// answering (a `Timeout` error, outcome unknown); its request is left
    /// to finish in the background (its socket timeouts end with its
    /// budget), and the master is skipped until it has. After `op`, a
    /// master reached on a connection opened since the server was last
    /// checked is checked (`INFO server`, in the same budget).
    pub(super) fn ask<T, F>(&self, within: Budget, op: F) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &Client, Budget) -> Result<T> + Send + Sync + 'static,
    {
        self.ask_checked(within, op).replies
    }

    /// [`Self::ask`], also telling which masters were checked (see
    /// [`Asked`]): what a count of votes needs.
    pub(super) fn ask_checked<T, F>(&self, within: Budget, op: F) -> Asked<T>
    where
        T: Send + 'static,
        F: Fn(usize, &Client, Budget) -> Result<T> + Send + Sync + 'static,
    {
        let started = Instant::now();
        let deadline = match within.end() {
            Some(end) => end.min(started + self.budget),
            None => started + self.budget,
        };
        let step = Budget::until(deadline);
        let label = self.label.clone();
        let run = move |i: usize, client: &Client, server: &Server| {
            let reply = op(i, client, step);
            let checked = server.check(client, step, &label);
            if checked && reply.is_ok() {
                server.answered(Instant::now());
            }
            (reply, checked)
        };
        if self.clients.len() == 1 {
            let (reply, checked) = run(0, &self.clients[0], &self.servers[0]);
            return Asked {
                replies: vec![reply],
                checked: vec![checked],
            };
        }
        if within.is_spent() {
            let replies = self.clients.iter().map(|_| Err(self.spent())).collect();
            let checked = vec![false; self.clients.len()];
            return Asked { replies, checked };
        }
        let pid = crate::fork::current_pid();
        let run = Arc::new(run);
        let (tx, rx) = mpsc::channel();
        let n = self.clients.len();
        let mut results: Vec<Option<(Result<T>, bool)>> = (0..n).map(|_| None).collect();
        // Per request: RUNNING, then DONE (by its thread) or ABANDONED (by us).
        let mut requests: Vec<Option<Arc<AtomicU8>>> = (0..n).map(|_| None).collect();
        for (i, client) in self.clients.iter().enumerate() {
            if self.abandoned[i].load(Ordering::Acquire) == pid {
                let err = Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{}: {} has not answered an earlier request yet",
                        self.label,
                        client.redacted_url()
                    ),
                );
                results[i] = Some((Err(err), false));
                continue;
            }
            let state = Arc::new(AtomicU8::new(RUNNING));
            let (run, client, tx) = (run.clone(), client.clone(), tx.clone());
            let (thread_state, abandoned) = (state.clone(), self.abandoned[i].clone());
            let server = self.servers[i].clone();
            let spawned = std::thread::Builder::new()
                .name("ferrolock-redlock".into())
                .spawn(move || {
                    crate::signals::block_in_this_thread();
                    let result = catch_unwind(AssertUnwindSafe(|| run(i, &client, &server)))
                        .unwrap_or_else(|_| {
                            let e = Error::new(ErrorKind::Redis, "redlock worker thread panicked");
                            (Err(e), false)
                        });
                    if thread_state.swap(DONE, Ordering::AcqRel) == ABANDONED {
                        abandoned.store(0, Ordering::Release);
                    }
                    let _ = tx.send((i, result));
                });
            match spawned {
                Ok(_) => requests[i] = Some(state),
                Err(e) => {
                    let err = Error::new(
                        ErrorKind::Redis,
                        format!("{}: cannot start a thread: {e}", self.label),
                    );
                    results[i] = Some((Err(err), false));
                }
            }
        }
        drop(tx);
        while results.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, result)) => results[i] = Some(result),
                Err(_) => break, // out of time (or every thread is done)
            }
        }
        for (i, state) in requests.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            if let Some(state) = state {
                // Mark the master first: a thread finishing in between finds
                // its request abandoned and clears the mark, or we do.
                self.abandoned[i].store(pid, Ordering::Release);
                if state
                    .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    self.abandoned[i].store(0, Ordering::Release);
                }
            }
        }
        let budget = deadline.saturating_duration_since(started);
        let (replies, checked) = results
            .into_iter()
            .zip(&self.clients)
            .map(|(r, client)| {
                r.unwrap_or_else(|| {
                    let e = Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "{}: {} did not answer within {budget:?}",
                            self.label,
                            client.redacted_url(),
                        ),
                    );
                    (Err(e.with_outcome_unknown()), false)
                })
            })
            .unzip();
        Asked { replies, checked }
    }

    /// The error of a request that could not start: the call's time is up.
    fn spent(&self) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{}: timed out: no time left to ask the masters (the call's timeout, plus one \
                 command timeout, has passed)",
                self.label
            ),
        )
    }

    /// True when master `i` may vote now: its server was checked since the
    /// request ran (`checked`), and it is not kept out after a restart.
    pub(super) fn may_vote(&self, i: usize, checked: bool) -> bool {
        checked && self.servers[i].kept_out(Instant::now()).is_none()
    }

    /// The masters whose reply in `asked` satisfies `yes` and who may vote.
    pub(super) fn voters<T>(
        &self,
        asked: &Asked<T>,
        yes: impl Fn(&Result<T>) -> bool,
    ) -> Vec<bool> {
        asked
            .replies
            .iter()
            .zip(&asked.checked)
            .enumerate()
            .map(|(i, (reply, &checked))| yes(reply) && self.may_vote(i, checked))
            .collect()
    }

    /// How many masters' replies in `asked` satisfy `yes` and may vote.
    pub(super) fn votes<T>(&self, asked: &Asked<T>, yes: impl Fn(&Result<T>) -> bool) -> usize {
        self.voters(asked, yes).into_iter().filter(|&v| v).count()
    }

    /// When fewer than a quorum of the masters that answered `asked` may
    /// vote (the others restarted lately): when enough of them will (`None`:
    /// a quorum may vote now), and why, for messages. A master whose check
    /// failed may vote again at its next check: now.
    pub(super) fn kept_out<T>(&self, asked: &Asked<T>) -> Option<(Instant, String)> {
        let now = Instant::now();
        let answered = asked.replies.iter().map(Result::is_ok);
        let mut voting = 0;
        let mut later: Vec<(Instant, usize)> = Vec::new();
        for (i, (answered, &checked)) in answered.zip(&asked.checked).enumerate() {
            if !answered {
                continue;
            }
            match (checked, self.servers[i].kept_out(now)) {
                (true, None) => voting += 1,
                (false, None) => later.push((now, i)),
                (_, Some(until)) => later.push((until, i)),
            }
        }
        if voting >= self.quorum() {
            return None;
        }
        later.sort();
        let missing = self.quorum() - voting;
        // (Fewer answered than a quorum: never, once `unreachable` passed.)
        let when = later.get(missing - 1).map_or(now, |(when, _)| *when);
        let out: Vec<String> = later
            .iter()
            .filter(|(until, _)| *until > now)
            .map(|(until, i)| {
                format!(
                    "{} for {:.1} s more",
                    self.clients[*i].redacted_url(),
                    (*until - now).as_secs_f64()
                )
            })
            .collect();
        let why = format!(
            "{}: only {voting} of {} masters may vote (quorum {}): a master that (re)started \
             less than one lock TTL ago may have lost locks, so it has no vote until that TTL \
             has passed (Redlock's delayed restart, see docs/deployment.md): {}",
            self.label,
            self.clients.len(),
            self.quorum(),
            out.join(", ")
        );
        Some((when, why))
    }

    /// The error to report when fewer than a quorum of masters answered
    /// `replies` at all (errors and timeouts are not answers): the first
    /// error, with how many answered.
    pub(super) fn unreachable<T>(&self, replies: &[Result<T>]) -> Option<Error> {
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        if answered >= self.quorum() {
            return None;
        }
        let first = replies.iter().find_map(|r| r.as_ref().err())?;
        Some(Error::new(
            first.kind(),
            format!(
                "{}: only {answered} of {} Redis masters answered (quorum {}); first error: {first}",
                self.label,
                self.clients.len(),
                self.quorum()
            ),
        ))
    }
}

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
    fn new(max_ttl_ms: u64) -> Self {
        Self {
            checked: AtomicU64::new(0),
            run_id: AtomicU64::new(0),
            kept_out_until: AtomicU64::new(0),
            last_answer: AtomicU64::new(0),
            max_ttl_ms: AtomicU64::new(max_ttl_ms),
        }
    }

    /// The server `client` talks to (one per URL and process).
    fn of(client: &Client) -> Arc<Server> {
        hold_across_forks();
        SERVERS
            .lock_unpoisoned()
            .get_or_insert_with(HashMap::new)
            .entry(client.redacted_url().to_owned())
            .or_insert_with(|| Arc::new(Server::new(0)))
            .clone()
    }

    /// Notes that keys on this server may live `ttl`.
    fn uses(&self, ttl: Duration) {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.max_ttl_ms.fetch_max(ttl_ms, Ordering::AcqRel);
    }

    /// Checks the server's identity if `client` opened a connection since
    /// the last check (one `INFO server` within `budget`). True when the
    /// server is checked: it was (or the server refuses `INFO`, when
    /// restarts cannot be seen), false when the check could not be made.
    fn check(&self, client: &Client, budget: Budget, label: &str) -> bool {
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
    fn answered(&self, now: Instant) {
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
    fn seen(&self, run_id: Option<&str>, uptime: Option<Duration>, now: Instant) {
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
    fn kept_out(&self, now: Instant) -> Option<Instant> {
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

thread_local! {
    /// The registry, held by `fork()`'s prepare handler.
    static FORK_HOLD: std::cell::RefCell<Option<MutexGuard<'static, Option<Registry>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Registers the `fork()` hooks that hold the registry across a fork (see
/// `fork.rs`); what was seen of the servers stays true in the child.
fn hold_across_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        crate::fork::register(crate::fork::Hooks {
            prepare: || {
                let guard = SERVERS.lock_unpoisoned();
                let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = Some(guard));
            },
            parent: release_after_fork,
            child: release_after_fork,
        })
    });
}

fn release_after_fork() {
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

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
