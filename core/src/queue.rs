//! The task queue: a sorted set of task ids scored by due time (the legacy
//! `Queue:<name>` layout), with atomic scripts for every operation and an
//! optional reliable mode (reserve → ack / nack) on top.

use std::time::{Duration, Instant};

use redis::Value;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{DEFAULT_LOCK_PREFIX, DEFAULT_QUEUE_PREFIX, QueueKeys, label, new_token};
use crate::scripts::{
    QUEUE_ACK, QUEUE_DEQUEUE, QUEUE_ENQUEUE, QUEUE_LEAVE, QUEUE_NACK, QUEUE_TAKE, QUEUE_TOP,
};
use crate::validate;
use crate::wait::{self, Attempt, Interrupt, Wait, WaitSpec};

/// Default visibility timeout of reserved tasks.
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);

/// Default time a queue operation waits for a legacy client's queue lock.
pub const DEFAULT_LEGACY_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest pause between polls of a legacy queue lock (legacy clients
/// release it with a plain DEL, which notifies nobody).
const LEGACY_POLL_MAX: Duration = Duration::from_millis(50);

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

/// A task taken from or read in a queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The task id (any bytes).
    pub id: Vec<u8>,
    /// Its score: the unix time (seconds) at which it was due.
    pub score: f64,
    /// For reserved tasks: the receipt that acks or nacks this reservation.
    pub receipt: Option<String>,
    /// For reserved tasks: unix time after which it returns to the queue.
    pub deadline: Option<f64>,
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

/// What a take (pop/reserve) attempt found.
enum Taken {
    Tasks(Vec<Task>),
    /// Nothing due; work may appear on its own after this long.
    Empty(Option<Duration>),
}

impl Queue {
    /// A queue on `name` (any bytes, 1 to 4096 of them).
    pub fn new(client: &Client, name: &[u8], opts: QueueOptions) -> Result<Self> {
        validate::name(name, "queue name")?;
        if opts.visibility < Duration::from_millis(1) {
            return Err(Error::invalid("visibility must be at least 0.001 seconds"));
        }
        if opts.recheck.is_zero() {
            return Err(Error::invalid("recheck interval must be > 0"));
        }
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

    /// Takes up to `count` due tasks (lowest score first, ties by id), waiting
    /// for work as `wait` allows. Empty when none came in time.
    /// `legacy_timeout`: how long to wait for a legacy client's queue lock
    /// (default: the queue's `legacy_lock_timeout`).
    pub fn pop(
        &self,
        count: usize,
        wait: Wait,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Vec<Task>> {
        if count == 0 {
            return Err(Error::invalid("count must be >= 1, got 0"));
        }
        self.take("pop", count, None, wait, legacy_timeout, interrupt)
    }

    /// Reserves one due task for `visibility` (default: the queue's): it leaves
    /// the queue, and comes back if not acked in time.
    pub fn reserve(
        &self,
        visibility: Option<Duration>,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Option<Task>> {
        let visibility = visibility.unwrap_or(self.opts.visibility);
        if visibility < Duration::from_millis(1) || visibility.as_secs_f64() > validate::MAX_SECONDS
        {
            return Err(Error::invalid(format!(
                "visibility must be between 0.001 s and ten years, got {visibility:?}"
            )));
        }
        Ok(self
            .take("reserve", 1, Some(visibility), wait, None, interrupt)?
            .into_iter()
            .next())
    }

    fn take(
        &self,
        mode: &'static str,
        count: usize,
        visibility: Option<Duration>,
        wait: Wait,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Vec<Task>> {
        let legacy_timeout = legacy_timeout.unwrap_or(self.opts.legacy_lock_timeout);
        let lease_ms = validate::millis(wait::lease_for(self.opts.recheck));
        let deadline = wait.deadline();
        let attempt = |waiter: &str| -> Result<Taken> {
            let k = &self.keys;
            let receipt = if mode == "reserve" {
                new_token()
            } else {
                String::new()
            };
            let call = QUEUE_TAKE
                .call(&self.task_keys())
                .arg(mode)
                .arg(count)
                .arg(self.check_legacy)
                .arg(&k.channel)
                .arg(waiter)
                .arg(lease_ms)
                .arg(visibility.map_or(0, validate::millis))
                .arg(&receipt);
            // While waiting for work, a legacy queue lock may hold us as long as the wait.
            let legacy_wait = match deadline {
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .max(legacy_timeout),
                None if wait == Wait::Forever => Duration::from_secs_f64(validate::MAX_SECONDS),
                None => legacy_timeout,
            };
            let reply = self.legacy_retry(Some(legacy_wait), interrupt, || {
                call.run::<Vec<Value>>(&self.client, &self.label)
            })?;
            parse_take(&reply, mode).map_err(|e| e.context(&self.label))
        };
        match attempt("")? {
            Taken::Tasks(tasks) => return Ok(tasks),
            Taken::Empty(_) if wait == Wait::Try => return Ok(Vec::new()),
            Taken::Empty(_) => {}
        }
        let spec = WaitSpec {
            deadline,
            recheck: self.opts.recheck,
            interrupt,
            label: &self.label,
        };
        let waiter = wait::WakeOnly {
            attempt: |waiter: &str| {
                Ok(match attempt(waiter)? {
                    Taken::Tasks(t) => Attempt::Done(t),
                    Taken::Empty(hint) => Attempt::Retry(hint),
                })
            },
            leave: |waiter: &str| self.leave(waiter),
        };
        let got = wait::wait_loop(
            &self.client,
            &self.keys.queue,
            &self.keys.channel,
            spec,
            &waiter,
        )
        .map_err(|e| {
            if e.is_interrupted() {
                wait::interrupted(&self.label)
            } else {
                e
            }
        })?;
        Ok(got.unwrap_or_default())
    }

    fn leave(&self, waiter: &str) -> Result<()> {
        let k = &self.keys;
        let call = QUEUE_LEAVE
            .call(&[&k.queue, &k.inflight, &k.waiters, &k.leases])
            .arg(waiter)
            .arg(&k.channel);
        call.run::<i64>(&self.client, &self.label).map(drop)
    }

    /// The first `count` due tasks: the ones [`Queue::pop`] would take, left
    /// in place (expired reservations are given back first, as pop does, and
    /// waiting consumers told).
    pub fn top(&self, count: usize) -> Result<Vec<Task>> {
        if count == 0 {
            return Err(Error::invalid("count must be >= 1, got 0"));
        }
        let k = &self.keys;
        let call = QUEUE_TOP
            .call(&self.task_keys())
            .arg(count)
            .arg(self.check_legacy)
            .arg(&k.channel);
        let items: Vec<Value> = call.run(&self.client, &self.label)?;
        parse_pairs(&items).map_err(|e| e.context(&self.label))
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
    fn legacy_retry(
        &self,
        timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
        mut op: impl FnMut() -> Result<Vec<Value>>,
    ) -> Result<Vec<Value>> {
        let timeout = timeout.unwrap_or(self.opts.legacy_lock_timeout);
        let until = Instant::now() + timeout;
        let mut backoff = Duration::from_millis(1);
        loop {
            let reply = op()?;
            if int_at(&reply, 0) != -1 {
                return Ok(reply);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::QueueLocked,
                    format!(
                        "{}: a legacy client held {:?} for longer than {:.3} s",
                        self.label,
                        String::from_utf8_lossy(&self.keys.legacy_lock),
                        timeout.as_secs_f64()
                    ),
                ));
            }
            let pttl = Duration::from_millis(int_at(&reply, 1).max(1) as u64);
            wait::pause(backoff.min(pttl).min(left), interrupt)?;
            backoff = (backoff * 2).min(LEGACY_POLL_MAX);
        }
    }
}

fn int_at(reply: &[Value], i: usize) -> i64 {
    match reply.get(i) {
        Some(Value::Int(n)) => *n,
        _ => 0,
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn float(v: &Value) -> Result<f64> {
    bytes(v)
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Redis,
                format!("unexpected score in reply: {v:?}"),
            )
        })
}

fn parse_pairs(items: &[Value]) -> Result<Vec<Task>> {
    items
        .chunks_exact(2)
        .map(|pair| {
            Ok(Task {
                id: bytes(&pair[0])
                    .ok_or_else(|| Error::new(ErrorKind::Redis, "unexpected task id in reply"))?
                    .to_vec(),
                score: float(&pair[1])?,
                receipt: None,
                deadline: None,
            })
        })
        .collect()
}

fn parse_take(reply: &[Value], mode: &str) -> Result<Taken> {
    match (int_at(reply, 0), reply.get(1)) {
        (1, Some(Value::Array(items))) if mode == "reserve" => {
            let id = items.first().and_then(bytes).unwrap_or_default().to_vec();
            let score = float(items.get(1).unwrap_or(&Value::Nil))?;
            let receipt = items
                .get(2)
                .and_then(bytes)
                .map(|b| String::from_utf8_lossy(b).into_owned());
            let deadline = items.get(3).map(float).transpose()?;
            Ok(Taken::Tasks(vec![Task {
                id,
                score,
                receipt,
                deadline,
            }]))
        }
        (1, Some(Value::Array(items))) => Ok(Taken::Tasks(parse_pairs(items)?)),
        (0, next) => {
            let next = next.and_then(bytes).filter(|b| !b.is_empty());
            let hint = match (next, reply.get(2)) {
                (Some(_), Some(now)) => {
                    let next = float(reply.get(1).unwrap_or(&Value::Nil))?;
                    let now = float(now)?;
                    Some(
                        Duration::from_secs_f64((next - now).clamp(0.0, 1e6))
                            + Duration::from_millis(1),
                    )
                }
                _ => None,
            };
            Ok(Taken::Empty(hint))
        }
        _ => Err(Error::new(
            ErrorKind::Redis,
            format!("unexpected reply: {reply:?}"),
        )),
    }
}
