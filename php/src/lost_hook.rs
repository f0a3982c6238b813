//! The lost-lock hook of `Ferrolock\Events::onLockLost` (`ops.rs`): kept for
//! the request, and called at the start of every call into the extension
//! (`errors::guard`) for the locks the watchdog found lost meanwhile.

use std::cell::RefCell;

use ext_php_rs::types::{ZendCallable, Zval};
use ferrolock::ops::events::{self, EventKind};

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

/// Makes `hook` the lost-lock hook of this request (replacing any), and
/// starts keeping the core's events for it.
pub fn set_hook(hook: Zval) {
    let old = HOOK.with(|slot| slot.borrow_mut().replace(hook));
    drop(old);
    events::enable(true);
}
