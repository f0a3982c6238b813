//! Operations: what an operator sees of locks and queues and does to them
//! (the CLI, exporters, logs).
//!
//! - [`Inspector`]: one lock in detail (holder, remaining TTL, last fencing
//!   token, waiters in order with their leases), the locks and queues under
//!   a prefix (a bounded `SCAN` of every master, never `KEYS`), a queue's
//!   reservations page by page, and the forced release of a lock.
//! - [`events`]: what happened where no caller could be told (a lock lost on
//!   the watchdog thread, a lost reply settled by the keeper), for logs and
//!   lost-lock hooks.
//! - [`metrics`]: this process's lock wait and hold times, lost locks.
//!
//! Every read here is bounded: a page, a limit, a `SCAN` step of
//! [`SCAN_COUNT`] keys; the scripts it runs only read.

use std::sync::atomic::{AtomicU64, Ordering};

pub mod events;
mod inspect;
pub mod metrics;
mod queues;

pub use self::inspect::{Inspector, Listing, LockInfo, Waiter};
pub use self::queues::{InFlight, InFlightPage, QueueInfo};

/// Keys a `SCAN` step asks the server to look at (its `COUNT`).
pub const SCAN_COUNT: usize = 1000;

/// Most items one call lists (waiters, reservations, locks, queues).
pub const MAX_PAGE: usize = 1000;

/// A token as operators see it: its first eight characters and `…` (enough
/// to tell holders apart, not enough to act as one); short ones whole.
pub fn short_token(token: &[u8]) -> String {
    let text = String::from_utf8_lossy(token);
    if text.chars().count() <= 12 {
        return text.into_owned();
    }
    let mut out: String = text.chars().take(8).collect();
    out.push('…');
    out
}

/// A lock object as its events name it: the object's id
/// ([`Lock::id`](crate::Lock::id)), the lock's name, and its label for
/// messages.
#[derive(Debug, Clone)]
pub(crate) struct LockRef {
    pub id: u64,
    pub name: Vec<u8>,
    pub label: String,
}

impl LockRef {
    /// A new lock object of `kind` (`lock`, `redlock`) on `name`: its id
    /// is drawn from one counter for both kinds, unique in the process.
    pub(crate) fn new(kind: &str, name: &[u8]) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Self {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            name: name.to_vec(),
            label: crate::keys::label(kind, name),
        }
    }
}

/// Where a forced release came from (the [`Event::origin`](events::Event::origin)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForcedBy {
    /// An [`Inspector`] (the CLI's `release --force`).
    Inspector,
    /// A lock object's own `force_release`.
    Lock,
}

impl ForcedBy {
    fn as_str(self) -> &'static str {
        match self {
            Self::Inspector => "inspector",
            Self::Lock => "lock",
        }
    }
}

/// An operator's forced release of the lock `name` (shown as `label`) ended
/// the hold of `holder`: counted, and reported as an
/// [`EventKind::ForcedRelease`](events::EventKind::ForcedRelease) event
/// naming the shortened token and where it came from. Returns the
/// shortened token.
pub(crate) fn forced_release(name: &[u8], label: &str, holder: &[u8], by: ForcedBy) -> String {
    let shown = short_token(holder);
    metrics::count(&metrics::FORCED_RELEASES);
    events::emit_with(|| {
        let origin = by.as_str();
        events::Event::new(
            events::EventKind::ForcedRelease,
            name,
            format!(
                "{label}: released by force from the {origin} of process {} (an operator's \
                 action); the hold of token {shown} ended",
                crate::fork::current_pid()
            ),
        )
        .ended(shown.clone(), origin)
    });
    shown
}

/// An acquire of a lock gave up (its wait ran out, or a try-once found the
/// lock held): counted.
pub(crate) fn missed() {
    metrics::count(&metrics::ACQUIRES_MISSED);
}

/// A hold taken at `since` was released: its hold time counted.
pub(crate) fn released(since: std::time::Instant) {
    metrics::LOCK_HOLD.observe(since.elapsed());
}

/// A hold of `lock` is lost (`why`): counted, and reported as an
/// [`EventKind::LockLost`](events::EventKind::LockLost) event that names the
/// lock object when the `watchdog` found it (its lost-lock hook is due).
/// Report each lost hold once (see `Lease::report_lost`).
pub(crate) fn lock_lost(lock: &LockRef, why: &str, watchdog: bool) {
    metrics::count(&metrics::LOCKS_LOST);
    events::emit_with(|| {
        let event = events::Event::new(
            events::EventKind::LockLost,
            &lock.name,
            format!("{}: lost: {why}", lock.label),
        );
        if watchdog { event.lock(lock.id) } else { event }
    });
}

/// A background renewal of `lock` failed (`why`): it is tried again.
pub(crate) fn renewal_failed(lock: &LockRef, why: &str) {
    events::emit_with(|| {
        events::Event::new(
            events::EventKind::RenewalFailed,
            &lock.name,
            format!(
                "{}: renewal failed ({why}); trying again until its TTL runs out",
                lock.label
            ),
        )
    });
}

/// An acquire of `lock` got it after `waited`: counted, and reported when
/// it waited longer than the slow acquire threshold.
pub(crate) fn acquired(lock: &LockRef, waited: std::time::Duration) {
    metrics::LOCK_WAIT.observe(waited);
    if events::slow_acquire().is_some_and(|t| waited > t) {
        events::emit_with(|| {
            events::Event::new(
                events::EventKind::SlowAcquire,
                &lock.name,
                format!(
                    "{}: acquired after waiting {:.3} s",
                    lock.label,
                    waited.as_secs_f64()
                ),
            )
            .lasting(waited.as_secs_f64())
        });
    }
}

/// `text` as a `SCAN MATCH` pattern that matches it literally.
fn glob_escape(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 4);
    for &b in text {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// A page size asked by a caller, checked: 1 to [`MAX_PAGE`].
fn page(count: usize, what: &str) -> crate::Result<usize> {
    crate::validate::task_count(count, what)?;
    if count > MAX_PAGE {
        return Err(crate::Error::invalid(format!(
            "{what} must be at most {MAX_PAGE}, got {count}"
        )));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_shortened_for_display() {
        assert_eq!(short_token(b"0123456789abcdef0123"), "01234567…");
        assert_eq!(short_token(b"legacy-1"), "legacy-1");
        assert_eq!(short_token("ééééééééééééé".as_bytes()), "éééééééé…");
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape(b"a*b?[c]\\"), b"a\\*b\\?\\[c\\]\\\\".to_vec());
        assert_eq!(glob_escape(b"orders:"), b"orders:".to_vec());
    }

    #[test]
    fn pages_are_bounded() {
        assert!(page(0, "count").is_err());
        assert!(page(MAX_PAGE + 1, "count").is_err());
        assert_eq!(page(10, "count").unwrap(), 10);
    }
}
