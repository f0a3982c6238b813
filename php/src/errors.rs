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
/// array) are invalid.
///
/// A plain Zend subclass, declared at MINIT, rather than a `#[php_class]`:
/// ext-php-rs (0.15) gives a `#[php_class]` its own object handler and
/// constructor, so such an exception has no file, line or trace, cannot be
/// serialized, and `new RedisLockException(...)` throws "You cannot
/// instantiate this class from PHP". Found by name when thrown (a hash
/// lookup, on the error path only), so no class-entry pointer is kept.
pub struct RedisLockException;

impl RedisLockException {
    /// The PHP class name.
    pub const NAME: &'static str = "RedisLockException";

    /// Declares the class (at MINIT).
    pub fn declare() -> ext_php_rs::error::Result<()> {
        ClassBuilder::new(Self::NAME)
            .extends((runtime_exception, "\\RuntimeException"))
            .registration(|_| {}) // found by name instead (see above)
            .register()
    }

    /// The class entry (`\RuntimeException` before MINIT declared it, which
    /// cannot happen: no method runs before MINIT).
    fn class() -> &'static ClassEntry {
        ClassEntry::try_find(Self::NAME).unwrap_or_else(runtime_exception)
    }
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
pub fn guard<T>(body: impl FnOnce() -> PhpResult<T>) -> PhpResult<T> {
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
