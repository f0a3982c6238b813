//! The [`Lock`]: a distributed lock on one deployment (a server, a Sentinel
//! master or a Cluster).
//!
//! This file has the lock, its state and the calls that read or extend a
//! hold; `single/acquire.rs` the acquire, `single/release.rs` the release,
//! `single/replicas.rs` `min_replicas`.

mod acquire;
mod packets;
mod release;
mod replicas;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fence::{self, Fence};
use super::{DistributedLock, Extender, LockOptions, not_owned};
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{LockKeys, label};
use crate::ops::LockRef;
use crate::scripts::Call;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{Interrupt, Wait};
use crate::watchdog::{self, Lease, Renew};

use super::{FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE, time_left};

/// A distributed lock on one name.
pub struct Lock {
    client: Client,
    /// Shared with the extends of its holds (see [`Extender`]).
    keys: Arc<LockKeys>,
    /// Its uncontended acquire and release, packed once.
    packets: packets::Packets,
    /// The hash of its key in the table of names whose fencing tokens this
    /// process reads ([`fence::is_read`]), computed once.
    fence_hash: u64,
    name: Vec<u8>,
    label: String,
    opts: LockOptions,
    state: Mutex<State>,
    /// This object, as events and lost-lock hooks name it (`ops`); shared
    /// with the watchdog's renewals of its holds.
    me: Arc<LockRef>,
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
    /// The lease of the last renewed hold, which the next renewed hold
    /// reuses once nothing else holds it (see [`Lock::lease_for`]).
    spare: Option<Arc<Lease<RenewHold>>>,
}

struct Held {
    token: String,
    fence: Fence,
    pid: u32,
    depth: u32,
    lease: Option<Arc<Lease<RenewHold>>>,
    /// When it was taken (the hold time metric).
    since: Instant,
    /// Its extends (shared with the watchdog's renewals): made with the
    /// lease, or by the first explicit extend of a hold not renewed.
    extender: Option<Arc<Extender>>,
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
        match &self.lease {
            // A renewed hold's validity is its lease's: the acquire's, then
            // its renewals' and its extends' (`watchdog::extended`).
            Some(lease) => lease.valid_at(now),
            None => self.valid_until > now,
        }
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

impl Lock {
    /// A lock on `name` (any bytes, 1 to 4096 of them). Nothing is sent to
    /// Redis until the first operation.
    pub fn new(client: &Client, name: &[u8], opts: LockOptions) -> Result<Self> {
        validate::name(name, "lock name")?;
        validate::lifetime(opts.ttl, "ttl")?;
        validate::interval(opts.recheck, "recheck interval")?;
        let keys = LockKeys::new(&opts.prefix, name);
        let packets = packets::Packets::new(&keys, validate::millis(opts.ttl), opts.legacy_turns());
        Ok(Self {
            client: client.clone(),
            fence_hash: fence::key_hash(&keys.lock),
            keys: Arc::new(keys),
            packets,
            label: label("lock", name),
            name: name.to_vec(),
            opts,
            state: Mutex::new(State::default()),
            me: Arc::new(LockRef::new("lock", name)),
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
    /// the key's TTL is left as it is; auto-renewal, if set, starts now,
    /// renewing at once when less than two thirds of the TTL are left);
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
        // Valid for what is left of the key's TTL (none left, or no TTL at
        // all: not known to be valid).
        let left = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
        let mut st = lock.state.lock_unpoisoned();
        let lease = lock.opts.auto_renew.then(|| {
            let lease = lock.lease_for(&mut st.spare, token, sent);
            if pttl >= 0 {
                // (A key without a TTL does not run out: a whole TTL, as
                // any hold.)
                lease.limit_validity(sent + left);
            }
            watchdog::register_adopted(lease.clone(), Instant::now());
            lease
        });
        let extender = match &lease {
            Some(lease) => lease.renewal().extender.clone(),
            None => Arc::new(Extender::new(lock.keys.clone(), token.to_owned())),
        };
        st.held = Some(Held {
            token: token.to_owned(),
            fence: None,
            pid: crate::fork::current_pid(),
            depth: 1,
            lease,
            since: Instant::now(),
            extender: Some(extender),
            waited: false,
            valid_until: sent + left,
            ttl: lock.opts.ttl,
            caller: None,
            moves: lock.client.master_moves(),
        });
        drop(st);
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
                Some(h) => {
                    let extender = h.extender.get_or_insert_with(|| {
                        Arc::new(Extender::new(self.keys.clone(), h.token.clone()))
                    });
                    (h.token.clone(), extender.clone())
                }
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
    me: Arc<LockRef>,
}

impl Lock {
    /// The lease of a renewed hold of `token` whose TTL started at `sent`:
    /// the lock's last one (`spare`) made new when nothing holds it any more
    /// (its hold released, the watchdog done with it), else a new one, which
    /// becomes the spare. A lock held, released and held again allocates
    /// nothing for its renewal: the token is copied into the extender's
    /// buffer.
    fn lease_for(
        &self,
        spare: &mut Option<Arc<Lease<RenewHold>>>,
        token: &str,
        sent: Instant,
    ) -> Arc<Lease<RenewHold>> {
        if let Some(lease) = spare {
            let keys = &self.keys;
            let reset = |renew: &mut RenewHold| match Arc::get_mut(&mut renew.extender) {
                Some(extender) => {
                    // As new (`Extender::new`): the fencing counter's life unknown.
                    extender.token.clear();
                    extender.token.push_str(token);
                    *extender.fence_until.get_mut() = 0;
                }
                // An extend of the hold before still has it.
                None => renew.extender = Arc::new(Extender::new(keys.clone(), token.to_owned())),
            };
            if Lease::reuse(lease, sent, self.opts.ttl, reset) {
                return lease.clone();
            }
        }
        let renew = RenewHold {
            extender: Arc::new(Extender::new(self.keys.clone(), token.to_owned())),
            me: self.me.clone(),
        };
        let lease = Lease::since(self.client.clone(), renew, sent, self.opts.ttl);
        *spare = Some(lease.clone());
        lease
    }
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
