//! The pool of one client: idle connections for commands, the wait hub of
//! this process (`wait/hub.rs`), and what the client knows of the deployment
//! (the cluster slot map, the Sentinel master), all under one mutex.
//!
//! The pool is deliberately small and hand-rolled rather than r2d2: it must
//! start no background thread (PHP-FPM workers, forked Python children), must
//! not PING on every checkout (that would double the round trips of an
//! uncontended lock), and must notice a `fork()` — a child never reuses a
//! socket of its parent, it silently forgets them (closing them could tear
//! down TLS sessions the parent still uses) and connects afresh.
//!
//! Connections carry the pool's *epoch* from checkout to checkin: it changes
//! when pooled connections may point at a server that is no longer the right
//! one (a Sentinel failover seen or suspected), and a connection checked out
//! before is then not pooled again.
//!
//! # Bounded, and shrinking when idle
//!
//! At most [`MAX_OPEN`] command connections of one client are open at once
//! (idle ones included): a caller that finds none idle and the bound reached
//! waits for one to come back, within its call's budget. Waiting threads do
//! not hold connections (they listen through the hub), so the bound only
//! queues bursts of round trips, which Redis serves one at a time anyway.
//! Connections idle for longer than [`IDLE_TIMEOUT`] are closed, beyond the
//! [`MIN_IDLE`] most recently used: when the pool is next used, and every
//! second from the hub's reader while it runs (no thread of its own).
//!
//! Calls that do not wait go first: a caller whose budget is *patient* (a
//! waiter's attempt or re-check, `budget.rs`) takes no connection while a
//! caller that does not wait (a release, a try-once) waits for one. With 500
//! waiters in a process re-checking at once, a release (which hands the lock
//! to one of them) would otherwise queue behind their round trips.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use redis::ConnectionLike;

use super::conn::Conn;
use super::replicas::Replicas;
use super::sentinel::{Asking, LookupError, MasterView, Resolver};
use super::topology::SlotCache;
use crate::budget::Budget;
use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::fork::current_pid;
use crate::settle::Settlement;
use crate::sync::LockUnpoisoned;

/// The most command connections one client has open at once.
pub(crate) const MAX_OPEN: usize = 32;

/// Idle connections older than this are closed (beyond [`MIN_IDLE`]).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle connections kept however long they have been idle (a PHP-FPM
/// worker's next request reuses them).
const MIN_IDLE: usize = 2;

/// The pool of one client.
pub(super) struct Pool {
    idle: Mutex<Idle>,
    /// Sentinel: signalled, with `idle`, when a lookup ends.
    looked_up: Condvar,
    /// Signalled, with `idle`, when a connection comes back or closes and
    /// only patient takers wait (see the module documentation).
    freed: Condvar,
    /// Signalled, with `idle`, when a connection comes back or closes and
    /// impatient takers wait.
    freed_first: Condvar,
    /// Sentinel: how many times the master was found to have changed (a
    /// failover), readable without the mutex.
    pub moves: AtomicU64,
}

/// Pool state, valid for the process `pid` only.
pub(super) struct Idle {
    pid: u32,
    /// Idle connections, the most recently used last, with when they came back.
    conns: Vec<(Conn, Instant)>,
    /// Command connections open (idle or checked out), at most [`MAX_OPEN`].
    open: usize,
    /// Threads waiting in [`Pool::take`] for a connection to come back:
    /// only then is `freed` signalled (a notify is a `futex` system call
    /// even when nobody waits, which would be one per round trip).
    takers: usize,
    /// Of the `takers`, those whose call does not wait: served first.
    impatient: usize,
    /// The wait hub of this client in this process (`wait/hub.rs`), kept
    /// without its type (see `Client::shared_by_waits`).
    pub hub: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Cluster: the slot map last fetched.
    pub slots: SlotCache,
    /// See the module documentation.
    pub epoch: u64,
    /// Sentinel: what this pool knows of the master.
    pub sentinel: Option<MasterView>,
    /// The master's replica count, as last read (`min_replicas`).
    pub replicas: Option<Replicas>,
    /// Sentinel: releases made lately, to run again on a new master (see
    /// `Client::note_release`), oldest first.
    pub replays: VecDeque<(Instant, Box<dyn Settlement>)>,
}

impl Idle {
    /// Every pooled connection may point at the wrong server: drop them,
    /// and keep those checked out now from coming back.
    pub(super) fn invalidate(&mut self) {
        self.epoch += 1;
        self.open -= self.conns.len();
        self.replicas = None;
        self.conns.clear();
    }

    /// Closes the connections idle for longer than [`IDLE_TIMEOUT`], beyond
    /// the [`MIN_IDLE`] most recent (returned, to be dropped unlocked).
    fn trim(&mut self, now: Instant) -> Vec<(Conn, Instant)> {
        let keep_from = self.conns.len().saturating_sub(MIN_IDLE);
        let old = self.conns[..keep_from]
            .iter()
            .take_while(|(_, since)| now.duration_since(*since) >= IDLE_TIMEOUT)
            .count();
        self.open -= old;
        self.conns.drain(..old).collect()
    }
}

/// Every pool of this process, so that `fork()` can wait until none is in use.
static POOLS: Mutex<Vec<Weak<Pool>>> = Mutex::new(Vec::new());

impl Pool {
    /// An empty pool; `sentinel` for a Sentinel deployment.
    pub(super) fn new(sentinel: Option<MasterView>) -> Arc<Self> {
        let pool = Arc::new(Self {
            idle: Mutex::new(Idle {
                pid: current_pid(),
                conns: Vec::new(),
                open: 0,
                takers: 0,
                impatient: 0,
                hub: None,
                slots: SlotCache::default(),
                epoch: 0,
                sentinel,
                replicas: None,
                replays: VecDeque::new(),
            }),
            looked_up: Condvar::new(),
            freed: Condvar::new(),
            freed_first: Condvar::new(),
            moves: AtomicU64::new(0),
        });
        let mut pools = POOLS.lock_unpoisoned();
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(&pool));
        pool
    }

    /// The pool state; emptied first in a forked child.
    pub(super) fn state(&self) -> MutexGuard<'_, Idle> {
        let mut idle = self.idle.lock_unpoisoned();
        let pid = current_pid();
        if idle.pid != pid {
            // Forked: the sockets belong to the parent. Forget, never close
            // (the hub too: its threads are the parent's).
            std::mem::forget(std::mem::take(&mut idle.conns));
            std::mem::forget(idle.hub.take());
            std::mem::forget(std::mem::take(&mut idle.replays));
            idle.open = 0;
            idle.takers = 0;
            idle.impatient = 0;
            if let Some(view) = idle.sentinel.as_mut() {
                view.forget_after_fork();
            }
            idle.slots.clear();
            idle.replicas = None;
            idle.pid = pid;
        }
        idle
    }

    /// An idle connection (`Some`), or leave to open one (`None`: the
    /// caller connects, and calls [`Pool::discard`] if that fails), the
    /// epoch to check it in with, and whether it waited. With [`MAX_OPEN`]
    /// connections open, waits for one to come back within `budget`; a
    /// patient budget also waits while an impatient caller does.
    /// `context` names the server in the error.
    pub(super) fn take(&self, budget: Budget, context: &str) -> Result<(Option<Conn>, u64, bool)> {
        let patient = budget.is_patient();
        let mut idle = self.state();
        let mut waited = false;
        loop {
            // (Only connections beyond the `MIN_IDLE` most recent are
            // trimmed: with no more than these, the clock is not read.)
            let trimmed = match idle.conns.first() {
                Some((_, since)) if idle.conns.len() > MIN_IDLE => {
                    let now = Instant::now();
                    if now.duration_since(*since) >= IDLE_TIMEOUT {
                        idle.trim(now)
                    } else {
                        Vec::new()
                    }
                }
                _ => Vec::new(),
            };
            let give_way = patient && idle.impatient > 0;
            if !give_way && let Some((conn, _)) = idle.conns.pop() {
                let epoch = idle.epoch;
                let more = waited && self.pass_on(&idle);
                drop(idle);
                if more {
                    self.freed.notify_one();
                }
                drop(trimmed);
                return Ok((Some(conn), epoch, waited));
            }
            if !give_way && idle.open < MAX_OPEN {
                idle.open += 1;
                let more = waited && self.pass_on(&idle);
                let epoch = idle.epoch;
                drop(idle);
                if more {
                    self.freed.notify_one();
                }
                return Ok((None, epoch, waited));
            }
            let left = match budget.left() {
                Some(left) if left < Duration::from_millis(1) => {
                    if waited && self.pass_on(&idle) {
                        // What woke this taker (an impatient one, giving
                        // up) is still free: for the patient ones.
                        self.freed.notify_one();
                    }
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "{context}: timed out: all {MAX_OPEN} connections of the pool stayed busy for the whole call"
                        ),
                    ));
                }
                Some(left) => left,
                None => Duration::from_secs(1),
            };
            idle.takers += 1;
            if !patient {
                idle.impatient += 1;
            }
            waited = true;
            let freed = if patient {
                &self.freed
            } else {
                &self.freed_first
            };
            idle = freed
                .wait_timeout(idle, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            idle.takers = idle.takers.saturating_sub(1);
            if !patient {
                idle.impatient = idle.impatient.saturating_sub(1);
            }
            if idle.pid != current_pid() {
                drop(idle);
                idle = self.state();
            }
        }
    }

    /// Pools `conn` again, unless it is closed or the epoch changed since
    /// `epoch` (it may point at a master that is no longer one): then it is
    /// closed.
    pub(super) fn put(&self, conn: Conn, epoch: u64) {
        self.put_since(conn, epoch, Instant::now());
    }

    /// [`Pool::put`], idle since `since` (a moment ago: the caller read
    /// the clock before its round trip).
    pub(super) fn put_since(&self, conn: Conn, epoch: u64, since: Instant) {
        let open = conn.is_open();
        let mut idle = self.state();
        let wake = self.wake_for(&idle);
        if open && idle.epoch == epoch {
            idle.conns.push((conn, since));
            drop(idle);
        } else {
            idle.open = idle.open.saturating_sub(1);
            drop(idle);
            drop(conn);
        }
        if let Some(freed) = wake {
            freed.notify_one();
        }
    }

    /// Whom a connection coming back (or a place freed) wakes: an impatient
    /// taker if one waits, else a patient one, else nobody (no system call).
    fn wake_for(&self, idle: &Idle) -> Option<&Condvar> {
        if idle.impatient > 0 {
            Some(&self.freed_first)
        } else if idle.takers > 0 {
            Some(&self.freed)
        } else {
            None
        }
    }

    /// After a taker stopped waiting: whether a patient taker should be woken
    /// for a connection (or a place) still free, which the notification that
    /// freed it may have sent to an impatient taker or to this one.
    fn pass_on(&self, idle: &Idle) -> bool {
        idle.impatient == 0 && idle.takers > 0 && (!idle.conns.is_empty() || idle.open < MAX_OPEN)
    }

    /// A connection from [`Pool::take`] (or the leave to open one) was
    /// dropped instead of coming back.
    pub(super) fn discard(&self) {
        let mut idle = self.state();
        idle.open = idle.open.saturating_sub(1);
        let wake = self.wake_for(&idle);
        drop(idle);
        if let Some(freed) = wake {
            freed.notify_one();
        }
    }

    /// Closes connections idle for longer than [`IDLE_TIMEOUT`] (see the
    /// module documentation).
    pub(super) fn trim(&self) {
        let trimmed = self.state().trim(Instant::now());
        drop(trimmed);
    }

    /// Waits until the Sentinel lookup under way ends (the count of lookups
    /// has moved past `seen`).
    pub(super) fn await_lookup<'a>(
        &'a self,
        idle: MutexGuard<'a, Idle>,
        seen: u64,
    ) -> MutexGuard<'a, Idle> {
        self.looked_up
            .wait_while(idle, |i| {
                i.sentinel.as_ref().is_some_and(|v| v.lookups() == seen)
            })
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A Sentinel lookup with `resolver`, taken out of the pool's view.
    pub(super) fn lookup(&self, resolver: Resolver) -> Lookup<'_> {
        Lookup {
            pool: self,
            resolver: Some(resolver),
        }
    }
}

/// A Sentinel lookup under way: the resolver taken out of the pool (see
/// `Client::master_client`). Dropping it wakes the threads waiting for the
/// answer; should the resolver not have been handed back (a panic), a fresh
/// one is put in its place first.
pub(super) struct Lookup<'a> {
    pool: &'a Pool,
    resolver: Option<Resolver>,
}

impl Lookup<'_> {
    /// Asks the sentinels; the client of the master found.
    pub(super) fn run(
        &mut self,
        config: &Config,
        asking: &Asking,
    ) -> std::result::Result<redis::Client, LookupError> {
        let Some(resolver) = self.resolver.as_mut() else {
            unreachable!("the resolver is handed back only after run")
        };
        resolver.master_client(config, asking.known.as_ref(), asking.recheck)
    }

    /// The resolver, to hand back to the pool's view.
    pub(super) fn hand_back(&mut self) -> Option<Resolver> {
        self.resolver.take()
    }
}

impl Drop for Lookup<'_> {
    fn drop(&mut self) {
        if self.resolver.is_some()
            && let Some(view) = self.pool.state().sentinel.as_mut()
        {
            view.abandoned();
        }
        self.pool.looked_up.notify_all();
    }
}

/// What `fork()`'s prepare handler holds of the pools until the parent and
/// child handlers run (all three run in the forking thread).
#[derive(Default)]
struct ForkHold {
    pools: Option<MutexGuard<'static, Vec<Weak<Pool>>>>,
    /// Each pool's guard, with the pool it borrows from (dropped after it).
    idle: Vec<(MutexGuard<'static, Idle>, Arc<Pool>)>,
}

thread_local! {
    static FORK_HOLD: std::cell::RefCell<ForkHold> = std::cell::RefCell::default();
}

/// Part of the client's `fork()` prepare handler: waits until no thread uses
/// a pool.
pub(super) fn hold_for_fork() {
    let pools = POOLS.lock_unpoisoned();
    let mut idle = Vec::new();
    for pool in pools.iter().filter_map(Weak::upgrade) {
        // SAFETY: the guard borrows from the pool `pool` points to, and is
        // stored next to that Arc, which keeps the pool alive; `ForkHold`
        // drops the guard first (tuple fields drop in order).
        let m: &'static Mutex<Idle> = unsafe { &*std::ptr::from_ref(&pool.idle) };
        idle.push((m.lock_unpoisoned(), pool));
    }
    let hold = ForkHold {
        pools: Some(pools),
        idle,
    };
    // Unavailable only while this thread is being torn down: then the fork
    // goes ahead without holding anything, as it would without this handler.
    let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = hold);
}

/// Part of the client's `fork()` parent and child handlers: lets go of what
/// [`hold_for_fork`] held. In the child the pools are not dropped (were one
/// the last reference, it would close sockets the parent still uses);
/// [`Pool::state`] empties them there.
pub(super) fn release_after_fork(in_child: bool) {
    let hold = FORK_HOLD
        .try_with(|h| std::mem::take(&mut *h.borrow_mut()))
        .unwrap_or_default();
    let ForkHold { pools, idle } = hold;
    for (guard, pool) in idle {
        drop(guard);
        if in_child {
            std::mem::forget(pool);
        }
    }
    drop(pools);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    /// Waits until the pool has `takers` waiting takers.
    fn until_waiting(pool: &Pool, takers: usize) {
        let end = Instant::now() + Duration::from_secs(10);
        while pool.state().takers != takers {
            assert!(Instant::now() < end, "never {takers} takers waiting");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Every place of a new pool taken (no connection is needed: a place
    /// is the leave to open one, given back with `discard`).
    fn full_pool() -> Arc<Pool> {
        let pool = Pool::new(None);
        let call = Budget::one_call(Duration::from_secs(5));
        for _ in 0..MAX_OPEN {
            assert!(matches!(pool.take(call, "test"), Ok((None, _, false))));
        }
        pool
    }

    fn taker(pool: &Arc<Pool>, budget: Budget) -> thread::JoinHandle<bool> {
        let pool = pool.clone();
        thread::spawn(move || pool.take(budget, "test").is_ok())
    }

    #[test]
    fn a_call_that_does_not_wait_goes_before_the_waits_calls() {
        let pool = full_pool();
        let patient = Budget::wait(
            Some(Instant::now() + Duration::from_secs(10)),
            Duration::from_secs(1),
        );
        let waits: Vec<_> = (0..3).map(|_| taker(&pool, patient)).collect();
        until_waiting(&pool, 3);
        let call = taker(&pool, Budget::one_call(Duration::from_secs(10)));
        until_waiting(&pool, 4);
        pool.discard();
        assert!(
            call.join().unwrap(),
            "the call that does not wait is served first"
        );
        until_waiting(&pool, 3);
        // Places freed while no such call waits go to the waits' calls, all
        // of them, even when freed together.
        pool.discard();
        pool.discard();
        pool.discard();
        for w in waits {
            assert!(w.join().unwrap());
        }
        assert_eq!(pool.state().takers, 0);
    }

    #[test]
    fn a_place_an_impatient_taker_leaves_unused_goes_to_the_patient_ones() {
        let pool = full_pool();
        let patient = Budget::wait(
            Some(Instant::now() + Duration::from_secs(10)),
            Duration::from_secs(1),
        );
        let wait = taker(&pool, patient);
        until_waiting(&pool, 1);
        // Gives up after 50 ms: the patient taker must not be left waiting
        // for the place freed meanwhile, whose notification went to it.
        let call = taker(&pool, Budget::one_call(Duration::from_millis(50)));
        until_waiting(&pool, 2);
        pool.discard();
        pool.discard();
        assert!(call.join().unwrap());
        assert!(
            wait.join().unwrap(),
            "the second place reaches the patient taker"
        );
    }
}
