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
//! Masters that restarted lately have no vote: see `servers.rs`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};

use super::servers::Server;

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
