//! Automatic renewal of held locks (and of anything else that expires unless
//! renewed, such as a queue task's reservation): one background thread per
//! process.
//!
//! Every held lock with `auto_renew` has a [`Lease`]; what a lease renews is
//! a [`Renew`]: the script call that sets its remaining time, answering 1
//! (renewed) or 0 (no longer ours). The thread wakes when the
//! earliest lease is due (every ttl/3), renews *all* leases of one client that
//! are due within the next short window in a single pipelined round trip (one
//! thread per client when several are due, so an unreachable server does not
//! delay the others), and marks a lease **lost** when Redis says the lock is no
//! longer ours.
//!
//! A lease is also lost, without waiting for any reply, once its validity has
//! run out: the send time of the last successful renewal plus the TTL. By then
//! the key has expired (Redis unreachable or stalled) and someone else may
//! hold it.
//!
//! The thread is started on first use and after a `fork()` in the child (a
//! child inherits no threads); leases of the parent are forgotten there, the
//! child does not own its parent's locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::scripts::{self, Call};
use crate::sync::LockUnpoisoned;

/// Renewals due within this window of the earliest are batched with it.
const BATCH_WINDOW: Duration = Duration::from_millis(50);

/// Retry interval after a failed renewal round trip (capped by ttl/10).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(200);

/// What a [`Lease`] renews.
pub(crate) trait Renew: Send + Sync {
    /// The call (a script, or a native command where `client`'s server has
    /// one) that sets the remaining time to `ttl_ms` if (and only if) the
    /// hold is still ours; it answers 1 or OK when renewed, 0 or nil when
    /// not ours.
    fn call(&self, client: &Client, ttl_ms: u64) -> Call;

    /// `call`, sent at `sent` with `ttl_ms`, renewed the hold.
    fn confirmed(&self, _call: &Call, _sent: Instant, _ttl_ms: u64) {}

    /// The lock this renews, for the events of its renewals and its loss
    /// (`ops::events`); `None` (the default) reports nothing.
    fn about(&self) -> Option<&crate::ops::LockRef> {
        None
    }
}

/// One held lock (or reservation) the watchdog keeps alive, with what
/// renews it (`R`, inline: one allocation per lease). The watchdog keeps
/// them as `Lease<dyn Renew>`. A lock reuses the lease of its last hold for
/// the next ([`Lease::reuse`]) once nothing else holds it: a loop of
/// acquire+release allocates no lease per hold.
pub(crate) struct Lease<R: ?Sized = dyn Renew> {
    client: Client,
    ttl_ms: AtomicU64,
    lost: AtomicBool,
    /// The loss was reported (`ops::lock_lost`): once per lease.
    reported: AtomicBool,
    /// Renewals fail (reported at the first failure of a streak only).
    failing: AtomicBool,
    active: AtomicBool,
    /// The key is ours at least until then (last confirmed send + TTL), as
    /// nanoseconds since [`epoch`]: an atomic, so that reading `lost` never
    /// waits for the watchdog thread (nor hangs in a forked child).
    valid_until: AtomicU64,
    renew: R,
}

/// A boxed renewal renews as what it boxes.
impl<R: Renew + ?Sized> Renew for Box<R> {
    fn call(&self, client: &Client, ttl_ms: u64) -> Call {
        (**self).call(client, ttl_ms)
    }

    fn confirmed(&self, call: &Call, sent: Instant, ttl_ms: u64) {
        (**self).confirmed(call, sent, ttl_ms);
    }

    fn about(&self) -> Option<&crate::ops::LockRef> {
        (**self).about()
    }
}

impl<R: Renew> Lease<R> {
    /// A lease for a hold taken just now.
    pub(crate) fn new(client: Client, renew: R, ttl: Duration) -> Arc<Self> {
        Self::since(client, renew, Instant::now(), ttl)
    }

    /// A lease for a hold whose TTL (re)started at `sent` (the send time of
    /// the round trip that took it).
    pub(crate) fn since(client: Client, renew: R, sent: Instant, ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            client,
            ttl_ms: AtomicU64::new(crate::validate::millis(ttl)),
            lost: AtomicBool::new(false),
            reported: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            active: AtomicBool::new(true),
            valid_until: AtomicU64::new(since_epoch(sent + ttl)),
            renew,
        })
    }

    /// Makes `lease` the lease of a new hold whose TTL started at `sent`,
    /// as [`Lease::since`] would make it, `reset` adapting its renewal to
    /// the hold: true when done, false (nothing changed) while anything else
    /// holds the lease: the hold it was made for, the watchdog (registered,
    /// or in a renewal round trip), a report. So the watchdog never sees a
    /// reused lease as the lease it knew.
    pub(crate) fn reuse(
        lease: &mut Arc<Self>,
        sent: Instant,
        ttl: Duration,
        reset: impl FnOnce(&mut R),
    ) -> bool {
        let Some(l) = Arc::get_mut(lease) else {
            return false;
        };
        reset(&mut l.renew);
        *l.ttl_ms.get_mut() = crate::validate::millis(ttl);
        *l.lost.get_mut() = false;
        *l.reported.get_mut() = false;
        *l.failing.get_mut() = false;
        *l.active.get_mut() = true;
        *l.valid_until.get_mut() = since_epoch(sent + ttl);
        true
    }
}

impl<R: Renew + ?Sized> Lease<R> {
    /// What renews it.
    pub(crate) fn renewal(&self) -> &R {
        &self.renew
    }

    /// True once a renewal found the lock gone, or its validity ran out
    /// without a successful renewal.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
            || since_epoch(Instant::now()) >= self.valid_until.load(Ordering::Acquire)
    }

    /// True while the hold is ours for sure at `now`: not lost (the
    /// opposite of [`Lease::is_lost`] at `now`, without a clock read).
    pub(crate) fn valid_at(&self, now: Instant) -> bool {
        !self.lost.load(Ordering::Acquire) && now < self.valid_until()
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Acquire))
    }

    /// Reports the hold lost (`why`), unless it was already: counted, and
    /// an event for the listener, naming the lock object when `watchdog`
    /// found it (its lost-lock hook is then due).
    pub(crate) fn report_lost(&self, why: &str, watchdog: bool) {
        if let Some(about) = self.renew.about()
            && !self.reported.swap(true, Ordering::AcqRel)
        {
            crate::ops::lock_lost(about, why, watchdog);
        }
    }

    /// Until when the hold is ours for sure: the send time of the last
    /// confirmed renewal (or extend, or the acquire) plus its TTL.
    pub(crate) fn valid_until(&self) -> Instant {
        epoch() + Duration::from_nanos(self.valid_until.load(Ordering::Acquire))
    }

    /// The hold is ours only until `until` (sooner than its lease says): an
    /// adopted hold, valid for what is left of the key's TTL.
    pub(crate) fn limit_validity(&self, until: Instant) {
        self.valid_until
            .fetch_min(since_epoch(until), Ordering::AcqRel);
    }

    /// A renewal to `ttl_ms`, sent at `sent`, succeeded.
    fn confirmed(&self, sent: Instant, ttl_ms: u64) {
        self.valid_until.fetch_max(
            since_epoch(sent + Duration::from_millis(ttl_ms)),
            Ordering::AcqRel,
        );
    }

    /// True when `entry` is this lease.
    fn is(&self, entry: &Arc<Lease>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(entry), self as *const Self)
    }
}

/// A fixed instant of this process that lease deadlines count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `t` as nanoseconds since [`epoch`] (0 for instants before it).
fn since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

struct Entry {
    lease: Arc<Lease>,
    due: Instant,
}

struct State {
    pid: u32,
    entries: Vec<Entry>,
    running: bool,
    /// When the thread, waiting on `wake`, will look at the entries again by
    /// itself; `None` while it is working (it then reads them before it
    /// waits). A lease due no earlier needs no wake-up: a loop of
    /// acquire+release would otherwise switch to the watchdog thread and back
    /// on every acquire (about 3 % of an uncontended pair here).
    wakes_at: Option<Instant>,
    /// How long the thread sleeps with nothing to renew: the shortest
    /// renewal period of the leases seen so far (at least [`MIN_IDLE_NAP`]),
    /// so that a lease registered while it sleeps is usually due after it
    /// wakes anyway and needs no wake-up (a loop of acquire+release of one
    /// lock registers one lease after another).
    idle_nap: Duration,
}

/// The shortest sleep of an idle watchdog thread (see `State::idle_nap`).
const MIN_IDLE_NAP: Duration = Duration::from_secs(1);

/// The longest sleep of an idle watchdog thread.
const MAX_IDLE_NAP: Duration = Duration::from_secs(60);

impl State {
    /// Whether the thread must be woken to notice a lease due at `due`.
    fn must_wake_for(&self, due: Instant) -> bool {
        self.wakes_at.is_some_and(|at| due < at)
    }
}

struct Watchdog {
    state: Mutex<State>,
    wake: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static W: OnceLock<Watchdog> = OnceLock::new();
    W.get_or_init(|| {
        crate::fork::register(crate::fork::Hooks {
            prepare: hold_for_fork,
            parent: release_after_fork,
            child: release_after_fork,
        });
        Watchdog {
            state: Mutex::new(State {
                pid: crate::fork::current_pid(),
                entries: Vec::new(),
                running: false,
                wakes_at: None,
                idle_nap: MAX_IDLE_NAP,
            }),
            wake: Condvar::new(),
        }
    })
}

fn state() -> std::sync::MutexGuard<'static, State> {
    let mut st = watchdog().state.lock_unpoisoned();
    let pid = crate::fork::current_pid();
    if st.pid != pid {
        // Forked child: the parent's leases and thread are not ours.
        std::mem::forget(std::mem::take(&mut st.entries));
        st.running = false;
        st.wakes_at = None;
        st.pid = pid;
    }
    st
}

thread_local! {
    /// The watchdog state, held by `fork()`'s prepare handler (see `fork.rs`).
    static FORK_HOLD: std::cell::RefCell<Option<MutexGuard<'static, State>>> =
        const { std::cell::RefCell::new(None) };
}

/// `fork()` prepare handler: waits until the watchdog thread is not inside
/// its bookkeeping (it never holds the state during a round trip).
fn hold_for_fork() {
    let guard = watchdog().state.lock_unpoisoned();
    let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = Some(guard));
}

/// `fork()` parent and child handler: releases the state again.
fn release_after_fork() {
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

/// Starts keeping `lease` alive (first renewal after ttl/3).
pub(crate) fn register(lease: Arc<Lease>) {
    register_at(lease, Instant::now());
}

/// [`register`] for a hold taken at `now` (a clock read the caller made).
pub(crate) fn register_at(lease: Arc<Lease>, now: Instant) {
    let due = now + lease.ttl() / 3;
    insert(lease, due);
}

/// [`register`] for a hold adopted by its token, valid for less than a
/// whole TTL (what was left of the key's, see [`Lease::limit_validity`]):
/// renewed, as any hold, once no more than two thirds of the TTL are left,
/// so at once when fewer are.
pub(crate) fn register_adopted(lease: Arc<Lease>, now: Instant) {
    let ttl = lease.ttl();
    let due = lease
        .valid_until()
        .checked_sub(ttl - ttl / 3)
        .map_or(now, |due| due.max(now));
    insert(lease, due);
}

/// Starts renewing `lease`, first at `due`.
fn insert(lease: Arc<Lease>, due: Instant) {
    let period = lease.ttl() / 3;
    let mut st = state();
    st.idle_nap = st.idle_nap.min(period.max(MIN_IDLE_NAP));
    st.entries.push(Entry { due, lease });
    let wake = st.must_wake_for(due);
    if !st.running {
        st.running = true;
        let spawned = std::thread::Builder::new()
            .name("ferrolock-watchdog".into())
            .spawn(run);
        if spawned.is_err() {
            st.running = false;
        }
    }
    drop(st);
    if wake {
        watchdog().wake.notify_all();
    }
}

/// An explicit extend to `ttl`, sent at `sent`, succeeded: renewals now use
/// that TTL, and the next one is due a third of it from now.
pub(crate) fn extended<R: Renew + ?Sized>(lease: &Lease<R>, sent: Instant, ttl: Duration) {
    lease
        .ttl_ms
        .store(crate::validate::millis(ttl), Ordering::Release);
    lease
        .valid_until
        .store(since_epoch(sent + ttl), Ordering::Release);
    let due = Instant::now() + ttl / 3;
    let mut st = state();
    if let Some(entry) = st.entries.iter_mut().find(|e| lease.is(&e.lease)) {
        entry.due = due;
    }
    let wake = st.must_wake_for(due);
    drop(st);
    if wake {
        watchdog().wake.notify_all();
    }
}

/// Stops renewing `lease` (the lock was released): the watchdog lets go of
/// it before this returns (see [`Lease::reuse`]).
pub(crate) fn unregister<R: Renew + ?Sized>(lease: &Lease<R>) {
    lease.active.store(false, Ordering::Release);
    let mut st = state();
    if let Some(i) = st.entries.iter().position(|e| lease.is(&e.lease)) {
        // Dropped once the state is unlocked (a lease's last reference
        // drops its client).
        let entry = st.entries.swap_remove(i);
        drop(st);
        drop(entry);
    }
}

fn run() {
    crate::signals::block_in_this_thread();
    let w = watchdog();
    let pid = crate::fork::current_pid();
    let mut st = state();
    loop {
        if st.pid != pid {
            return;
        }
        st.entries
            .retain(|e| e.lease.active.load(Ordering::Acquire));
        let now = Instant::now();
        // Sleep until the earliest renewal is due, or for the idle nap when
        // none is (a lease registered meanwhile wakes us if it is due sooner).
        let earliest = st.entries.iter().map(|e| e.due).min();
        let until = earliest.unwrap_or(now + st.idle_nap);
        if earliest.is_none_or(|due| due > now) {
            st.wakes_at = Some(until);
            st = w
                .wake
                .wait_timeout(st, until.saturating_duration_since(now))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            st.wakes_at = None;
            continue;
        }
        // Everything due soon, grouped by client (one round trip each).
        let horizon = now + BATCH_WINDOW;
        let mut groups: HashMap<*const (), Vec<Arc<Lease>>> = HashMap::new();
        for e in st.entries.iter().filter(|e| e.due <= horizon) {
            groups
                .entry(client_id(&e.lease.client))
                .or_default()
                .push(e.lease.clone());
        }
        drop(st);
        let groups: Vec<Vec<Arc<Lease>>> = groups.into_values().collect();
        let results: Vec<(Arc<Lease>, Renewal)> = if groups.len() == 1 {
            groups.into_iter().flat_map(renew_batch).collect()
        } else {
            // One thread per client: a server that does not answer must not
            // delay the renewals of locks on the others.
            std::thread::scope(|scope| {
                let handles: Vec<_> = groups
                    .into_iter()
                    .map(|g| {
                        scope.spawn(move || {
                            crate::signals::block_in_this_thread();
                            renew_batch(g)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap_or_default())
                    .collect()
            })
        };
        st = state();
        let now = Instant::now();
        // Reported once the state is unlocked: no mutex of ours is taken
        // while another is held (see `fork.rs`).
        let mut reports: Vec<(Arc<Lease>, Report)> = Vec::new();
        for (lease, outcome) in results {
            let Some(entry) = st
                .entries
                .iter_mut()
                .find(|e| Arc::ptr_eq(&e.lease, &lease))
            else {
                continue; // released meanwhile
            };
            let ttl = lease.ttl();
            match outcome {
                Renewal::Done => {
                    entry.due = now + ttl / 3;
                    lease.failing.store(false, Ordering::Relaxed);
                }
                Renewal::Stale => entry.due = now,
                Renewal::Gone => {
                    lease.lost.store(true, Ordering::Release);
                    lease.active.store(false, Ordering::Release);
                    reports.push((lease, Report::Gone));
                }
                // Could not tell (error): try again soon. is_lost() turns true
                // by itself once the validity runs out.
                Renewal::Failed(why) if lease.is_lost() => {
                    lease.active.store(false, Ordering::Release);
                    reports.push((lease, Report::RanOut(why)));
                }
                Renewal::Failed(why) => {
                    entry.due = now + RETRY_AFTER_ERROR.min(ttl / 10);
                    if !lease.failing.swap(true, Ordering::Relaxed) {
                        // The first failure of a streak.
                        reports.push((lease, Report::Failing(why)));
                    }
                }
            }
        }
        if !reports.is_empty() {
            drop(st);
            for (lease, report) in reports {
                match report {
                    Report::Gone => {
                        lease.report_lost("the watchdog found it expired or taken", true)
                    }
                    Report::RanOut(why) => lease.report_lost(
                        &format!("no renewal succeeded within its TTL (last: {why})"),
                        true,
                    ),
                    Report::Failing(why) => {
                        if let Some(about) = lease.renew.about() {
                            crate::ops::renewal_failed(about, &why);
                        }
                    }
                }
            }
            st = state();
        }
    }
}

fn client_id(client: &Client) -> *const () {
    client.pool_id()
}

/// What the watchdog reports of a lease (`ops::events`).
enum Report {
    /// Found gone.
    Gone,
    /// Its validity ran out without a successful renewal (the last error).
    RanOut(String),
    /// A renewal failed, the first of a streak (the error).
    Failing(String),
}

/// How one lease's renewal went.
enum Renewal {
    /// Renewed to the lease's current TTL.
    Done,
    /// Renewed, but to a TTL an `extend()` has changed meanwhile: which one
    /// Redis applied last is unknown, so renew again at once.
    Stale,
    /// The lock is gone.
    Gone,
    /// Unknown (an error, said here).
    Failed(String),
}

/// Renews `leases` (all of one client) in one pipelined round trip.
fn renew_batch(leases: Vec<Arc<Lease>>) -> Vec<(Arc<Lease>, Renewal)> {
    let Some(first) = leases.first() else {
        return Vec::new();
    };
    let client = first.client.clone();
    let ttls: Vec<u64> = leases
        .iter()
        .map(|l| l.ttl_ms.load(Ordering::Acquire))
        .collect();
    let calls: Vec<_> = leases
        .iter()
        .zip(&ttls)
        .map(|(l, ttl_ms)| l.renew.call(&client, *ttl_ms))
        .collect();
    let sent = Instant::now();
    let replies = client.run("lock renewal", |conn| scripts::query_batch(conn, &calls));
    match replies {
        Ok(values) if values.len() == leases.len() => leases
            .into_iter()
            .zip(values)
            .zip(ttls)
            .zip(&calls)
            .map(|(((l, v), ttl_ms), call)| {
                let outcome = match v {
                    redis::Value::Int(1) | redis::Value::Okay => {
                        l.renew.confirmed(call, sent, ttl_ms);
                        l.confirmed(sent, ttl_ms);
                        if l.ttl_ms.load(Ordering::Acquire) == ttl_ms {
                            Renewal::Done
                        } else {
                            Renewal::Stale
                        }
                    }
                    redis::Value::Int(0) | redis::Value::Nil => Renewal::Gone,
                    other => Renewal::Failed(format!("unexpected reply {other:?}")),
                };
                (l, outcome)
            })
            .collect(),
        Ok(values) => {
            let why = format!("{} replies to {} renewals", values.len(), leases.len());
            leases
                .into_iter()
                .map(|l| (l, Renewal::Failed(why.clone())))
                .collect()
        }
        Err(e) => {
            let why = e.to_string();
            leases
                .into_iter()
                .map(|l| (l, Renewal::Failed(why.clone())))
                .collect()
        }
    }
}
