//! The task queue: a sorted set of task ids scored by due time (the legacy
//! `Queue:<name>` layout), with atomic scripts for every operation and an
//! optional reliable mode (reserve → ack / nack) on top.
//!
//! The rooms: this file (the [`Queue`], its options and defaults, and the
//! operations on single tasks), `take.rs` (pop, reserve, top), `task.rs`
//! (what is handed out), `reply.rs` (reading script replies), `legacy.rs`
//! (waiting out a legacy client's queue lock).

mod legacy;
mod reply;
mod take;
mod task;

use std::time::Duration;

use redis::Value;

use self::reply::int_at;
pub use self::task::Task;
use crate::client::Client;
use crate::error::Result;
use crate::keys::{DEFAULT_LOCK_PREFIX, DEFAULT_QUEUE_PREFIX, QueueKeys, label};
use crate::scripts::{QUEUE_ACK, QUEUE_DEQUEUE, QUEUE_ENQUEUE, QUEUE_NACK};
use crate::validate;
use crate::wait::{self, Interrupt};

/// Default visibility timeout of reserved tasks.
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);

/// Default time a queue operation waits for a legacy client's queue lock.
pub const DEFAULT_LEGACY_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of a [`Queue`]. Start from `QueueOptions::default()` and set fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueueOptions {
    /// Key prefix of the queue (`Queue:` shares it with legacy PHP code).
    pub prefix: Vec<u8>,
    /// Key prefix of locks: the legacy queue lock is `<lock_prefix><prefix><name>`.
    pub lock_prefix: Vec<u8>,
    /// Default visibility timeout of [`Queue::reserve`].
    pub visibility: Duration,
    /// How long an operation waits while a legacy client holds the queue lock.
    pub legacy_lock_timeout: Duration,
    /// Longest pause between re-checks while waiting for work.
    pub recheck: Duration,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_QUEUE_PREFIX.as_bytes().to_vec(),
            lock_prefix: DEFAULT_LOCK_PREFIX.as_bytes().to_vec(),
            visibility: DEFAULT_VISIBILITY,
            legacy_lock_timeout: DEFAULT_LEGACY_LOCK_TIMEOUT,
            recheck: wait::DEFAULT_RECHECK,
        }
    }
}

/// A task queue on one name.
pub struct Queue {
    client: Client,
    keys: QueueKeys,
    name: Vec<u8>,
    label: String,
    opts: QueueOptions,
    /// Scripts check the legacy queue lock (not on a cluster: another slot).
    check_legacy: &'static str,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("name", &self.label).finish()
    }
}

impl Queue {
    /// A queue on `name` (any bytes, 1 to 4096 of them).
    pub fn new(client: &Client, name: &[u8], opts: QueueOptions) -> Result<Self> {
        validate::name(name, "queue name")?;
        validate::lifetime(opts.visibility, "visibility")?;
        validate::interval(opts.recheck, "recheck interval")?;
        Ok(Self {
            keys: QueueKeys::new(&opts.prefix, &opts.lock_prefix, name),
            label: label("queue", name),
            name: name.to_vec(),
            check_legacy: if client.is_cluster() { "0" } else { "1" },
            client: client.clone(),
            opts,
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The options this queue was created with.
    pub fn options(&self) -> &QueueOptions {
        &self.opts
    }

    /// The key of the legacy queue lock, or the queue key when not checked.
    fn legacy_key(&self) -> &[u8] {
        if self.check_legacy == "1" {
            &self.keys.legacy_lock
        } else {
            &self.keys.queue
        }
    }

    /// The keys of the scripts that take, return or peek at tasks (take, top,
    /// nack), in their order: queue, legacy queue lock (or the queue),
    /// inflight, receipts, waiters, leases.
    fn task_keys(&self) -> [&[u8]; 6] {
        let k = &self.keys;
        [
            &k.queue,
            self.legacy_key(),
            &k.inflight,
            &k.receipts,
            &k.waiters,
            &k.leases,
        ]
    }

    /// Adds `ids` in one round trip, due `delay` seconds from now (negative:
    /// earlier). Ids already queued keep their score. Returns how many were new.
    /// While a legacy client holds the queue lock this waits for it, up to
    /// `legacy_timeout` (default: the queue's), consulting `interrupt`.
    pub fn enqueue<I: AsRef<[u8]>>(
        &self,
        ids: &[I],
        delay: f64,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<usize> {
        let delay = validate::offset(delay, "delay")?;
        for id in ids {
            validate::name(id.as_ref(), "task id")?;
        }
        if ids.is_empty() {
            return Ok(0);
        }
        let k = &self.keys;
        let mut call = QUEUE_ENQUEUE
            .call(&[&k.queue, self.legacy_key(), &k.waiters, &k.leases])
            .arg(delay)
            .arg(self.check_legacy)
            .arg(&k.channel);
        for id in ids {
            call = call.arg(id.as_ref());
        }
        let reply = self.legacy_retry(legacy_timeout, interrupt, || {
            call.run::<Vec<Value>>(&self.client, &self.label)
        })?;
        Ok(int_at(&reply, 0).max(0) as usize)
    }

    /// Removes `id` if its score is still exactly `score` (a task queued again
    /// since it was read keeps its place). True when removed. Waits for a
    /// legacy client's queue lock as [`Queue::enqueue`] does.
    pub fn dequeue(
        &self,
        id: &[u8],
        score: f64,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        validate::name(id, "task id")?;
        let score = validate::score(score)?;
        let call = QUEUE_DEQUEUE
            .call(&[&self.keys.queue, self.legacy_key()])
            .arg(id)
            .arg(score)
            .arg(self.check_legacy);
        let reply = self.legacy_retry(legacy_timeout, interrupt, || {
            call.run::<Vec<Value>>(&self.client, &self.label)
        })?;
        Ok(int_at(&reply, 0) == 1)
    }

    /// Acknowledges a reserved task. False when the reservation was lost (it
    /// expired and went back to the queue, maybe to another consumer, whose
    /// claim is left untouched).
    pub fn ack(&self, id: &[u8], receipt: &str) -> Result<bool> {
        validate::name(id, "task id")?;
        validate::name(receipt.as_bytes(), "receipt")?;
        let call = QUEUE_ACK
            .call(&[&self.keys.inflight, &self.keys.receipts])
            .arg(id)
            .arg(receipt);
        let acked: i64 = call.run(&self.client, &self.label)?;
        Ok(acked == 1)
    }

    /// Gives a reserved task back, due `delay` seconds from now. False when
    /// the reservation was lost. Waits for a legacy client's queue lock as
    /// [`Queue::enqueue`] does (up to the queue's `legacy_lock_timeout`).
    pub fn nack(
        &self,
        id: &[u8],
        receipt: &str,
        delay: f64,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        validate::name(id, "task id")?;
        validate::name(receipt.as_bytes(), "receipt")?;
        let delay = validate::offset(delay, "delay")?;
        let k = &self.keys;
        let call = QUEUE_NACK
            .call(&self.task_keys())
            .arg(id)
            .arg(receipt)
            .arg(delay)
            .arg(self.check_legacy)
            .arg(&k.channel);
        let reply = self.legacy_retry(None, interrupt, || {
            call.run::<Vec<Value>>(&self.client, &self.label)
        })?;
        Ok(int_at(&reply, 0) == 1)
    }

    /// Number of queued tasks, due or delayed (reserved ones not counted).
    pub fn len(&self) -> Result<u64> {
        self.client
            .query(&self.label, redis::cmd("ZCARD").arg(&self.keys.queue))
    }

    /// True when no task is queued.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Number of reserved tasks not yet acked.
    pub fn in_flight(&self) -> Result<u64> {
        self.client
            .query(&self.label, redis::cmd("ZCARD").arg(&self.keys.inflight))
    }

    /// Runs `op` again while it reports that a legacy client holds the queue
    /// lock (`{-1, pttl}`), polling with backoff up to `timeout`.
    /// Runs `op` while a legacy client holds the queue lock, up to
    /// `timeout` (default: the queue's `legacy_lock_timeout`); see `legacy.rs`.
    fn legacy_retry(
        &self,
        timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
        op: impl FnMut() -> Result<Vec<Value>>,
    ) -> Result<Vec<Value>> {
        let timeout = timeout.unwrap_or(self.opts.legacy_lock_timeout);
        legacy::retry(&self.label, &self.keys.legacy_lock, timeout, interrupt, op)
    }
}
