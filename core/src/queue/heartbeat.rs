//! Keeping reservations alive in the background: a touch every third of
//! the visibility, from one thread per process, until the guard is dropped.
//!
//! A small keeper of its own, behind the [`Renew`] trait, until the lock
//! watchdog can renew anything (then reservations register there and this
//! thread goes). Fork-safe as the watchdog is: a child forgets its parent's
//! heartbeats (the reservations are the parent's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::Queue;
use crate::error::Result;
use crate::sync::LockUnpoisoned;

/// Something the keeper renews.
pub(crate) trait Renew: Send + Sync {
    /// Renews once: `Ok(false)` when it is gone for good (stop renewing).
    fn renew(&self) -> Result<bool>;
    /// Time between renewals.
    fn period(&self) -> Duration;
}

/// A reservation to touch.
pub(crate) struct Touch {
    pub queue: Arc<Queue>,
    pub id: Vec<u8>,
    pub receipt: String,
    pub visibility: Duration,
}

impl Renew for Touch {
    fn renew(&self) -> Result<bool> {
        Ok(self
            .queue
            .touch(&self.id, &self.receipt, Some(self.visibility))?
            .is_some())
    }

    fn period(&self) -> Duration {
        self.visibility / 3
    }
}

/// Retry interval after a renewal that failed (capped by the period).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(200);

struct Beat {
    renew: Arc<dyn Renew>,
    active: AtomicBool,
    /// A renewal found it gone.
    lost: AtomicBool,
}

/// Keeps one reservation alive while it exists (see [`Queue::keep_alive`]).
pub struct Heartbeat {
    beat: Arc<Beat>,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat")
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Heartbeat {
    /// True once a touch found the reservation gone (it expired and went
    /// back to the queue, or was acked elsewhere).
    pub fn is_lost(&self) -> bool {
        self.beat.lost.load(Ordering::Acquire)
    }

    /// Stops renewing (as dropping it does).
    pub fn stop(&self) {
        self.beat.active.store(false, Ordering::Release);
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop();
    }
}

struct State {
    pid: u32,
    beats: Vec<(Arc<Beat>, Instant)>,
    running: bool,
    /// When the thread wakes by itself (`None` while it works).
    wakes_at: Option<Instant>,
}

struct Keeper {
    state: Mutex<State>,
    wake: Condvar,
}

fn keeper() -> &'static Keeper {
    static K: OnceLock<Keeper> = OnceLock::new();
    K.get_or_init(|| {
        crate::fork::register(crate::fork::Hooks {
            prepare: hold_for_fork,
            parent: release_after_fork,
            child: release_after_fork,
        });
        Keeper {
            state: Mutex::new(State {
                pid: crate::fork::current_pid(),
                beats: Vec::new(),
                running: false,
                wakes_at: None,
            }),
            wake: Condvar::new(),
        }
    })
}

thread_local! {
    /// The keeper's state, held by `fork()`'s prepare handler (see `fork.rs`).
    static FORK_HOLD: std::cell::RefCell<Option<MutexGuard<'static, State>>> =
        const { std::cell::RefCell::new(None) };
}

/// `fork()` prepare handler: waits until the keeper is not inside its
/// bookkeeping (it never holds the state during a round trip).
fn hold_for_fork() {
    let guard = keeper().state.lock_unpoisoned();
    let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = Some(guard));
}

/// `fork()` parent and child handler: releases the state again.
fn release_after_fork() {
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

fn state() -> MutexGuard<'static, State> {
    let mut st = keeper().state.lock_unpoisoned();
    let pid = crate::fork::current_pid();
    if st.pid != pid {
        // Forked child: the parent's reservations and thread are not ours.
        std::mem::forget(std::mem::take(&mut st.beats));
        st.running = false;
        st.wakes_at = None;
        st.pid = pid;
    }
    st
}

/// Starts renewing `renew` every period (the first one period from now).
pub(crate) fn start(renew: Arc<dyn Renew>) -> Heartbeat {
    let due = Instant::now() + renew.period();
    let beat = Arc::new(Beat {
        renew,
        active: AtomicBool::new(true),
        lost: AtomicBool::new(false),
    });
    let mut st = state();
    st.beats.push((beat.clone(), due));
    let wake = st.wakes_at.is_some_and(|at| due < at);
    if !st.running {
        st.running = std::thread::Builder::new()
            .name("ferrolock-heartbeat".into())
            .spawn(run)
            .is_ok();
    }
    drop(st);
    if wake {
        keeper().wake.notify_all();
    }
    Heartbeat { beat }
}

fn run() {
    crate::signals::block_in_this_thread();
    let k = keeper();
    let pid = crate::fork::current_pid();
    let mut st = state();
    loop {
        if st.pid != pid {
            return;
        }
        st.beats.retain(|(b, _)| b.active.load(Ordering::Acquire));
        let now = Instant::now();
        let earliest = st.beats.iter().map(|(_, due)| *due).min();
        if earliest.is_none_or(|due| due > now) {
            let until = earliest.unwrap_or(now + Duration::from_secs(60));
            st.wakes_at = Some(until);
            st = k
                .wake
                .wait_timeout(st, until.saturating_duration_since(now))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            st.wakes_at = None;
            continue;
        }
        let due: Vec<Arc<Beat>> = st
            .beats
            .iter()
            .filter(|(_, at)| *at <= now)
            .map(|(b, _)| b.clone())
            .collect();
        drop(st);
        let results: Vec<(Arc<Beat>, Result<bool>)> = due
            .into_iter()
            .filter(|b| b.active.load(Ordering::Acquire))
            .map(|b| {
                let r = b.renew.renew();
                (b, r)
            })
            .collect();
        st = state();
        let now = Instant::now();
        for (beat, outcome) in results {
            let period = beat.renew.period();
            let Some(entry) = st.beats.iter_mut().find(|(b, _)| Arc::ptr_eq(b, &beat)) else {
                continue;
            };
            match outcome {
                Ok(true) => entry.1 = now + period,
                Ok(false) => {
                    beat.lost.store(true, Ordering::Release);
                    beat.active.store(false, Ordering::Release);
                }
                Err(_) => entry.1 = now + RETRY_AFTER_ERROR.min(period),
            }
        }
    }
}
