//! `Ferrolock\Metrics` and `Ferrolock\Events`: this process's lock figures
//! for an application's own exporter, and a hook for locks found lost in the
//! background. Every figure and event is the core's (`ferrolock::ops`).
//!
//! PHP runs one request at a time on one thread: the hook is never called
//! from the watchdog's thread. The watchdog records the loss; the hook runs
//! at the start of the next call into the extension (any method of any
//! ferrolock class, `Ferrolock\Events::dispatch()` included), on the
//! request's thread. No `E_WARNING` is raised for a loss.

use ext_php_rs::exception::PhpResult;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendHashTable, Zval};
use ferrolock::ops::metrics;

use crate::args::{type_error, type_name};
use crate::errors::guard;
use crate::lost_hook::{Hook, remove_hook, set_hook};

/// This process's lock figures, for an application's own exporter.
#[php_class]
#[php(name = "Ferrolock\\Metrics")]
pub struct Metrics;

#[php_impl]
impl Metrics {
    /// `Ferrolock\Metrics::snapshot(): array` — counted since the process
    /// started (a PHP-FPM worker: across its requests):
    /// `buckets` (histogram upper bounds, seconds), `lock_wait` and
    /// `lock_hold` (`cumulative` counts per bucket and `+Inf` last, `count`,
    /// `sum` seconds), `acquires_missed`, `locks_lost`, `forced_releases`,
    /// `dead_lettered`, `settlements_pending`. Queue figures: the queues'
    /// `stats()`.
    pub fn snapshot() -> PhpResult<Zval> {
        guard(|| {
            let s = metrics::snapshot();
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let mut out = ZendHashTable::new();
            out.insert("buckets", metrics::BUCKETS.to_vec())?;
            for (key, h) in [("lock_wait", &s.lock_wait), ("lock_hold", &s.lock_hold)] {
                let mut row = ZendHashTable::new();
                row.insert(
                    "cumulative",
                    h.cumulative.iter().map(|&c| n(c)).collect::<Vec<i64>>(),
                )?;
                row.insert("count", n(h.count))?;
                row.insert("sum", h.sum)?;
                out.insert(key, row)?;
            }
            out.insert("acquires_missed", n(s.acquires_missed))?;
            out.insert("locks_lost", n(s.locks_lost))?;
            out.insert("forced_releases", n(s.forced_releases))?;
            out.insert("dead_lettered", n(s.dead_lettered))?;
            out.insert(
                "settlements_pending",
                i64::try_from(s.settlements_pending).unwrap_or(i64::MAX),
            )?;
            let mut zv = Zval::new();
            zv.set_hashtable(out);
            Ok(zv)
        })
    }
}

/// What happened in the background, told to the application.
#[php_class]
#[php(name = "Ferrolock\\Events")]
pub struct Events;

#[php_impl]
impl Events {
    /// `Ferrolock\Events::onLockLost(?callable $hook): void` — `$hook(string
    /// $name, string $message)` is called once for each hold the watchdog
    /// (auto-renewal) finds lost: expired or taken while held, or no renewal
    /// succeeded within its TTL. It runs at the next call into the extension
    /// (or `Events::dispatch()`), never from a background thread; what it
    /// throws goes to `error_log()`. `null` removes it. Kept until the end of
    /// the request.
    pub fn onLockLost(hook: &Zval) -> PhpResult<()> {
        guard(|| hook_of(Hook::Lost, hook, "Ferrolock\\Events::onLockLost"))
    }

    /// `Ferrolock\Events::onEvent(?callable $hook): void` — `$hook(array
    /// $event)` is called for every event of this process, when it happens
    /// where no caller could be told (the lost-lock hook's losses, renewals
    /// that failed, slow acquires, forced releases, dead-lettered tasks,
    /// settlements of lost replies): `kind` (`lock_lost`, `forced_release`,
    /// …), `level` (`info`, `warning`, `error`), `message`, `name`, `at`
    /// (unix seconds), `seconds` (a slow acquire's wait), `holder` and
    /// `origin` (a forced release: the shortened token of the hold it ended,
    /// and `lock` or `inspector`), `lock_id`. Called as the lost-lock hook
    /// is (at the next call into the extension, never from a background
    /// thread; what it throws goes to `error_log()`); `null` removes it.
    pub fn onEvent(hook: &Zval) -> PhpResult<()> {
        guard(|| hook_of(Hook::Every, hook, "Ferrolock\\Events::onEvent"))
    }

    /// `Ferrolock\Events::dispatch(): void` — calls the hooks for what
    /// happened since the last call into the extension (a long computation
    /// that makes no other call can check here).
    pub fn dispatch() -> PhpResult<()> {
        // guard() dispatches first.
        guard(|| Ok(()))
    }
}

/// Sets (a callable) or removes (`null`) the hook `which`; `function` names
/// the method in a `TypeError`.
fn hook_of(which: Hook, hook: &Zval, function: &'static str) -> PhpResult<()> {
    let hook = hook.dereference();
    if hook.is_null() {
        remove_hook(which);
        return Ok(());
    }
    if ZendCallable::new(hook).is_err() {
        let at = crate::args::At {
            function,
            position: 1,
            name: "hook",
        };
        return Err(type_error(&at, "?callable", &type_name(hook)));
    }
    set_hook(which, hook.shallow_clone());
    Ok(())
}
