//! Redlock: one lock over N independent Redis masters.
//!
//! Each attempt sends the same acquire script (same token) to every master in
//! parallel. It succeeds when at least N/2+1 masters that may vote said yes,
//! every one of them knows the hold's fencing token (see below), *and* the
//! validity left — `ttl − elapsed (monotonic, from the attempt's start) −
//! drift`, where drift is 1 % of the ttl plus 2 ms — is positive when the
//! call is about to return (and longer than the steps still to come).
//! Otherwise the attempt is undone: released on every master at once. A
//! master that errors or does not answer counts as a no; but when fewer than
//! a quorum of masters answered at all, nothing could be decided: a try-once
//! fails with the first error (a `Connection` error, as a single server that
//! is down would), and a wait asks again with backoff until its deadline (as
//! a single server's wait rides out a restart), then fails saying how long it
//! tried.
//! Extend re-checks the quorum and the validity the same way (and refuses a
//! hold whose validity already ran out).
//!
//! A master that hangs (stopped, or behind a link that stops forwarding) must
//! not hold the others up, nor the call past its time: as the algorithm asks,
//! each master gets a time small against the TTL
//! ([`Redlock::master_budget`]: a tenth of it, at least
//! [`MIN_MASTER_BUDGET`]) to answer each request — the acquire, the fencing
//! token's spread, the undo, a release or extend — after which it counts as
//! not answering; every step also stays within the call's budget (its wait,
//! plus one command timeout: see `budget.rs`). A request whose reply was lost
//! may still run on that master later: an undo or release that did not get
//! its reply is handed to the settlement keeper (`settle.rs`), which releases
//! the token there once the master answers (the key expires by its TTL at
//! the latest).
//!
//! A master that restarted lately (its data, and so the locks it held, may
//! be gone) has no vote for one TTL: see `servers.rs`. While too few masters
//! may vote, an attempt cannot succeed: a try-once, or a wait that would end
//! before enough of them may vote again, fails with a
//! [`Quorum`](crate::ErrorKind::Quorum) error saying so; a longer wait waits.
//!
//! # Fencing tokens
//!
//! Each master that grants the lock draws a token (its counter, raised past
//! its clock in µs); the hold's token is the largest of the quorum, and every
//! master of the quorum is raised to it before the call returns (a master
//! that cannot be raised in time does not count). Any later quorum overlaps
//! this one in a master that voted for both, which then issues a larger
//! token: tokens increase across holders as long as the quorums overlap in a
//! master that kept its data (what keeping restarted masters out ensures)
//! and the counter has not expired (ttl + 60 s after the hold's last write,
//! after which tokens follow the masters' clocks: they still increase unless
//! those clocks are more than that far apart or step back). See
//! docs/deployment.md.
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
//!
//! # Renewal, metrics and events
//!
//! With [`Redlock::auto_renew`] on, a thread of the hold (`renew.rs`)
//! extends it every ttl/3 through the same quorum-checked extend; a renewal
//! that finds the quorum gone, or fails until the validity runs out, gives
//! the hold up and reports it lost, naming this object (its lost-lock hook
//! is then due). Acquire waits, missed acquires, hold times and lost holds
//! count in [`ops::metrics`](crate::ops::metrics) and report in
//! [`ops::events`](crate::ops::events) exactly as a `Lock`'s do.

mod acquire;
mod masters;
mod renew;
mod servers;
mod steps;
mod undo;
mod waiter;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::acquire::Attempts;
pub use self::masters::MIN_MASTER_BUDGET;
use self::masters::Masters;
pub use self::steps::RedlockSteps;
use super::{DistributedLock, extend_call, not_owned};
use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{LockKeys, label};
use crate::ops::{self, LockRef};
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{Interrupt, Wait};

/// Longest pause between two attempts of a waiter listening on a master.
const NOTIFIED_RECHECK: Duration = Duration::from_millis(250);

/// A lock held on a majority of independent Redis masters.
pub struct Redlock {
    inner: Arc<Inner>,
}

/// A Redlock's state, shared with the renewal thread of its hold
/// (`renew.rs`), which holds it weakly.
struct Inner {
    masters: Masters,
    keys: LockKeys,
    name: Vec<u8>,
    label: String,
    ttl: Duration,
    state: Mutex<Option<Held>>,
    lost: AtomicBool,
    /// This object, as events and lost-lock hooks name it (`ops`).
    me: LockRef,
    auto_renew: AtomicBool,
    /// The renewal of the current hold: dropping it ends its thread.
    renewal: Mutex<Option<renew::Renewal>>,
}

#[derive(Clone)]
struct Held {
    token: String,
    fence: i64,
    pid: u32,
    /// When it was taken (the hold time metric).
    since: Instant,
    /// The start of the last confirmed acquire or extend, plus its validity.
    valid_until: Instant,
    /// The TTL the keys were last given (the lock's, or an extend's): how
    /// long a key may outlive a release that did not get its reply.
    ttl: Duration,
}

/// What an extend of a hold got (see [`Inner::try_extend`]).
enum Extended {
    /// A quorum extended it within its validity (the hold is updated).
    Done,
    /// Too few masters extended it in time: `yes` did, `no` (of those that
    /// may vote) answered that the key is not this hold's.
    Refused { yes: usize, no: usize },
    /// Fewer than a quorum of masters answered.
    Unreachable(Error),
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("name", &self.inner.label)
            .field("masters", &self.inner.masters.clients().len())
            .finish()
    }
}

impl Redlock {
    /// A Redlock on `name` over `clients` (independent masters; 3 or 5 usual).
    pub fn new(clients: Vec<Client>, name: &[u8], ttl: Duration, prefix: &[u8]) -> Result<Self> {
        validate::name(name, "lock name")?;
        let label = label("redlock", name);
        validate::lifetime(ttl, "ttl")?;
        let budget = (ttl / 10).max(MIN_MASTER_BUDGET);
        let masters = Masters::new(clients, budget, ttl, &label)?;
        let inner = Inner {
            keys: LockKeys::new(prefix, name),
            label,
            name: name.to_vec(),
            masters,
            ttl,
            state: Mutex::new(None),
            lost: AtomicBool::new(false),
            me: LockRef::new("redlock", name),
            auto_renew: AtomicBool::new(false),
            renewal: Mutex::new(None),
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The same Redlock, renewing its holds in the background (`on`): every
    /// ttl/3 a thread of the hold extends it on every master, with the same
    /// quorum and validity checks as [`Redlock::extend`]. A renewal that
    /// fails is tried again while the validity lasts; one that finds the
    /// quorum gone, or the validity run out, gives the hold up (released
    /// everywhere) and reports it lost (a
    /// [`LockLost`](crate::ops::events::EventKind::LockLost) event naming
    /// this object: its lost-lock hook is due). Off by default.
    #[must_use]
    pub fn auto_renew(self, on: bool) -> Self {
        self.inner.auto_renew.store(on, Ordering::Release);
        self
    }

    /// This object's id, unique in the process (shared with
    /// [`Lock::id`](crate::Lock::id)'s): what events about it name it by.
    pub fn id(&self) -> u64 {
        self.inner.me.id
    }

    /// Votes needed: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.inner.masters.quorum()
    }

    /// How long each master has to answer one request: a tenth of the TTL,
    /// at least 50 ms (`MIN_MASTER_BUDGET`).
    pub fn master_budget(&self) -> Duration {
        self.inner.masters.budget()
    }

    /// Takes the lock on a quorum of masters, waiting as `wait` allows (see
    /// the module documentation for how it waits). Ends within the wait plus
    /// one command timeout (a try-once: within one command timeout).
    pub fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        let acquired = self.inner.acquire(wait, interrupt)?;
        if acquired {
            renew::start_if_on(&self.inner);
        }
        Ok(acquired)
    }

    /// Releases the lock on every master. Fails with NotOwned when this object
    /// does not hold it or fewer than a quorum of masters still had it, and
    /// with the connection error when fewer than a quorum answered (the hold
    /// is given up either way; a master that did not answer is released by
    /// the keeper once it does, its key expires by its TTL at the latest).
    pub fn release(&self) -> Result<()> {
        self.inner.release()
    }

    /// Sets the TTL on every master to `ttl` (default: the lock's ttl); needs a
    /// hold still within its validity, then a quorum and positive validity
    /// again, else the lock is released and reported lost.
    pub fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        self.inner.extend(ttl)
    }

    /// True when a quorum of masters has the key (anyone holds it).
    pub fn locked(&self) -> Result<bool> {
        self.inner.locked()
    }

    /// True when this object holds the lock on a quorum and is within validity.
    pub fn owned(&self) -> Result<bool> {
        self.inner.owned()
    }

    /// The token of the current hold.
    pub fn token(&self) -> Option<String> {
        self.inner.held().map(|h| h.token)
    }

    /// The largest fencing token the quorum issued for this hold; increasing
    /// across holders (every master of the quorum is raised to it).
    pub fn fencing_token(&self) -> Option<i64> {
        self.inner.held().map(|h| h.fence)
    }

    /// True when the hold was lost or its validity ran out without an extend.
    pub fn lost(&self) -> bool {
        self.inner.lost()
    }
}

impl Inner {
    /// The clock drift allowed for a hold of `ttl`: 1 % of it plus 2 ms.
    fn drift(ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(2)
    }

    /// Votes needed: N/2 + 1.
    fn quorum(&self) -> usize {
        self.masters.quorum()
    }

    /// The budget of a call that does not wait: one command timeout.
    fn one_call(&self) -> Budget {
        Budget::one_call(self.masters.command_timeout())
    }

    /// See [`Redlock::acquire`]; counted in the metrics (a wait, or a miss).
    fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        let mut a = self.attempts(wait);
        let outcome = self.acquire_as(&mut a, interrupt);
        self.conclude(a, outcome)
    }

    /// Ends the acquire call `a`, whose attempts came to `outcome`: what it
    /// may have left on masters is undone, its waiter deregistered, and the
    /// call counted in the metrics.
    fn conclude(&self, a: Attempts, outcome: Result<bool>) -> Result<bool> {
        let Attempts {
            token,
            budget,
            started,
            waiter,
            lingering,
            ..
        } = a;
        if !matches!(outcome, Ok(true)) {
            // The call is over: what it could not undo is undone by the
            // keeper once those masters answer (not earlier: a later
            // attempt of the call could have taken the key again with the
            // same token, and would have lost it to the keeper).
            for (i, _) in lingering.iter().enumerate().filter(|(_, l)| **l) {
                self.release_later(i, &token, self.ttl);
            }
        }
        if let Some(w) = waiter {
            let ttl_ms = validate::millis(self.ttl);
            let held = matches!(outcome, Ok(true));
            w.close(&self.masters, &self.keys, &self.label, &token, ttl_ms, held);
        }
        let outcome = if matches!(outcome, Ok(true)) && self.lost() {
            // The validity left when the quorum was confirmed covered one
            // master budget, all that closing the wait may take: should it
            // have run out all the same, the hold is given up, never
            // reported.
            self.give_up(&token, self.ttl, budget);
            Ok(false)
        } else {
            outcome
        };
        match outcome {
            Ok(true) => ops::acquired(&self.me, started.elapsed()),
            Ok(false) => ops::missed(),
            Err(_) => {}
        }
        outcome
    }

    /// The hold of this process, if any.
    fn held(&self) -> Option<Held> {
        self.state
            .lock_unpoisoned()
            .as_ref()
            .filter(|h| h.pid == crate::fork::current_pid())
            .cloned()
    }

    /// True while `token`'s hold is this object's current one.
    fn holds(&self, token: &str) -> bool {
        self.held().is_some_and(|h| h.token == token)
    }

    /// Reports the current hold lost (`why`; `watchdog`: found by its
    /// renewal): once per hold, whoever finds it first.
    fn report_lost(&self, why: &str, watchdog: bool) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            ops::lock_lost(&self.me, why, watchdog);
        }
    }

    /// See [`Redlock::release`].
    fn release(&self) -> Result<()> {
        let Some(held) = self.held() else {
            return Err(self.not_owned("this object does not hold it"));
        };
        *self.state.lock_unpoisoned() = None;
        self.stop_renewal();
        let released = self.release_everywhere(&held.token, self.one_call());
        let mut unanswered = 0;
        for (i, release) in released.replies.iter().enumerate() {
            if release.is_err() {
                self.release_later(i, &held.token, held.ttl);
                unanswered += 1;
            }
        }
        if let Some(e) = self.masters.unreachable(&released.replies) {
            ops::released(held.since);
            self.lost.store(true, Ordering::Release);
            return Err(e.context_after(
                "the masters that did not answer are released in the background once they \
                 answer (the keys expire by their TTL at the latest)",
            ));
        }
        let count = self.masters.votes(&released, |r| matches!(r, Ok(1)));
        if count >= self.quorum() {
            ops::released(held.since);
            Ok(())
        } else {
            let masters = self.masters.clients().len();
            let quorum = self.quorum();
            self.report_lost(
                &format!("a release found only {count} of {masters} masters still holding it"),
                false,
            );
            let unanswered = match unanswered {
                0 => String::new(),
                n => format!("; {n} did not answer and are released in the background"),
            };
            Err(self.not_owned(&format!(
                "only {count} of {masters} masters still held it (quorum {quorum}){unanswered}"
            )))
        }
    }

    /// See [`Redlock::extend`].
    fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        let ttl = match ttl {
            Some(ttl) => validate::lifetime(ttl, "ttl")?,
            None => self.ttl,
        };
        let Some(held) = self.held() else {
            return Err(self.not_owned("this object does not hold it"));
        };
        let budget = self.one_call();
        if Instant::now() >= held.valid_until {
            let why = "its validity (ttl − elapsed − clock drift) ran out before the extend";
            self.report_lost(why, false);
            self.give_up(&held.token, held.ttl, budget);
            return Err(self.not_owned(why));
        }
        // Keys extended may live `ttl` from now.
        let key_ttl = ttl.max(held.ttl);
        match self.try_extend(&held, ttl, budget) {
            Extended::Done => Ok(()),
            Extended::Unreachable(e) => {
                self.report_lost("fewer than a quorum of masters answered an extend", false);
                self.give_up(&held.token, key_ttl, budget);
                Err(e)
            }
            Extended::Refused { yes: count, .. } => {
                let why = format!(
                    "only {count} of {} masters extended it in time (quorum {})",
                    self.masters.clients().len(),
                    self.quorum()
                );
                self.report_lost(&format!("an extend found {why}"), false);
                self.give_up(&held.token, key_ttl, budget);
                Err(self.not_owned(&why))
            }
        }
    }

    /// Sets the keys of `held` to `ttl` on every master within `budget`; on
    /// a quorum within a positive validity, the hold's validity is moved.
    /// Gives nothing up (the caller decides).
    fn try_extend(&self, held: &Held, ttl: Duration, budget: Budget) -> Extended {
        let start = Instant::now();
        self.masters.uses_ttl(ttl);
        let call = extend_call(&self.keys, &held.token, validate::millis(ttl));
        let label = self.label.clone();
        let extended = self.masters.ask_checked(budget, move |_, c, within| {
            c.run_within(within, &label, |con| call.query::<i64>(con))
        });
        if let Some(e) = self.masters.unreachable(&extended.replies) {
            return Extended::Unreachable(e);
        }
        let count = self.masters.votes(&extended, |r| matches!(r, Ok(1)));
        let validity = ttl.checked_sub(start.elapsed() + Self::drift(ttl));
        match validity.filter(|v| !v.is_zero() && count >= self.quorum()) {
            Some(v) => {
                if let Some(h) = self.state.lock_unpoisoned().as_mut()
                    && h.token == held.token
                {
                    h.valid_until = start + v;
                    h.ttl = ttl;
                }
                Extended::Done
            }
            None => Extended::Refused {
                yes: count,
                no: self.masters.votes(&extended, |r| matches!(r, Ok(0))),
            },
        }
    }

    /// True when a quorum of masters has the key (anyone holds it).
    fn locked(&self) -> Result<bool> {
        let (key, label) = (self.keys.lock.clone(), self.label.clone());
        let asked = self
            .masters
            .ask_checked(self.one_call(), move |_, c, within| {
                c.run_within(within, &label, |con| {
                    redis::cmd("EXISTS").arg(&key).query::<bool>(con)
                })
            });
        if let Some(e) = self.masters.unreachable(&asked.replies) {
            return Err(e);
        }
        Ok(self.masters.votes(&asked, |r| matches!(r, Ok(true))) >= self.quorum())
    }

    /// True when this object holds the lock on a quorum and is within validity.
    fn owned(&self) -> Result<bool> {
        let Some(held) = self.held() else {
            return Ok(false);
        };
        if self.lost() {
            return Ok(false);
        }
        let (key, label) = (self.keys.lock.clone(), self.label.clone());
        let asked = self
            .masters
            .ask_checked(self.one_call(), move |_, c, within| {
                c.run_within(within, &label, |con| {
                    redis::cmd("GET").arg(&key).query::<Option<Vec<u8>>>(con)
                })
            });
        if let Some(e) = self.masters.unreachable(&asked.replies) {
            return Err(e);
        }
        let token = held.token.as_bytes();
        let yes = self
            .masters
            .votes(&asked, |r| matches!(r, Ok(Some(v)) if v == token));
        Ok(yes >= self.quorum() && !self.lost())
    }

    /// True when the hold was lost or its validity ran out without an extend.
    fn lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        self.held().is_some_and(|h| Instant::now() >= h.valid_until)
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
        &self.inner.name
    }
    fn ttl(&self) -> Duration {
        self.inner.ttl
    }
}

/// A random duration in [max/10, max], from the token RNG.
fn jitter(max: Duration) -> Duration {
    let r = uuid::Uuid::new_v4().as_u128() as u64 % 1000;
    max / 10 + (max * 9 / 10) * r as u32 / 1000
}
