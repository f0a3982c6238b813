//! A [`Ticket`]: where the hub delivers what it hears for one waiter.
//!
//! A waiter takes a ticket before its first registering attempt and keeps it
//! until its wait ends. The hub's reader hands every message for the
//! waiter's id to the ticket as an [`Event`], which is kept until taken
//! ([`Ticket::take`]; the next step of the wait does that), so one that
//! arrives between two steps is not lost. The waiter either blocks until
//! one is pending ([`Ticket::wait`], a condition variable waited on in
//! [`INTERRUPT_SLICE`]s so the caller's interrupt hook is consulted) or is
//! called back when one arrives ([`Ticket::on_event`], for event loops: the
//! asyncio binding turns the call into `loop.call_soon_threadsafe`).
//!
//! One ticket may be registered with several hubs (a Redlock waits on every
//! master at once): whichever hears first wakes it.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::interrupt::{INTERRUPT_SLICE, Interrupt};
use crate::error::Result;
use crate::sync::LockUnpoisoned;

/// What a waiter is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A lock was handed over to this waiter, with this fencing token: it
    /// holds the lock from now on.
    Granted(i64),
    /// Something changed (a release, an enqueue): try again now.
    Woken,
    /// The subscription this waiter relies on was lost and restored, or
    /// moved (a reconnect, a Sentinel master change, a Cluster slot move):
    /// a grant may have been missed, so check again now.
    Recheck,
}

/// A callback run by the hub's reader thread for every event of a ticket.
/// It must return quickly and must not block (schedule work elsewhere).
pub type Callback = Box<dyn FnMut(Event) + Send>;

/// The events of one waiter (see the module documentation).
#[derive(Clone)]
pub struct Ticket {
    pub(super) inner: Arc<Shared>,
}

/// The part of a ticket the hubs hold.
pub(super) struct Shared {
    /// The waiter id: 32 hex digits.
    pub id: String,
    state: Mutex<Pending>,
    ready: Condvar,
}

#[derive(Default)]
struct Pending {
    granted: Option<i64>,
    woken: bool,
    recheck: bool,
    callback: Option<Callback>,
}

impl Pending {
    fn is_pending(&self) -> bool {
        self.granted.is_some() || self.woken || self.recheck
    }

    /// The most important pending event, left pending.
    fn peek(&self) -> Option<Event> {
        if let Some(fence) = self.granted {
            return Some(Event::Granted(fence));
        }
        if self.recheck {
            return Some(Event::Recheck);
        }
        self.woken.then_some(Event::Woken)
    }

    /// The most important pending event, taken.
    fn take(&mut self) -> Option<Event> {
        if let Some(fence) = self.granted.take() {
            self.woken = false;
            self.recheck = false;
            return Some(Event::Granted(fence));
        }
        if std::mem::take(&mut self.recheck) {
            self.woken = false;
            return Some(Event::Recheck);
        }
        std::mem::take(&mut self.woken).then_some(Event::Woken)
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.inner.id)
            .finish()
    }
}

impl Ticket {
    /// A ticket with a fresh waiter id.
    pub(crate) fn new() -> Self {
        Self {
            inner: Arc::new(Shared {
                id: crate::keys::new_token(),
                state: Mutex::new(Pending::default()),
                ready: Condvar::new(),
            }),
        }
    }

    /// The waiter id (without the hub's id).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Takes the pending event, if any, without waiting.
    pub fn take(&self) -> Option<Event> {
        self.inner.state.lock_unpoisoned().take()
    }

    /// Waits until an event is pending (left for [`Ticket::take`]) or
    /// `until` passes (`None`: no limit), consulting `interrupt` every
    /// [`INTERRUPT_SLICE`] (its error ends the wait). `Ok(false)` when
    /// `until` passed first.
    pub fn wait(&self, until: Option<Instant>, interrupt: Option<Interrupt<'_>>) -> Result<bool> {
        let mut st = self.inner.state.lock_unpoisoned();
        loop {
            if st.is_pending() {
                return Ok(true);
            }
            let now = Instant::now();
            let left = match until {
                Some(u) if u <= now => return Ok(false),
                Some(u) => u - now,
                None => INTERRUPT_SLICE,
            };
            let slice = match interrupt {
                Some(_) => left.min(INTERRUPT_SLICE),
                None => left,
            };
            st = self
                .inner
                .ready
                .wait_timeout(st, slice)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            if !st.is_pending()
                && let Some(check) = interrupt
            {
                drop(st);
                check()?;
                st = self.inner.state.lock_unpoisoned();
            }
        }
    }

    /// Calls `callback` (on the hub's reader thread) when an event arrives
    /// from now on; the event is kept for [`Ticket::take`] all the same (the
    /// callback should only schedule the next step of the wait). If one is
    /// pending already, `callback` is called at once, on this thread.
    pub fn on_event(&self, mut callback: Callback) {
        let mut st = self.inner.state.lock_unpoisoned();
        if let Some(event) = st.peek() {
            drop(st);
            callback(event);
            st = self.inner.state.lock_unpoisoned();
        }
        st.callback = Some(callback);
    }

    /// Stops calling the callback.
    pub fn clear_callback(&self) {
        self.inner.state.lock_unpoisoned().callback = None;
    }
}

impl Shared {
    /// Delivers `event`: kept for [`Ticket::take`], the blocked waiter woken
    /// and the callback, if any, called.
    pub(super) fn deliver(&self, event: Event) {
        let mut st = self.state.lock_unpoisoned();
        match event {
            Event::Granted(fence) => st.granted = Some(fence),
            Event::Woken => st.woken = true,
            Event::Recheck => st.recheck = true,
        }
        let callback = st.callback.take();
        drop(st);
        self.ready.notify_all();
        if let Some(mut callback) = callback {
            // Called without the lock (it may take other locks); put back
            // unless replaced meanwhile.
            callback(event);
            let mut st = self.state.lock_unpoisoned();
            if st.callback.is_none() {
                st.callback = Some(callback);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn events_are_kept_until_taken_and_a_grant_comes_first() {
        let t = Ticket::new();
        assert_eq!(t.take(), None);
        t.inner.deliver(Event::Woken);
        t.inner.deliver(Event::Granted(7));
        assert_eq!(t.take(), Some(Event::Granted(7)));
        assert_eq!(t.take(), None, "a grant absorbs the wake-ups before it");
        t.inner.deliver(Event::Woken);
        t.inner.deliver(Event::Recheck);
        assert_eq!(t.take(), Some(Event::Recheck));
        assert_eq!(t.take(), None);
    }

    #[test]
    fn wait_ends_on_an_event_a_deadline_or_the_hook() {
        let t = Ticket::new();
        let start = Instant::now();
        let until = start + Duration::from_millis(80);
        assert!(!t.wait(Some(until), None).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(80));

        let other = t.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            other.inner.deliver(Event::Granted(1));
        });
        assert!(t.wait(None, None).unwrap());
        assert_eq!(t.take(), Some(Event::Granted(1)), "left for take");
        h.join().unwrap();

        let calls = AtomicUsize::new(0);
        let hook = || -> Result<()> {
            if calls.fetch_add(1, Ordering::AcqRel) >= 2 {
                Err(crate::wait::interrupted("test"))
            } else {
                Ok(())
            }
        };
        let err = t.wait(None, Some(&hook)).unwrap_err();
        assert!(err.is_interrupted());
    }

    #[test]
    fn a_callback_hears_of_pending_and_later_events() {
        let t = Ticket::new();
        t.inner.deliver(Event::Woken);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        t.on_event(Box::new(move |e| s.lock().unwrap().push(e)));
        t.inner.deliver(Event::Granted(3));
        assert_eq!(*seen.lock().unwrap(), vec![Event::Woken, Event::Granted(3)]);
        assert_eq!(t.take(), Some(Event::Granted(3)), "events stay for take");
        t.clear_callback();
        t.inner.deliver(Event::Woken);
        assert_eq!(seen.lock().unwrap().len(), 2);
        assert_eq!(t.take(), Some(Event::Woken));
    }
}
