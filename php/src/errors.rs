//! The error boundary: `RedisLockException`, the one legacy error policy,
//! and the guard that keeps Rust panics out of PHP.

use std::panic::{AssertUnwindSafe, catch_unwind};

use ext_php_rs::builders::ClassBuilder;
use ext_php_rs::error::php_error;
use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::flags::ErrorType;
use ext_php_rs::zend::ClassEntry;
use ferrolock::ErrorKind;

unsafe extern "C" {
    // SPL is always compiled into PHP; its class entries are set before any
    // extension's MINIT.
    static spl_ce_RuntimeException: *mut ClassEntry;
}

/// `\RuntimeException`'s class entry.
fn runtime_exception() -> &'static ClassEntry {
    // SAFETY: a valid class entry for the whole life of the PHP process.
    unsafe { &*spl_ce_RuntimeException }
}

/// `class RedisLockException extends RuntimeException {}`: Redis could not be
/// reached or answered with an error, or the connection settings (URL or
/// array) are invalid. Also `Ferrolock\RedisLockException` (see `legacy.rs`).
///
/// A plain Zend subclass, declared at MINIT, rather than a `#[php_class]`:
/// ext-php-rs (0.15) gives a `#[php_class]` its own object handler and
/// constructor, so such an exception has no file, line or trace, cannot be
/// serialized, and `new RedisLockException(...)` throws "You cannot
/// instantiate this class from PHP". Found by name when thrown (a hash
/// lookup, on the error path only), so no class-entry pointer is kept.
pub struct RedisLockException;

impl RedisLockException {
    /// The PHP class name (legacy).
    pub const NAME: &'static str = "RedisLockException";

    /// Declares the class (at MINIT), under its legacy or namespaced name.
    pub fn declare() -> ext_php_rs::error::Result<()> {
        ClassBuilder::new(crate::legacy::class_name(Self::NAME))
            .extends((runtime_exception, "\\RuntimeException"))
            .registration(|_| {}) // found by name instead (see above)
            .register()?;
        if crate::legacy::global_names() {
            crate::legacy::name_declared(Self::NAME)?; // the namespaced alias
        }
        Ok(())
    }

    /// The class entry (`\RuntimeException` before MINIT declared it, which
    /// cannot happen: no method runs before MINIT).
    fn class() -> &'static ClassEntry {
        ClassEntry::try_find(&crate::legacy::class_name(Self::NAME))
            .unwrap_or_else(runtime_exception)
    }
}

/// The exceptions of the modern classes, mirroring the Python package's:
/// `Ferrolock\FerrolockException extends \RuntimeException`, and under it
/// the lock and connection failures. Declared at MINIT like
/// `RedisLockException` (plain Zend subclasses, found by name when thrown).
/// Bad arguments are PHP's own `\TypeError` and `\ValueError`, as Python's
/// are its builtin `TypeError` and `ValueError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exc {
    /// `Ferrolock\FerrolockException` (Python: `FerrolockError`).
    Ferrolock,
    /// `Ferrolock\LockException` (`LockError`).
    Lock,
    /// `Ferrolock\LockTimeoutException` (`LockTimeout`).
    Timeout,
    /// `Ferrolock\LockNotOwnedException` (`LockNotOwnedError`).
    NotOwned,
    /// `Ferrolock\LockLostException` (`LockLostError`).
    Lost,
    /// `Ferrolock\ConnectionException` (`ConnectionError`).
    Connection,
}

impl Exc {
    /// Every class, parents first.
    pub const ALL: [Exc; 6] = [
        Exc::Ferrolock,
        Exc::Lock,
        Exc::Timeout,
        Exc::NotOwned,
        Exc::Lost,
        Exc::Connection,
    ];

    /// The PHP class name.
    pub fn name(self) -> &'static str {
        match self {
            Exc::Ferrolock => "Ferrolock\\FerrolockException",
            Exc::Lock => "Ferrolock\\LockException",
            Exc::Timeout => "Ferrolock\\LockTimeoutException",
            Exc::NotOwned => "Ferrolock\\LockNotOwnedException",
            Exc::Lost => "Ferrolock\\LockLostException",
            Exc::Connection => "Ferrolock\\ConnectionException",
        }
    }

    /// The parent class: a class entry finder and its name.
    fn parent(self) -> (fn() -> &'static ClassEntry, &'static str) {
        fn ferrolock() -> &'static ClassEntry {
            Exc::Ferrolock.class()
        }
        fn lock() -> &'static ClassEntry {
            Exc::Lock.class()
        }
        match self {
            Exc::Ferrolock => (runtime_exception, "\\RuntimeException"),
            Exc::Lock | Exc::Connection => (ferrolock, Exc::Ferrolock.name()),
            Exc::Timeout | Exc::NotOwned | Exc::Lost => (lock, Exc::Lock.name()),
        }
    }

    /// Declares every class (at MINIT).
    pub fn declare_all() -> ext_php_rs::error::Result<()> {
        for exc in Self::ALL {
            ClassBuilder::new(exc.name())
                .extends(exc.parent())
                .registration(|_| {})
                .register()?;
        }
        Ok(())
    }

    fn class(self) -> &'static ClassEntry {
        ClassEntry::try_find(self.name())
            .or_else(|| crate::legacy::find_class(self.name())) // at MINIT
            .unwrap_or_else(runtime_exception)
    }

    /// A new exception of this class.
    pub fn err(self, message: impl Into<String>) -> PhpException {
        PhpException::new(message.into(), 0, self.class())
    }
}

/// A core error as the modern classes report it: a bad argument is a
/// `\ValueError` (`what` names the method, e.g. `Ferrolock\Lock::extend()`),
/// the rest one of the [`Exc`] classes.
pub fn modern(what: &str, e: ferrolock::Error) -> PhpException {
    let message = e.to_string();
    let class = match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::Config => {
            return value_error(format!("{what}: {message}"));
        }
        ErrorKind::Connection | ErrorKind::Auth | ErrorKind::Timeout => Exc::Connection,
        ErrorKind::NotOwned => Exc::NotOwned,
        ErrorKind::Lost => Exc::Lost,
        ErrorKind::QueueLocked => Exc::Timeout,
        ErrorKind::Quorum => Exc::Lock,
        _ => Exc::Ferrolock,
    };
    class.err(message)
}

/// PHP's `\ValueError` with `message`.
pub fn value_error(message: impl Into<String>) -> PhpException {
    PhpException::new(message.into(), 0, ext_php_rs::zend::ce::value_error())
}

/// A `RedisLockException` with `message`.
pub fn lock_exception(message: impl Into<String>) -> PhpException {
    PhpException::new(message.into(), 0, RedisLockException::class())
}

/// A core error as a `RedisLockException`.
pub fn exception(e: ferrolock::Error) -> PhpException {
    lock_exception(e.to_string())
}

/// Emits an `E_WARNING` (PHP prefixes it with `Class::method(): `).
pub fn warn(message: &str) {
    php_error(&ErrorType::Warning, &message.replace('\0', "\\0"));
}

/// The legacy error policy, for every method: what the legacy classes
/// answered with `false`/`[]` — an invalid argument, a legacy queue lock held
/// past the timeout — is `None` plus an `E_WARNING` naming the problem (the
/// caller returns the legacy value); anything about Redis is a
/// `RedisLockException`.
pub fn settle<T>(result: ferrolock::Result<T>) -> PhpResult<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_invalid_argument() || e.kind() == ErrorKind::QueueLocked => {
            warn(e.message());
            Ok(None)
        }
        Err(e) => Err(exception(e)),
    }
}

/// Runs a method body, turning a Rust panic into a `RedisLockException`
/// instead of aborting the PHP process.
///
/// First, the lost-lock hook is called for the locks the watchdog found lost
/// since the last call (`ops.rs`): PHP's calls are the only moments it can
/// run on the request's thread.
pub fn guard<T>(body: impl FnOnce() -> PhpResult<T>) -> PhpResult<T> {
    crate::ops::dispatch();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(lock_exception(format!("ferrolock internal error: {what}")))
        }
    }
}
