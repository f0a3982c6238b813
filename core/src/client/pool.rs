//! The pool of one client: idle connections for commands and for
//! subscriptions, and what the client knows of the deployment (the cluster
//! slot map, the Sentinel master), all under one mutex.
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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

use redis::ConnectionLike;

use super::conn::{Conn, Node};
use super::replicas::Replicas;
use super::sentinel::{Asking, LookupError, MasterView, Resolver};
use super::topology::SlotCache;
use crate::config::Config;
use crate::fork::current_pid;
use crate::settle::Settlement;
use crate::sync::LockUnpoisoned;

/// Idle connections kept per client (and per node, for subscriptions); more
/// concurrent users simply open more and close the surplus when done.
const MAX_IDLE: usize = 64;

/// A pooled subscriber connection and the leftover channel it still listens
/// to (see `Subscriber::leftover`).
pub(super) type IdleSubscriber = (redis::Connection, Option<Vec<u8>>);

/// The pool of one client.
pub(super) struct Pool {
    idle: Mutex<Idle>,
    /// Sentinel: signalled, with `idle`, when a lookup ends.
    looked_up: Condvar,
    /// Sentinel: how many times the master was found to have changed (a
    /// failover), readable without the mutex.
    pub moves: AtomicU64,
}

/// Pool state, valid for the process `pid` only.
pub(super) struct Idle {
    pid: u32,
    conns: Vec<Conn>,
    /// Idle connections used for subscriptions, per cluster node (`None`:
    /// the server or Sentinel master).
    subscribers: HashMap<Option<Node>, Vec<IdleSubscriber>>,
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
        self.replicas = None;
        self.conns.clear();
        self.subscribers.clear();
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
                subscribers: HashMap::new(),
                slots: SlotCache::default(),
                epoch: 0,
                sentinel,
                replicas: None,
                replays: VecDeque::new(),
            }),
            looked_up: Condvar::new(),
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
            // Forked: the sockets belong to the parent. Forget, never close.
            std::mem::forget(std::mem::take(&mut idle.conns));
            std::mem::forget(std::mem::take(&mut idle.subscribers));
            std::mem::forget(std::mem::take(&mut idle.replays));
            if let Some(view) = idle.sentinel.as_mut() {
                view.forget_after_fork();
            }
            idle.slots.clear();
            idle.replicas = None;
            idle.pid = pid;
        }
        idle
    }

    /// An idle connection if there is one, and the epoch to check it in with.
    pub(super) fn take(&self) -> (Option<Conn>, u64) {
        let mut idle = self.state();
        (idle.conns.pop(), idle.epoch)
    }

    /// Pools `conn` again, unless it is closed or the epoch changed since
    /// `epoch` (it may point at a master that is no longer one).
    pub(super) fn put(&self, conn: Conn, epoch: u64) {
        let open = conn.is_open();
        let mut idle = self.state();
        if open && idle.epoch == epoch && idle.conns.len() < MAX_IDLE {
            idle.conns.push(conn);
        }
    }

    /// An idle subscriber connection to `node`, if there is one.
    pub(super) fn take_subscriber(&self, node: &Option<Node>) -> Option<IdleSubscriber> {
        self.state().subscribers.get_mut(node).and_then(Vec::pop)
    }

    /// Closes the idle subscriber connections to `node` (with the pool
    /// unlocked).
    pub(super) fn drop_subscribers(&self, node: &Option<Node>) {
        let closed = self.state().subscribers.remove(node);
        drop(closed);
    }

    /// Pools a subscriber connection to `node` again.
    pub(super) fn put_subscriber(&self, node: Option<Node>, idle: IdleSubscriber) {
        let mut state = self.state();
        let list = state.subscribers.entry(node).or_default();
        if list.len() < MAX_IDLE {
            list.push(idle);
        }
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
