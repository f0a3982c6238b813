//! Settling what a lost reply left open.
//!
//! A round trip whose reply is lost (a timeout, a dropped connection, a
//! signal) leaves its outcome unknown ([`Error::outcome_unknown`]): an
//! acquire may have taken the lock under a token the caller never got, a pop
//! may have removed tasks nobody holds, a release may or may not have freed
//! the lock. The client knows what it sent (the token, the request id), so
//! it can find out and put things right once the server answers again: that
//! is a [`Settlement`]. The caller runs it at once while its own budget lasts
//! ([`settle_or_defer`]); what is still open then is handed to the *keeper*,
//! a background thread of this process that retries it with backoff until it
//! succeeds or its [`horizon`](Settlement::horizon) passes (by then the hold
//! or the record it is about has expired in Redis: nothing is left to put
//! right). A successful round trip of the same client wakes the keeper at
//! once (the server answers again), so a settlement waits no longer than the
//! outage it came from.
//!
//! The keeper lives as long as the process: a PHP CLI script or a Python
//! program that exits with settlements pending leaves them to the keys' own
//! expiry (their TTL). A forked child forgets its parent's settlements, as it
//! forgets its leases (they are the parent's to settle).
//!
//! [`Error::outcome_unknown`]: crate::Error::outcome_unknown

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::error::Result;
use crate::ops::events::{Event, EventKind};
use crate::sync::LockUnpoisoned;

/// First retry delay of a deferred settlement; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// Longest delay between two tries of a deferred settlement.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Something a lost reply left open, to be put right once the server
/// answers. Implementations must be idempotent: a try whose own reply is lost
/// is simply tried again.
pub(crate) trait Settlement: Send + 'static {
    /// One try within `budget`: `Ok` when settled (nothing more to do), `Err`
    /// when the server could not be reached or did not answer (tried again
    /// later, until the horizon).
    fn settle(&self, budget: Budget) -> Result<()>;

    /// After this instant nothing is left to settle (the hold or record has
    /// expired in Redis): the keeper drops the settlement.
    fn horizon(&self) -> Instant;

    /// What is being settled, for messages and logs (`release of lock
    /// "orders"`).
    fn describe(&self) -> String;

    /// The client the settlement talks to (its pool identity), so that a
    /// successful round trip of that client can wake the keeper.
    fn client_id(&self) -> *const ();
}

/// Runs `settlement` now, within `budget`; if it cannot be settled in that
/// time, hands it to the keeper and returns the last error (the caller
/// reports it, saying the keeper finishes the job).
pub(crate) fn settle_or_defer(settlement: Box<dyn Settlement>, budget: Budget) -> Result<()> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let err = match settlement.settle(budget) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let pause = backoff.min(budget.left().unwrap_or(backoff));
        if budget.is_spent() || pause >= budget.left().unwrap_or(Duration::MAX) {
            defer(settlement);
            return Err(err);
        }
        std::thread::sleep(pause);
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Hands `settlement` to the keeper, which tries it at once and then with
/// backoff until it succeeds or its horizon passes.
pub(crate) fn defer(settlement: Box<dyn Settlement>) {
    report(EventKind::SettlementDeferred, &*settlement, || {
        "its reply was lost; put right in the background once the server answers".into()
    });
    hand_over(vec![settlement], false);
}

/// Hands a batch of settlements to the keeper, tried in the given order
/// (most urgent first) after those already waiting, reported as one event saying
/// `why` instead of one per settlement: a Sentinel failover replays the
/// releases of its last seconds (hundreds on a busy lock), and a log line
/// each, read and logged by the binding while the keeper works, would both
/// flood the log and slow the replays down.
pub(crate) fn defer_batch(settlements: Vec<Box<dyn Settlement>>, why: String) {
    if settlements.is_empty() {
        return;
    }
    crate::ops::events::emit_with(|| Event::new(EventKind::SettlementDeferred, b"", why));
    hand_over(settlements, true);
}

/// Queues `settlements` for the keeper (starting it if needed) and wakes it.
fn hand_over(settlements: Vec<Box<dyn Settlement>>, quiet: bool) {
    let mut st = state();
    let now = Instant::now();
    st.entries
        .extend(settlements.into_iter().map(|settlement| Entry {
            settlement,
            due: now,
            backoff: FIRST_BACKOFF,
            quiet,
        }));
    PENDING.store(st.entries.len(), Ordering::Release);
    if !st.running {
        st.running = true;
        let spawned = std::thread::Builder::new()
            .name("ferrolock-settle".into())
            .spawn(run);
        if spawned.is_err() {
            // No thread: the settlement stays queued and the next defer()
            // tries to start one again; the keys expire by their TTL meanwhile.
            st.running = false;
        }
    }
    drop(st);
    keeper().wake.notify_all();
}

/// A round trip of the client `client_id` succeeded: the server answers
/// again, so its pending settlements are tried at once. One atomic load when
/// nothing is pending (the common case, on every round trip).
pub(crate) fn server_answered(client_id: *const ()) {
    if PENDING.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut st = state();
    let now = Instant::now();
    let mut woken = false;
    for e in st.entries.iter_mut() {
        if e.settlement.client_id() == client_id && e.due > now {
            e.due = now;
            woken = true;
        }
    }
    drop(st);
    if woken {
        keeper().wake.notify_all();
    }
}

/// Settlements not yet settled in this process (see the `settle` module:
/// what lost replies left open, put right once the server answers).
pub fn pending_settlements() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// Settlements of the client `client_id` not yet settled (see
/// [`Client::pending_settlements`](crate::Client::pending_settlements)).
pub(crate) fn pending_for(client_id: *const ()) -> usize {
    if PENDING.load(Ordering::Acquire) == 0 {
        return 0;
    }
    let st = state();
    let queued = st
        .entries
        .iter()
        .filter(|e| e.settlement.client_id() == client_id)
        .count();
    queued + usize::from(st.trying == Some(client_id as usize))
}

/// Waits up to `timeout` until no settlement is pending (see
/// [`pending_settlements`]); true if none is.
/// For tests and orderly shutdowns (a CLI worker that wants its lost
/// replies put right before it exits).
pub fn wait_settled(timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if pending_settlements() == 0 {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reports `settlement` as an event of `kind` (`what` happened to it).
fn report(kind: EventKind, settlement: &dyn Settlement, what: impl FnOnce() -> String) {
    crate::ops::events::emit_with(|| {
        Event::new(kind, b"", format!("{}: {}", settlement.describe(), what()))
    });
}

/// Number of pending settlements, readable without the mutex.
static PENDING: AtomicUsize = AtomicUsize::new(0);

struct Entry {
    settlement: Box<dyn Settlement>,
    due: Instant,
    backoff: Duration,
    /// One of a batch reported as a whole ([`defer_batch`]): no event of
    /// its own when it is settled or given up.
    quiet: bool,
}

struct State {
    pid: u32,
    entries: Vec<Entry>,
    running: bool,
    /// The client (its id) of the settlement the keeper is trying, taken
    /// out of `entries` meanwhile.
    trying: Option<usize>,
}

struct Keeper {
    state: Mutex<State>,
    wake: Condvar,
}

fn keeper() -> &'static Keeper {
    static K: OnceLock<Keeper> = OnceLock::new();
    K.get_or_init(|| {
        hold_across_forks();
        Keeper {
            state: Mutex::new(State {
                pid: crate::fork::current_pid(),
                entries: Vec::new(),
                running: false,
                trying: None,
            }),
            wake: Condvar::new(),
        }
    })
}

fn state() -> MutexGuard<'static, State> {
    let mut st = keeper().state.lock_unpoisoned();
    let pid = crate::fork::current_pid();
    if st.pid != pid {
        // Forked child: the parent's settlements and thread are not ours.
        // Forget them without dropping (a dropped client could close sockets
        // the parent still uses).
        std::mem::forget(std::mem::take(&mut st.entries));
        PENDING.store(0, Ordering::Release);
        st.running = false;
        st.pid = pid;
    }
    st
}

crate::fork::hold_mutex_across_forks!(hold_across_forks, State, &keeper().state);

/// The keeper thread: tries every due settlement in turn (one command timeout each,
/// with the state unlocked), reschedules those that failed, drops those
/// settled or past their horizon, and sleeps until the next is due. Ends
/// when nothing is pending.
fn run() {
    crate::signals::block_in_this_thread();
    let k = keeper();
    let pid = crate::fork::current_pid();
    let mut st = state();
    loop {
        if st.pid != pid {
            return;
        }
        let now = Instant::now();
        let (open, expired): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut st.entries)
            .into_iter()
            .partition(|e| e.settlement.horizon() > now);
        st.entries = open;
        PENDING.store(st.entries.len(), Ordering::Release);
        if !expired.is_empty() {
            // Reported with the state unlocked: no mutex of ours is taken
            // while another is held (see `fork.rs`).
            drop(st);
            for e in expired.into_iter().filter(|e| !e.quiet) {
                report(EventKind::SettlementExpired, &*e.settlement, || {
                    "given up: what it was about has expired in Redis by itself".into()
                });
            }
            st = state();
            continue;
        }
        if st.entries.is_empty() {
            st.running = false;
            return;
        }
        let Some(index) = st.entries.iter().position(|e| e.due <= now) else {
            let next = st.entries.iter().map(|e| e.due).min().unwrap_or(now);
            st = k
                .wake
                .wait_timeout(st, next.saturating_duration_since(now))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            continue;
        };
        // (In order: the first due is the oldest deferred, or the most
        // urgent of a batch.)
        let mut entry = st.entries.remove(index);
        st.trying = Some(entry.settlement.client_id() as usize);
        drop(st);
        let settled = entry
            .settlement
            .settle(Budget::until(Instant::now() + MAX_BACKOFF * 3))
            .is_ok();
        if settled && !entry.quiet {
            report(EventKind::SettlementDone, &*entry.settlement, || {
                "put right after its reply was lost".into()
            });
        }
        st = state();
        st.trying = None;
        if st.pid != pid {
            std::mem::forget(entry);
            return;
        }
        if !settled {
            entry.due = Instant::now() + entry.backoff;
            entry.backoff = (entry.backoff * 2).min(MAX_BACKOFF);
            st.entries.push(entry);
        }
        PENDING.store(st.entries.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::error::{Error, ErrorKind};

    /// Fails `failures` times, then succeeds; counts its tries.
    struct Flaky {
        tries: Arc<AtomicU32>,
        failures: u32,
        horizon: Instant,
    }

    impl Settlement for Flaky {
        fn settle(&self, _budget: Budget) -> Result<()> {
            let n = self.tries.fetch_add(1, Ordering::AcqRel);
            if n < self.failures {
                Err(Error::new(ErrorKind::Connection, "not yet"))
            } else {
                Ok(())
            }
        }
        fn horizon(&self) -> Instant {
            self.horizon
        }
        fn describe(&self) -> String {
            "flaky".into()
        }
        fn client_id(&self) -> *const () {
            std::ptr::null()
        }
    }

    #[test]
    fn settled_inline_deferred_and_dropped_at_the_horizon() {
        // Settled at once: nothing deferred.
        let tries = Arc::new(AtomicU32::new(0));
        let far = Instant::now() + Duration::from_secs(60);
        let s = Flaky {
            tries: tries.clone(),
            failures: 0,
            horizon: far,
        };
        assert!(settle_or_defer(Box::new(s), Budget::one_call(Duration::from_secs(1))).is_ok());
        assert_eq!(tries.load(Ordering::Acquire), 1);

        // Fails past the caller's budget: the keeper finishes it.
        let tries = Arc::new(AtomicU32::new(0));
        let s = Flaky {
            tries: tries.clone(),
            failures: 4,
            horizon: far,
        };
        let budget = Budget::until(Instant::now() + Duration::from_millis(20));
        assert!(settle_or_defer(Box::new(s), budget).is_err());
        assert!(
            wait_settled(Duration::from_secs(10)),
            "the keeper settles it"
        );
        assert_eq!(tries.load(Ordering::Acquire), 5);

        // Never succeeds: dropped once its horizon passes.
        let tries = Arc::new(AtomicU32::new(0));
        defer(Box::new(Flaky {
            tries: tries.clone(),
            failures: u32::MAX,
            horizon: Instant::now() + Duration::from_millis(300),
        }));
        assert!(wait_settled(Duration::from_secs(10)));
        assert!(tries.load(Ordering::Acquire) >= 2);
    }
}
