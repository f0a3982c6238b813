//! Mutexes that shrug off poisoning.
//!
//! A thread that panics while holding one of our mutexes poisons it; the
//! data behind each of them stays consistent at every point where a panic
//! can occur (they guard bookkeeping, never half-done updates), so the next
//! user simply goes on with it.

use std::sync::{Mutex, MutexGuard};

/// [`Mutex::lock`] that recovers a poisoned mutex instead of failing.
pub(crate) trait LockUnpoisoned<T> {
    /// Locks the mutex, taking it over if a panicking thread poisoned it.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> LockUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
