//! Connections: one [`Client`] per deployment, shared by every lock and queue
//! that names the same URL, with a pool of reusable connections.
//!
//! The pool is deliberately small and hand-rolled rather than r2d2: it must
//! start no background thread (PHP-FPM workers, forked Python children), must
//! not PING on every checkout (that would double the round trips of an
//! uncontended lock), and must notice a `fork()` — a child never reuses a
//! socket of its parent, it silently forgets them (closing them could tear
//! down TLS sessions the parent still uses) and connects afresh.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, OnceLock, Weak};
use std::time::{Duration, Instant};

use redis::{ConnectionInfo, ConnectionLike, RedisResult};

use crate::config::{Config, Target, node_info};
use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockUnpoisoned;

/// Idle connections kept per client; more concurrent users simply open more
/// and close the surplus when they are done.
const MAX_IDLE: usize = 64;

/// How long the Sentinel master address is trusted before the sentinels are
/// asked again. After a failover the old master keeps accepting writes until
/// the sentinels demote it (seconds); re-asking bounds how long we could
/// keep writing there.
const MASTER_RECHECK: Duration = Duration::from_secs(1);

/// The longest the known Sentinel master is trusted without confirmation
/// while no sentinel answers (a lookup costs their timeouts).
const MASTER_TRUST_MAX: Duration = Duration::from_secs(30);

/// How long a cached cluster slot map is trusted before it is fetched again.
const SLOT_MAP_TTL: Duration = Duration::from_secs(1);

/// A connection of either kind.
pub(crate) enum Conn {
    /// One server (standalone or the Sentinel master).
    Single(redis::Connection),
    /// A cluster connection (routes by key, follows MOVED/ASK).
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Conn {
    /// The connection as the redis crate's command interface.
    pub(crate) fn like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Single(c) => c,
            Conn::Cluster(c) => c.as_mut(),
        }
    }
}

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
    idle: Mutex<Idle>,
    /// Sentinel: signalled, with `idle`, when a lookup ends.
    looked_up: Condvar,
}

/// Pool state, valid for the process `pid` only.
struct Idle {
    pid: u32,
    conns: Vec<Conn>,
    /// Idle connections used for subscriptions, per cluster node (`None`:
    /// the server or Sentinel master), each with the channel of its last
    /// finished wait if it still listens to it (see [`Subscriber::leftover`]).
    subscribers: HashMap<Option<(String, u16)>, Vec<IdleSubscriber>>,
    slot_map: Option<(Instant, SlotMap)>,
    /// Changes when connections may point at a server that is no longer the
    /// right one (Sentinel: a failover seen or suspected). A connection
    /// checked out before is not pooled again.
    epoch: u64,
    /// Sentinel: what this pool knows of the master.
    sentinel: Option<SentinelView>,
}

/// What a pool knows of its Sentinel master (see [`Client::master_client`]).
struct SentinelView {
    /// The resolver; `None` while a thread is asking the sentinels with it.
    resolver: Option<Resolver>,
    /// The master believed right, and until when it is trusted without
    /// asking the sentinels again.
    master: Option<(redis::Client, Instant)>,
    /// Lookups in a row that no sentinel answered (the known master is then
    /// trusted for longer each time, up to [`MASTER_TRUST_MAX`]).
    failures: u32,
    /// Errors seen that suggest the master changed; the value as of the
    /// last lookup that checked `ROLE`.
    suspicions: u64,
    checked: u64,
    /// Lookups finished, and the error of the last one if it failed (for the
    /// threads that waited for it).
    lookups: u64,
    last_error: Option<(ErrorKind, String)>,
}

impl SentinelView {
    fn new(config: &Config) -> Option<Self> {
        let Target::Sentinel { sentinels, .. } = &config.target else {
            return None;
        };
        Some(Self {
            resolver: Some(Resolver::new(sentinels.clone())),
            master: None,
            failures: 0,
            suspicions: 0,
            checked: 0,
            lookups: 0,
            last_error: None,
        })
    }
}

enum Backend {
    Single(redis::Client),
    Sentinel,
    Cluster(redis::cluster::ClusterClient),
}

use crate::fork::current_pid;
use crate::sentinel::{LookupError, Resolver, Timeouts};

/// Every pool of this process, so that `fork()` can wait until none is in use
/// (see `fork.rs`).
static POOLS: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// The process-wide clients of [`Client::shared`], by URL.
static REGISTRY: Mutex<Option<HashMap<String, Client>>> = Mutex::new(None);

/// What `fork()`'s prepare handler holds until the parent and child handlers
/// run (all three run in the forking thread).
#[derive(Default)]
struct ForkHold {
    registry: Option<MutexGuard<'static, Option<HashMap<String, Client>>>>,
    pools: Option<MutexGuard<'static, Vec<Weak<Inner>>>>,
    /// Each pool's guard, with the pool it borrows from (dropped after it).
    idle: Vec<(MutexGuard<'static, Idle>, Arc<Inner>)>,
}

thread_local! {
    static FORK_HOLD: std::cell::RefCell<ForkHold> = std::cell::RefCell::default();
}

/// Registers the client's [`fork`](crate::fork) hooks, before the registry
/// or a pool is first used.
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
    let pools = POOLS.lock_unpoisoned();
    let mut idle = Vec::new();
    for inner in pools.iter().filter_map(Weak::upgrade) {
        // SAFETY: the guard borrows from the pool `inner` points to, and is
        // stored next to that Arc, which keeps the pool alive; `ForkHold`
        // drops the guard first (tuple fields drop in order).
        let m: &'static Mutex<Idle> = unsafe { &*std::ptr::from_ref(&inner.idle) };
        idle.push((m.lock_unpoisoned(), inner));
    }
    let hold = ForkHold {
        registry: Some(registry),
        pools: Some(pools),
        idle,
    };
    // Unavailable only while this thread is being torn down: then the fork
    // goes ahead without holding anything, as it would without this handler.
    let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = hold);
}

/// `fork()` parent and child handler: lets go of what [`hold_for_fork`] held.
/// In the child the pools are not dropped (were one the last reference, it
/// would close sockets the parent still uses); `Client::idle` empties them
/// there.
fn release_after_fork(in_child: bool) {
    let hold = FORK_HOLD
        .try_with(|h| std::mem::take(&mut *h.borrow_mut()))
        .unwrap_or_default();
    let ForkHold {
        registry,
        pools,
        idle,
    } = hold;
    for (guard, inner) in idle {
        drop(guard);
        if in_child {
            std::mem::forget(inner);
        }
    }
    drop(pools);
    drop(registry);
}

impl Client {
    /// A new client with its own pool. Nothing is connected until first use.
    pub fn new(config: Config) -> Result<Self> {
        hold_across_forks();
        let ctx = config.redacted_url().to_owned();
        let backend = match &config.target {
            Target::Single(info) => Backend::Single(
                single_client(info, &config).map_err(|e| Error::from_redis(&ctx, e))?,
            ),
            Target::Sentinel { .. } => Backend::Sentinel,
            Target::Cluster { nodes, node, tls } => {
                let mut b = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                    .tcp_settings(tcp_settings())
                    .connection_timeout(config.connect_timeout)
                    .response_timeout(config.command_timeout)
                    .retries(3);
                if let Some(u) = node.username() {
                    b = b.username(u);
                }
                if let Some(p) = node.password() {
                    b = b.password(p);
                }
                if let Some(mode) = tls {
                    b = b.tls(*mode);
                }
                if let Some(certs) = &config.tls_certs {
                    b = b.certs(certs.clone());
                }
                Backend::Cluster(b.build().map_err(|e| Error::from_redis(&ctx, e))?)
            }
        };
        install_crypto_provider();
        let sentinel = SentinelView::new(&config);
        let inner = Arc::new(Inner {
            config,
            backend,
            idle: Mutex::new(Idle {
                pid: current_pid(),
                conns: Vec::new(),
                subscribers: HashMap::new(),
                slot_map: None,
                epoch: 0,
                sentinel,
            }),
            looked_up: Condvar::new(),
        });
        let mut pools = POOLS.lock_unpoisoned();
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(&inner));
        Ok(Self { inner })
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

    /// Checks that Redis answers (`PING`).
    pub fn ping(&self) -> Result<()> {
        self.run("ping", |c| {
            redis::cmd("PING").query::<String>(c.like()).map(drop)
        })
    }

    /// Runs `op` on a pooled connection.
    ///
    /// Errors are mapped with `context` (e.g. `lock "orders"`). A connection
    /// that fails is discarded; when a *reused* connection turns out to be dead
    /// (the server restarted or closed it while idle) the operation is retried
    /// once on a fresh connection — the dead socket cannot have delivered it.
    pub(crate) fn run<T>(
        &self,
        context: &str,
        mut op: impl FnMut(&mut Conn) -> RedisResult<T>,
    ) -> Result<T> {
        let (mut conn, reused, epoch) = self.checkout().map_err(|e| e.context(context))?;
        match deferring_signals(|| op(&mut conn)) {
            Ok(v) => {
                self.checkin(conn, epoch);
                Ok(v)
            }
            Err(e) if reused && (is_stale(&e) || is_failover(&e)) => {
                drop(conn);
                self.forget_topology(&e);
                let epoch = self.idle().epoch;
                let mut fresh = self.connect().map_err(|e| e.context(context))?;
                match deferring_signals(|| op(&mut fresh)) {
                    Ok(v) => {
                        self.checkin(fresh, epoch);
                        Ok(v)
                    }
                    Err(e) => Err(self.failed(fresh, epoch, e, context)),
                }
            }
            Err(e) => Err(self.failed(conn, epoch, e, context)),
        }
    }

    fn failed(&self, conn: Conn, epoch: u64, e: redis::RedisError, context: &str) -> Error {
        // A server error reply leaves the connection usable; anything else
        // (I/O, timeout, protocol) leaves it in an unknown state.
        if e.is_io_error() || e.is_timeout() || e.is_unrecoverable_error() || is_failover(&e) {
            self.forget_topology(&e);
        } else {
            self.checkin(conn, epoch);
        }
        Error::from_redis(context, e)
    }

    fn idle(&self) -> MutexGuard<'_, Idle> {
        let mut idle = self.inner.idle.lock_unpoisoned();
        let pid = current_pid();
        if idle.pid != pid {
            // Forked: the sockets belong to the parent. Forget, never close.
            std::mem::forget(std::mem::take(&mut idle.conns));
            std::mem::forget(std::mem::take(&mut idle.subscribers));
            if let Some(view) = idle.sentinel.as_mut() {
                std::mem::forget(view.resolver.take());
            }
            idle.sentinel = SentinelView::new(&self.inner.config);
            idle.slot_map = None;
            idle.pid = pid;
        }
        idle
    }

    /// A connection, whether it was pooled, and the pool's epoch when it
    /// was taken (for [`Client::checkin`]).
    fn checkout(&self) -> Result<(Conn, bool, u64)> {
        if matches!(self.inner.backend, Backend::Sentinel) {
            self.master_client()?; // re-asks the sentinels once MASTER_RECHECK has passed
        }
        let (pooled, epoch) = {
            let mut idle = self.idle();
            (idle.conns.pop(), idle.epoch)
        };
        match pooled {
            Some(conn) => Ok((conn, true, epoch)),
            None => Ok((self.connect()?, false, epoch)),
        }
    }

    /// Pools `conn` again, unless it is closed or the pool's epoch changed
    /// since `epoch` (it may point at a master that is no longer one).
    fn checkin(&self, conn: Conn, epoch: u64) {
        let open = match &conn {
            Conn::Single(c) => c.is_open(),
            Conn::Cluster(c) => c.is_open(),
        };
        let mut idle = self.idle();
        if open && idle.epoch == epoch && idle.conns.len() < MAX_IDLE {
            idle.conns.push(conn);
        }
    }

    /// Drops cached topology after an error that suggests it changed.
    pub(crate) fn forget_topology(&self, e: &redis::RedisError) {
        let mut idle = self.idle();
        if let Some(view) = idle.sentinel.as_mut() {
            // The master may have moved: re-ask the sentinels (and check
            // ROLE) before the next command, keeping the master we know only
            // as a fallback; drop connections that may point at the old one.
            view.suspicions += 1;
            if let Some((_, until)) = view.master.as_mut() {
                *until = Instant::now();
            }
            idle.epoch += 1;
            idle.conns.clear();
            idle.subscribers.clear();
        }
        if e.is_cluster_error() || e.is_io_error() {
            idle.slot_map = None;
        }
    }

    /// Opens a new connection of the deployment's kind.
    fn connect(&self) -> Result<Conn> {
        let ctx = self.inner.config.redacted_url();
        match &self.inner.backend {
            Backend::Single(client) => self
                .open_plain(client)
                .map(Conn::Single)
                .map_err(|e| Error::from_redis(ctx, e)),
            Backend::Sentinel => {
                let client = self.master_client()?;
                self.open_plain(&client)
                    .map(Conn::Single)
                    .map_err(|e| Error::from_redis(ctx, e))
            }
            Backend::Cluster(client) => client
                .get_connection()
                .map(|c| Conn::Cluster(Box::new(c)))
                .map_err(|e| Error::from_redis(ctx, e)),
        }
    }

    fn open_plain(&self, client: &redis::Client) -> RedisResult<redis::Connection> {
        let cfg = &self.inner.config;
        let conn = client.get_connection_with_timeout(cfg.connect_timeout)?;
        conn.set_read_timeout(Some(cfg.command_timeout))?;
        conn.set_write_timeout(Some(cfg.command_timeout))?;
        Ok(conn)
    }

    /// Sentinel: the client of the current master, asking the sentinels when
    /// the one known has not been confirmed for [`MASTER_RECHECK`] or an
    /// error suggested that it changed (see [`Client::forget_topology`]).
    ///
    /// One thread asks at a time, and holds no lock meanwhile: the pool
    /// stays usable, and `fork()` need not wait. While it asks, other
    /// threads go on with the master known so far, unless it is suspect or
    /// there is none: those wait for the answer, and share its error if it
    /// fails. When no sentinel answers at all, the known master is kept,
    /// trusted for longer after each such failure (up to
    /// [`MASTER_TRUST_MAX`]), so that a process does not pay the sentinels'
    /// timeouts again every second; with none known, that is an error.
    fn master_client(&self) -> Result<redis::Client> {
        let ctx = self.inner.config.redacted_url();
        let no_view = || Error::new(ErrorKind::Config, format!("{ctx}: not a sentinel URL"));
        let mut idle = self.idle();
        let (resolver, suspicions, recheck, known) = loop {
            let view = idle.sentinel.as_mut().ok_or_else(no_view)?;
            let now = Instant::now();
            let suspect = view.suspicions != view.checked;
            match &view.master {
                Some((client, until)) if now < *until => return Ok(client.clone()),
                Some((client, _)) if view.resolver.is_none() && !suspect => {
                    return Ok(client.clone()); // somebody is asking: go on meanwhile
                }
                _ => {}
            }
            if let Some(resolver) = view.resolver.take() {
                let known = view
                    .master
                    .as_ref()
                    .and_then(|(c, _)| tcp_addr(c.get_connection_info()));
                break (
                    resolver,
                    view.suspicions,
                    suspect || view.master.is_none(),
                    known,
                );
            }
            let seen = view.lookups;
            idle = self
                .inner
                .looked_up
                .wait_while(idle, |i| {
                    i.sentinel.as_ref().is_some_and(|v| v.lookups == seen)
                })
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some((kind, message)) = idle.sentinel.as_ref().and_then(|v| v.last_error.clone())
            {
                return Err(Error::new(kind, message));
            }
        };
        drop(idle);
        let mut lookup = Lookup {
            client: self,
            resolver: Some(resolver),
        };
        let found = lookup.run(known.as_ref(), recheck);
        // (`lookup` is dropped after this guard, and then wakes the waiters.)
        let mut idle = self.idle();
        let Some(view) = idle.sentinel.as_mut() else {
            return Err(no_view());
        };
        view.resolver = lookup.resolver.take();
        view.lookups += 1;
        let now = Instant::now();
        match found {
            Ok(client) => {
                let moved = view.master.as_ref().is_some_and(|(old, _)| {
                    old.get_connection_info().addr() != client.get_connection_info().addr()
                });
                if recheck {
                    view.checked = suspicions;
                }
                // An error seen meanwhile: this answer may predate it.
                let until = if view.suspicions == suspicions {
                    now + MASTER_RECHECK
                } else {
                    now
                };
                view.master = Some((client.clone(), until));
                view.failures = 0;
                view.last_error = None;
                if moved {
                    // Failover: every pooled connection points at the old master.
                    idle.epoch += 1;
                    idle.conns.clear();
                    idle.subscribers.clear();
                }
                Ok(client)
            }
            Err(LookupError {
                error,
                no_answer,
                known_confirmed,
            }) => match view.master.as_mut() {
                // No sentinel answered: keep the master we know rather than
                // fail (it passed ROLE if it was suspect).
                Some((client, until)) if no_answer => {
                    if known_confirmed {
                        view.checked = suspicions;
                    }
                    view.failures = view.failures.saturating_add(1);
                    let backoff = MASTER_RECHECK.saturating_mul(1 << view.failures.min(5));
                    *until = if view.suspicions == suspicions {
                        now + backoff.min(MASTER_TRUST_MAX)
                    } else {
                        now
                    };
                    view.last_error = None;
                    Ok(client.clone())
                }
                _ => {
                    let e = Error::from_redis(ctx, error);
                    view.last_error = Some((e.kind(), e.to_string()));
                    Err(e)
                }
            },
        }
    }

    /// A connection for a subscription, to the node that serves `key` (the
    /// server itself, the Sentinel master, or the cluster node owning the
    /// key's slot). Subscriber connections speak RESP3, where subscription
    /// traffic arrives as push frames: they can unsubscribe without waiting
    /// for the confirmation (the next user skips it), or leave that to the
    /// next user altogether ([`Subscriber::leftover`]). They have a pool of
    /// their own and never carry ordinary commands.
    /// Return it with [`Client::checkin_subscriber`].
    pub(crate) fn checkout_subscriber(&self, key: &[u8], pooled: Pooled) -> Result<Subscriber> {
        let ctx = self.inner.config.redacted_url();
        let node = self.subscription_node(key)?;
        let mut idle = self.idle();
        let mut closed = None;
        if pooled == Pooled::Discard {
            // Closed with the one that just failed, most likely. (Dropped
            // below, with the pool unlocked.)
            closed = idle.subscribers.remove(&node);
        } else if let Some((conn, leftover)) = idle.subscribers.get_mut(&node).and_then(Vec::pop) {
            return Ok(Subscriber {
                conn,
                node,
                leftover,
                reused: true,
            });
        }
        drop(idle);
        drop(closed);
        let client = match (&self.inner.backend, &node) {
            (Backend::Single(_) | Backend::Sentinel, _) => {
                let client = match &self.inner.backend {
                    Backend::Single(c) => c.clone(),
                    _ => self.master_client()?,
                };
                let info = client.get_connection_info().clone();
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                single_client(&info.set_redis_settings(settings), &self.inner.config)
                    .map_err(|e| Error::from_redis(ctx, e))?
            }
            (Backend::Cluster(_), Some((host, port))) => {
                let Target::Cluster {
                    node: settings,
                    tls,
                    ..
                } = &self.inner.config.target
                else {
                    unreachable!("cluster backend has a cluster target")
                };
                let settings = settings.clone().set_protocol(redis::ProtocolVersion::RESP3);
                let info = node_info(host, *port, &settings, *tls)
                    .map_err(|e| Error::from_redis(ctx, e))?;
                single_client(&info, &self.inner.config).map_err(|e| Error::from_redis(ctx, e))?
            }
            (Backend::Cluster(_), None) => unreachable!("cluster subscribers have a node"),
        };
        let conn = self
            .open_plain(&client)
            .map_err(|e| Error::from_redis(ctx, e))?;
        Ok(Subscriber {
            conn,
            node,
            leftover: None,
            reused: false,
        })
    }

    /// Where subscriptions for `key` must live: nowhere in particular for one
    /// server, the current master for Sentinel, the slot's master for Cluster.
    /// A grant is only published to a waiter listening on the node that runs
    /// the script, so a subscription elsewhere would never hear it.
    fn subscription_node(&self, key: &[u8]) -> Result<Option<(String, u16)>> {
        Ok(match &self.inner.backend {
            Backend::Single(_) => None,
            Backend::Sentinel => tcp_addr(self.master_client()?.get_connection_info()),
            Backend::Cluster(_) => Some(self.node_for(key)?),
        })
    }

    /// False when `sub` no longer listens where grants for `key` are
    /// published (a failover or a slot migration happened): the waiter should
    /// subscribe again. Errors while finding out count as "still current".
    pub(crate) fn subscriber_is_current(&self, sub: &Subscriber, key: &[u8]) -> bool {
        match self.subscription_node(key) {
            Ok(node) => node == sub.node,
            Err(_) => true,
        }
    }

    /// Returns a connection taken with [`Client::checkout_subscriber`].
    pub(crate) fn checkin_subscriber(&self, sub: Subscriber) {
        if !sub.conn.is_open() {
            return;
        }
        let mut idle = self.idle();
        let list = idle.subscribers.entry(sub.node).or_default();
        if list.len() < MAX_IDLE {
            list.push((sub.conn, sub.leftover));
        }
    }

    /// The server's URL with any password masked, for messages.
    pub(crate) fn redacted_url(&self) -> &str {
        self.inner.config.redacted_url()
    }

    /// The time allowed for one command (subscription replies included).
    pub(crate) fn command_timeout(&self) -> Duration {
        self.inner.config.command_timeout
    }

    /// Cluster: the master serving the slot of `key`, from `CLUSTER SLOTS`.
    fn node_for(&self, key: &[u8]) -> Result<(String, u16)> {
        let slot = crate::keys::slot_of(key);
        let lookup = |map: &[(u16, u16, String, u16)]| {
            map.iter()
                .find(|(lo, hi, _, _)| (*lo..=*hi).contains(&slot))
                .map(|(_, _, h, p)| (h.clone(), *p))
        };
        if let Some((at, map)) = &self.idle().slot_map
            && at.elapsed() < SLOT_MAP_TTL
            && let Some(node) = lookup(map)
        {
            return Ok(node);
        }
        let raw: Vec<redis::Value> = self.run("cluster slots", |c| {
            redis::cmd("CLUSTER").arg("SLOTS").query(c.like())
        })?;
        let map = parse_cluster_slots(&raw);
        let node = lookup(&map).ok_or_else(|| {
            Error::new(
                ErrorKind::Connection,
                format!("no cluster node serves slot {slot}"),
            )
        })?;
        self.idle().slot_map = Some((Instant::now(), map));
        Ok(node)
    }
}

/// A Sentinel lookup under way: the resolver taken out of the pool (see
/// [`Client::master_client`]). Dropping it wakes the threads waiting for the
/// answer; should the resolver not have been handed back (a panic), it puts
/// a fresh one in its place first.
struct Lookup<'a> {
    client: &'a Client,
    resolver: Option<Resolver>,
}

impl Lookup<'_> {
    /// Asks the sentinels; the client of the master found.
    fn run(
        &mut self,
        known: Option<&(String, u16)>,
        recheck: bool,
    ) -> std::result::Result<redis::Client, LookupError> {
        let client = self.client;
        let cfg = &client.inner.config;
        let Target::Sentinel {
            master, node, tls, ..
        } = &cfg.target
        else {
            unreachable!("a Sentinel lookup has a Sentinel target")
        };
        let limits = Timeouts {
            connect: cfg.connect_timeout,
            command: cfg.command_timeout,
        };
        let master_at = |host: &str, port: u16| -> RedisResult<redis::Client> {
            single_client(&node_info(host, port, node, *tls)?, cfg)
        };
        let Some(resolver) = self.resolver.as_mut() else {
            unreachable!("the resolver is taken back only after run")
        };
        let (host, port) =
            resolver.master_address(master, known, recheck, &limits, |host, port| {
                // The ROLE check's connection: without CLIENT SETINFO, whose
                // replies the redis crate would each wait for up to the connect
                // timeout on a master that hangs.
                let settings = node.clone().set_skip_set_lib_name();
                let info = node_info(host, port, &settings, *tls)?;
                client.open_plain(&single_client(&info, cfg)?)
            })?;
        master_at(&host, port).map_err(|error| LookupError {
            error,
            no_answer: false,
            known_confirmed: false,
        })
    }
}

impl Drop for Lookup<'_> {
    fn drop(&mut self) {
        if self.resolver.is_some() {
            let mut idle = self.client.idle();
            if let Some(view) = idle.sentinel.as_mut() {
                view.resolver =
                    SentinelView::new(&self.client.inner.config).and_then(|v| v.resolver);
                view.lookups += 1;
                view.last_error = Some((ErrorKind::Connection, "a Sentinel lookup failed".into()));
            }
        }
        self.client.inner.looked_up.notify_all();
    }
}

/// A pooled subscriber connection and the leftover channel it still listens to.
type IdleSubscriber = (redis::Connection, Option<Vec<u8>>);

/// Cluster slot ranges and the master serving each: `(first, last, host, port)`.
type SlotMap = Vec<(u16, u16, String, u16)>;

/// A connection checked out for a subscription.
pub(crate) struct Subscriber {
    pub conn: redis::Connection,
    node: Option<(String, u16)>,
    /// The channel of a wait that ended successfully and that this connection
    /// still listens to. Unsubscribing costs a write, which a waiter that was
    /// just handed a lock should not pay before returning: the next wait on
    /// this connection sends it together with its own SUBSCRIBE. Harmless
    /// meanwhile: a finished waiter is in no waiter list, so nothing is ever
    /// published to its channel again.
    pub leftover: Option<Vec<u8>>,
    /// Taken from the pool (the server may have closed it since).
    pub reused: bool,
}

/// What [`Client::checkout_subscriber`] does with idle subscriber connections.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooled {
    /// Reuse one if there is one.
    Reuse,
    /// Drop them all and open a new one: one of them was found closed.
    Discard,
}

/// The host and port of a TCP or TLS connection's address.
fn tcp_addr(info: &ConnectionInfo) -> Option<(String, u16)> {
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

fn single_client(info: &ConnectionInfo, config: &Config) -> RedisResult<redis::Client> {
    let info = info.clone().set_tcp_settings(tcp_settings());
    match &config.tls_certs {
        Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
        None => redis::Client::open(info),
    }
}

/// Socket options of every connection to a data node: `TCP_NODELAY`, as in
/// redis-py and hiredis. Our commands are one write each, but Nagle's
/// algorithm would hold back a second small write (a pipelined command, an
/// UNSUBSCRIBE followed by the next SUBSCRIBE) until the first is
/// acknowledged.
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

fn parse_cluster_slots(raw: &[redis::Value]) -> SlotMap {
    use redis::Value;
    let mut out = Vec::new();
    for entry in raw {
        let Value::Array(items) = entry else { continue };
        let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(master))) =
            (items.first(), items.get(1), items.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => continue,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        out.push((*lo as u16, *hi as u16, host, *port as u16));
    }
    out
}

/// Runs one round trip with signals deferred: a signal must not cut it short,
/// Redis would have run the command and its reply would be lost (see
/// `signals.rs`). Connecting is left interruptible: nothing was sent yet.
fn deferring_signals<T>(op: impl FnOnce() -> T) -> T {
    let _signals = crate::signals::Deferred::new();
    op()
}

/// A reused connection that fails like this was closed while idle.
pub(crate) fn is_stale(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal()
}

/// The node we talk to is no longer the master (Sentinel failover).
fn is_failover(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
            | redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
    )
}

/// rustls needs one process-wide crypto provider; we ship `ring`.
fn install_crypto_provider() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
