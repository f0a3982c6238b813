//! Redlock: one lock over N independent Redis masters.
//!
//! Each attempt sends the same acquire script (same token) to every master in
//! parallel. It succeeds when at least N/2+1 masters said yes *and* the
//! validity left — `ttl − elapsed (monotonic) − drift`, where drift is 1 % of
//! the ttl plus 2 ms — is positive. Otherwise every master is released. A
//! master that errors or does not answer counts as a no; but when fewer than a
//! quorum of masters answered at all, nothing could be decided and the call
//! fails with the first error (a `Connection` error, as a single server that
//! is down would): waiting would only retry against servers that are down.
//! Extend re-checks the quorum and the validity the same way.
//!
//! A master that hangs (stopped, or behind a link that drops packets) must not
//! hold the others up: as the algorithm asks, each master gets a time small
//! against the TTL ([`Redlock::master_budget`]: a tenth of it, at least
//! [`MIN_MASTER_BUDGET`]) to answer each request, after which it counts as
//! not answering. Its request goes on in the background until the client's
//! own timeouts end it, and until then that master is skipped (at most one
//! abandoned request per master).
//!
//! # Waiting
//!
//! A waiter subscribes on every master that answers and registers there as a
//! waiter of that master's key, exactly as a [`Lock`](crate::Lock) waiter
//! does, with one token for the whole call. A release, which reaches every
//! master, hands each master's key to its oldest waiter: usually the same
//! one everywhere, which then holds a quorum before the releaser (or anyone
//! else) can take it back. The waiter listens on one of its masters; the
//! message wakes it and its next attempt counts the keys set to its token.
//! Keys handed over are given a fresh TTL by that attempt, so the validity it
//! computes holds. A waiter re-checks every [`NOTIFIED_RECHECK`] as well (a
//! hold can end without a release reaching that master: it was unreachable,
//! or held a stale key) and when a holder's TTL ends. Where it cannot
//! subscribe at all, it pauses a random time of at most [`RETRY_MAX`].

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::client::subscriber::Subscriber;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{LockKeys, label, new_token};
use crate::lock::{DistributedLock, Tried, acquire_call};
use crate::scripts::{LOCK_EXTEND, LOCK_FENCE, LOCK_LEAVE, LOCK_RELEASE};
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt, Wait};

/// Longest pause between two attempts of a waiter that could not subscribe.
const RETRY_MAX: Duration = Duration::from_millis(50);

/// Longest pause between two attempts of a waiter listening on a master.
const NOTIFIED_RECHECK: Duration = Duration::from_millis(250);

/// The least time a master is given to answer one request.
pub const MIN_MASTER_BUDGET: Duration = Duration::from_millis(50);

/// States of one request to a master (see [`Redlock::master_budget`]).
const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// A lock held on a majority of independent Redis masters.
pub struct Redlock {
    clients: Vec<Client>,
    /// Per master: the pid of a process that gave up waiting for a request
    /// still in flight there (0: none). A pid, so that a forked child does not
    /// inherit its parent's.
    abandoned: Vec<Arc<AtomicU32>>,
    keys: LockKeys,
    name: Vec<u8>,
    label: String,
    ttl: Duration,
    state: Mutex<Option<Held>>,
    lost: AtomicBool,
}

struct Held {
    token: String,
    fence: i64,
    pid: u32,
    valid_until: Instant,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("name", &self.label)
            .field("masters", &self.clients.len())
            .finish()
    }
}

impl Redlock {
    /// A Redlock on `name` over `clients` (independent masters; 3 or 5 usual).
    pub fn new(clients: Vec<Client>, name: &[u8], ttl: Duration, prefix: &[u8]) -> Result<Self> {
        validate::name(name, "lock name")?;
        if clients.is_empty() {
            return Err(Error::invalid("Redlock needs at least one Redis URL"));
        }
        // A master listed twice would vote twice: one server could make a
        // quorum on its own. (Two names of one host, e.g. localhost and
        // 127.0.0.1, cannot be told apart here.)
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
        if ttl < Duration::from_millis(1) || ttl.as_secs_f64() > validate::MAX_SECONDS {
            return Err(Error::invalid(format!(
                "ttl must be between 0.001 s and ten years, got {ttl:?}"
            )));
        }
        Ok(Self {
            keys: LockKeys::new(prefix, name),
            label: label("redlock", name),
            name: name.to_vec(),
            abandoned: clients.iter().map(|_| Arc::default()).collect(),
            clients,
            ttl,
            state: Mutex::new(None),
            lost: AtomicBool::new(false),
        })
    }

    /// Votes needed: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.clients.len() / 2 + 1
    }

    /// How long each master has to answer one request: a tenth of the TTL,
    /// at least 50 ms (`MIN_MASTER_BUDGET`).
    pub fn master_budget(&self) -> Duration {
        (self.ttl / 10).max(MIN_MASTER_BUDGET)
    }

    /// Runs `op` on every master in parallel; one result per master, in order.
    fn on_all<T, F>(&self, op: F) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: Fn(&Client) -> Result<T> + Send + Sync + 'static,
    {
        self.on_each(move |_, c| op(c))
    }

    /// [`Self::on_all`], telling `op` the index of the master. A master that
    /// has not answered within [`Self::master_budget`] counts as not
    /// answering (a `Timeout` error); its request is left to finish in the
    /// background, and the master is skipped until it has.
    fn on_each<T, F>(&self, op: F) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &Client) -> Result<T> + Send + Sync + 'static,
    {
        if self.clients.len() == 1 {
            return vec![op(0, &self.clients[0])];
        }
        let budget = self.master_budget();
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

    fn drift(&self) -> Duration {
        self.ttl / 100 + Duration::from_millis(2)
    }

    /// Takes the lock on a quorum of masters, waiting as `wait` allows (see
    /// the module documentation for how it waits).
    pub fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        // One token for the whole call: a master that hands its key to this
        // waiter sets it to this token, which the next attempt then counts.
        let token = new_token();
        let mut waiter = None;
        let outcome = self.acquire_as(&token, wait, interrupt, &mut waiter);
        if let Some(w) = waiter {
            w.close(self, &token, matches!(outcome, Ok(true)));
        }
        outcome
    }

    fn acquire_as(
        &self,
        token: &str,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
        waiter: &mut Option<Waiter>,
    ) -> Result<bool> {
        let deadline = wait.deadline();
        let ttl_ms = validate::millis(self.ttl);
        let lease_ms = validate::millis(wait::lease_for(NOTIFIED_RECHECK));
        loop {
            let start = Instant::now();
            let listening: Vec<bool> = match waiter {
                Some(w) => w.subs.iter().map(Option::is_some).collect(),
                None => vec![false; self.clients.len()],
            };
            let id = waiter.as_ref().map(|w| w.id.clone()).unwrap_or_default();
            let (k, label, owner) = (self.keys.clone(), self.label.clone(), token.to_string());
            let replies = self.on_each(move |i, c| {
                let waiter = if listening[i] { id.as_str() } else { "" };
                let call = acquire_call(&k, &owner, ttl_ms, waiter, false, lease_ms);
                call.run::<Tried>(c, &label)
            });
            let elapsed = start.elapsed();
            if let Some(w) = waiter.as_mut() {
                w.update(&replies);
            }
            if let Some(e) = self.unreachable(&replies) {
                // Undo wherever it was taken (best effort: the rest expires).
                self.release_everywhere(token);
                return Err(e);
            }
            let granted: Vec<i64> = replies
                .iter()
                .filter_map(|r| match r {
                    Ok(Tried::Acquired(fence)) => Some(*fence),
                    _ => None,
                })
                .collect();
            let validity = self.ttl.checked_sub(elapsed + self.drift());
            if granted.len() >= self.quorum()
                && let Some(validity) = validity.filter(|v| !v.is_zero())
            {
                let fence = granted.iter().copied().max().unwrap_or(0);
                self.spread_fence(&replies, fence);
                *self.state.lock_unpoisoned() = Some(Held {
                    token: token.to_string(),
                    fence,
                    pid: crate::fork::current_pid(),
                    valid_until: start + validity,
                });
                self.lost.store(false, Ordering::Release);
                return Ok(true);
            }
            // Not enough: undo everywhere (a master that timed out may have
            // taken it all the same).
            self.release_everywhere(token);
            if wait == Wait::Try {
                return Ok(false);
            }
            // Pause no longer than the shortest holder TTL, nor past the deadline.
            let mut limit = replies
                .iter()
                .filter_map(|r| match r {
                    Ok(Tried::Busy(pttl)) => *pttl,
                    _ => None,
                })
                .min()
                .unwrap_or(Duration::MAX);
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                limit = limit.min(left);
            }
            if waiter
                .as_ref()
                .is_some_and(|w| w.subs.iter().all(Option::is_none))
            {
                *waiter = None; // every subscription broke: start over
            }
            if waiter.is_none() {
                *waiter = self.subscribe(&replies);
                if waiter.is_some() {
                    continue; // the next attempt registers where we listen
                }
            }
            let pause = match waiter.as_mut() {
                Some(w) => w.listen(NOTIFIED_RECHECK.min(limit), interrupt),
                None => wait::pause(jitter(RETRY_MAX).min(limit), interrupt),
            };
            pause.map_err(|_| wait::interrupted(&self.label))?;
        }
    }

    /// Subscribes on every master that answered in `replies`, in parallel
    /// (`None` when no subscription could be made).
    fn subscribe(&self, replies: &[Result<Tried>]) -> Option<Waiter> {
        let id = new_token();
        let mut channel = self.keys.channel.clone();
        channel.extend_from_slice(id.as_bytes());
        let answered: Vec<bool> = replies.iter().map(Result::is_ok).collect();
        let (label, key, chan) = (self.label.clone(), self.keys.lock.clone(), channel.clone());
        let subs: Vec<Option<Sub>> = self
            .on_each(move |i, c| {
                if !answered[i] {
                    return Err(Error::new(ErrorKind::Connection, "did not answer"));
                }
                let context = format!("{label}: waiting on {}", c.redacted_url());
                wait::subscribed(c, &key, &chan, &context)
            })
            .into_iter()
            .map(|r| {
                r.ok().map(|sub| Sub {
                    sub,
                    registered: false,
                })
            })
            .collect();
        subs.iter()
            .any(Option::is_some)
            .then_some(Waiter { id, channel, subs })
    }

    /// Raises the fencing counter of the masters that granted this hold to
    /// its fence, the largest the quorum issued: any later quorum overlaps
    /// this one in at least one master, so it issues a larger token even if
    /// the masters' clocks disagree.
    fn spread_fence(&self, replies: &[Result<Tried>], fence: i64) {
        let k = &self.keys;
        let ttl_ms = validate::millis(self.ttl);
        std::thread::scope(|s| {
            for (client, reply) in self.clients.iter().zip(replies) {
                if matches!(reply, Ok(Tried::Acquired(f)) if *f < fence) {
                    s.spawn(move || {
                        let call = LOCK_FENCE.call(&[&k.fence]).arg(fence).arg(ttl_ms);
                        // Best effort: a master that fails here counts as down.
                        let _ = call.run::<i64>(client, &self.label);
                    });
                }
            }
        });
    }

    /// Releases `token` on every master; one reply per master (1: released).
    fn release_everywhere(&self, token: &str) -> Vec<Result<i64>> {
        let (k, label, token) = (self.keys.clone(), self.label.clone(), token.to_string());
        self.on_all(move |c| {
            let call = LOCK_RELEASE
                .call(&[&k.lock, &k.fence, &k.waiters, &k.leases])
                .arg(&token)
                .arg(&k.channel);
            call.run::<i64>(c, &label)
        })
    }

    /// The error to report when fewer than a quorum of masters answered
    /// `replies` at all (errors and timeouts are not answers): the first
    /// error, with how many answered.
    fn unreachable<T>(&self, replies: &[Result<T>]) -> Option<Error> {
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

    fn held_token(&self) -> Option<String> {
        self.state
            .lock_unpoisoned()
            .as_ref()
            .filter(|h| h.pid == crate::fork::current_pid())
            .map(|h| h.token.clone())
    }

    /// Releases the lock on every master. Fails with NotOwned when this object
    /// does not hold it or fewer than a quorum of masters still had it, and
    /// with the connection error when fewer than a quorum answered (the hold
    /// is given up either way; what could not be released expires).
    pub fn release(&self) -> Result<()> {
        let Some(token) = self.held_token() else {
            return Err(self.not_owned("this object does not hold it"));
        };
        let replies = self.release_everywhere(&token);
        *self.state.lock_unpoisoned() = None;
        if let Some(e) = self.unreachable(&replies) {
            self.lost.store(true, Ordering::Release);
            return Err(e);
        }
        let released = replies.iter().filter(|r| matches!(r, Ok(1))).count();
        if released >= self.quorum() {
            Ok(())
        } else {
            self.lost.store(true, Ordering::Release);
            Err(self.not_owned(&format!(
                "only {released} of {} masters still held it (quorum {})",
                self.clients.len(),
                self.quorum()
            )))
        }
    }

    /// Sets the TTL on every master to `ttl` (default: the lock's ttl); needs a
    /// quorum and positive validity, else the lock is released and reported lost.
    pub fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        let ttl = ttl.unwrap_or(self.ttl);
        if ttl < Duration::from_millis(1) || ttl.as_secs_f64() > validate::MAX_SECONDS {
            return Err(Error::invalid(format!(
                "ttl must be between 0.001 s and ten years, got {ttl:?}"
            )));
        }
        let Some(token) = self.held_token() else {
            return Err(self.not_owned("this object does not hold it"));
        };
        let start = Instant::now();
        let (k, label, owner) = (self.keys.clone(), self.label.clone(), token.clone());
        let replies = self.on_all(move |c| {
            let call = LOCK_EXTEND
                .call(&[&k.lock, &k.fence])
                .arg(&owner)
                .arg(validate::millis(ttl));
            call.run::<i64>(c, &label)
        });
        if let Some(e) = self.unreachable(&replies) {
            self.release_everywhere(&token);
            *self.state.lock_unpoisoned() = None;
            self.lost.store(true, Ordering::Release);
            return Err(e);
        }
        let ok = replies.iter().filter(|r| matches!(r, Ok(1))).count();
        let validity = ttl.checked_sub(start.elapsed() + ttl / 100 + Duration::from_millis(2));
        match validity.filter(|v| !v.is_zero() && ok >= self.quorum()) {
            Some(v) => {
                if let Some(h) = self.state.lock_unpoisoned().as_mut() {
                    h.valid_until = start + v;
                }
                Ok(())
            }
            None => {
                self.release_everywhere(&token);
                *self.state.lock_unpoisoned() = None;
                self.lost.store(true, Ordering::Release);
                Err(self.not_owned(&format!(
                    "only {ok} of {} masters extended it (quorum {})",
                    self.clients.len(),
                    self.quorum()
                )))
            }
        }
    }

    /// True when a quorum of masters has the key (anyone holds it).
    pub fn locked(&self) -> Result<bool> {
        let (key, label) = (self.keys.lock.clone(), self.label.clone());
        let replies = self.on_all(move |c| c.query::<bool>(&label, redis::cmd("EXISTS").arg(&key)));
        if let Some(e) = self.unreachable(&replies) {
            return Err(e);
        }
        let yes = replies.iter().filter(|r| matches!(r, Ok(true))).count();
        Ok(yes >= self.quorum())
    }

    /// True when this object holds the lock on a quorum and is within validity.
    pub fn owned(&self) -> Result<bool> {
        let Some(token) = self.held_token() else {
            return Ok(false);
        };
        if self.lost() {
            return Ok(false);
        }
        let (key, label) = (self.keys.lock.clone(), self.label.clone());
        let replies =
            self.on_all(move |c| c.query::<Option<Vec<u8>>>(&label, redis::cmd("GET").arg(&key)));
        if let Some(e) = self.unreachable(&replies) {
            return Err(e);
        }
        let yes = replies
            .iter()
            .filter(|r| matches!(r, Ok(Some(v)) if v == token.as_bytes()))
            .count();
        Ok(yes >= self.quorum())
    }

    /// The token of the current hold.
    pub fn token(&self) -> Option<String> {
        self.held_token()
    }

    /// The largest fencing token the quorum issued for this hold; increasing
    /// across holders (every master of the quorum is raised to it).
    pub fn fencing_token(&self) -> Option<i64> {
        self.state
            .lock_unpoisoned()
            .as_ref()
            .filter(|h| h.pid == crate::fork::current_pid())
            .map(|h| h.fence)
    }

    /// True when the hold was lost or its validity ran out without an extend.
    pub fn lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        self.state
            .lock_unpoisoned()
            .as_ref()
            .is_some_and(|h| h.pid == crate::fork::current_pid() && Instant::now() >= h.valid_until)
    }

    fn not_owned(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::NotOwned,
            format!("{}: not owned: {why}", self.label),
        )
    }
}

/// A waiting Redlock's subscriptions, one per master (see the module docs).
struct Waiter {
    id: String,
    channel: Vec<u8>,
    /// Per master: its subscription, if one could be made and still works.
    subs: Vec<Option<Sub>>,
}

struct Sub {
    sub: Subscriber,
    /// The last attempt registered us there (the key was busy); a key that
    /// attempt took, it took with our registration.
    registered: bool,
}

impl Waiter {
    /// Notes where the last attempt left us registered; a master that failed
    /// probably broke its subscription too: it is dropped.
    fn update(&mut self, replies: &[Result<Tried>]) {
        for (slot, reply) in self.subs.iter_mut().zip(replies) {
            match (slot.as_mut(), reply) {
                (Some(s), Ok(tried)) => s.registered = matches!(tried, Tried::Busy(_)),
                (Some(_), Err(_)) => *slot = None,
                (None, _) => {}
            }
        }
    }

    /// Waits up to `pause` for a hand-over message on the first master where
    /// we are registered (or just pauses if there is none). Only the
    /// interrupt hook is an error; a broken subscription is dropped.
    fn listen(&mut self, pause: Duration, interrupt: Option<Interrupt<'_>>) -> Result<()> {
        let slot = self
            .subs
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|s| s.registered));
        let Some(slot) = slot else {
            return wait::pause(pause.min(RETRY_MAX), interrupt);
        };
        // Tell the hook's verdict apart from a broken connection.
        let stopped = &Cell::new(false);
        let watched = interrupt.map(|check| move || check().inspect_err(|_| stopped.set(true)));
        let hook: Option<Interrupt<'_>> = watched.as_ref().map(|h| h as _);
        let heard = match slot.as_mut() {
            Some(s) => wait::listen(&mut s.sub.conn, &self.channel, pause, hook, "waiting"),
            None => Ok(None),
        };
        match heard {
            Ok(_) => Ok(()),
            Err(e) if stopped.get() => Err(e),
            Err(_) => {
                *slot = None;
                Ok(())
            }
        }
    }

    /// Deregisters where registered (on all those masters at once, each
    /// within the master budget); a key handed over meanwhile is kept when
    /// the Redlock is `held` (it is part of the hold), else passed on. Each
    /// subscription is left for the next user of its connection to drop (as
    /// after a `Lock` wait), or dropped now if deregistering failed.
    fn close(self, redlock: &Redlock, token: &str, held: bool) {
        let registered: Vec<bool> = self
            .subs
            .iter()
            .map(|s| s.as_ref().is_some_and(|s| s.registered))
            .collect();
        let member = format!("{}|{}|{token}", self.id, validate::millis(redlock.ttl));
        let (k, label, token) = (
            redlock.keys.clone(),
            redlock.label.clone(),
            token.to_string(),
        );
        let left = redlock.on_each(move |i, client| {
            if !registered[i] {
                return Ok(());
            }
            let call = LOCK_LEAVE
                .call(&[&k.lock, &k.fence, &k.waiters, &k.leases])
                .arg(&member)
                .arg(&token)
                .arg(if held { "0" } else { "1" })
                .arg(&k.channel);
            call.run::<Vec<i64>>(client, &label).map(drop)
        });
        for ((client, slot), left) in redlock.clients.iter().zip(self.subs).zip(left) {
            let Some(Sub { mut sub, .. }) = slot else {
                continue;
            };
            if left.is_ok() {
                sub.leftover = Some(self.channel.clone());
                client.checkin_subscriber(sub);
            } else if sub.conn.unsubscribe_resp3(&self.channel).is_ok() {
                client.checkin_subscriber(sub);
            }
        }
    }
}

impl DistributedLock for Redlock {
    fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        Redlock::acquire(self, wait, interrupt)
    }
    fn release(&self) -> Result<()> {
        Redlock::release(self)
    }
    fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        Redlock::extend(self, ttl)
    }
    fn locked(&self) -> Result<bool> {
        Redlock::locked(self)
    }
    fn owned(&self) -> Result<bool> {
        Redlock::owned(self)
    }
    fn token(&self) -> Option<String> {
        Redlock::token(self)
    }
    fn fencing_token(&self) -> Result<Option<i64>> {
        Ok(Redlock::fencing_token(self))
    }
    fn lost(&self) -> bool {
        Redlock::lost(self)
    }
    fn name(&self) -> &[u8] {
        &self.name
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// A random duration in [max/10, max], from the token RNG.
fn jitter(max: Duration) -> Duration {
    let r = uuid::Uuid::new_v4().as_u128() as u64 % 1000;
    max / 10 + (max * 9 / 10) * r as u32 / 1000
}
