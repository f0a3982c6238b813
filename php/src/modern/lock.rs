//! `Ferrolock\Lock`: the Python package's `Lock` for PHP.

use std::sync::Arc;

use ext_php_rs::exception::PhpResult;
use ext_php_rs::prelude::*;
use ext_php_rs::types::Zval;
use ferrolock::{DEFAULT_LOCK_PREFIX, DEFAULT_TTL, LockOptions, Wait, validate};

use super::{Kind, Settings, boolean, bytes, connection_value, invalid, number};
use crate::args::{Args, OptBool, OptInt, OptNum, OptStr, Param, StrArg, bytes_zval, read_args};
use crate::connect::Policy;
use crate::errors::{guard, modern};

/// The settings a lock takes: argument name, kind, other `$options` keys.
const SETTINGS: &[(&str, Kind, &[&str])] = &[
    ("ttl", Kind::Number, &[]),
    ("timeout", Kind::Number, &[]),
    ("autoRenew", Kind::Bool, &["auto_renew"]),
    ("reentrant", Kind::Bool, &[]),
    ("fair", Kind::Bool, &[]),
    ("connection", Kind::Connection, &[]),
    ("url", Kind::Bytes, &[]),
    ("prefix", Kind::Bytes, &[]),
    ("minReplicas", Kind::Int, &["min_replicas"]),
    ("legacyInterop", Kind::Bool, &["legacy_interop"]),
];

/// A distributed lock on one Redis deployment (a server, a Sentinel master,
/// a Cluster), as the Python package's `ferrolock.Lock`.
#[php_class]
#[php(name = "Ferrolock\\Lock")]
pub struct Lock {
    inner: Arc<ferrolock::Lock>,
    /// Default wait of `acquire()` (None: forever).
    timeout: Option<f64>,
}

/// What `__construct` and `restore` read: the lock's name, its options and
/// its default timeout.
struct Built {
    client: ferrolock::Client,
    name: Vec<u8>,
    opts: LockOptions,
    timeout: Option<f64>,
}

/// Reads the settings of `function` (`__construct` or `restore`): `args` is
/// positioned before `$options`, and `name` was read already.
#[allow(clippy::too_many_arguments)]
fn build(
    function: &'static str,
    mut args: Args,
    name: Vec<u8>,
    options: Option<&Zval>,
    ttl: Option<OptNum>,
    timeout: Option<OptNum>,
    autoRenew: Option<OptBool>,
    reentrant: Option<OptBool>,
    fair: Option<OptBool>,
    connection_arg: Option<&Zval>,
    url: Option<OptStr>,
    prefix: Option<OptStr>,
    minReplicas: Option<OptInt>,
    legacyInterop: Option<OptBool>,
) -> PhpResult<Built> {
    let options_at = args.at("options");
    let mut s = Settings::new(function, SETTINGS);
    s.arg("ttl", number(args.read("ttl", ttl)?));
    s.arg("timeout", number(args.read("timeout", timeout)?));
    s.arg("autoRenew", boolean(args.read("autoRenew", autoRenew)?));
    s.arg("reentrant", boolean(args.read("reentrant", reentrant)?));
    s.arg("fair", boolean(args.read("fair", fair)?));
    let connection_at = args.at("connection");
    s.arg(
        "connection",
        connection_value(&connection_at, connection_arg)?,
    );
    s.arg("url", bytes(args.read("url", url)?));
    s.arg("prefix", bytes(args.read("prefix", prefix)?));
    let min_replicas = args.read("minReplicas", minReplicas)?;
    s.arg("minReplicas", min_replicas.map(super::Value::Int));
    s.arg(
        "legacyInterop",
        boolean(args.read("legacyInterop", legacyInterop)?),
    );
    s.options(&options_at, options)?;

    let what = s.what();
    let mut opts = LockOptions::default();
    if let Some(ttl) = s.number("ttl") {
        opts.ttl = validate::ttl(ttl, "ttl").map_err(|e| invalid(function, e))?;
    }
    let timeout = s.number("timeout");
    Wait::from_secs(timeout, "timeout").map_err(|e| invalid(function, e))?;
    opts.auto_renew = s.boolean("autoRenew").unwrap_or(true);
    opts.reentrant = s.boolean("reentrant").unwrap_or(false);
    opts.fair = s.boolean("fair").unwrap_or(false);
    opts.legacy_interop = s.boolean("legacyInterop");
    opts.prefix = s
        .bytes("prefix")
        .unwrap_or_else(|| DEFAULT_LOCK_PREFIX.as_bytes().to_vec());
    if let Some(n) = s.int("minReplicas") {
        opts.min_replicas = u32::try_from(n).map_err(|_| {
            crate::errors::value_error(format!(
                "{what}: minReplicas must be between 0 and {}, got {n}",
                u32::MAX
            ))
        })?;
    }
    let client = s.client(connection_at, Policy::Modern(function_what(function)))?;
    Ok(Built {
        client,
        name,
        opts,
        timeout,
    })
}

/// `Ferrolock\Lock::__construct()` for messages (a static string per method).
fn function_what(function: &'static str) -> &'static str {
    match function {
        "Ferrolock\\Lock::restore" => "Ferrolock\\Lock::restore()",
        _ => "Ferrolock\\Lock::__construct()",
    }
}

const _: () = assert!(DEFAULT_TTL.as_secs() == 30 && DEFAULT_TTL.subsec_nanos() == 0);

impl Lock {
    fn fail(&self, method: &str, e: ferrolock::Error) -> ext_php_rs::exception::PhpException {
        modern(&format!("Ferrolock\\Lock::{method}()"), e)
    }
}

#[php_impl]
impl Lock {
    /// `new Lock(string $name, ?array $options = null, ...)`: see the stubs.
    #[php(defaults(
        options = None,
        ttl = None,
        timeout = None,
        autoRenew = None,
        reentrant = None,
        fair = None,
        connection = None,
        url = None,
        prefix = None,
        minReplicas = None,
        legacyInterop = None
    ))]
    #[allow(clippy::too_many_arguments)]
    pub fn __construct(
        name: StrArg,
        options: Option<&Zval>,
        ttl: Option<OptNum>,
        timeout: Option<OptNum>,
        autoRenew: Option<OptBool>,
        reentrant: Option<OptBool>,
        fair: Option<OptBool>,
        connection: Option<&Zval>,
        url: Option<OptStr>,
        prefix: Option<OptStr>,
        minReplicas: Option<OptInt>,
        legacyInterop: Option<OptBool>,
    ) -> PhpResult<Self> {
        guard(|| {
            const F: &str = "Ferrolock\\Lock::__construct";
            let mut args = Args::new(F);
            let name = args.read("name", name)?;
            let b = build(
                F,
                args,
                name,
                options,
                ttl,
                timeout,
                autoRenew,
                reentrant,
                fair,
                connection,
                url,
                prefix,
                minReplicas,
                legacyInterop,
            )?;
            let inner =
                ferrolock::Lock::new(&b.client, &b.name, b.opts).map_err(|e| invalid(F, e))?;
            Ok(Self {
                inner: Arc::new(inner),
                timeout: b.timeout,
            })
        })
    }

    /// Adopts the hold of `$token` (read with `token()` in another process):
    /// a lock that holds it, checked in Redis; `LockNotOwnedException` when
    /// the token holds nothing (anymore). Same options as the constructor.
    #[php(defaults(
        options = None,
        ttl = None,
        timeout = None,
        autoRenew = None,
        reentrant = None,
        fair = None,
        connection = None,
        url = None,
        prefix = None,
        minReplicas = None,
        legacyInterop = None
    ))]
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        name: StrArg,
        token: StrArg,
        options: Option<&Zval>,
        ttl: Option<OptNum>,
        timeout: Option<OptNum>,
        autoRenew: Option<OptBool>,
        reentrant: Option<OptBool>,
        fair: Option<OptBool>,
        connection: Option<&Zval>,
        url: Option<OptStr>,
        prefix: Option<OptStr>,
        minReplicas: Option<OptInt>,
        legacyInterop: Option<OptBool>,
    ) -> PhpResult<Self> {
        guard(|| {
            const F: &str = "Ferrolock\\Lock::restore";
            let mut args = Args::new(F);
            let name = args.read("name", name)?;
            let token_at = args.at("token");
            let token = token.read(&token_at)?;
            let token = String::from_utf8(token).map_err(|_| {
                crate::errors::value_error(format!("{token_at} must be a token (UTF-8 text)"))
            })?;
            let b = build(
                F,
                args,
                name,
                options,
                ttl,
                timeout,
                autoRenew,
                reentrant,
                fair,
                connection,
                url,
                prefix,
                minReplicas,
                legacyInterop,
            )?;
            let inner = ferrolock::Lock::restore(&b.client, &b.name, b.opts, &token)
                .map_err(|e| modern("Ferrolock\\Lock::restore()", e))?;
            Ok(Self {
                inner: Arc::new(inner),
                timeout: b.timeout,
            })
        })
    }

    /// Takes the lock. `$timeout`: null → the lock's own timeout (null there
    /// too: wait as long as it takes); 0 → try once; else wait up to that many
    /// seconds. True when acquired.
    #[php(defaults(timeout = None))]
    pub fn acquire(&self, timeout: Option<OptNum>) -> PhpResult<bool> {
        guard(|| {
            read_args!("Ferrolock\\Lock::acquire", timeout);
            let wait = Wait::from_secs(timeout.or(self.timeout), "timeout")
                .map_err(|e| self.fail("acquire", e))?;
            self.inner
                .acquire(wait, None)
                .map_err(|e| self.fail("acquire", e))
        })
    }

    /// Releases the lock; `LockNotOwnedException` when this object does not
    /// hold it (never acquired, released, expired or taken over).
    pub fn release(&self) -> PhpResult<()> {
        guard(|| self.inner.release().map_err(|e| self.fail("release", e)))
    }

    /// Sets the remaining TTL of the hold to `$ttl` seconds (null: the lock's
    /// ttl); `LockNotOwnedException` when not held.
    #[php(defaults(ttl = None))]
    pub fn extend(&self, ttl: Option<OptNum>) -> PhpResult<()> {
        guard(|| {
            read_args!("Ferrolock\\Lock::extend", ttl);
            let ttl = ttl
                .map(|t| validate::ttl(t, "ttl"))
                .transpose()
                .map_err(|e| self.fail("extend", e))?;
            self.inner.extend(ttl).map_err(|e| self.fail("extend", e))
        })
    }

    /// True when anyone holds the lock.
    pub fn locked(&self) -> PhpResult<bool> {
        guard(|| self.inner.locked().map_err(|e| self.fail("locked", e)))
    }

    /// True when this object holds the lock (checked in Redis).
    pub fn owned(&self) -> PhpResult<bool> {
        guard(|| self.inner.owned().map_err(|e| self.fail("owned", e)))
    }

    /// The owner token of the current hold (null when not held): hand it to
    /// `Lock::restore()` in another process.
    pub fn token(&self) -> Option<String> {
        self.inner.token()
    }

    /// The fencing token of the current hold (null when not held); the first
    /// read of a hold may ask Redis, and throws `LockLostException` when it
    /// finds the hold gone.
    #[php(name = "fencingToken")]
    pub fn fencing_token(&self) -> PhpResult<Option<i64>> {
        guard(|| {
            self.inner
                .fencing_token()
                .map_err(|e| self.fail("fencingToken", e))
        })
    }

    /// True once the hold was lost (the watchdog found it gone or could not
    /// renew it, or a release/extend found it taken).
    pub fn lost(&self) -> bool {
        self.inner.lost()
    }

    /// Frees the lock whoever holds it (for operators: a stuck holder); the
    /// oldest waiter gets it, as on a release. True when a hold was ended.
    #[php(name = "forceRelease")]
    pub fn force_release(&self) -> PhpResult<bool> {
        guard(|| {
            self.inner
                .force_release()
                .map_err(|e| self.fail("forceRelease", e))
        })
    }

    /// The lock's name.
    pub fn name(&self) -> Zval {
        bytes_zval(self.inner.name())
    }

    /// The lock's ttl in seconds.
    pub fn ttl(&self) -> f64 {
        self.inner.options().ttl.as_secs_f64()
    }

    /// The default wait of `acquire()` in seconds (null: forever).
    pub fn timeout(&self) -> Option<f64> {
        self.timeout
    }
}
