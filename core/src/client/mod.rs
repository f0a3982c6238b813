//! Connections: one [`Client`] per deployment, shared by every lock and queue
//! that names the same URL, with a pool of reusable connections.
//!
//! The rooms, from the bottom up: `encode.rs` (commands packed once but for
//! one argument), `conn.rs` (one connection of either kind, and how one is
//! opened), `topology.rs` (Redis Cluster: its client and
//! slot map), `sentinel.rs` (finding the Sentinel master, and what a pool
//! knows of it), `pool.rs` (idle connections and that knowledge, under one
//! mutex), this file (the [`Client`]: running a command on a pooled
//! connection, with one retry when a reused connection turns out dead), and
//! `subscriber.rs` (the wait hub's side of the client: its subscription
//! connections, on the right node).

pub(crate) mod conn;
pub(crate) mod encode;
mod failure;
mod native;
mod nodes;
mod pool;
mod replay;
mod replicas;
mod resp;
mod sentinel;
pub(crate) mod subscriber;
mod topology;
mod wire;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use redis::{FromRedisValue, RedisResult};

use self::conn::{
    Conn, Link, install_crypto_provider, is_failover, is_stale, may_have_run, open_link,
    single_client,
};
use self::failure::which_timeout;
use self::native::IFEQ_UNKNOWN;
use self::pool::Pool;
use self::sentinel::{MasterView, Next};
use self::topology::cluster_client;
use crate::budget::Budget;
use crate::config::{Config, Target};
use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockUnpoisoned;

/// A handle to one Redis deployment (server, Sentinel master or Cluster).
///
/// Cheap to clone; clones share the connection pool. Use [`Client::shared`] to
/// get the process-wide client of a URL.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.config.redacted_url())
            .finish()
    }
}

struct Inner {
    config: Config,
    backend: Backend,
    pool: Arc<Pool>,
    /// The [`CONNECTS`] number of the last connection this client opened
    /// (0: none yet).
    last_connect: AtomicU64,
    /// Whether the server has `SET … IFEQ` ([`Client::has_set_ifeq`]): one
    /// of the `IFEQ_*` values.
    set_ifeq: AtomicU8,
}

enum Backend {
    Single(redis::Client),
    Sentinel,
    Cluster(redis::cluster::ClusterClient),
}

/// Connections opened by every client of this process, numbered in order
/// (see [`Client::last_connect`]).
static CONNECTS: AtomicU64 = AtomicU64::new(0);

/// The process-wide clients of [`Client::shared`], by URL.
static REGISTRY: Mutex<Option<HashMap<String, Client>>> = Mutex::new(None);

type Registry = MutexGuard<'static, Option<HashMap<String, Client>>>;

thread_local! {
    /// The registry, held by `fork()`'s prepare handler until the parent and
    /// child handlers run (all three run in the forking thread).
    static FORK_HOLD: std::cell::RefCell<Option<Registry>> = const { std::cell::RefCell::new(None) };
}

/// Registers the client's [`fork`](crate::fork) hooks, before the registry
/// or a pool is first used: they hold the registry, then every pool.
fn hold_across_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        crate::fork::register(crate::fork::Hooks {
            prepare: hold_for_fork,
            parent: || release_after_fork(false),
            child: || release_after_fork(true),
        })
    });
}

/// `fork()` prepare handler: waits until no thread uses the registry or a pool.
fn hold_for_fork() {
    let registry = REGISTRY.lock_unpoisoned();
    pool::hold_for_fork();
    // Unavailable only while this thread is being torn down: then the fork
    // goes ahead without holding the registry, as it would without this handler.
    let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = Some(registry));
}

/// `fork()` parent and child handler: lets go of what [`hold_for_fork`] held.
fn release_after_fork(in_child: bool) {
    pool::release_after_fork(in_child);
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

impl Client {
    /// A new client with its own pool. Nothing is connected until first use.
    pub fn new(config: Config) -> Result<Self> {
        hold_across_forks();
        let ctx = config.redacted_url().to_owned();
        let (backend, sentinel) = match &config.target {
            Target::Single(info) => (
                Backend::Single(
                    single_client(info, &config).map_err(|e| Error::from_redis(&ctx, e))?,
                ),
                None,
            ),
            Target::Sentinel { sentinels, .. } => {
                (Backend::Sentinel, Some(MasterView::new(sentinels.clone())))
            }
            Target::Cluster { nodes, node, tls } => (
                Backend::Cluster(
                    cluster_client(nodes, node, *tls, &config)
                        .map_err(|e| Error::from_redis(&ctx, e))?,
                ),
                None,
            ),
        };
        install_crypto_provider();
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                backend,
                pool: Pool::new(sentinel),
                last_connect: AtomicU64::new(0),
                set_ifeq: AtomicU8::new(IFEQ_UNKNOWN),
            }),
        })
    }

    /// The process-wide client for `url`: every lock and queue naming the same
    /// URL shares one pool.
    pub fn shared(url: &str) -> Result<Self> {
        hold_across_forks();
        let key = url.trim().to_owned();
        if let Some(client) = REGISTRY
            .lock_unpoisoned()
            .as_ref()
            .and_then(|r| r.get(&key))
        {
            return Ok(client.clone());
        }
        let client = Client::new(Config::from_url(&key)?)?;
        let mut registry = REGISTRY.lock_unpoisoned();
        Ok(registry
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert(client)
            .clone())
    }

    /// The settings this client was built from.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// True when connected to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.config.is_cluster()
    }

    /// Same pool (clones of one client, or the same shared URL).
    pub fn same_as(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// An identity of the pool, to group work by client.
    pub(crate) fn pool_id(&self) -> *const () {
        Arc::as_ptr(&self.inner).cast()
    }

    /// The server's URL with any password masked, for messages.
    pub(crate) fn redacted_url(&self) -> &str {
        self.inner.config.redacted_url()
    }

    /// How many times the Sentinel master was found to have changed (a
    /// failover) since this client was made; always 0 for other deployments.
    /// A lock compares the count at acquire and at release to tell a hold
    /// lost in a failover from one that expired.
    pub(crate) fn master_moves(&self) -> u64 {
        self.inner.pool.moves.load(Ordering::Acquire)
    }

    /// The number (a process-wide sequence, in the order connections were
    /// opened by any client) of the last command connection this client
    /// opened; 0 if none. A server that restarted closed every connection to
    /// it, so whatever ran there since ran on a connection numbered higher
    /// than any opened before the restart: Redlock checks the server's
    /// identity (`INFO server`) only when this moved past its last check.
    pub(crate) fn last_connect(&self) -> u64 {
        self.inner.last_connect.load(Ordering::Acquire)
    }

    /// The time allowed for one command (subscription replies included).
    pub(crate) fn command_timeout(&self) -> Duration {
        self.inner.config.command_timeout
    }

    /// What lost replies of this client left open and is still to be put
    /// right once the server answers (see [`crate::pending_settlements`],
    /// which counts those of every client).
    pub fn pending_settlements(&self) -> usize {
        crate::settle::pending_for(self.pool_id())
    }

    /// Waits up to `timeout` until this client has no settlement pending
    /// ([`Client::pending_settlements`]); true if none is. For tests and
    /// orderly shutdowns.
    pub fn wait_settled(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while self.pending_settlements() > 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Checks that Redis answers (`PING`).
    pub fn ping(&self) -> Result<()> {
        self.query::<String>("ping", &redis::cmd("PING")).map(drop)
    }

    /// Runs one command on a pooled connection, as [`Client::run`] does.
    pub(crate) fn query<T: FromRedisValue>(&self, context: &str, cmd: &redis::Cmd) -> Result<T> {
        self.run(context, |c| cmd.query(c))
    }

    /// The budget of a call that does not wait: one command timeout from now.
    pub(crate) fn one_call(&self) -> Budget {
        Budget::one_call(self.inner.config.command_timeout)
    }

    /// Runs `op` on a pooled connection within one command timeout (see
    /// [`Client::run_within`]).
    pub(crate) fn run<T>(
        &self,
        context: &str,
        op: impl FnMut(&mut Conn) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_within(self.one_call(), context, op)
    }

    /// Runs `op` on a pooled connection, connecting and reading within
    /// `budget` (see `budget.rs`): each round trip's socket timeouts are the
    /// command timeout or the time left, whichever is shorter, and nothing
    /// starts once the budget is spent.
    ///
    /// Errors are mapped with `context` (e.g. `lock "orders"`). A connection
    /// that fails is discarded (reset: see `tcp_settings`); when a *reused*
    /// connection turns out to be dead (the server restarted or closed it
    /// while idle) the operation is retried once on a fresh connection — the
    /// dead socket cannot have delivered it. An error after which the
    /// command may have run is marked [`Error::outcome_unknown`].
    pub(crate) fn run_within<T>(
        &self,
        budget: Budget,
        context: &str,
        op: impl FnMut(&mut Conn) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_noting(budget, context, &Cell::new(false), op)
    }

    /// [`Client::run_within`], setting `maybe_ran` when the result comes
    /// from the retry on a fresh connection after a reused one failed: the
    /// first try may have run (a connection closed while idle and one that
    /// died after delivering the command, before the reply, look the same),
    /// so a caller whose command is not idempotent (a release that the
    /// retry finds already done) must judge the reply with that in mind.
    pub(crate) fn run_noting<T>(
        &self,
        budget: Budget,
        context: &str,
        maybe_ran: &Cell<bool>,
        mut op: impl FnMut(&mut Conn) -> RedisResult<T>,
    ) -> Result<T> {
        // The clock is read once here: for the budget, the socket timeouts
        // (unless checking out took a while) and the connection's idle mark.
        let now = Instant::now();
        let left = budget.end().map(|end| end.saturating_duration_since(now));
        if left.is_some_and(|left| left < Duration::from_millis(1)) {
            return Err(self.spent(context));
        }
        let out = self.checkout(budget).map_err(|e| e.context(context))?;
        let (mut conn, reused, epoch) = (out.conn, out.reused, out.epoch);
        let limit = self.inner.config.command_timeout;
        let timeout = match left {
            _ if !out.prompt => budget.cap(limit),
            Some(left) => limit.min(left),
            None => limit,
        };
        match self.round_trip(&mut conn, timeout, &mut op) {
            Ok(v) => {
                self.inner.pool.put_since(conn, epoch, now);
                crate::settle::server_answered(self.pool_id());
                Ok(v)
            }
            Err(e) if reused && (is_stale(&e) || is_failover(&e)) => {
                if may_have_run(&e) {
                    maybe_ran.set(true);
                }
                drop(conn);
                self.forget_topology(&e);
                let epoch = self.inner.pool.state().epoch;
                if budget.is_spent() {
                    self.inner.pool.discard();
                    return Err(self.spent(context));
                }
                // The dead connection's place in the pool goes to the new one.
                let mut fresh = match self.connect(budget) {
                    Ok(fresh) => fresh,
                    Err(e) => {
                        self.inner.pool.discard();
                        return Err(e.context(context));
                    }
                };
                let timeout = budget.cap(self.inner.config.command_timeout);
                match self.round_trip(&mut fresh, timeout, &mut op) {
                    Ok(v) => {
                        self.inner.pool.put(fresh, epoch);
                        crate::settle::server_answered(self.pool_id());
                        Ok(v)
                    }
                    Err(e) => Err(self.failed(fresh, epoch, e, context, false)),
                }
            }
            Err(e) => Err(self.failed(conn, epoch, e, context, reused)),
        }
    }

    /// One use of `conn` by `op`, its socket timeouts fitted to `timeout`
    /// (the budget's cap of the command timeout).
    fn round_trip<T>(
        &self,
        conn: &mut Conn,
        timeout: Duration,
        op: &mut impl FnMut(&mut Conn) -> RedisResult<T>,
    ) -> RedisResult<T> {
        conn.fit_timeout(timeout)?;
        if conn.defers_signals() {
            deferring_signals(|| op(conn))
        } else {
            op(conn)
        }
    }

    /// A connection (see [`Checkout`]). Waits within `budget` while the
    /// pool has all the connections it may open in use (see `pool.rs`).
    fn checkout(&self, budget: Budget) -> Result<Checkout> {
        let sentinel = matches!(self.inner.backend, Backend::Sentinel);
        if sentinel {
            self.master_client()?; // re-asks the sentinels once their answer is old
        }
        match self.inner.pool.take(budget, self.redacted_url())? {
            (Some(conn), epoch, waited) => Ok(Checkout {
                conn,
                reused: true,
                epoch,
                prompt: !waited && !sentinel,
            }),
            (None, epoch, _) => match self.connect(budget) {
                Ok(conn) => Ok(Checkout {
                    conn,
                    reused: false,
                    epoch,
                    prompt: false,
                }),
                Err(e) => {
                    self.inner.pool.discard();
                    Err(e)
                }
            },
        }
    }

    /// Drops cached topology after an error that suggests it changed.
    pub(crate) fn forget_topology(&self, e: &redis::RedisError) {
        let mut idle = self.inner.pool.state();
        if let Some(view) = idle.sentinel.as_mut() {
            // The master may have moved: re-ask the sentinels before the
            // next command; drop connections that may point at the old one.
            view.suspect();
            idle.invalidate();
        }
        if e.is_cluster_error() || e.is_io_error() {
            idle.slots.clear();
        }
    }

    /// Opens a new connection of the deployment's kind, within `budget`
    /// (a cluster connection within its own connect timeout: the redis
    /// crate connects to the nodes as it needs them).
    fn connect(&self, budget: Budget) -> Result<Conn> {
        let cfg = &self.inner.config;
        let ctx = cfg.redacted_url();
        let connect_timeout = budget.cap(cfg.connect_timeout);
        let open = || -> Result<redis::RedisResult<Conn>> {
            let link = match &self.inner.backend {
                Backend::Single(client) => open_link(client, cfg, connect_timeout),
                Backend::Sentinel => {
                    let client = self.master_client()?;
                    open_link(&client, cfg, connect_timeout)
                }
                Backend::Cluster(client) => {
                    client.get_connection().map(|c| Link::Cluster(Box::new(c)))
                }
            };
            Ok(link.map(|link| Conn::new(link, cfg.command_timeout)))
        };
        let conn = match open()? {
            Ok(mut conn) => match self.probe_set_ifeq(&mut conn, budget) {
                Ok(()) => Ok(conn),
                // Not a Redis server, or one that does not answer: said below.
                Err(e) if e.kind() == redis::ErrorKind::Parse || e.is_timeout() => Err(e),
                // The probe's connection dropped: the caller's command was
                // not sent; it goes on a new connection, and the next
                // connection asks again.
                Err(_) => {
                    drop(conn);
                    open()?
                }
            },
            Err(e) => Err(e),
        };
        let conn = conn.map_err(|e| {
            if e.kind() == redis::ErrorKind::Parse {
                // The handshake's or the probe's reply is not RESP.
                self.not_redis(&e)
            } else if e.is_timeout() {
                Error::with_source(
                    ErrorKind::Timeout,
                    format!(
                        "{ctx}: timed out: no connection within {}",
                        which_timeout(connect_timeout, cfg.connect_timeout, "connect")
                    ),
                    e,
                )
            } else {
                Error::from_redis(ctx, e)
            }
        })?;
        let number = CONNECTS.fetch_add(1, Ordering::AcqRel) + 1;
        self.inner.last_connect.fetch_max(number, Ordering::AcqRel);
        Ok(conn)
    }

    /// Sentinel: the client of the current master, asking the sentinels when
    /// the one known is no longer trusted (see `sentinel.rs` for when).
    ///
    /// One thread asks at a time, and holds no lock meanwhile: the pool
    /// stays usable, and `fork()` need not wait. Threads that cannot go on
    /// with the master known so far wait for its answer.
    fn master_client(&self) -> Result<redis::Client> {
        let cfg = &self.inner.config;
        let no_view = || {
            Error::new(
                ErrorKind::Config,
                format!("{}: not a sentinel URL", cfg.redacted_url()),
            )
        };
        let pool = &self.inner.pool;
        let mut idle = pool.state();
        let (resolver, asking) = loop {
            let view = idle.sentinel.as_mut().ok_or_else(no_view)?;
            match view.next(Instant::now()) {
                Next::Use(client) => return Ok(client),
                Next::Ask(resolver, asking) => break (resolver, asking),
                Next::Wait(seen) => {
                    idle = pool.await_lookup(idle, seen);
                    if let Some(e) = idle.sentinel.as_ref().and_then(MasterView::failure) {
                        return Err(e);
                    }
                }
            }
        };
        drop(idle);
        let mut lookup = pool.lookup(resolver);
        let found = lookup.run(cfg, &asking);
        // (`lookup` is dropped after this guard, and then wakes the waiters.)
        let mut idle = pool.state();
        let view = idle.sentinel.as_mut().ok_or_else(no_view)?;
        let (client, moved) = view.settle(lookup.hand_back(), &asking, found, cfg.redacted_url());
        if moved {
            // Failover: every pooled connection points at the old master,
            // and the releases it confirmed lately may be lost with it.
            idle.invalidate();
            pool.moves.fetch_add(1, Ordering::AcqRel);
            // The new master may be another server version.
            self.inner.set_ifeq.store(IFEQ_UNKNOWN, Ordering::Release);
            let replays = std::mem::take(&mut idle.replays);
            drop(idle);
            self.replay(replays);
        }
        client
    }
}

/// A connection from [`Client::checkout`].
struct Checkout {
    conn: Conn,
    /// It was pooled (else: just opened).
    reused: bool,
    /// The pool's epoch when it was taken (for [`Pool::put`]).
    epoch: u64,
    /// Taken from the pool at once: no wait, no connect, no Sentinel
    /// lookup, so the time left read just before still holds.
    prompt: bool,
}

/// Runs one round trip on a connection of the redis crate (TLS, RESP3, a
/// cluster) with signals deferred: a signal must not cut it short, Redis
/// would have run the command and its reply would be lost (see
/// `signals.rs`). Our own plain connections need no such guard: their reads
/// go on after a signal (`wire.rs`). Connecting is left interruptible:
/// nothing was sent yet.
fn deferring_signals<T>(op: impl FnOnce() -> T) -> T {
    let _signals = crate::signals::Deferred::new();
    op()
}
