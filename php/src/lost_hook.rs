//! The hooks of `Ferrolock\Events` (`ops.rs`): the lost-lock hook
//! (`onLockLost`) and the listener of every event (`onEvent`), kept for the
//! request, and called at the start of every call into the extension
//! (`errors::guard`) for what the core reported meanwhile.

use std::cell::RefCell;
use std::time::UNIX_EPOCH;

use ext_php_rs::types::{ZendCallable, ZendHashTable, Zval};
use ferrolock::ops::events::{self, Event, EventKind};

thread_local! {
    /// The lost-lock hook of the current request (a callable), dropped at
    /// request end (it may be a closure of the request's objects).
    static HOOK: RefCell<Option<Zval>> = const { RefCell::new(None) };
    /// The listener of every event (`Events::onEvent`), kept as the hook is.
    static LISTENER: RefCell<Option<Zval>> = const { RefCell::new(None) };
}

/// Which of the two hooks.
#[derive(Clone, Copy)]
pub enum Hook {
    /// `onLockLost`: `$hook(string $name, string $message)`.
    Lost,
    /// `onEvent`: `$hook(array $event)`.
    Every,
}

fn slot(which: Hook) -> &'static std::thread::LocalKey<RefCell<Option<Zval>>> {
    match which {
        Hook::Lost => &HOOK,
        Hook::Every => &LISTENER,
    }
}

/// Drops both hooks and the events not dispatched (called from RSHUTDOWN,
/// while the object store is still alive): a request's hooks never see the
/// next request's events, nor the next one this one's.
pub fn release_hook() {
    let lost = HOOK.with(|s| s.borrow_mut().take());
    let every = LISTENER.with(|s| s.borrow_mut().take());
    if lost.is_some() || every.is_some() {
        events::enable(false);
        let _ = events::drain();
    }
    drop((lost, every));
}

/// Removes one hook; events stop being kept when neither is left.
pub fn remove_hook(which: Hook) {
    let old = slot(which).with(|s| s.borrow_mut().take());
    let other = match which {
        Hook::Lost => Hook::Every,
        Hook::Every => Hook::Lost,
    };
    if old.is_some() && slot(other).with(|s| s.borrow().is_none()) {
        events::enable(false);
        let _ = events::drain();
    }
    drop(old);
}

/// Calls the hooks for what happened since the last call into the
/// extension (the start of every method; one atomic load when nothing
/// happened): the listener with every event, the lost-lock hook with each
/// lock found lost in the background.
pub fn dispatch() {
    if !events::pending() {
        return;
    }
    let lost_hook = HOOK.with(|s| s.borrow().as_ref().map(Zval::shallow_clone));
    let listener = LISTENER.with(|s| s.borrow().as_ref().map(Zval::shallow_clone));
    for event in events::drain() {
        if let Some(listener) = &listener {
            call(listener, "event listener", &event, |e| {
                let mut row = Zval::new();
                row.set_hashtable(event_array(e)?);
                Ok(vec![row])
            });
        }
        // Losses the watchdog found (a release or extend that finds its lock
        // lost throws there instead).
        if let Some(hook) = &lost_hook
            && event.kind == EventKind::LockLost
            && event.lock_id != 0
        {
            call(hook, "lost-lock hook", &event, |e| {
                let mut name = Zval::new();
                name.set_binary(e.name.clone());
                let mut message = Zval::new();
                message.set_string(&e.message, false)?;
                Ok(vec![name, message])
            });
        }
    }
}

/// Calls `hook` with the arguments `args` makes of `event`; what it throws
/// goes to `error_log()`.
fn call(
    hook: &Zval,
    what: &str,
    event: &Event,
    args: impl FnOnce(&Event) -> ext_php_rs::error::Result<Vec<Zval>>,
) {
    let Ok(callable) = ZendCallable::new(hook) else {
        return;
    };
    let Ok(args) = args(event) else {
        return;
    };
    let refs: Vec<&dyn ext_php_rs::convert::IntoZvalDyn> = args
        .iter()
        .map(|a| a as &dyn ext_php_rs::convert::IntoZvalDyn)
        .collect();
    if let Err(e) = callable.try_call(refs) {
        crate::jobs::error_log(&format!(
            "ferrolock: the {what} failed on {}: {}",
            String::from_utf8_lossy(&event.name),
            crate::jobs::describe(e)
        ));
    }
}

/// An event as `onEvent` hands it: `kind`, `level`, `message`, `name`,
/// `at` (unix seconds), `seconds`, `holder` and `origin` (forced
/// releases), `lock_id`.
fn event_array(e: &Event) -> ext_php_rs::error::Result<ext_php_rs::boxed::ZBox<ZendHashTable>> {
    let mut row = ZendHashTable::new();
    row.insert("kind", e.kind.as_str())?;
    row.insert("level", e.kind.level().as_str())?;
    row.insert("message", e.message.as_str())?;
    let mut name = Zval::new();
    name.set_binary(e.name.clone());
    row.insert("name", name)?;
    let at =
        e.at.duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
    row.insert("at", at)?;
    row.insert("seconds", e.seconds)?;
    row.insert("holder", e.holder.as_str())?;
    row.insert("origin", e.origin.as_str())?;
    row.insert("lock_id", i64::try_from(e.lock_id).unwrap_or(i64::MAX))?;
    Ok(row)
}

/// Makes `hook` this request's hook of `which` (replacing any), and starts
/// keeping the core's events for it.
pub fn set_hook(which: Hook, hook: Zval) {
    let old = slot(which).with(|s| s.borrow_mut().replace(hook));
    drop(old);
    events::enable(true);
}
