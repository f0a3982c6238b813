//! `RedisLock`: the legacy class's methods over `ferrolock::Lock`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use ext_php_rs::convert::IntoZval;
use ext_php_rs::exception::PhpResult;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendClassObject, Zval};
use ferrolock::{Client, DistributedLock, ErrorKind, Lock, LockOptions, Redlock, Wait, validate};

use crate::args::{IntArg, NumArg, StrArg, cap_wait, float_bytes, read_args};
use crate::connect::settings;
use crate::errors::{exception, guard, lock_exception, settle, warn};

/// Legacy minimum lock lifetime: `max((int)$expire, 5)`.
const MIN_EXPIRE: i64 = 5;

/// Longest accepted `$waitIntervalUs` (one hour).
const MAX_WAIT_INTERVAL_US: i64 = 3_600_000_000;

/// Released lock objects a `RedisLock` keeps for its next `lock()` of the
/// same name (see [`Spare`]).
const MAX_SPARES: usize = 8;

/// A lock object this `RedisLock` released, kept to take the same name
/// again: making one (its keys, its packed commands, its labels) cost more
/// than the acquire and release it serves. Reused only for the same
/// `$expire` and `$waitIntervalUs`, and only when this object does not hold
/// the name (a second `lock()` of a held name takes a new object, and waits
/// or fails as the legacy class did).
struct Spare {
    name: Vec<u8>,
    ttl: Duration,
    recheck: Duration,
    lock: Box<dyn DistributedLock>,
}

thread_local! {
    /// `RedisLock::instance()` of the current request, released at request end.
    static INSTANCE: RefCell<Option<Zval>> = const { RefCell::new(None) };
}

/// Drops the request singleton (called from RSHUTDOWN, while the object store
/// is still alive).
pub fn release_instance() {
    let old = INSTANCE.with(|slot| slot.borrow_mut().take());
    drop(old);
}

/// Distributed locks with the API of the legacy `RedisLock` class.
#[php_class]
#[php(name = "RedisLock")]
pub struct RedisLock {
    client: Option<Client>,
    servers: Vec<Client>,
    fair: bool,
    auto_renew: bool,
    min_replicas: u32,
    legacy_interop: Option<bool>,
    prefix: Vec<u8>,
    /// Locks this object holds (or held: a lost hold stays until unlock),
    /// with the `$expire` and `$waitIntervalUs` they were taken with.
    held: HashMap<Vec<u8>, (Box<dyn DistributedLock>, Duration, Duration)>,
    /// Lock objects released lately, newest last (see [`Spare`]).
    spares: Vec<Spare>,
}

impl RedisLock {
    fn from_param(param: Option<&Zval>) -> PhpResult<Self> {
        let s = settings("RedisLock::__construct", param)?;
        Ok(Self {
            client: s.client,
            servers: s.servers,
            fair: s.fair,
            auto_renew: s.auto_renew,
            min_replicas: s.min_replicas,
            legacy_interop: s.legacy_interop,
            prefix: s
                .prefix
                .unwrap_or_else(|| ferrolock::DEFAULT_LOCK_PREFIX.as_bytes().to_vec()),
            held: HashMap::new(),
            spares: Vec::new(),
        })
    }

    /// A lock object for `name`: a spare one if this object released one
    /// taken with the same settings, else a new one.
    fn take_lock(
        &mut self,
        name: &[u8],
        ttl: Duration,
        recheck: Duration,
    ) -> ferrolock::Result<Box<dyn DistributedLock>> {
        if !self.held.contains_key(name)
            && let Some(i) = self
                .spares
                .iter()
                .rposition(|s| s.name == name && s.ttl == ttl && s.recheck == recheck)
        {
            return Ok(self.spares.remove(i).lock);
        }
        self.new_lock(name, ttl, recheck)
    }

    /// Keeps `lock`, released, for a later `lock()` of `name`.
    fn keep_spare(
        &mut self,
        name: Vec<u8>,
        lock: Box<dyn DistributedLock>,
        ttl: Duration,
        recheck: Duration,
    ) {
        if self.spares.len() >= MAX_SPARES {
            self.spares.remove(0);
        }
        self.spares.push(Spare {
            name,
            ttl,
            recheck,
            lock,
        });
    }

    fn new_lock(
        &self,
        name: &[u8],
        ttl: Duration,
        recheck: Duration,
    ) -> ferrolock::Result<Box<dyn DistributedLock>> {
        if !self.servers.is_empty() {
            return Ok(Box::new(Redlock::new(
                self.servers.clone(),
                name,
                ttl,
                &self.prefix,
            )?));
        }
        let client = self.client.as_ref().ok_or_else(|| {
            ferrolock::Error::new(ferrolock::ErrorKind::Config, "no Redis configured")
        })?;
        let mut opts = LockOptions::default();
        opts.ttl = ttl;
        opts.prefix = self.prefix.clone();
        opts.fair = self.fair;
        opts.auto_renew = self.auto_renew;
        opts.min_replicas = self.min_replicas;
        opts.legacy_interop = self.legacy_interop;
        opts.recheck = recheck;
        Ok(Box::new(Lock::new(client, name, opts)?))
    }
}

#[php_impl]
impl RedisLock {
    /// `new RedisLock(string|array|null $param = null)`.
    #[php(defaults(param = None))]
    pub fn __construct(param: Option<&Zval>) -> PhpResult<Self> {
        guard(|| Self::from_param(param))
    }

    /// The same object for the whole request (the legacy singleton).
    /// Declared without a return type: its class is `RedisLock` or, with
    /// `ferrolock.legacy_classes` off, `Ferrolock\RedisLock`.
    pub fn instance() -> PhpResult<Zval> {
        guard(|| {
            INSTANCE.with(|slot| {
                let mut slot = slot.borrow_mut();
                if slot.is_none() {
                    let object = ZendClassObject::new(Self::from_param(None)?);
                    let mut zv = Zval::new();
                    // Moves the single reference into the slot (set_object would add one).
                    object.set_zval(&mut zv, false)?;
                    *slot = Some(zv);
                }
                // A new reference to the object kept until RSHUTDOWN.
                slot.as_ref()
                    .map(Zval::shallow_clone)
                    .ok_or_else(|| lock_exception("RedisLock::instance(): singleton slot is empty"))
            })
        })
    }

    /// Takes `$name`; `$timeout` 0 tries once, > 0 waits up to that many
    /// seconds (woken by notification; `$waitIntervalUs` caps re-checks; more
    /// than ten years waits ten years, i.e. as long as it takes);
    /// `$expire` is the lifetime in seconds, at least 5.
    #[php(defaults(
        timeout = Some(0.into()),
        expire = Some(15.into()),
        waitIntervalUs = Some(100000.into())
    ))]
    pub fn lock(
        &mut self,
        name: StrArg,
        timeout: Option<NumArg>,
        expire: Option<IntArg>,
        waitIntervalUs: Option<IntArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisLock::lock", name, timeout, expire, waitIntervalUs);
            if settle(validate::name(&name, "lock name"))?.is_none() {
                return Ok(false);
            }
            let Some(ttl) = settle(validate::seconds(
                expire.max(MIN_EXPIRE) as f64,
                "expire",
                true,
            ))?
            else {
                return Ok(false);
            };
            let wait = if !timeout.is_finite() {
                // NaN or ±INF: bad input (issue 26.5), not "try once".
                let got = String::from_utf8_lossy(&float_bytes(timeout)).into_owned();
                warn(&format!(
                    "timeout must be a finite number of seconds, got {got}"
                ));
                return Ok(false);
            } else if timeout <= 0.0 {
                Wait::Try
            } else {
                match settle(validate::seconds(cap_wait(timeout), "timeout", false))? {
                    Some(d) => Wait::For(d),
                    None => return Ok(false),
                }
            };
            let recheck =
                Duration::from_micros(waitIntervalUs.clamp(1000, MAX_WAIT_INTERVAL_US) as u64);
            let Some(lock) = settle(self.take_lock(&name, ttl, recheck))? else {
                return Ok(false);
            };
            // Each lock() takes a new hold object, so the caller identity
            // (this thread) only matters to the core's check of a hold the
            // same object retakes; a second lock() of a name this object
            // holds waits (or fails) as the legacy class did.
            let acquired = lock
                .acquire_as(wait, None, Some(ferrolock::caller_thread_id()))
                .map_err(exception)?;
            if acquired {
                // A hold of the same name that expired meanwhile is forgotten.
                self.held.insert(name, (lock, ttl, recheck));
            } else if !self.held.contains_key(&name) {
                self.keep_spare(name, lock, ttl, recheck);
            }
            Ok(acquired)
        })
    }

    /// Releases `$name` if this object holds it; false otherwise.
    pub fn unlock(&mut self, name: StrArg) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisLock::unlock", name);
            if !given(&name) {
                return Ok(false);
            }
            self.unlock_name(&name)
        })
    }

    /// Releases every lock this object holds; true when all were still held.
    #[php(name = "unlockAll")]
    pub fn unlock_all(&mut self) -> PhpResult<bool> {
        guard(|| {
            let names: Vec<Vec<u8>> = self.held.keys().cloned().collect();
            let mut all = true;
            for name in names {
                all &= self.unlock_name(&name)?;
            }
            Ok(all)
        })
    }

    /// Sets the remaining lifetime of a held lock to max(`$expire`, 1) seconds.
    pub fn expire(&mut self, name: StrArg, expire: IntArg) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisLock::expire", name, expire);
            if !given(&name) {
                return Ok(false);
            }
            let Some((lock, _, _)) = self.held.get(&name) else {
                return Ok(false);
            };
            let Some(ttl) = settle(validate::seconds(expire.max(1) as f64, "expire", true))? else {
                return Ok(false);
            };
            match lock.extend(Some(ttl)) {
                Ok(()) => Ok(true),
                Err(e) if e.is_not_owned() => Ok(false),
                Err(e) => Err(exception(e)),
            }
        })
    }

    /// True when this object holds `$name` (checked in Redis).
    #[php(name = "isLocking")]
    pub fn is_locking(&self, name: StrArg) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisLock::isLocking", name);
            if !given(&name) {
                return Ok(false);
            }
            match self.held.get(&name) {
                Some((lock, _, _)) => lock.owned().map_err(exception),
                None => Ok(false),
            }
        })
    }

    /// Extra: the fencing token of this object's hold of `$name` (strictly
    /// increasing per name across holders); false when this object has not
    /// acquired `$name`, released it, or knows the hold is lost (auto-renew
    /// or Redlock found it gone, an expire()/unlock() did, or this read did).
    /// The first read of a hold taken uncontended asks Redis (one round trip
    /// that draws the token and checks the hold); later reads of that hold do
    /// not, so without auto-renew they do not notice an expiry (`isLocking()`
    /// asks Redis).
    #[php(name = "fencingToken")]
    pub fn fencing_token(&self, name: StrArg) -> PhpResult<Zval> {
        guard(|| {
            read_args!("RedisLock::fencingToken", name);
            let mut out = Zval::new();
            let hold = self.held.get(&name).map(|h| &h.0).filter(|l| !l.lost());
            let fence = match hold.map(|l| l.fencing_token()) {
                Some(Ok(fence)) => fence,
                Some(Err(e)) if e.kind() == ErrorKind::Lost => None,
                Some(Err(e)) => return Err(exception(e)),
                None => None,
            };
            match fence {
                Some(f) => out.set_long(f),
                None => out.set_bool(false),
            }
            Ok(out)
        })
    }
}

/// The methods that look a held lock up by name: an empty name is the legacy
/// invalid argument (false plus the warning `lock()` gives); any other name is
/// looked up (one too long to lock is simply not held).
fn given(name: &[u8]) -> bool {
    if name.is_empty() {
        if let Err(e) = validate::name(name, "lock name") {
            warn(e.message());
        }
        return false;
    }
    true
}

impl RedisLock {
    fn unlock_name(&mut self, name: &[u8]) -> PhpResult<bool> {
        let Some((name, (lock, ttl, recheck))) = self.held.remove_entry(name) else {
            return Ok(false);
        };
        let released = match lock.release() {
            Ok(()) => true,
            Err(e) if e.is_not_owned() => false,
            Err(e) => {
                // Still held as far as we know: a later unlock() tries again.
                self.held.insert(name, (lock, ttl, recheck));
                return Err(exception(e));
            }
        };
        self.keep_spare(name, lock, ttl, recheck);
        Ok(released)
    }
}
