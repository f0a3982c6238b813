//! The [`Lock`]: a distributed lock on one deployment (a server, a Sentinel
//! master or a Cluster).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fence::{self, Fence};
use super::waiter::LockWaiter;
use super::{
    DistributedLock, LockOptions, Tried, extend_call, legacy, not_owned, release_call,
    release_call_with_turns,
};
use crate::budget::Budget;
use crate::client::Client;
use crate::client::conn::Link;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{LockKeys, label, new_token};
use crate::scripts::Call;
use crate::settle::Settlement;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt, Wait, WaitSpec};
use crate::watchdog::{self, Lease, Renew};

/// A distributed lock on one name.
pub struct Lock {
    client: Client,
    keys: LockKeys,
    name: Vec<u8>,
    label: String,
    opts: LockOptions,
    state: Mutex<State>,
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
    /// Taken after waiting: others probably wait too, and the release will
    /// likely hand the lock over (see [`Lock::release_token`]).
    waited: bool,
}

impl State {
    /// The hold of this process (a forked child does not own its parent's locks).
    fn held_here(&mut self) -> Option<&mut Held> {
        let pid = crate::fork::current_pid();
        self.held.as_mut().filter(|h| h.pid == pid)
    }
}

impl Lock {
    /// A lock on `name` (any bytes, 1 to 4096 of them). Nothing is sent to
    /// Redis until the first operation.
    pub fn new(client: &Client, name: &[u8], opts: LockOptions) -> Result<Self> {
        validate::name(name, "lock name")?;
        validate::lifetime(opts.ttl, "ttl")?;
        validate::interval(opts.recheck, "recheck interval")?;
        Ok(Self {
            client: client.clone(),
            keys: LockKeys::new(&opts.prefix, name),
            label: label("lock", name),
            name: name.to_vec(),
            opts,
            state: Mutex::new(State::default()),
        })
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
        let current: Option<Vec<u8>> = lock
            .client
            .query(&lock.label, redis::cmd("GET").arg(&lock.keys.lock))?;
        if current.as_deref() != Some(token.as_bytes()) {
            return Err(
                lock.not_owned("the token does not hold it (expired, released or taken over)")
            );
        }
        let lease = lock.opts.auto_renew.then(|| {
            let renew = Box::new(RenewHold {
                keys: lock.keys.clone(),
                token: token.to_owned(),
            });
            let lease = Lease::new(lock.client.clone(), renew, lock.opts.ttl);
            watchdog::register(lease.clone());
            lease
        });
        lock.state.lock_unpoisoned().held = Some(Held {
            token: token.to_owned(),
            fence: None,
            pid: crate::fork::current_pid(),
            depth: 1,
            lease,
            waited: false,
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

    /// Takes the lock, waiting as `wait` allows. Returns `Ok(false)` when the
    /// wait ran out. `interrupt` is consulted every 50 ms while waiting.
    ///
    /// Uncontended, a non-fair lock (without `min_replicas`) is taken with one
    /// plain `SET NX PX`, which draws no fencing token:
    /// [`Lock::fencing_token`] draws it when first read.
    pub fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        self.acquire_as(new_token(), wait, interrupt)
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
        self.acquire_as(token.to_owned(), wait, interrupt)
    }

    fn acquire_as(
        &self,
        token: String,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        if self.reenter() {
            return Ok(true);
        }
        let mut waited = false;
        let first = match self.first_attempt(&token, wait) {
            // A wait rides out faults: its scripted attempts (same token)
            // take over, and recognise a hold the lost reply may have taken.
            Err(e) if wait != Wait::Try && e.is_transient() => None,
            first => first?,
        };
        let fence: Option<Fence> = match first {
            Some(fence) => Some(fence),
            None if wait == Wait::Try => None,
            None => {
                waited = true;
                let spec = WaitSpec {
                    deadline: wait.deadline(),
                    recheck: self.opts.recheck,
                    interrupt,
                    label: &self.label,
                };
                let waiter = self.waiter(&token);
                wait::wait_loop(
                    &self.client,
                    &self.keys.lock,
                    &self.keys.channel,
                    spec,
                    &waiter,
                )?
                .map(Some)
            }
        };
        let Some(fence) = fence else {
            return Ok(false);
        };
        self.take_hold(token, fence, waited)
    }

    /// What a wait on this lock needs: its client, keys and label.
    pub(super) fn wait_parts(&self) -> (&Client, &LockKeys, &str) {
        (&self.client, &self.keys, &self.label)
    }

    /// A reentrant lock held by this object counts one more acquire (true).
    pub(super) fn reenter(&self) -> bool {
        if self.opts.reentrant
            && let Some(h) = self.state.lock_unpoisoned().held_here()
        {
            h.depth += 1;
            return true;
        }
        false
    }

    /// The acquire with `token` succeeded (with `fence`, if drawn; `waited`:
    /// after waiting): confirm on replicas if asked, start renewing, and
    /// record the hold.
    pub(super) fn take_hold(&self, token: String, fence: Fence, waited: bool) -> Result<bool> {
        if self.opts.min_replicas > 0 {
            self.confirm_replicas(&token)?;
        }
        let lease = self.opts.auto_renew.then(|| {
            let renew = Box::new(RenewHold {
                keys: self.keys.clone(),
                token: token.clone(),
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
            waited,
        });
        st.lost = false;
        Ok(true)
    }

    /// One attempt without waiting; `Ok(true)` when taken.
    pub fn try_acquire(&self) -> Result<bool> {
        self.acquire(Wait::Try, None)
    }

    /// The first attempt of an acquire; `Some(fence)` when taken.
    ///
    /// A non-fair lock first tries a plain `SET NX PX`, which draws no fencing
    /// token: Redis runs it in about a sixth of the instructions of the
    /// acquire script (callgrind: 11k against 67k), which brings an
    /// uncontended acquire+release close to two plain round trips. The token
    /// is drawn when first read ([`Lock::fencing_token`]); a name whose token
    /// this process reads goes through the script, which draws it at once.
    /// A busy `SET` goes on to wait (the waiting attempts handle legacy
    /// orphans), or for a try-once, to one scripted attempt, which gives a
    /// legacy orphan (a key without TTL) its expiry and takes the lock if it
    /// was freed in between (two round trips where the script alone took
    /// one; orphans would otherwise block try-once callers forever). A fair
    /// lock always needs the script (waiters go first), and so does one with
    /// `min_replicas`: its `WAIT` must cover the token's write too.
    pub(super) fn first_attempt(&self, token: &str, wait: Wait) -> Result<Option<Fence>> {
        if !self.opts.fair
            && self.opts.min_replicas == 0
            && !fence::is_read(&self.keys.lock)
            && !legacy::is_open(&self.keys.lock)
        {
            let mut set = redis::cmd("SET");
            set.arg(&self.keys.lock)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(validate::millis(self.opts.ttl));
            let reply: redis::Value = self.client.query(&self.label, &set)?;
            if reply != redis::Value::Nil {
                return Ok(Some(None));
            }
            if wait != Wait::Try {
                return Ok(None);
            }
        }
        Ok(match self.waiter(token).attempt_as("")? {
            Tried::Acquired(f) => Some(Some(f)),
            Tried::Busy(_) => None,
        })
    }

    /// The attempts and waits of one acquire with `token`.
    pub(super) fn waiter<'a>(&'a self, token: &'a str) -> LockWaiter<'a> {
        LockWaiter {
            client: &self.client,
            keys: &self.keys,
            label: &self.label,
            token,
            ttl_ms: validate::millis(self.opts.ttl),
            fair: self.opts.fair,
            lease_ms: validate::millis(wait::lease_for(self.opts.recheck)),
            legacy: self.opts.legacy_turns().is_some(),
        }
    }

    /// `WAIT min_replicas`: undo the acquire if too few replicas confirm it.
    ///
    /// `WAIT` covers the writes of the connection it runs on, and the hold may
    /// have been written by another client (a hand-over) or another pooled
    /// connection: so a token-checked extend runs first on the same
    /// connection, and the WAIT covers everything up to it.
    fn confirm_replicas(&self, token: &str) -> Result<()> {
        let want = self.opts.min_replicas;
        // WAIT blocks on the server for up to its timeout, and the socket read
        // gives up after the command timeout: WAIT gets four fifths of it, so
        // its answer ("too few replicas") arrives before the read times out.
        let timeout_ms = validate::millis(self.client.config().command_timeout() * 4 / 5).max(1);
        let extend = extend_call(&self.keys, token, validate::millis(self.opts.ttl));
        let (still_ours, got): (i64, i64) = self.client.run(&self.label, |c| {
            let still_ours: i64 = extend.query(c)?;
            let got: i64 = redis::cmd("WAIT").arg(want).arg(timeout_ms).query(c)?;
            Ok((still_ours, got))
        })?;
        if still_ours == 1 && got >= i64::from(want) {
            return Ok(());
        }
        let _ = self.release_token(token, false);
        Err(Error::new(
            ErrorKind::Quorum,
            format!(
                "{}: only {got} of the {want} required replicas confirmed the acquire within {timeout_ms} ms; released it",
                self.label
            ),
        ))
    }

    /// Runs the release script; `Ok(false)` when the lock was not ours.
    /// `hand_over`: waiters are likely, so the script probably wakes one:
    /// send it behind a PING, which makes Redis write the waiter's grant
    /// before our reply ([`Call::query_behind_ping`]; a free lock's release
    /// skips the extra command).
    ///
    /// [`Call::query_behind_ping`]: crate::scripts::Call::query_behind_ping
    fn release_token(&self, token: &str, hand_over: bool) -> Result<bool> {
        let turns = self.opts.legacy_turns();
        let call = match turns {
            Some(turns) => release_call_with_turns(&self.keys, token, turns),
            None => release_call(&self.keys, token),
        };
        let released: i64 = self.client.run(&self.label, |c| match c.link() {
            Link::Single(con) if hand_over => call.query_behind_ping(con),
            _ => call.query(c),
        })?;
        if let (2, Some(turns)) = (released, turns) {
            // Legacy pollers' turn: our own next acquire must respect it.
            legacy::opened(&self.keys.lock, turns);
        }
        Ok(released >= 1)
    }

    /// Releases the lock. Fails with [`ErrorKind::NotOwned`] when this object
    /// does not hold it (never acquired, expired, taken over, or acquired by
    /// the parent of this forked process). A reentrant lock is released in
    /// Redis by the last of its nested releases.
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
        match self.release_token(&held.token, held.waited) {
            Ok(true) => {
                // Sentinel: sent again if the master is replaced before its
                // replica had this release (see `Client::note_release`).
                let horizon = Instant::now() + self.opts.ttl;
                self.client.note_release(horizon, || {
                    Box::new(ReleaseHold {
                        client: self.client.clone(),
                        keys: self.keys.clone(),
                        token: held.token.clone(),
                        horizon,
                        label: self.label.clone(),
                    })
                });
                Ok(())
            }
            Ok(false) => {
                self.state.lock_unpoisoned().lost = true;
                Err(self.not_owned("it expired or another owner took it before the release"))
            }
            Err(e) if e.is_transient() => {
                // The release may or may not have run. The object forgets the
                // hold (a new acquire works at once); the token is released
                // again within the call's time if the server answers, else by
                // the keeper once it does; at the latest the key expires by
                // its TTL.
                let settlement = Box::new(ReleaseHold {
                    client: self.client.clone(),
                    keys: self.keys.clone(),
                    token: held.token,
                    horizon: Instant::now() + self.opts.ttl,
                    label: self.label.clone(),
                });
                match crate::settle::settle_or_defer(settlement, budget) {
                    Ok(()) => Ok(()),
                    Err(_) => Err(e.context_after(
                        "the release is completed in the background once the server answers \
                         (the key expires by its TTL at the latest)",
                    )),
                }
            }
            Err(e) => Err(e),
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
    pub fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        let ttl = match ttl {
            Some(ttl) => validate::lifetime(ttl, "ttl")?,
            None => self.opts.ttl,
        };
        let (token, lease) = {
            let mut st = self.state.lock_unpoisoned();
            match st.held_here() {
                Some(h) => (h.token.clone(), h.lease.clone()),
                None => return Err(self.not_held(&st)),
            }
        };
        let call = extend_call(&self.keys, &token, validate::millis(ttl));
        let sent = std::time::Instant::now();
        let extended: i64 = call.run(&self.client, &self.label)?;
        if extended == 1 {
            if let Some(lease) = lease {
                watchdog::extended(&lease, sent, ttl);
            }
            Ok(())
        } else {
            self.state.lock_unpoisoned().lost = true;
            Err(self.not_owned("it expired or another owner took it"))
        }
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
    keys: LockKeys,
    token: String,
}

impl Renew for RenewHold {
    fn call(&self, ttl_ms: u64) -> Call {
        extend_call(&self.keys, &self.token, ttl_ms)
    }
}

/// A release whose reply was lost: the token is released once the server
/// answers (compare-and-delete, handing the lock to the next waiter), or
/// found no longer holding the lock. Either way the token holds nothing
/// afterwards. Dropped once the hold would have expired anyway.
struct ReleaseHold {
    client: Client,
    keys: LockKeys,
    token: String,
    horizon: Instant,
    label: String,
}

impl Settlement for ReleaseHold {
    fn settle(&self, budget: Budget) -> Result<()> {
        let call = release_call(&self.keys, &self.token);
        self.client
            .run_within(budget, &self.label, |c| call.query::<i64>(c))
            .map(drop)
    }

    fn horizon(&self) -> Instant {
        self.horizon
    }

    fn describe(&self) -> String {
        format!("release of {}", self.label)
    }

    fn client_id(&self) -> *const () {
        self.client.pool_id()
    }
}
