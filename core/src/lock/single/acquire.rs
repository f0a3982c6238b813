//! Acquiring a [`Lock`]: reentry, the attempts and the wait, what an
//! acquire comes to (a hold recorded, or its token abandoned).

use std::time::Instant;

use super::{FIRST_RETRY_PAUSE, Held, Lock, MAX_RETRY_PAUSE, caller_thread_id, time_left};
use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{LockKeys, new_token};
use crate::lock::fence::{self, Fence};
use crate::lock::waiter::{LockWaiter, Trail};
use crate::lock::{Abandon, Tried, legacy};
use crate::settle;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt, Wait, WaitSpec};
use crate::watchdog;

impl Lock {
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
    pub(super) fn acquire_by(
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
    pub(in crate::lock) fn reenter(&self, wait: Wait, caller: Option<u64>) -> Result<Option<bool>> {
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
    pub(in crate::lock) fn budget_of(&self, wait: Wait, deadline: Option<Instant>) -> Budget {
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
    pub(in crate::lock) fn conclude(
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
        let now = Instant::now();
        crate::ops::acquired(&self.me, now.saturating_duration_since(trail.started));
        let mut st = self.state.lock_unpoisoned();
        if let Some(old) = st.held.take().and_then(|h| h.lease) {
            watchdog::unregister(&*old);
        }
        // A hold that is not renewed gets its extender at its first extend.
        // A renewed one reuses the lease of the lock's last renewed hold
        // (`Lock::lease_for`): no allocation. Its validity counts from the
        // acquire's round trip; a hold that a wait ended with may have been
        // handed over by message, after the wait's last round trip (up to a
        // re-check interval before: more than a short TTL), so it counts from
        // now, as the watchdog's renewals do.
        let (extender, lease) = if self.opts.auto_renew {
            let base = if waited { now } else { sent };
            let lease = self.lease_for(&mut st.spare, &token, base);
            watchdog::register_at(lease.clone(), now);
            (Some(lease.renewal().extender.clone()), Some(lease))
        } else {
            (None, None)
        };
        st.held = Some(Held {
            token,
            fence,
            pid: crate::fork::current_pid(),
            depth: 1,
            lease,
            since: now,
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
    pub(in crate::lock) fn wait_parts(&self) -> (&Client, &LockKeys, &str) {
        (&self.client, &self.keys, &self.label)
    }

    /// Checks, before anything is written, that the master has the
    /// replicas `min_replicas` asks for (see [`Lock::check_replicas`]).
    pub(in crate::lock) fn precheck(&self, budget: Budget) -> Result<()> {
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
    pub(super) fn take(
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
    pub(in crate::lock) fn take_first(
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
    pub(super) fn try_again(
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
    pub(super) fn first_attempt(
        &self,
        token: &str,
        wait: Wait,
        budget: Budget,
        trail: &Trail,
    ) -> Result<Option<Fence>> {
        // While this process knows of a legacy pollers' turn, even the
        // first attempt respects it (the full form).
        // Both commands are packed once per lock (`packets.rs`).
        if !self.opts.fair && self.opts.min_replicas == 0 && !legacy::is_open(&self.keys.lock) {
            let token = token.as_bytes();
            if fence::is_read(self.fence_hash) {
                let acquire = &self.packets.acquire;
                let tried = trail.run(&self.client, budget, &self.label, |c| {
                    let reply = acquire.query(c, token, false)?;
                    Ok(redis::from_redis_value::<Tried>(reply)?)
                })?;
                if let Tried::Acquired(f) = tried {
                    return Ok(Some(Some(f)));
                }
            } else {
                let set = &self.packets.set_nx;
                let reply = trail.run(&self.client, budget, &self.label, |c| {
                    c.request(set, token).and_then(redis::Value::extract_error)
                })?;
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
    pub(in crate::lock) fn waiter<'a>(
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
    pub(in crate::lock) fn abandon(&self, token: &str, budget: Budget) -> Result<()> {
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::client::Client;
    use crate::lock::LockOptions;
    use crate::lock::single::Lock;
    use crate::sync::LockUnpoisoned;
    use crate::testing::RedisServer;

    /// A renewed hold uses the lease of the lock's hold before (one object,
    /// the new token), unless something still holds that lease.
    #[test]
    fn a_renewed_hold_reuses_the_lease_of_the_hold_before() {
        let server = RedisServer::start();
        let client = Client::shared(&server.url()).unwrap();
        let opts = LockOptions {
            auto_renew: true,
            ..LockOptions::default()
        };
        let lock = Lock::new(&client, b"reuse", opts).unwrap();
        let lease_of = |l: &Lock| {
            let st = l.state.lock_unpoisoned();
            st.held.as_ref().and_then(|h| h.lease.clone()).unwrap()
        };
        assert!(lock.try_acquire().unwrap());
        let first = Arc::as_ptr(&lease_of(&lock));
        lock.release().unwrap();
        assert!(lock.try_acquire().unwrap());
        let second = lease_of(&lock);
        assert_eq!(Arc::as_ptr(&second), first, "reused");
        assert_eq!(second.renewal().extender.token, lock.token().unwrap());
        assert!(!second.is_lost());
        // Still held elsewhere (here: by the test) when the next hold starts.
        lock.release().unwrap();
        assert!(lock.try_acquire().unwrap());
        let third = lease_of(&lock);
        assert!(!Arc::ptr_eq(&second, &third), "a new lease");
        assert_eq!(third.renewal().extender.token, lock.token().unwrap());
        lock.release().unwrap();
    }
}
