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
    /// Signalled, with `idle`, when a connection comes back or closes.
    freed: Condvar,
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
                hub: None,
                slots: SlotCache::default(),
                epoch: 0,
                sentinel,
                replicas: None,
                replays: VecDeque::new(),
            }),
            looked_up: Condvar::new(),
            freed: Condvar::new(),
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
    /// connections open, waits for one to come back within `budget`.
    /// `context` names the server in the error.
    pub(super) fn take(&self, budget: Budget, context: &str) -> Result<(Option<Conn>, u64, bool)> {
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
            if let Some((conn, _)) = idle.conns.pop() {
                let epoch = idle.epoch;
                drop(idle);
                drop(trimmed);
                return Ok((Some(conn), epoch, waited));
            }
            if idle.open < MAX_OPEN {
                idle.open += 1;
                return Ok((None, idle.epoch, waited));
            }
            let left = match budget.left() {
                Some(left) if left < Duration::from_millis(1) => {
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
            waited = true;
            idle = self
                .freed
                .wait_timeout(idle, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            idle.takers = idle.takers.saturating_sub(1);
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
        let waited_for = idle.takers > 0;
        if open && idle.epoch == epoch {
            idle.conns.push((conn, since));
            drop(idle);
        } else {
            idle.open = idle.open.saturating_sub(1);
            drop(idle);
            drop(conn);
        }
        if waited_for {
            self.freed.notify_one();
        }
    }

    /// A connection from [`Pool::take`] (or the leave to open one) was
    /// dropped instead of coming back.
    pub(super) fn discard(&self) {
        let mut idle = self.state();
        idle.open = idle.open.saturating_sub(1);
        let waited_for = idle.takers > 0;
        drop(idle);
        if waited_for {
            self.freed.notify_one();
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
