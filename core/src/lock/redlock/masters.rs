//! The masters of a Redlock: asked in parallel, each within a time budget,
//! and counted against the quorum.
//!
//! A master that has not answered within the budget counts as not answering
//! (a `Timeout` error); its request is left to finish in the background, and
//! the master is skipped until it has (at most one abandoned request per
//! master).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};

/// The least time a master is given to answer one request.
pub const MIN_MASTER_BUDGET: Duration = Duration::from_millis(50);

/// States of one request to a master (see [`Masters::on_each`]).
const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// Independent Redis masters, one vote each.
pub(super) struct Masters {
    clients: Vec<Client>,
    /// Per master: the pid of a process that gave up waiting for a request
    /// still in flight there (0: none). A pid, so that a forked child does not
    /// inherit its parent's.
    abandoned: Vec<Arc<AtomicU32>>,
    /// How long each master has to answer one request.
    budget: Duration,
    /// `redlock "name"`, for messages.
    label: String,
}

impl Masters {
    /// The masters of `clients`: at least one, each a distinct server (a
    /// master listed twice would vote twice: one server could make a quorum
    /// on its own; two names of one host, e.g. localhost and 127.0.0.1,
    /// cannot be told apart here).
    pub(super) fn new(clients: Vec<Client>, budget: Duration, label: &str) -> Result<Self> {
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
        Ok(Self {
            abandoned: clients.iter().map(|_| Arc::default()).collect(),
            clients,
            budget,
            label: label.to_owned(),
        })
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

    /// Runs `op` on every master in parallel; one result per master, in order.
    pub(super) fn on_all<T, F>(&self, op: F) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: Fn(&Client) -> Result<T> + Send + Sync + 'static,
    {
        self.on_each(move |_, c| op(c))
    }

    /// [`Self::on_all`], telling `op` the index of the master. A master that
    /// has not answered within the budget counts as not answering (a
    /// `Timeout` error); its request is left to finish in the background,
    /// and the master is skipped until it has.
    pub(super) fn on_each<T, F>(&self, op: F) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &Client) -> Result<T> + Send + Sync + 'static,
    {
        if self.clients.len() == 1 {
            return vec![op(0, &self.clients[0])];
        }
        let budget = self.budget;
        let deadline = Instant::now() + budget;
        let pid = crate::fork::current_pid();
        let op = Arc::new(op);
        let (tx, rx) = mpsc::channel();
        let mut results: Vec<Option<Result<T>>> = self.clients.iter().map(|_| None).collect();
        // Per request: RUNNING, then DONE (by its thread) or ABANDONED (by us).
        let mut requests: Vec<Option<Arc<AtomicU8>>> = self.clients.iter().map(|_| None).collect();
        for (i, client) in self.clients.iter().enumerate() {
            if self.abandoned[i].load(Ordering::Acquire) == pid {
                results[i] = Some(Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{}: {} has not answered an earlier request yet",
                        self.label,
                        client.redacted_url()
                    ),
                )));
                continue;
            }
            let state = Arc::new(AtomicU8::new(RUNNING));
            let (op, client, tx) = (op.clone(), client.clone(), tx.clone());
            let (thread_state, abandoned) = (state.clone(), self.abandoned[i].clone());
            let spawned = std::thread::Builder::new()
                .name("ferrolock-redlock".into())
                .spawn(move || {
                    crate::signals::block_in_this_thread();
                    let result =
                        catch_unwind(AssertUnwindSafe(|| op(i, &client))).unwrap_or_else(|_| {
                            Err(Error::new(
                                ErrorKind::Redis,
                                "redlock worker thread panicked",
                            ))
                        });
                    if thread_state.swap(DONE, Ordering::AcqRel) == ABANDONED {
                        abandoned.store(0, Ordering::Release);
                    }
                    let _ = tx.send((i, result));
                });
            match spawned {
                Ok(_) => requests[i] = Some(state),
                Err(e) => {
                    results[i] = Some(Err(Error::new(
                        ErrorKind::Redis,
                        format!("{}: cannot start a thread: {e}", self.label),
                    )))
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
        results
            .into_iter()
            .zip(&self.clients)
            .map(|(r, client)| {
                r.unwrap_or_else(|| {
                    Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "{}: {} did not answer within {:?}",
                            self.label,
                            client.redacted_url(),
                            budget
                        ),
                    ))
                })
            })
            .collect()
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
