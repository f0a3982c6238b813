//! The distributed locks: [`Lock`](single::Lock) on one deployment,
//! [`Redlock`](redlock::Redlock) over several independent masters.
//!
//! The owner is the lock object (its current token), not a thread: one
//! object may be acquired in one thread and released in another, and PHP's
//! `RedisLock` keeps one per name. Every acquisition gets a fresh random token
//! (UUID v4 from a per-thread CSPRNG seeded by the OS, see
//! [`new_token`](crate::keys::new_token)), so a stale release can never
//! free a later hold.
//!
//! The rooms: this file (the [`DistributedLock`] trait both kinds implement,
//! [`LockOptions`] and the defaults, and the script calls both kinds make),
//! `single.rs` (the `Lock`), `waiter.rs` (one blocked acquire of a `Lock`),
//! `fence.rs` (fencing tokens drawn on first read), `redlock/` (the
//! `Redlock`). The two kinds share only what this file offers them.

pub(crate) mod fence;
pub(crate) mod legacy;
pub(crate) mod redlock;
pub(crate) mod single;
pub(crate) mod waiter;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{DEFAULT_LOCK_PREFIX, LockKeys};
use crate::scripts::{Call, LOCK_ABANDON, LOCK_ACQUIRE, LOCK_EXTEND, LOCK_LEAVE, LOCK_RELEASE};
use crate::settle::Settlement;
use crate::wait::{self, Interrupt, Wait};

/// First pause before a round trip of a call is tried again after a
/// connection error (a wait riding out a fault); it doubles up to
/// [`MAX_RETRY_PAUSE`].
pub(crate) const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Longest pause between two tries of a call that rides out a connection error.
pub(crate) const MAX_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// True while `deadline` (`None`: never) has not passed.
pub(crate) fn time_left(deadline: Option<Instant>) -> bool {
    deadline.is_none_or(|d| Instant::now() < d)
}

/// Default lock TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Settings of a [`Lock`](single::Lock). Start from `LockOptions::default()`
/// and set fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LockOptions {
    /// Time to live of the key; the lock frees itself this long after the last
    /// acquire/extend/renewal if its owner vanishes.
    pub ttl: Duration,
    /// Key prefix (`Lock:` shares locks with legacy PHP code).
    pub prefix: Vec<u8>,
    /// Grant waiters in arrival order instead of letting newcomers barge in.
    pub fair: bool,
    /// Nested acquires by the same object count up; Redis is only touched by
    /// the first acquire and the last release.
    pub reentrant: bool,
    /// Renew the TTL every ttl/3 from the background watchdog while held.
    pub auto_renew: bool,
    /// Longest pause between two re-checks while waiting (wake-ups normally
    /// come much sooner, by notification).
    pub recheck: Duration,
    /// Confirm each acquire on this many replicas (`WAIT`) before reporting
    /// success; 0 disables. While the master has fewer replicas connected,
    /// acquires fail at once ([`ErrorKind::Quorum`]) without writing; a
    /// `WAIT` that falls short is undone at once. See docs/deployment.md.
    pub min_replicas: u32,
    /// Share the lock fairly with legacy clients that poll with `SETNX`
    /// (the hand-rolled PHP `RedisLock`): under sustained contention a
    /// release now and then leaves the key free for one of their polls
    /// instead of handing it to the next waiter (see `docs/migration.md`).
    /// `None` (the default): on when the prefix is the legacy `Lock:`.
    pub legacy_interop: Option<bool>,
    /// How often those legacy clients poll (their `$waitIntervalUs`; 100 ms
    /// by default): a turn leaves the key free for one and a half of these,
    /// at most once every twenty.
    pub legacy_poll: Duration,
}

impl LockOptions {
    /// The legacy pollers' turns of a lock with these options, if on.
    pub(crate) fn legacy_turns(&self) -> Option<legacy::Turns> {
        let on = self
            .legacy_interop
            .unwrap_or(self.prefix == DEFAULT_LOCK_PREFIX.as_bytes());
        on.then(|| legacy::Turns::for_poll(self.legacy_poll))
    }
}

/// Default poll interval of legacy clients (the legacy `RedisLock`'s).
pub const DEFAULT_LEGACY_POLL: Duration = Duration::from_millis(100);

impl Default for LockOptions {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            prefix: DEFAULT_LOCK_PREFIX.as_bytes().to_vec(),
            fair: false,
            reentrant: false,
            auto_renew: false,
            recheck: wait::DEFAULT_RECHECK,
            min_replicas: 0,
            legacy_interop: None,
            legacy_poll: DEFAULT_LEGACY_POLL,
        }
    }
}

/// What [`Lock`](single::Lock) and [`Redlock`](redlock::Redlock) have in
/// common, so bindings can offer both through one code path.
pub trait DistributedLock: Send + Sync {
    /// Takes the lock, waiting as `wait` allows; `Ok(false)` when the wait ran out.
    fn acquire(&self, wait: Wait, interrupt: Option<Interrupt<'_>>) -> Result<bool>;
    /// [`DistributedLock::acquire`] on behalf of `caller` (a thread or
    /// greenlet id; `None`: unknown), so that a caller re-acquiring a
    /// non-reentrant lock it holds fails instead of waiting for itself (see
    /// [`Lock::acquire_as`](single::Lock::acquire_as)). By default the
    /// caller is not told apart.
    fn acquire_as(
        &self,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
        caller: Option<u64>,
    ) -> Result<bool> {
        let _ = caller;
        self.acquire(wait, interrupt)
    }
    /// Releases it; [`ErrorKind::NotOwned`] when not held by this object.
    fn release(&self) -> Result<()>;
    /// Sets the remaining TTL (default: the lock's ttl).
    fn extend(&self, ttl: Option<Duration>) -> Result<()>;
    /// True when anyone holds it.
    fn locked(&self) -> Result<bool>;
    /// True when this object holds it (checked in Redis).
    fn owned(&self) -> Result<bool>;
    /// Token of the current hold.
    fn token(&self) -> Option<String>;
    /// Fencing token of the current hold (may ask Redis: see
    /// [`Lock::fencing_token`](single::Lock::fencing_token)).
    fn fencing_token(&self) -> Result<Option<i64>>;
    /// True once the hold was lost.
    fn lost(&self) -> bool;
    /// The lock's name.
    fn name(&self) -> &[u8];
    /// The lock's TTL.
    fn ttl(&self) -> Duration;
}

/// Outcome of one acquire attempt: the reply of `lock_acquire-5.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tried {
    /// Taken, with this fencing token.
    Acquired(i64),
    /// Held by another owner: its remaining TTL if known, else wait for a turn.
    Busy(Option<Duration>),
}

/// The script answers the fencing token as a string when the lock is taken,
/// and an integer when it is not: the holder's PTTL (ms), or -1 when the lock
/// was just handed to an older waiter.
impl redis::FromRedisValue for Tried {
    fn from_redis_value(v: redis::Value) -> std::result::Result<Self, redis::ParsingError> {
        Ok(match v {
            redis::Value::Int(pttl) if pttl >= 0 => {
                // PTTL is 0 in the holder's last millisecond: re-check right after it.
                Tried::Busy(Some(Duration::from_millis(pttl.unsigned_abs() + 1)))
            }
            redis::Value::Int(_) => Tried::Busy(None),
            v => Tried::Acquired(i64::from_redis_value(v)?),
        })
    }
}

/// One run of the acquire script (`lock_acquire-5.lua`) for `token`;
/// `waiter` registers it as that waiter while the lock is busy ('' = not).
/// `legacy_turn`: it respects legacy pollers' turns (`legacy.rs`).
/// An attempt of a non-fair lock that does neither (a `Lock`'s first
/// attempt, Redlock's attempts before they listen) uses the script's short
/// form, three keys and four arguments fewer.
pub(crate) fn acquire_call(
    k: &LockKeys,
    token: &str,
    ttl_ms: u64,
    waiter: &str,
    fair: bool,
    lease_ms: u64,
    legacy_turn: bool,
) -> Call {
    if waiter.is_empty() && !fair && !legacy_turn {
        return LOCK_ACQUIRE
            .call(&[&k.lock, &k.fence])
            .arg(token)
            .arg(ttl_ms);
    }
    full_acquire_call(k, token, ttl_ms, waiter, fair, lease_ms, legacy_turn)
}

/// The acquire script's full form (see [`acquire_call`]), which also clears
/// a ghost holder and waits behind older waiters of a fair lock; `waiter`
/// '' does not register; `legacy_turn`: it respects legacy pollers' turns.
pub(crate) fn full_acquire_call(
    k: &LockKeys,
    token: &str,
    ttl_ms: u64,
    waiter: &str,
    fair: bool,
    lease_ms: u64,
    legacy_turn: bool,
) -> Call {
    let keys: &[&[u8]] = if legacy_turn {
        &[
            &k.lock,
            &k.fence,
            &k.waiters,
            &k.leases,
            &k.ghosts,
            &k.legacy_turn,
        ]
    } else {
        &[&k.lock, &k.fence, &k.waiters, &k.leases, &k.ghosts]
    };
    LOCK_ACQUIRE
        .call(keys)
        .arg(token)
        .arg(ttl_ms)
        .arg(waiter)
        .arg(if fair { "1" } else { "0" })
        .arg(lease_ms)
        .arg(&k.channel)
}

/// The release script for `token` (1: released; it hands the lock to the
/// oldest live waiter, if any).
pub(crate) fn release_call(k: &LockKeys, token: &str) -> Call {
    LOCK_RELEASE
        .call(&[&k.lock, &k.fence, &k.waiters, &k.leases])
        .arg(token)
        .arg(&k.channel)
}

/// [`release_call`] that may leave the key free for legacy pollers' turn
/// instead of handing it over (2: released into a turn; see `legacy.rs`).
/// A `Lock` sends it packed once (`single/packets.rs`, whose test compares
/// the bytes with this).
#[cfg(test)]
pub(crate) fn release_call_with_turns(k: &LockKeys, token: &str, turns: legacy::Turns) -> Call {
    LOCK_RELEASE
        .call(&[
            &k.lock,
            &k.fence,
            &k.waiters,
            &k.leases,
            &k.legacy_turn,
            &k.legacy_next,
        ])
        .arg(token)
        .arg(&k.channel)
        .arg(turns.turn_ms)
        .arg(turns.every_ms)
}

/// The extend script: the TTL of `token`'s hold set to `ttl_ms` (1: done).
pub(crate) fn extend_call(k: &LockKeys, token: &str, ttl_ms: u64) -> Call {
    LOCK_EXTEND
        .call(&[&k.lock, &k.fence])
        .arg(token)
        .arg(ttl_ms)
}

/// How long the extend script keeps the fencing counter past the hold (its
/// `+ 60000`, and `next_fence`'s).
const FENCE_KEPT: Duration = Duration::from_secs(60);

/// How long the fencing counter outlives the hold at least, between two
/// extends by script.
const FENCE_MARGIN: Duration = Duration::from_secs(30);

/// The token-checked extends of one hold (explicit ones and the watchdog's
/// renewals).
///
/// Where the server has it (Valkey 8.1+, Redis 8.4+: see
/// [`Client::has_set_ifeq`]), an extend is one native command,
/// `SET lock token IFEQ token PX ttl`, instead of the extend script: the
/// same compare-and-set of the TTL, without a script run. The script also
/// keeps the fencing counter alive (it must outlive the hold, `next_fence`
/// in `prelude.lua`): so the native command is used only while the counter
/// is known to live at least [`FENCE_MARGIN`] past the new expiry (known
/// from the last confirmed extend by script: sent then, it lives until
/// [`FENCE_KEPT`] after that extend's expiry at least). The first renewal
/// of a hold, and one in every few after it, run the script. Nothing here
/// wakes waiters or touches another key, which stay the scripts' work.
pub(crate) struct Extender {
    keys: Arc<LockKeys>,
    token: String,
    /// The fencing counter lives at least until then: nanoseconds since
    /// [`Extender::origin`]; 0 while not known.
    fence_until: AtomicU64,
    origin: Instant,
}

impl Extender {
    /// The extends of `token`'s hold of the lock of `keys`.
    pub(crate) fn new(keys: Arc<LockKeys>, token: String) -> Self {
        Self {
            keys,
            token,
            fence_until: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    /// The call that sets the hold's remaining TTL to `ttl_ms`, sent now
    /// on `client`: native where the server has it and the fencing counter
    /// needs no renewal, else the script. Its reply reads through
    /// [`Extender::answer`].
    pub(crate) fn call(&self, client: &Client, ttl_ms: u64) -> Call {
        let expiry = Instant::now() + Duration::from_millis(ttl_ms) + FENCE_MARGIN;
        let known = self.fence_until.load(Ordering::Acquire);
        let fence_lives = known != 0
            && u64::try_from(expiry.saturating_duration_since(self.origin).as_nanos())
                .is_ok_and(|at| at <= known);
        if fence_lives && client.has_set_ifeq() {
            let mut cmd =
                redis::Cmd::with_capacity(8, self.keys.lock.len() + 2 * self.token.len() + 32);
            cmd.arg("SET")
                .arg(&self.keys.lock)
                .arg(&self.token)
                .arg("IFEQ")
                .arg(&self.token)
                .arg("PX")
                .arg(ttl_ms);
            return Call::native(cmd);
        }
        extend_call(&self.keys, &self.token, ttl_ms)
    }

    /// `call` (made by [`Extender::call`] with `ttl_ms`, sent at `sent`)
    /// extended the hold.
    pub(crate) fn confirmed(&self, call: &Call, sent: Instant, ttl_ms: u64) {
        if call.is_script() {
            let lives = sent + Duration::from_millis(ttl_ms) + FENCE_KEPT;
            let at = u64::try_from(lives.saturating_duration_since(self.origin).as_nanos())
                .unwrap_or(u64::MAX);
            self.fence_until.fetch_max(at, Ordering::AcqRel);
        }
    }

    /// What an extend's reply says: `Some(true)` extended, `Some(false)`
    /// the hold is not ours; `None` for any other reply. The script answers
    /// 1 or 0, `SET … IFEQ` OK or nil.
    pub(crate) fn answer(reply: &redis::Value) -> Option<bool> {
        match reply {
            redis::Value::Int(1) | redis::Value::Okay => Some(true),
            redis::Value::Int(0) | redis::Value::Nil => Some(false),
            redis::Value::SimpleString(s) if s == "OK" => Some(true),
            _ => None,
        }
    }
}

/// The script that deregisters `waiter` (which waited with `token` for a
/// hold of `ttl_ms`). A hold handed to it meanwhile is kept (the reply is
/// `[1, fence]`), or passed on when `give_back`.
pub(crate) fn leave_call(
    k: &LockKeys,
    waiter: &str,
    token: &str,
    ttl_ms: u64,
    give_back: bool,
) -> Call {
    LOCK_LEAVE
        .call(&[&k.lock, &k.fence, &k.waiters, &k.leases])
        .arg(format!("{waiter}|{ttl_ms}|{token}"))
        .arg(token)
        .arg(if give_back { "1" } else { "0" })
        .arg(&k.channel)
}

/// The script that undoes an acquire with `token` its caller gave up on
/// (`lock_abandon-5.lua`): the token's waiter registration (`member`, or
/// any, when `None`) is removed, its hold released (handed on), and the
/// token recorded as a ghost for `ghost_ttl_ms`.
pub(crate) fn abandon_call(
    k: &LockKeys,
    token: &str,
    member: Option<&str>,
    ghost_ttl_ms: u64,
) -> Call {
    LOCK_ABANDON
        .call(&[&k.lock, &k.fence, &k.waiters, &k.leases, &k.ghosts])
        .arg(token)
        .arg(member.unwrap_or(""))
        .arg(&k.channel)
        .arg(ghost_ttl_ms)
}

/// How long the ghost of an abandoned token is remembered beyond the hold's
/// TTL, and how long past the TTL its abandonment is retried: a write of the
/// token still buffered by a paused server, or delayed in the network, runs
/// when it runs.
pub(crate) const GHOST_GRACE: Duration = Duration::from_secs(60);

/// An acquire its caller gave up on, while one of its round trips had an
/// unknown outcome (its reply lost: it may have taken the lock) or a grant
/// reached a waiter that had left: settled by `lock_abandon-5.lua`, so the
/// token holds nothing and waits nowhere, and a late write of it is cleared
/// by the next contender (see [`crate::settle`]).
pub(crate) struct Abandon {
    client: Client,
    keys: LockKeys,
    token: String,
    member: Option<String>,
    ttl: Duration,
    horizon: Instant,
    label: String,
}

impl Abandon {
    /// The abandonment of `token`'s acquire of the lock `keys` (whose holds
    /// live `ttl`); `member`: its waiter registration, if known.
    pub(crate) fn new(
        client: &Client,
        keys: &LockKeys,
        token: &str,
        member: Option<String>,
        ttl: Duration,
        label: &str,
    ) -> Self {
        Self {
            client: client.clone(),
            keys: keys.clone(),
            token: token.to_owned(),
            member,
            ttl,
            horizon: Instant::now() + ttl + GHOST_GRACE,
            label: label.to_owned(),
        }
    }
}

impl Settlement for Abandon {
    fn settle(&self, budget: Budget) -> Result<()> {
        let ghost_ttl = crate::validate::millis(self.ttl + GHOST_GRACE);
        let call = abandon_call(&self.keys, &self.token, self.member.as_deref(), ghost_ttl);
        self.client
            .run_within(budget, &self.label, |c| call.query::<i64>(c))
            .map(drop)
    }

    fn horizon(&self) -> Instant {
        self.horizon
    }

    fn describe(&self) -> String {
        format!("abandoned acquire of {}", self.label)
    }

    fn client_id(&self) -> *const () {
        self.client.pool_id()
    }
}

/// A release or extend refused: `label` is not held by this owner (`why`).
pub(crate) fn not_owned(label: &str, why: &str) -> Error {
    Error::new(ErrorKind::NotOwned, format!("{label}: not owned: {why}"))
}

/// A release whose reply was lost (or that could not be sent in time; on
/// Redlock, one per master that did not answer): the token is released once
/// the server answers (compare-and-delete, handing the lock to the next waiter), or
/// found no longer holding the lock. Either way the token holds nothing
/// afterwards. Dropped once the hold would have expired anyway.
pub(crate) struct ReleaseHold {
    pub(crate) client: Client,
    pub(crate) keys: LockKeys,
    pub(crate) token: String,
    pub(crate) horizon: Instant,
    pub(crate) label: String,
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
        format!(
            "release of {} on {}",
            self.label,
            self.client.redacted_url()
        )
    }

    fn client_id(&self) -> *const () {
        self.client.pool_id()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::{FromRedisValue, Value};

    use super::Tried;

    #[test]
    fn acquire_replies_are_told_apart_by_type() {
        let parse = |v| Tried::from_redis_value(v).unwrap();
        let token = b"1763700000123456".to_vec();
        assert_eq!(
            parse(Value::BulkString(token)),
            Tried::Acquired(1_763_700_000_123_456)
        );
        // A token of 0 (a fence key lost under a hand-over) is still a hold.
        assert_eq!(parse(Value::BulkString(b"0".to_vec())), Tried::Acquired(0));
        assert_eq!(
            parse(Value::Int(0)),
            Tried::Busy(Some(Duration::from_millis(1)))
        );
        assert_eq!(
            parse(Value::Int(2500)),
            Tried::Busy(Some(Duration::from_millis(2501)))
        );
        assert_eq!(parse(Value::Int(-1)), Tried::Busy(None));
        assert!(Tried::from_redis_value(Value::Nil).is_err());
    }
}
