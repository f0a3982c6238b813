//! `Ferrolock\Metrics` and `Ferrolock\Events`: this process's lock figures
//! for an application's own exporter, and a hook for locks found lost in the
//! background. Every figure and event is the core's (`ferrolock::ops`).
//!
//! PHP runs one request at a time on one thread: the hook is never called
//! from the watchdog's thread. The watchdog records the loss; the hook runs
//! at the start of the next call into the extension (any method of any
//! ferrolock class, `Ferrolock\Events::dispatch()` included), on the
//! request's thread. No `E_WARNING` is raised for a loss.

use std::cell::RefCell;

use ext_php_rs::exception::PhpResult;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendHashTable, Zval};
use ferrolock::ops::events::{self, EventKind};
use ferrolock::ops::metrics;

use crate::args::{type_error, type_name};
use crate::errors::guard;

thread_local! {
    /// The lost-lock hook of the current request (a callable), dropped at
    /// request end (it may be a closure of the request's objects).
    static HOOK: RefCell<Option<Zval>> = const { RefCell::new(None) };
}

/// Drops the hook and the events not dispatched (called from RSHUTDOWN,
/// while the object store is still alive): a request's hook never sees the
/// next request's losses, nor the next one this one's.
pub fn release_hook() {
    let old = HOOK.with(|slot| slot.borrow_mut().take());
    if old.is_some() {
        events::enable(false);
        let _ = events::drain();
    }
    drop(old);
}

/// Calls the hook for each lock found lost in the background since the last
/// call (the start of every method of the extension; one atomic load when
/// nothing happened).
pub fn dispatch() {
    if !events::pending() {
        return;
    }
    let hook = HOOK.with(|slot| slot.borrow().as_ref().map(Zval::shallow_clone));
    let lost = events::drain();
    let Some(hook) = hook else {
        return;
    };
    for event in lost {
        // Losses the watchdog found (a release or extend that finds its lock
        // lost throws there instead).
        if event.kind != EventKind::LockLost || event.lock_id == 0 {
            continue;
        }
        let Ok(callable) = ZendCallable::new(&hook) else {
            return;
        };
        let mut name = Zval::new();
        name.set_binary(event.name.clone());
        if let Err(e) = callable.try_call(vec![&name, &event.message.as_str()]) {
            crate::jobs::error_log(&format!(
                "ferrolock: the lost-lock hook failed on {}: {}",
                String::from_utf8_lossy(&event.name),
                crate::jobs::describe(e)
            ));
        }
    }
}

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
        guard(|| {
            let hook = hook.dereference();
            if hook.is_null() {
                release_hook();
                return Ok(());
            }
            if ZendCallable::new(hook).is_err() {
                let at = crate::args::At {
                    function: "Ferrolock\\Events::onLockLost",
                    position: 1,
                    name: "hook",
                };
                return Err(type_error(&at, "?callable", &type_name(hook)));
            }
            let hook = hook.shallow_clone();
            let old = HOOK.with(|slot| slot.borrow_mut().replace(hook));
            drop(old);
            events::enable(true);
            Ok(())
        })
    }

    /// `Ferrolock\Events::dispatch(): void` — calls the hook for the losses
    /// found since the last call into the extension (a long computation
    /// that makes no other call can check here).
    pub fn dispatch() -> PhpResult<()> {
        // guard() dispatches first.
        guard(|| Ok(()))
    }
}
