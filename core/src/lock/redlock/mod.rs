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

mod masters;
mod waiter;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use self::masters::MIN_MASTER_BUDGET;
use self::masters::Masters;
use self::waiter::{RETRY_MAX, Waiter};
use super::{DistributedLock, Tried, acquire_call, extend_call, not_owned, release_call};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{LockKeys, label, new_token};
use crate::scripts::LOCK_FENCE;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt, Wait};

/// Longest pause between two attempts of a waiter listening on a master.
const NOTIFIED_RECHECK: Duration = Duration::from_millis(250);

/// A lock held on a majority of independent Redis masters.
pub struct Redlock {
    masters: Masters,
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
            .field("masters", &self.masters.clients().len())
            .finish()
    }
}

impl Redlock {
    /// A Redlock on `name` over `clients` (independent masters; 3 or 5 usual).
    pub fn new(clients: Vec<Client>, name: &[u8], ttl: Duration, prefix: &[u8]) -> Result<Self> {
        validate::name(name, "lock name")?;
        let label = label("redlock", name);
        let masters = Masters::new(clients, (ttl / 10).max(MIN_MASTER_BUDGET), &label)?;
        validate::lifetime(ttl, "ttl")?;
        Ok(Self {
            keys: LockKeys::new(prefix, name),
            label,
            name: name.to_vec(),
            masters,
            ttl,
            state: Mutex::new(None),
            lost: AtomicBool::new(false),
        })
    }

    /// Votes needed: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.masters.quorum()
    }

    /// How long each master has to answer one request: a tenth of the TTL,
    /// at least 50 ms (`MIN_MASTER_BUDGET`).
    pub fn master_budget(&self) -> Duration {
        self.masters.budget()
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
            let ttl_ms = validate::millis(self.ttl);
            let held = matches!(outcome, Ok(true));
            w.close(&self.masters, &self.keys, &self.label, &token, ttl_ms, held);
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
                Some(w) => w.listening(),
                None => vec![false; self.masters.clients().len()],
            };
            let members = waiter.as_ref().map(Waiter::members).unwrap_or_default();
            let (k, label, owner) = (self.keys.clone(), self.label.clone(), token.to_string());
            let replies = self.masters.on_each(move |i, c| {
                let waiter = if listening[i] {
                    members[i].as_str()
                } else {
                    ""
                };
                let call = acquire_call(&k, &owner, ttl_ms, waiter, false, lease_ms, false);
                call.run::<Tried>(c, &label)
            });
            let elapsed = start.elapsed();
            if let Some(w) = waiter.as_mut() {
                w.update(&replies);
            }
            if let Some(e) = self.masters.unreachable(&replies) {
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
            if waiter.as_ref().is_some_and(Waiter::is_broken) {
                *waiter = None; // every subscription broke: start over
            }
            if waiter.is_none() {
                *waiter = Waiter::subscribe(&self.masters, &self.keys, &self.label, &replies);
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

    /// Raises the fencing counter of the masters that granted this hold to
    /// its fence, the largest the quorum issued: any later quorum overlaps
    /// this one in at least one master, so it issues a larger token even if
    /// the masters' clocks disagree.
    fn spread_fence(&self, replies: &[Result<Tried>], fence: i64) {
        let k = &self.keys;
        let ttl_ms = validate::millis(self.ttl);
        std::thread::scope(|s| {
            for (client, reply) in self.masters.clients().iter().zip(replies) {
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
        let (call, label) = (release_call(&self.keys, token), self.label.clone());
        self.masters.on_all(move |c| call.run::<i64>(c, &label))
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
        if let Some(e) = self.masters.unreachable(&replies) {
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
                self.masters.clients().len(),
                self.quorum()
            )))
        }
    }

    /// Sets the TTL on every master to `ttl` (default: the lock's ttl); needs a
    /// quorum and positive validity, else the lock is released and reported lost.
    pub fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        let ttl = match ttl {
            Some(ttl) => validate::lifetime(ttl, "ttl")?,
            None => self.ttl,
        };
        let Some(token) = self.held_token() else {
            return Err(self.not_owned("this object does not hold it"));
        };
        let start = Instant::now();
        let call = extend_call(&self.keys, &token, validate::millis(ttl));
        let label = self.label.clone();
        let replies = self.masters.on_all(move |c| call.run::<i64>(c, &label));
        if let Some(e) = self.masters.unreachable(&replies) {
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
                    self.masters.clients().len(),
                    self.quorum()
                )))
            }
        }
    }

    /// True when a quorum of masters has the key (anyone holds it).
    pub fn locked(&self) -> Result<bool> {
        let (key, label) = (self.keys.lock.clone(), self.label.clone());
        let replies = self
            .masters
            .on_all(move |c| c.query::<bool>(&label, redis::cmd("EXISTS").arg(&key)));
        if let Some(e) = self.masters.unreachable(&replies) {
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
        let replies = self
            .masters
            .on_all(move |c| c.query::<Option<Vec<u8>>>(&label, redis::cmd("GET").arg(&key)));
        if let Some(e) = self.masters.unreachable(&replies) {
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
        not_owned(&self.label, why)
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
