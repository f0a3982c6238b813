//! What happened that an operator wants to hear of: waits beyond a
//! threshold, renewals that failed, locks lost, tasks dead-lettered, lost
//! replies being settled, forced releases.
//!
//! Most of these happen where no caller can be told: on the watchdog thread,
//! on the settlement keeper's. So they are kept here, in a bounded queue of
//! this process, for whoever listens: the Python package logs them (logger
//! `ferrolock`) and calls a lock's `on_lost` from a thread of its own; the
//! PHP extension calls its lost-lock hook at the next call into it (PHP is
//! single-threaded); a Rust program reads them with [`wait`] or [`drain`].
//!
//! Nothing is kept until a listener calls [`enable`]: until then an event
//! costs one atomic load where it would happen. The queue holds the latest
//! [`CAPACITY`] events; older ones are dropped (and counted: [`dropped`]).
//! A forked child starts with an empty queue (the parent's events are the
//! parent's to report).
//!
//! A waiting listener gets the first event of a quiet spell at once, and
//! what follows in batches, at most one per [`BATCH_WINDOW`], except a lost
//! lock, which is handed over at once (its `on_lost` hook is due). A burst
//! (a thousand waiters each reporting a slow acquire) so wakes the Python
//! listener, a thread that needs the GIL, ten times a second rather than a
//! thousand: at 2,000 waiters its wake-ups took a twentieth of the lock's
//! throughput, competing for the GIL with the holder and the next waiter.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::sync::LockUnpoisoned;
use crate::wait::interrupt::{INTERRUPT_SLICE, Interrupt};

/// Events kept at most; older ones are dropped first.
pub const CAPACITY: usize = 1024;

/// Events after the first of a quiet spell reach a waiting listener at most
/// once per window (see the module docs).
pub const BATCH_WINDOW: Duration = Duration::from_millis(100);

/// Default threshold of [`EventKind::SlowAcquire`]: one second.
pub const DEFAULT_SLOW_ACQUIRE: Duration = Duration::from_secs(1);

/// What happened.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An acquire that had to wait got the lock after more than the slow
    /// acquire threshold ([`set_slow_acquire`]).
    SlowAcquire,
    /// A background renewal of a held lock failed (no answer, an error): it
    /// is tried again until the lock's validity runs out.
    RenewalFailed,
    /// A lock this process held is gone: the watchdog found it expired or
    /// taken, or could not renew it within its TTL, or a release or extend
    /// found it so. [`Event::lock_id`] names the lock object when the
    /// watchdog found it (its `on_lost` hook is then due).
    LockLost,
    /// An operator freed a lock whoever held it.
    ForcedRelease,
    /// A task used its last attempt and went to the dead set.
    DeadLettered,
    /// A call's reply was lost and what it left open could not be put right
    /// within the call's time: the keeper thread goes on trying.
    SettlementDeferred,
    /// The keeper put right what a lost reply had left open.
    SettlementDone,
    /// The keeper gave up: the hold or record it was about has expired by
    /// itself meanwhile (nothing is left open).
    SettlementExpired,
}

impl EventKind {
    /// A short snake_case name (`lock_lost`), for logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SlowAcquire => "slow_acquire",
            Self::RenewalFailed => "renewal_failed",
            Self::LockLost => "lock_lost",
            Self::ForcedRelease => "forced_release",
            Self::DeadLettered => "dead_lettered",
            Self::SettlementDeferred => "settlement_deferred",
            Self::SettlementDone => "settlement_done",
            Self::SettlementExpired => "settlement_expired",
        }
    }

    /// True for a kind handed to a waiting listener at once rather than with
    /// the next batch: a lost lock (see the module docs).
    pub fn is_urgent(self) -> bool {
        matches!(self, Self::LockLost)
    }

    /// How loud it should be logged.
    pub fn level(self) -> Level {
        match self {
            Self::LockLost => Level::Error,
            Self::SlowAcquire
            | Self::RenewalFailed
            | Self::ForcedRelease
            | Self::DeadLettered
            | Self::SettlementDeferred => Level::Warning,
            Self::SettlementDone | Self::SettlementExpired => Level::Info,
        }
    }
}

/// A log level, as Python's `logging` and PSR-3 name them.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Worth knowing.
    Info,
    /// Something went wrong and was handled, or may need a look.
    Warning,
    /// Something this process relied on failed.
    Error,
}

impl Level {
    /// `info`, `warning` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// One event.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// When (this machine's clock).
    pub at: SystemTime,
    /// A complete sentence for a log line (`lock "orders" lost: …`).
    pub message: String,
    /// The lock's or queue's name (empty for a settlement).
    pub name: Vec<u8>,
    /// The lock object concerned ([`Lock::id`](crate::Lock::id)), for a
    /// [`EventKind::LockLost`] found by the watchdog; 0 otherwise.
    pub lock_id: u64,
    /// How long, for [`EventKind::SlowAcquire`] (the wait, in seconds); 0
    /// otherwise.
    pub seconds: f64,
    /// For [`EventKind::ForcedRelease`]: the holder token of the hold it
    /// ended, shortened ([`short_token`](super::short_token)); empty
    /// otherwise.
    pub holder: String,
    /// For [`EventKind::ForcedRelease`]: where it came from, `inspector`
    /// (an [`Inspector`](super::Inspector): the CLI's `release --force`) or
    /// `lock` (a lock object's `force_release`); empty otherwise.
    pub origin: String,
}

impl Event {
    /// An event of `kind` about `name`, happening now.
    pub(crate) fn new(kind: EventKind, name: &[u8], message: String) -> Self {
        Self {
            kind,
            at: SystemTime::now(),
            message,
            name: name.to_vec(),
            lock_id: 0,
            seconds: 0.0,
            holder: String::new(),
            origin: String::new(),
        }
    }

    /// The same event, about the lock object `id`.
    pub(crate) fn lock(mut self, id: u64) -> Self {
        self.lock_id = id;
        self
    }

    /// The same event, about the hold of `holder` (shortened), acted on
    /// from `origin`.
    pub(crate) fn ended(mut self, holder: String, origin: &str) -> Self {
        self.holder = holder;
        self.origin = origin.to_owned();
        self
    }

    /// The same event, lasting `seconds`.
    pub(crate) fn lasting(mut self, seconds: f64) -> Self {
        self.seconds = seconds;
        self
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Events queued (readable without the mutex: [`pending`]).
static QUEUED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Counts [`wake`] calls: a [`wait`] returns when it changes.
static WAKES: AtomicU64 = AtomicU64::new(0);
/// The slow acquire threshold in microseconds (0: off).
static SLOW_ACQUIRE_US: AtomicU64 = AtomicU64::new(DEFAULT_SLOW_ACQUIRE.as_micros() as u64);

struct State {
    pid: u32,
    events: VecDeque<Event>,
    /// How many of `events` are urgent ([`EventKind::is_urgent`]).
    urgent: usize,
    /// When a [`wait`] last took events (the batch window starts there).
    taken: Option<Instant>,
}

impl State {
    /// Takes every event kept, oldest first.
    fn take(&mut self) -> Vec<Event> {
        QUEUED.store(0, Ordering::Release);
        self.urgent = 0;
        self.events.drain(..).collect()
    }
}

struct Queue {
    state: Mutex<State>,
    arrived: Condvar,
}

fn queue() -> &'static Queue {
    static Q: OnceLock<Queue> = OnceLock::new();
    Q.get_or_init(|| {
        hold_across_forks();
        Queue {
            state: Mutex::new(State {
                pid: crate::fork::current_pid(),
                events: VecDeque::new(),
                urgent: 0,
                taken: None,
            }),
            arrived: Condvar::new(),
        }
    })
}

fn state() -> MutexGuard<'static, State> {
    let mut st = queue().state.lock_unpoisoned();
    let pid = crate::fork::current_pid();
    if st.pid != pid {
        // A forked child: the parent's events are the parent's.
        st.take();
        st.taken = None;
        st.pid = pid;
    }
    st
}

crate::fork::hold_mutex_across_forks!(hold_across_forks, State, &queue().state);

/// Starts (or stops) keeping events for a listener. Off by default.
pub fn enable(on: bool) {
    if on {
        let _ = queue(); // registers the fork hooks before any event is kept
    }
    ENABLED.store(on, Ordering::Release);
}

/// True while events are kept.
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// Keeps `event` for the listener (nothing when none is [`enable`]d).
pub(crate) fn emit(event: Event) {
    if !is_enabled() {
        return;
    }
    let urgent = event.kind.is_urgent();
    let mut st = state();
    // A listener waiting for the batch window to end needs no wake-up.
    let wake = urgent || st.events.is_empty();
    if st.events.len() >= CAPACITY
        && let Some(oldest) = st.events.pop_front()
    {
        st.urgent -= usize::from(oldest.kind.is_urgent());
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    st.events.push_back(event);
    st.urgent += usize::from(urgent);
    QUEUED.store(st.events.len(), Ordering::Release);
    drop(st);
    if wake {
        queue().arrived.notify_all();
    }
}

/// Builds and keeps an event only when a listener is enabled (the message
/// is not formatted otherwise).
pub(crate) fn emit_with(make: impl FnOnce() -> Event) {
    if is_enabled() {
        emit(make());
    }
}

/// True when events are waiting to be read: one atomic load (the PHP
/// extension asks at every call).
pub fn pending() -> bool {
    QUEUED.load(Ordering::Acquire) > 0
}

/// Events dropped so far because nobody read them in time.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Takes every event waiting, oldest first, without waiting.
pub fn drain() -> Vec<Event> {
    if !pending() {
        return Vec::new();
    }
    state().take()
}

/// Waits up to `timeout` for events, then takes every event waiting,
/// oldest first (empty when none came). Events that follow others taken
/// less than [`BATCH_WINDOW`] ago are gathered until the window ends (or
/// `timeout`, or an urgent one arrives). `interrupt`, if any, is consulted
/// every 50 ms; its error ends the wait.
pub fn wait(timeout: Duration, interrupt: Option<Interrupt<'_>>) -> crate::Result<Vec<Event>> {
    let until = Instant::now() + timeout;
    let wakes = WAKES.load(Ordering::Acquire);
    let mut st = state();
    loop {
        let now = Instant::now();
        let over = now >= until || WAKES.load(Ordering::Acquire) != wakes;
        let mut wake_at = until;
        if !st.events.is_empty() {
            let due = st.taken.map_or(now, |t| t + BATCH_WINDOW);
            if over || st.urgent > 0 || now >= due {
                st.taken = Some(now);
                return Ok(st.take());
            }
            wake_at = wake_at.min(due);
        } else if over {
            return Ok(Vec::new());
        }
        let mut slice = wake_at - now;
        if interrupt.is_some() {
            slice = slice.min(INTERRUPT_SLICE);
        }
        st = queue()
            .arrived
            .wait_timeout(st, slice)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
        if let Some(check) = interrupt {
            drop(st);
            check()?;
            st = state();
        }
    }
}

/// Ends every [`wait`] under way now (with what has arrived, maybe
/// nothing): a listener shutting down.
pub fn wake() {
    WAKES.fetch_add(1, Ordering::AcqRel);
    let _st = state();
    queue().arrived.notify_all();
}

/// Sets the threshold beyond which a waiting acquire is reported
/// ([`EventKind::SlowAcquire`]); `None` turns the report off. Default:
/// [`DEFAULT_SLOW_ACQUIRE`].
pub fn set_slow_acquire(threshold: Option<Duration>) {
    let us = threshold.map_or(0, |d| {
        u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
    });
    SLOW_ACQUIRE_US.store(us, Ordering::Release);
}

/// The slow acquire threshold (`None`: off).
pub fn slow_acquire() -> Option<Duration> {
    match SLOW_ACQUIRE_US.load(Ordering::Acquire) {
        0 => None,
        us => Some(Duration::from_micros(us)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_names_and_levels() {
        assert_eq!(EventKind::LockLost.as_str(), "lock_lost");
        assert_eq!(EventKind::LockLost.level(), Level::Error);
        assert_eq!(EventKind::SettlementDone.level().as_str(), "info");
        assert!(Level::Error > Level::Warning);
    }

    #[test]
    fn a_burst_is_gathered_for_a_batch_window_and_a_lost_lock_is_not() {
        // No other test of this binary turns events on; names keep ours apart.
        enable(true);
        let ours = |e: &&Event| e.name.starts_with(b"batch-test");
        let slow = || Event::new(EventKind::SlowAcquire, b"batch-test-slow", String::new());
        let five = Duration::from_secs(5);
        emit(slow());
        let before_take = Instant::now();
        let first = wait(five, None).unwrap();
        assert_eq!(
            first.iter().filter(ours).count(),
            1,
            "the first of a quiet spell at once"
        );

        emit(slow());
        emit(slow());
        let batch = wait(five, None).unwrap();
        assert_eq!(
            batch.iter().filter(ours).count(),
            2,
            "gathered into one batch"
        );
        assert!(
            before_take.elapsed() >= BATCH_WINDOW,
            "not before the window ended: {:?}",
            before_take.elapsed()
        );

        emit(Event::new(
            EventKind::LockLost,
            b"batch-test-lost",
            String::new(),
        ));
        let started = Instant::now();
        let lost = wait(five, None).unwrap();
        assert_eq!(lost.iter().filter(ours).count(), 1);
        assert!(
            started.elapsed() < BATCH_WINDOW,
            "a lost lock is not held back for the window"
        );
        enable(false);
    }
}
