//! The [`Lock`]: a distributed lock on one deployment (a server, a Sentinel
//! master or a Cluster).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fence::{self, Fence};
use super::waiter::{LockWaiter, Trail};
use super::{
    Abandon, DistributedLock, Extender, LockOptions, ReleaseHold, Tried, acquire_call, extend_call,
    legacy, not_owned, release_call, release_call_with_turns,
};
use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{LockKeys, label, new_token};
use crate::ops::LockRef;
use crate::scripts::Call;
use crate::settle;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt, Wait, WaitSpec};
use crate::watchdog::{self, Lease, Renew};

/// First pause before a round trip of a call is tried again after a
/// connection error; it doubles up to [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Longest pause between two tries of a call that rides out a connection error.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A distributed lock on one name.
pub struct Lock {
    client: Client,
    keys: LockKeys,
    name: Vec<u8>,
    label: String,
    opts: LockOptions,
    state: Mutex<State>,
    /// This object, as events and lost-lock hooks name it (`ops`).
    me: LockRef,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock").field("name", &self.label).finish()
    }
}

#[derive(Default)]
struct State {
    held: Option<Held>,
    /// Set when a release/extend found the lock gone while we believed we held it.
    lost: bool,
}

struct Held {
    token: String,
    fence: Fence,
    pid: u32,
    depth: u32,
    lease: Option<Arc<Lease>>,
    /// When it was taken (the hold time metric).
    since: Instant,
    /// Its extends (shared with the watchdog's renewals).
    extender: Arc<Extender>,
    /// Taken after waiting: others probably wait too, and the release will
    /// likely hand the lock over (see [`Lock::release_token`]).
    waited: bool,
    /// The hold is ours at least until then (monotonic clock): the send time
    /// of the round trip that (re)started its TTL plus the TTL, advanced by
    /// each confirmed extend (the lease tracks its renewals).
    valid_until: Instant,
    /// The TTL the key was last given (the lock's, or an extend's).
    ttl: Duration,
    /// Who acquired it (a thread, a greenlet: see [`Lock::acquire_as`]).
    caller: Option<u64>,
    /// The client's count of master changes when it was taken.
    moves: u64,
}

impl Held {
    /// True while the hold is ours for sure (its validity has not run out).
    fn valid(&self, now: Instant) -> bool {
        let renewed = self.lease.as_ref().map(|l| l.valid_until());
        renewed.map_or(self.valid_until, |r| r.max(self.valid_until)) > now
            && !self.lease.as_ref().is_some_and(|l| l.is_lost())
    }
}

impl State {
    /// The hold of this process (a forked child does not own its parent's locks).
    fn held_here(&mut self) -> Option<&mut Held> {
        let pid = crate::fork::current_pid();
        self.held.as_mut().filter(|h| h.pid == pid)
    }
}

/// The calling OS thread's identity (`pthread_self`, which Python's
/// `threading.get_ident()` also reports): the caller an acquire is made by
/// unless the binding names another ([`Lock::acquire_as`]).
pub fn caller_thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// True while `deadline` (`None`: never) has not passed.
fn time_left(deadline: Option<Instant>) -> bool {
    deadline.is_none_or(|d| Instant::now() < d)
}

impl Lock {
    /// A lock on `name` (any bytes, 1 to 4096 of them). Nothing is sent to
    /// Redis until the first operation.
    pub fn new(client: &Client, name: &[u8], opts: LockOptions) -> Result<Self> {
        validate::name(name, "lock name")?;
        validate::lifetime(opts.ttl, "ttl")?;
        validate::interval(opts.recheck, "recheck interval")?;
        static IDS: AtomicU64 = AtomicU64::new(1);
        Ok(Self {
            client: client.clone(),
            keys: LockKeys::new(&opts.prefix, name),
            label: label("lock", name),
            name: name.to_vec(),
            opts,
            state: Mutex::new(State::default()),
            me: LockRef {
                id: IDS.fetch_add(1, Ordering::Relaxed),
                name: name.to_vec(),
                label: label("lock", name),
            },
        })
    }

    /// This object's id, unique in the process: what events about it
    /// ([`ferrolock::ops::events`](crate::ops::events)) name it by.
    pub fn id(&self) -> u64 {
        self.me.id
    }

    /// A lock on `name` that adopts the hold of `token`: an owner token
    /// another object or process read with [`Lock::token`] and handed over
    /// (Laravel's `restoreLock($name, $owner)`, a serialized Symfony lock
    /// key). One round trip checks that `token` still holds the lock: if it
    /// does, the returned lock holds it as if it had acquired it (depth 1;
    /// the key's TTL is left as it is; auto-renewal, if set, starts now);
    /// if not, [`ErrorKind::NotOwned`] (expired, released, taken over, or
    /// never a token of this lock). The hold's fencing token is drawn anew
    /// when first read ([`Lock::fencing_token`]): larger than the one the
    /// original holder may have read, still smaller than every later hold's.
    pub fn restore(client: &Client, name: &[u8], opts: LockOptions, token: &str) -> Result<Self> {
        validate::name(token.as_bytes(), "token")?;
        let lock = Self::new(client, name, opts)?;
        let mut read = redis::pipe();
        read.cmd("GET")
            .arg(&lock.keys.lock)
            .cmd("PTTL")
            .arg(&lock.keys.lock);
        let sent = Instant::now();
        let (current, pttl): (Option<Vec<u8>>, i64) =
            lock.client.run(&lock.label, |c| read.query(c))?;
        if current.as_deref() != Some(token.as_bytes()) {
            return Err(
                lock.not_owned("the token does not hold it (expired, released or taken over)")
            );
        }
        let extender = Arc::new(Extender::new(lock.keys.clone(), token.to_owned()));
        let lease = lock.opts.auto_renew.then(|| {
            let renew = Box::new(RenewHold {
                extender: extender.clone(),
                me: lock.me.clone(),
            });
            let lease = Lease::new(lock.client.clone(), renew, lock.opts.ttl);
            watchdog::register(lease.clone());
            lease
        });
        // Valid for what is left of the key's TTL (none left, or no TTL at
        // all: not known to be valid).
        let left = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
        lock.state.lock_unpoisoned().held = Some(Held {
            token: token.to_owned(),
            fence: None,
            pid: crate::fork::current_pid(),
            depth: 1,
            lease,
            since: Instant::now(),
            extender,
            waited: false,
            valid_until: sent + left,
            ttl: lock.opts.ttl,
            caller: None,
            moves: lock.client.master_moves(),
        });
        Ok(lock)
    }

    /// The lock's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The Redis key holding the owner token.
    pub fn key(&self) -> &[u8] {
        &self.keys.lock
    }

    /// The options this lock was created with.
    pub fn options(&self) -> &LockOptions {
        &self.opts
    }

    /// Takes the lock, waiting as `wait` allows, on behalf of the calling
    /// thread (see [`Lock::acquire_as`]). Returns `Ok(false)` when the wait
    /// ran out. `interrupt` is consulted every 50 ms while waiting.
    ///
    /// Uncontended, a non-fair lock (without `min_replicas`) is taken with one
    /// plain `SET NX PX`, which draws no fencing token:
    /// [`Lock::fencing_token`] draws it when first read.
    ///
    /// Time: a try-once ([`Wait::Try`]) ends within one command timeout, a
    /// wait within its timeout plus one command timeout, whatever Redis does.
    /// A round trip whose reply is lost is tried again with the same token
    /// while the wait has time left (the acquire script recognises a hold
    /// that is already the token's); when the call gives up instead, the
    /// token is abandoned: released once the server answers, and recorded so
    /// that a late write of it holds nothing (see `lock_abandon-5.lua`).
    pub fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        self.acquire_as(wait, interrupt, Some(caller_thread_id()))
    }

    /// [`Lock::acquire`] with the caller's owner token instead of a fresh
    /// random one (redis-py's `acquire(token=…)`): 1 to 4096 bytes, unique
    /// to the caller, who is its owner. Acquiring with the token that holds
    /// the lock takes it again (as a retry after a lost reply must).
    pub fn acquire_with_token(
        &self,
        token: &str,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        validate::name(token.as_bytes(), "token")?;
        self.acquire_by(
            Some(token.to_owned()),
            wait,
            interrupt,
            Some(caller_thread_id()),
        )
    }

    /// [`Lock::acquire`] on behalf of `caller`: a thread id, or whatever runs
    /// as one (the current greenlet under gevent); `None` for callers that
    /// cannot be told apart (asyncio tasks on one thread).
    ///
    /// A non-reentrant lock that `caller` already holds (validly: not lost,
    /// not expired) is not waited for: that would wait for itself until the
    /// timeout, or forever while the watchdog renews the hold. Such a wait
    /// fails with [`ErrorKind::WouldDeadlock`] instead (a try-once answers
    /// `false`, the lock being busy). Other callers sharing the object wait
    /// as usual.
    pub fn acquire_as(
        &self,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
        caller: Option<u64>,
    ) -> Result<bool> {
        self.acquire_by(None, wait, interrupt, caller)
    }

    /// The acquire of [`Lock::acquire_as`] with `token` (`None`: a fresh
    /// random one, [`new_token`]).
    fn acquire_by(
        &self,
        token: Option<String>,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
        caller: Option<u64>,
    ) -> Result<bool> {
        if let Some(done) = self.reenter(wait, caller)? {
            return Ok(done);
        }
        let token = token.unwrap_or_else(new_token);
        let deadline = wait.deadline();
        let budget = self.budget_of(wait, deadline);
        self.precheck(budget)?;
        let trail = Trail::default();
        let taken = self.take(&token, wait, deadline, budget, interrupt, &trail);
        self.conclude(token, taken, budget, &trail, caller)
    }

    /// Before an acquire by `caller`: `Some` when it is answered without
    /// Redis (a reentrant lock held here counts one more acquire; a
    /// non-reentrant one that `caller` holds would wait for itself).
    pub(super) fn reenter(&self, wait: Wait, caller: Option<u64>) -> Result<Option<bool>> {
        if let Some(h) = self.state.lock_unpoisoned().held_here() {
            if self.opts.reentrant {
                h.depth += 1;
                return Ok(Some(true));
            }
            if caller.is_some() && h.caller == caller && h.valid(Instant::now()) {
                if wait == Wait::Try {
                    return Ok(Some(false)); // busy, as for anyone (`threading.Lock` does the same)
                }
                return Err(Error::new(
                    ErrorKind::WouldDeadlock,
                    format!(
                        "{}: already held by this caller (thread), and the lock is not \
                         reentrant: acquiring it again would wait for itself; release it \
                         first, or make the lock reentrant",
                        self.label
                    ),
                ));
            }
        }
        Ok(None)
    }

    /// The time of an acquire that waits as `wait` (until `deadline`).
    pub(super) fn budget_of(&self, wait: Wait, deadline: Option<Instant>) -> Budget {
        match wait {
            Wait::Try => self.client.one_call(),
            _ => Budget::wait(deadline, self.client.command_timeout()),
        }
    }

    /// What an acquire with `token` comes to once its attempts and wait
    /// ended with `taken` (see [`Lock::take`]): a hold recorded (confirmed
    /// on replicas first if asked, renewed if asked), or the token abandoned
    /// when a round trip's outcome was unknown and the acquire did not
    /// succeed.
    pub(super) fn conclude(
        &self,
        token: String,
        taken: Result<Option<(Fence, bool)>>,
        budget: Budget,
        trail: &Trail,
        caller: Option<u64>,
    ) -> Result<bool> {
        let (fence, waited) = match taken {
            Ok(Some(taken)) => taken,
            Ok(None) => {
                if trail.unsure.get() {
                    let _ = self.abandon(&token, budget);
                }
                crate::ops::metrics::count(&crate::ops::metrics::ACQUIRES_MISSED);
                return Ok(false);
            }
            Err(e) => {
                if e.outcome_unknown() || trail.unsure.get() {
                    // A server that just let a round trip time out is not
                    // waited for again: the keeper settles it.
                    let inline = if e.is_timeout() {
                        Budget::until(Instant::now())
                    } else {
                        budget
                    };
                    return Err(match self.abandon(&token, inline) {
                        Ok(()) => e.context_after("the acquire was undone"),
                        Err(_) => e.context_after(
                            "the acquire is undone in the background once the server \
                             answers (a hold it may have taken expires by its TTL at the latest)",
                        ),
                    });
                }
                return Err(e);
            }
        };
        let sent = trail.sent.get().unwrap_or_else(Instant::now);
        if self.opts.min_replicas > 0 {
            self.confirm_replicas(&token, budget)?;
        }
        crate::ops::acquired(&self.me, trail.started.elapsed());
        let extender = Arc::new(Extender::new(self.keys.clone(), token.clone()));
        let lease = self.opts.auto_renew.then(|| {
            let renew = Box::new(RenewHold {
                extender: extender.clone(),
                me: self.me.clone(),
            });
            let lease = Lease::new(self.client.clone(), renew, self.opts.ttl);
            watchdog::register(lease.clone());
            lease
        });
        let mut st = self.state.lock_unpoisoned();
        if let Some(old) = st.held.take().and_then(|h| h.lease) {
            watchdog::unregister(&old);
        }
        st.held = Some(Held {
            token,
            fence,
            pid: crate::fork::current_pid(),
            depth: 1,
            lease,
            since: Instant::now(),
            extender,
            waited,
            valid_until: sent + self.opts.ttl,
            ttl: self.opts.ttl,
            caller,
            moves: self.client.master_moves(),
        });
        st.lost = false;
        Ok(true)
    }

    /// What a wait on this lock needs: its client, keys and label.
    pub(super) fn wait_parts(&self) -> (&Client, &LockKeys, &str) {
        (&self.client, &self.keys, &self.label)
    }

    /// Checks, before anything is written, that the master has the
    /// replicas `min_replicas` asks for (see [`Lock::check_replicas`]).
    pub(super) fn precheck(&self, budget: Budget) -> Result<()> {
        if self.opts.min_replicas > 0 {
            self.check_replicas(budget)?;
        }
        Ok(())
    }

    /// One attempt without waiting; `Ok(true)` when taken.
    pub fn try_acquire(&self) -> Result<bool> {
        self.acquire(Wait::Try, None)
    }

    /// The attempts and the wait of one acquire with `token`: the fence of
    /// the hold taken and whether it waited, or `None` when the wait ran out.
    /// A connection error while the wait has time left is ridden out: the
    /// wait goes on (same token) after a pause.
    fn take(
        &self,
        token: &str,
        wait: Wait,
        deadline: Option<Instant>,
        budget: Budget,
        interrupt: Option<Interrupt<'_>>,
        trail: &Trail,
    ) -> Result<Option<(Fence, bool)>> {
        if let Some(taken) = self.take_first(token, wait, deadline, budget, trail)? {
            return Ok(taken);
        }
        let mut pause = FIRST_RETRY_PAUSE;
        let started = Instant::now();
        let mut failures = 0;
        loop {
            let spec = WaitSpec {
                deadline,
                recheck: self.opts.recheck,
                interrupt,
                label: &self.label,
            };
            let waiter = self.waiter(token, budget, trail);
            match wait::wait_loop(
                &self.client,
                &self.keys.lock,
                &self.keys.channel,
                spec,
                &waiter,
            ) {
                Ok(Some(fence)) => return Ok(Some((Some(fence), true))),
                Ok(None) => return Ok(None),
                Err(e) if e.is_transient() && time_left(deadline) => {
                    let left =
                        deadline.map_or(pause, |d| d.saturating_duration_since(Instant::now()));
                    wait::pause(pause.min(left), interrupt)?;
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                    failures += 1;
                }
                Err(e) if e.is_transient() && failures > 0 => {
                    return Err(e.context_after(&format!(
                        "tried for {:.1} s",
                        started.elapsed().as_secs_f64()
                    )));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The first attempt of [`Lock::take`]: `Some` when the acquire ends
    /// with it (taken, or a try-once that found the lock busy), `None` when
    /// it goes on to wait.
    pub(super) fn take_first(
        &self,
        token: &str,
        wait: Wait,
        deadline: Option<Instant>,
        budget: Budget,
        trail: &Trail,
    ) -> Result<Option<Option<(Fence, bool)>>> {
        match self.first_attempt(token, wait, budget, trail) {
            Ok(Some(fence)) => Ok(Some(Some((fence, false)))),
            Ok(None) if wait == Wait::Try => Ok(Some(None)),
            Ok(None) => Ok(None),
            Err(e) if !e.is_transient() => Err(e),
            // Its reply lost: a try-once tries again (same token) while its
            // command timeout lasts, to find a hold the lost one took ...
            Err(e) if wait == Wait::Try && (e.outcome_unknown() || trail.unsure.get()) => {
                self.try_again(token, budget, trail, e).map(Some)
            }
            Err(e) if wait == Wait::Try => Err(e),
            // ... and a wait goes on with its waiting attempts while it has time.
            Err(e) if !time_left(deadline) => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// A try-once whose attempt failed with `e` (a connection error: its
    /// reply may be lost): attempts of the full form with the same token,
    /// which find a hold the lost one took, while `budget` lasts.
    fn try_again(
        &self,
        token: &str,
        budget: Budget,
        trail: &Trail,
        mut e: Error,
    ) -> Result<Option<(Fence, bool)>> {
        let mut pause = FIRST_RETRY_PAUSE;
        while budget.left().is_some_and(|left| left > pause) {
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
            match self.waiter(token, budget, trail).attempt_as("") {
                Ok(Tried::Acquired(f)) => return Ok(Some((Some(f), false))),
                Ok(Tried::Busy(_)) => return Ok(None),
                Err(again) if again.is_transient() => e = again,
                Err(again) => return Err(again),
            }
        }
        Err(e)
    }

    /// The first attempt of an acquire; `Some(fence)` when taken.
    ///
    /// A non-fair lock first tries a plain `SET NX PX`, which draws no fencing
    /// token: Redis runs it in about a sixth of the instructions of the
    /// acquire script (callgrind: 11k against 67k), which brings an
    /// uncontended acquire+release close to two plain round trips. The token
    /// is drawn when first read ([`Lock::fencing_token`]); a name whose token
    /// this process reads goes through the script's short form, which draws
    /// it at once. A busy first attempt goes on to wait (the waiting attempts
    /// handle legacy orphans and ghosts), or for a try-once, to one attempt
    /// of the script's full form, which clears a ghost holder, heals a legacy
    /// orphan and takes the lock if it was freed in between (two round trips
    /// where the script alone took one; orphans would otherwise block
    /// try-once callers forever). A fair lock always needs the full form
    /// (waiters go first), and so does one with `min_replicas`: its `WAIT`
    /// must cover the token's write too.
    fn first_attempt(
        &self,
        token: &str,
        wait: Wait,
        budget: Budget,
        trail: &Trail,
    ) -> Result<Option<Fence>> {
        // While this process knows of a legacy pollers' turn, even the
        // first attempt respects it (the full form).
        if !self.opts.fair && self.opts.min_replicas == 0 && !legacy::is_open(&self.keys.lock) {
            let ttl_ms = validate::millis(self.opts.ttl);
            if fence::is_read(&self.keys.lock) {
                let call = acquire_call(&self.keys, token, ttl_ms, "", false, 0, false);
                let tried: Tried =
                    trail.run(&self.client, budget, &self.label, |c| call.query(c))?;
                if let Tried::Acquired(f) = tried {
                    return Ok(Some(Some(f)));
                }
            } else {
                let mut set = redis::cmd("SET");
                set.arg(&self.keys.lock)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms);
                let reply: redis::Value =
                    trail.run(&self.client, budget, &self.label, |c| set.query(c))?;
                if reply != redis::Value::Nil {
                    return Ok(Some(None));
                }
            }
            if wait != Wait::Try {
                return Ok(None);
            }
        }
        Ok(match self.waiter(token, budget, trail).attempt_as("")? {
            Tried::Acquired(f) => Some(Some(f)),
            Tried::Busy(_) => None,
        })
    }

    /// The attempts and waits of one acquire with `token`, within `budget`.
    pub(super) fn waiter<'a>(
        &'a self,
        token: &'a str,
        budget: Budget,
        trail: &'a Trail,
    ) -> LockWaiter<'a> {
        LockWaiter {
            client: &self.client,
            keys: &self.keys,
            label: &self.label,
            token,
            ttl_ms: validate::millis(self.opts.ttl),
            fair: self.opts.fair,
            lease_ms: validate::millis(wait::lease_for(self.opts.recheck)),
            legacy: self.opts.legacy_turns().is_some(),
            budget,
            trail,
        }
    }

    /// Makes sure `token` holds nothing and waits nowhere after an acquire
    /// that gave up with a round trip's outcome unknown: settled now if the
    /// server answers within `budget`, else by the keeper once it does.
    pub(super) fn abandon(&self, token: &str, budget: Budget) -> Result<()> {
        let abandon = Abandon::new(
            &self.client,
            &self.keys,
            token,
            None,
            self.opts.ttl,
            &self.label,
        );
        settle::settle_or_defer(Box::new(abandon), budget)
    }

    /// Fails at once, before anything is written, when the master has
    /// fewer replicas connected than `min_replicas` (as far as known: see
    /// `client/replicas.rs`): its `WAIT` could not succeed, and the key
    /// would be held for nothing meanwhile.
    fn check_replicas(&self, budget: Budget) -> Result<()> {
        let want = self.opts.min_replicas;
        match self.client.connected_replicas(want, budget, &self.label)? {
            Some(have) if have < want => Err(Error::new(
                ErrorKind::Quorum,
                format!(
                    "{}: not acquired: the master has {have} replica(s) connected, fewer than \
                     min_replicas ({want}); nothing was written (the count is read again at \
                     most every second while below)",
                    self.label
                ),
            )),
            _ => Ok(()),
        }
    }

    /// `WAIT min_replicas`: undo the acquire at once if too few replicas
    /// confirm it.
    ///
    /// `WAIT` covers the writes of the connection it runs on, and the hold may
    /// have been written by another client (a hand-over) or another pooled
    /// connection: so a token-checked extend runs first on the same
    /// connection, and the WAIT covers everything up to it. WAIT blocks on
    /// the server for up to its timeout, and the socket read gives up at the
    /// end of the call's budget: WAIT gets four fifths of the command
    /// timeout or of the time the call has left, whichever is shorter, so
    /// its answer ("too few replicas") arrives first, and the key is never
    /// held for longer than the caller waits.
    fn confirm_replicas(&self, token: &str, budget: Budget) -> Result<()> {
        let want = self.opts.min_replicas;
        let limit = self.client.command_timeout();
        let left = budget.left().unwrap_or(limit).min(limit);
        let timeout_ms = validate::millis(left * 4 / 5).max(1);
        let extend = extend_call(&self.keys, token, validate::millis(self.opts.ttl));
        let confirmed = self.client.run_within(budget, &self.label, |c| {
            let still_ours: i64 = extend.query(c)?;
            let got: i64 = redis::cmd("WAIT").arg(want).arg(timeout_ms).query(c)?;
            Ok((still_ours, got))
        });
        let (still_ours, got) = match confirmed {
            Ok(reply) => reply,
            Err(e) => {
                // Unknown: undo (within one command timeout; else the
                // keeper), and report the error.
                let _ = self.abandon(token, self.client.one_call());
                return Err(e.context_after("the acquire was undone"));
            }
        };
        if still_ours == 1 && got >= i64::from(want) {
            return Ok(());
        }
        self.client.forget_replicas();
        let _ = self.abandon(token, self.client.one_call());
        Err(Error::new(
            ErrorKind::Quorum,
            format!(
                "{}: only {got} of the {want} required replicas confirmed the acquire within {timeout_ms} ms; released it",
                self.label
            ),
        ))
    }

    /// Runs the release script within `budget`; `Ok(false)` when the lock
    /// was not ours.
    /// `hand_over`: waiters are likely, so the script probably wakes one:
    /// send it behind a PING, which makes Redis write the waiter's grant
    /// before our reply ([`Call::query_behind_ping`]; a free lock's release
    /// skips the extra command).
    ///
    /// [`Call::query_behind_ping`]: crate::scripts::Call::query_behind_ping
    /// `maybe_ran` is set when a try before the one that answered may have
    /// run (see [`Client::run_noting`]).
    fn release_token(
        &self,
        token: &str,
        hand_over: bool,
        budget: Budget,
        maybe_ran: &Cell<bool>,
    ) -> Result<bool> {
        let turns = self.opts.legacy_turns();
        let call = match turns {
            Some(turns) => release_call_with_turns(&self.keys, token, turns),
            None => release_call(&self.keys, token),
        };
        let released: i64 = self
            .client
            .run_noting(budget, &self.label, maybe_ran, |c| match c.single() {
                Some(con) if hand_over => call.query_behind_ping(con),
                _ => call.query(c),
            })?;
        if let (2, Some(turns)) = (released, turns) {
            // Legacy pollers' turn: our own next acquire must respect it.
            legacy::opened(&self.keys.lock, turns);
        }
        Ok(released >= 1)
    }

    /// Releases the lock. Fails with [`ErrorKind::NotOwned`] when this object
    /// does not hold it (never acquired, expired, taken over, lost in a
    /// failover, or acquired by the parent of this forked process). A
    /// reentrant lock is released in Redis by the last of its nested
    /// releases.
    ///
    /// Renewal stops first, whatever happens next. A release whose reply is
    /// lost is sent again within the call's time (one command timeout); a
    /// retry that finds the key no longer ours reports success when the hold
    /// was still valid when an earlier try, which may have run, was sent
    /// (that try released it) and the master did not change. Out of time,
    /// the object forgets the hold (a new acquire works at once), the release
    /// is completed in the background once the server answers, and the
    /// caller gets a connection error saying so.
    pub fn release(&self) -> Result<()> {
        let held = {
            let mut st = self.state.lock_unpoisoned();
            match st.held_here() {
                None => return Err(self.not_held(&st)),
                Some(h) if h.depth > 1 => {
                    h.depth -= 1;
                    return Ok(());
                }
                Some(_) => st.held.take(),
            }
        };
        let Some(held) = held else {
            return Err(self.not_owned("it is not held"));
        };
        // Renewal stops now, whatever the release's outcome: a hold that is
        // being released must never be kept alive (a failed release in a
        // failover would otherwise wedge the name for the life of the process).
        if let Some(lease) = &held.lease {
            watchdog::unregister(lease);
        }
        let budget = self.client.one_call();
        let moves = self.client.master_moves();
        // Whether a try that may have run was sent while the hold was valid.
        let mut ran_while_valid = false;
        let mut pause = FIRST_RETRY_PAUSE;
        let mut hand_over = held.waited;
        loop {
            let valid = held.valid(Instant::now());
            let maybe_ran = Cell::new(false);
            let last = match self.release_token(&held.token, hand_over, budget, &maybe_ran) {
                Ok(true) => {
                    self.released(&held, moves);
                    return Ok(());
                }
                Ok(false)
                    if (ran_while_valid || (maybe_ran.get() && valid))
                        && !self.master_moved(&held) =>
                {
                    self.released(&held, moves);
                    return Ok(());
                }
                Ok(false) => {
                    self.state.lock_unpoisoned().lost = true;
                    self.report_lost(&held, "a release found it expired or taken");
                    return Err(self.refused(&held, "the release"));
                }
                Err(e) if e.is_transient() => e,
                Err(e) => return Err(e),
            };
            ran_while_valid |= last.outcome_unknown() && valid;
            hand_over = false;
            let left = budget.left().unwrap_or(Duration::ZERO);
            if left <= pause {
                return Err(self.release_later(&held, last));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
    }

    /// `held` was released: under Sentinel the release is kept a moment, to
    /// run again on a new master should the master turn out to have changed
    /// (see [`Client::note_release`]; `moves`: the count of master changes
    /// before it was sent).
    fn released(&self, held: &Held, moves: u64) {
        crate::ops::metrics::LOCK_HOLD.observe(held.since.elapsed());
        self.client.note_release(moves, || {
            Box::new(ReleaseHold {
                client: self.client.clone(),
                keys: self.keys.clone(),
                token: held.token.clone(),
                horizon: Instant::now() + held.ttl,
                label: self.label.clone(),
            })
        });
    }

    /// Hands the release of `held` to the keeper after the call ran out of
    /// time with `e`; the error the caller gets.
    fn release_later(&self, held: &Held, e: Error) -> Error {
        crate::ops::metrics::LOCK_HOLD.observe(held.since.elapsed());
        // The key expires by its TTL at the latest: the last renewal or
        // extend was sent before now.
        let settlement = Box::new(ReleaseHold {
            client: self.client.clone(),
            keys: self.keys.clone(),
            token: held.token.clone(),
            horizon: Instant::now() + held.ttl,
            label: self.label.clone(),
        });
        settle::defer(settlement);
        e.context_after(
            "the release is completed in the background once the server answers \
             (the key expires by its TTL at the latest); this object no longer holds the lock",
        )
    }

    /// Reports `held` lost (`why`) when a release or extend found it so:
    /// once per hold, whether the watchdog or a call finds it first.
    fn report_lost(&self, held: &Held, why: &str) {
        match &held.lease {
            Some(lease) => lease.report_lost(why, false),
            None => crate::ops::lock_lost(&self.me, why, false),
        }
    }

    /// True when the client's master changed since `held` was taken (a
    /// Sentinel failover).
    fn master_moved(&self, held: &Held) -> bool {
        self.client.master_moves() != held.moves
    }

    /// The error of a release or extend (`what`) that found the key not ours.
    fn refused(&self, held: &Held, what: &str) -> Error {
        if self.master_moved(held) {
            self.not_owned(&format!(
                "the master changed (a failover) since the lock was acquired, and the new \
                 master does not have this hold at {what} (the replica promoted had not \
                 received it, or it expired meanwhile)"
            ))
        } else {
            self.not_owned(&format!(
                "it expired or another owner took it before {what}"
            ))
        }
    }

    /// Frees the lock whoever holds it: a tool for operators, for a hold whose
    /// owner is stuck or gone. Runs the release script with the holder's
    /// token, so the lock goes to the oldest waiter as on any release, and
    /// the holder's next release or extend fails with
    /// [`ErrorKind::NotOwned`]. True when this call ended a hold; false when
    /// the lock was free (or changed hands three times while this looked).
    pub fn force_release(&self) -> Result<bool> {
        for _ in 0..3 {
            let holder: Option<Vec<u8>> = self
                .client
                .query(&self.label, redis::cmd("GET").arg(&self.keys.lock))?;
            let Some(holder) = holder else {
                return Ok(false);
            };
            let k = &self.keys;
            let released: i64 = crate::scripts::LOCK_RELEASE
                .call(&[&k.lock, &k.fence, &k.waiters, &k.leases])
                .arg(&holder[..])
                .arg(&k.channel)
                .run(&self.client, &self.label)?;
            if released == 1 {
                // This object's own hold: forgotten (it is not lost: it let go).
                let mut st = self.state.lock_unpoisoned();
                let ours = st
                    .held
                    .as_ref()
                    .is_some_and(|h| h.token.as_bytes() == holder);
                if let Some(lease) = st.held.take_if(|_| ours).and_then(|h| h.lease) {
                    watchdog::unregister(&lease);
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Sets the remaining TTL of a held lock to `ttl` (default: the lock's ttl).
    ///
    /// A try whose reply is lost is sent again within the call's time (one
    /// command timeout); the hold's validity only advances on a confirmed
    /// reply.
    pub fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        let ttl = match ttl {
            Some(ttl) => validate::lifetime(ttl, "ttl")?,
            None => self.opts.ttl,
        };
        let (token, extender) = {
            let mut st = self.state.lock_unpoisoned();
            match st.held_here() {
                Some(h) => (h.token.clone(), h.extender.clone()),
                None => return Err(self.not_held(&st)),
            }
        };
        let ttl_ms = validate::millis(ttl);
        let budget = self.client.one_call();
        let mut pause = FIRST_RETRY_PAUSE;
        let (extended, sent) = loop {
            let call = extender.call(&self.client, ttl_ms);
            let sent = Instant::now();
            let reply = self.client.run_within(budget, &self.label, |c| {
                let reply: redis::Value = call.query(c)?;
                Extender::answer(&reply).ok_or_else(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::UnexpectedReturnType,
                        "an extend answered neither 1/OK nor 0/nil",
                        format!("{reply:?}"),
                    ))
                })
            });
            match reply {
                Ok(extended) => {
                    if extended {
                        extender.confirmed(&call, sent, ttl_ms);
                    }
                    break (extended, sent);
                }
                Err(e) if e.is_transient() && budget.left().is_some_and(|l| l > pause) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
                Err(e) => return Err(e),
            }
        };
        let mut st = self.state.lock_unpoisoned();
        let Some(h) = st.held_here().filter(|h| h.token == token) else {
            // Released (or re-acquired) meanwhile.
            return Err(self.not_owned("it was released while being extended"));
        };
        if extended {
            h.valid_until = h.valid_until.max(sent + ttl);
            h.ttl = ttl;
            if let Some(lease) = &h.lease {
                watchdog::extended(lease, sent, ttl);
            }
            return Ok(());
        }
        let err = self.refused(h, "the extend");
        let lease = h.lease.clone();
        st.lost = true;
        // Reported once the state is unlocked (no mutex of ours is taken
        // while another is held: see `fork.rs`).
        drop(st);
        let why = "an extend found it expired or taken";
        match lease {
            Some(lease) => lease.report_lost(why, false),
            None => crate::ops::lock_lost(&self.me, why, false),
        }
        Err(err)
    }

    /// True when anyone holds the lock (checked in Redis).
    pub fn locked(&self) -> Result<bool> {
        self.client
            .query(&self.label, redis::cmd("EXISTS").arg(&self.keys.lock))
    }

    /// True when this object holds the lock (checked in Redis).
    pub fn owned(&self) -> Result<bool> {
        let Some(token) = self.token() else {
            return Ok(false);
        };
        let current: Option<Vec<u8>> = self
            .client
            .query(&self.label, redis::cmd("GET").arg(&self.keys.lock))?;
        Ok(current.as_deref() == Some(token.as_bytes()))
    }

    /// Remaining TTL of the key, whoever holds it (`None`: not held, or no TTL).
    pub fn remaining(&self) -> Result<Option<Duration>> {
        let pttl: i64 = self
            .client
            .query(&self.label, redis::cmd("PTTL").arg(&self.keys.lock))?;
        Ok((pttl >= 0).then(|| Duration::from_millis(pttl as u64)))
    }

    /// The token of the current hold, if this object believes it holds the lock.
    pub fn token(&self) -> Option<String> {
        self.state
            .lock_unpoisoned()
            .held_here()
            .map(|h| h.token.clone())
    }

    /// The fencing token of the current hold: strictly increasing per name
    /// across all holders. Pass it to the storage you protect.
    ///
    /// A hold taken by a plain `SET NX PX` (see [`Lock::acquire`]) has no token
    /// until this first asks for one: one round trip, which checks that the
    /// lock is still ours and draws the token inside the hold, so it orders
    /// with the other holders' exactly as if the acquire had drawn it. Later
    /// reads of the same hold answer the same token without a round trip.
    /// `Ok(None)` when this object does not hold the lock; an
    /// [`ErrorKind::Lost`] error when the first read found it gone
    /// (expired or taken: [`Lock::lost`] is then true), so that a stale
    /// holder cannot pass on a missing token as if its write were unfenced.
    pub fn fencing_token(&self) -> Result<Option<i64>> {
        let token = match self.state.lock_unpoisoned().held_here() {
            None => return Ok(None),
            Some(Held { fence: Some(f), .. }) => return Ok(Some(*f)),
            Some(h) => h.token.clone(),
        };
        let drawn = fence::draw(
            &self.client,
            &self.keys,
            &self.label,
            &token,
            validate::millis(self.opts.ttl),
        )?;
        let mut st = self.state.lock_unpoisoned();
        let Some(h) = st.held_here().filter(|h| h.token == token) else {
            return Ok(None); // released (or re-acquired) meanwhile
        };
        match drawn {
            // Two threads may both have drawn one: the first stored is the
            // hold's token, so every reader passes the storage the same.
            Some(f) => Ok(Some(*h.fence.get_or_insert(f))),
            None => {
                st.lost = true;
                Err(Error::new(
                    ErrorKind::Lost,
                    format!(
                        "{}: lost: it expired or another owner took it before its fencing token was read",
                        self.label
                    ),
                ))
            }
        }
    }

    /// Nesting depth of a reentrant hold (0 when not held).
    pub fn depth(&self) -> u32 {
        self.state
            .lock_unpoisoned()
            .held_here()
            .map_or(0, |h| h.depth)
    }

    /// True once the lock was lost while held: the watchdog found it gone or
    /// could not renew it in time, or a release/extend found it taken.
    pub fn lost(&self) -> bool {
        let mut st = self.state.lock_unpoisoned();
        st.lost
            || st
                .held_here()
                .and_then(|h| h.lease.as_ref())
                .is_some_and(|l| l.is_lost())
    }

    /// Forgets a hold without touching Redis (the key expires by its TTL).
    /// Used when the owner goes away without releasing (PHP objects that
    /// legacy code never unlocked keep their key until it expires).
    pub fn forget(&self) {
        if let Some(lease) = self
            .state
            .lock_unpoisoned()
            .held
            .take()
            .and_then(|h| h.lease)
        {
            watchdog::unregister(&lease);
        }
    }

    fn not_held(&self, st: &State) -> Error {
        match &st.held {
            Some(h) => self.not_owned(&format!(
                "it was acquired by process {} before this process forked from it",
                h.pid
            )),
            None => self.not_owned("this object does not hold it"),
        }
    }

    fn not_owned(&self, why: &str) -> Error {
        not_owned(&self.label, why)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Stop renewing; the key itself expires by its TTL (we never block in Drop).
        self.forget();
    }
}

impl DistributedLock for Lock {
    fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        Lock::acquire(self, wait, interrupt)
    }
    fn acquire_as(
        &self,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
        caller: Option<u64>,
    ) -> Result<bool> {
        Lock::acquire_as(self, wait, interrupt, caller)
    }
    fn release(&self) -> Result<()> {
        Lock::release(self)
    }
    fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        Lock::extend(self, ttl)
    }
    fn locked(&self) -> Result<bool> {
        Lock::locked(self)
    }
    fn owned(&self) -> Result<bool> {
        Lock::owned(self)
    }
    fn token(&self) -> Option<String> {
        Lock::token(self)
    }
    fn fencing_token(&self) -> Result<Option<i64>> {
        Lock::fencing_token(self)
    }
    fn lost(&self) -> bool {
        Lock::lost(self)
    }
    fn name(&self) -> &[u8] {
        Lock::name(self)
    }
    fn ttl(&self) -> Duration {
        self.opts.ttl
    }
}

// Bindings share one Lock between threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Lock>();
};

/// What the watchdog renews for a held lock: its token-checked extend.
struct RenewHold {
    extender: Arc<Extender>,
    me: LockRef,
}

impl Renew for RenewHold {
    fn call(&self, client: &Client, ttl_ms: u64) -> Call {
        self.extender.call(client, ttl_ms)
    }

    fn confirmed(&self, call: &Call, sent: Instant, ttl_ms: u64) {
        self.extender.confirmed(call, sent, ttl_ms);
    }

    fn about(&self) -> Option<&LockRef> {
        Some(&self.me)
    }
}
