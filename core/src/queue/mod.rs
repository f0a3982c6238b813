//! The task queue: a sorted set of task ids scored by due time (the legacy
//! `Queue:<name>` layout), with atomic scripts for every operation and a
//! reliable mode (reserve → ack / nack / touch) on top: attempts, backoff,
//! dead letters, payloads, one id never in flight twice (docs/queue.md).
//!
//! The rooms: this file (the [`Queue`], its options and defaults, and the
//! operations on single tasks), `take.rs` (pop, reserve, top), `steps.rs`
//! (a take run step by step, for event loops), `dead.rs` (dead letters and
//! stats), `task.rs` (what is handed out), `receipt.rs` (what a reservation
//! is acked with), `heartbeat.rs` (keeping reservations alive in the
//! background), `worker.rs` (the worker loop's steps), `reply.rs` (reading
//! script replies), `legacy.rs` (waiting out a legacy client's queue lock),
//! `lost.rs` (takes whose reply was lost), `replicas.rs` (`min_replicas`).

pub(crate) mod dead;
mod heartbeat;
mod legacy;
mod lost;
mod receipt;
mod replicas;
mod reply;
mod steps;
mod take;
mod task;
mod worker;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::Value;

pub use self::dead::QueueStats;
pub use self::heartbeat::Heartbeat;
use self::reply::int_at;
pub use self::steps::TakeSteps;
pub use self::take::Step;
pub use self::task::{Finish, Task};
pub use self::worker::{NextSteps, Outcome, Worker, WorkerOptions};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{DEFAULT_LOCK_PREFIX, DEFAULT_QUEUE_PREFIX, QueueKeys, label};
use crate::scripts::{QUEUE_ACK, QUEUE_DEQUEUE, QUEUE_ENQUEUE, QUEUE_NACK};
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt};

/// Default visibility timeout of reserved tasks.
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);

/// Default time a queue operation waits for a legacy client's queue lock.
pub const DEFAULT_LEGACY_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Default number of reservations a task gets before it goes to the dead
/// set. Ten, with the default backoff (1 s doubling, capped at 5 min), gives a
/// failing task about nine minutes of retries (1 + 2 + … + 256 s): enough to
/// ride out a dependency's restart or a deploy, while a task that can never
/// succeed costs ten runs, not an endless stream of them.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// Default wait after a task's first failed attempt (doubled after each).
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// Default longest wait between two attempts.
pub const DEFAULT_BACKOFF_CAP: Duration = Duration::from_secs(300);

/// Default jitter: each backoff is cut by a random fraction of up to half.
pub const DEFAULT_BACKOFF_JITTER: f64 = 0.5;

/// Settings of a [`Queue`]. Start from `QueueOptions::default()` and set fields.
///
/// The settings that decide what happens when a reservation ends (attempts,
/// backoff, jitter, visibility) are stored with the reservation when it is
/// made: consumers with different settings on one queue each apply their own
/// to the tasks they reserved, whoever ends the reservation.
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
    /// Reservations a task gets: one that ends unacked (nack or timeout) at
    /// this attempt sends the task to the dead set. `None`: unlimited.
    pub max_attempts: Option<u32>,
    /// Wait after a failed first attempt before the task is due again;
    /// doubled after each further failure.
    pub backoff: Duration,
    /// Longest backoff.
    pub backoff_cap: Duration,
    /// Each backoff is cut by a random fraction of up to this much (0 to 1;
    /// 0: exact), so tasks that failed together do not return together.
    pub backoff_jitter: f64,
    /// Replicas that must confirm an enqueue or an ack (`WAIT`, up to four
    /// fifths of the command timeout) before it returns, so that a failover
    /// cannot lose it. A master known to have fewer fails the call at once,
    /// writing nothing. 0: don't wait (the default).
    pub min_replicas: u32,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_QUEUE_PREFIX.as_bytes().to_vec(),
            lock_prefix: DEFAULT_LOCK_PREFIX.as_bytes().to_vec(),
            visibility: DEFAULT_VISIBILITY,
            legacy_lock_timeout: DEFAULT_LEGACY_LOCK_TIMEOUT,
            recheck: wait::DEFAULT_RECHECK,
            max_attempts: Some(DEFAULT_MAX_ATTEMPTS),
            backoff: DEFAULT_BACKOFF,
            backoff_cap: DEFAULT_BACKOFF_CAP,
            backoff_jitter: DEFAULT_BACKOFF_JITTER,
            min_replicas: 0,
        }
    }
}

impl QueueOptions {
    fn check(&self) -> Result<()> {
        validate::lifetime(self.visibility, "visibility")?;
        validate::interval(self.recheck, "recheck interval")?;
        if self.max_attempts == Some(0) {
            return Err(Error::invalid(
                "max_attempts must be >= 1 (None: unlimited), got 0",
            ));
        }
        for (d, what) in [(self.backoff, "backoff"), (self.backoff_cap, "backoff_cap")] {
            validate::seconds(d.as_secs_f64(), what, true)?;
        }
        if !(0.0..=1.0).contains(&self.backoff_jitter) {
            return Err(Error::invalid(format!(
                "backoff_jitter must be between 0 and 1, got {}",
                self.backoff_jitter
            )));
        }
        Ok(())
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
    /// Takes whose replies arrived: the next take deletes their records.
    received: Mutex<Vec<String>>,
}

/// Records the next take deletes at most (older ones expire by their TTL).
const RECEIVED_MAX: usize = 32;

/// Records deleted together.
const RECEIVED_BATCH: usize = 16;

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("name", &self.label).finish()
    }
}

impl Queue {
    /// A queue on `name` (any bytes, 1 to 4096 of them).
    pub fn new(client: &Client, name: &[u8], opts: QueueOptions) -> Result<Self> {
        validate::name(name, "queue name")?;
        opts.check()?;
        Ok(Self {
            keys: QueueKeys::new(&opts.prefix, &opts.lock_prefix, name),
            label: label("queue", name),
            name: name.to_vec(),
            check_legacy: if client.is_cluster() { "0" } else { "1" },
            client: client.clone(),
            opts,
            received: Mutex::new(Vec::new()),
        })
    }

    /// The take `rid` got its reply: its record can go.
    fn reply_received(&self, rid: String) {
        let mut r = self.received.lock_unpoisoned();
        if r.len() >= RECEIVED_MAX {
            r.remove(0);
        }
        r.push(rid);
    }

    /// The rids whose records the next take deletes (taken off the list),
    /// sixteen at a time: one DEL per sixteen takes, sixteen small keys per
    /// consumer at most (the rest expire).
    fn received_rids(&self) -> Vec<String> {
        let mut r = self.received.lock_unpoisoned();
        if r.len() < RECEIVED_BATCH {
            return Vec::new();
        }
        std::mem::take(&mut *r)
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

    /// The keys of the scripts that take, return, add or peek at tasks, in
    /// the order `queue_keys()` in prelude.lua reads them.
    fn task_keys(&self) -> [&[u8]; 10] {
        let k = &self.keys;
        [
            &k.queue,
            self.legacy_key(),
            &k.inflight,
            &k.receipts,
            &k.waiters,
            &k.leases,
            &k.attempts,
            &k.payloads,
            &k.dead,
            &k.pending,
        ]
    }

    /// Adds `ids` in one round trip, due `delay` seconds from now (negative:
    /// earlier). Ids already queued keep their score. Returns how many were new.
    /// An id in flight is queued again when its reservation ends (see
    /// docs/queue.md, "One id, one consumer"), and counts as new.
    /// While a legacy client holds the queue lock this waits for it, up to
    /// `legacy_timeout` (default: the queue's), consulting `interrupt`.
    pub fn enqueue<I: AsRef<[u8]>>(
        &self,
        ids: &[I],
        delay: f64,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<usize> {
        for id in ids {
            validate::name(id.as_ref(), "task id")?;
        }
        self.add(
            ids.iter().map(|id| (id.as_ref(), None)),
            ids.len(),
            delay,
            legacy_timeout,
            interrupt,
        )
    }

    /// [`Queue::enqueue`] with a payload per id (any bytes, stored in the
    /// queue's slot until the task is acked, popped, dequeued or purged). A
    /// payload replaces the one the task had, also when the id is queued or in
    /// flight already (the newest data wins; the score stays the first).
    pub fn enqueue_with_payloads<I: AsRef<[u8]>, P: AsRef<[u8]>>(
        &self,
        tasks: &[(I, P)],
        delay: f64,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<usize> {
        for (id, _) in tasks {
            validate::name(id.as_ref(), "task id")?;
        }
        let items = tasks.iter().map(|(id, p)| (id.as_ref(), Some(p.as_ref())));
        self.add(items, tasks.len(), delay, legacy_timeout, interrupt)
    }

    fn add<'a>(
        &self,
        items: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + Clone,
        len: usize,
        delay: f64,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<usize> {
        let delay = validate::offset(delay, "delay")?;
        if len == 0 {
            return Ok(0);
        }
        let with_payloads = items.clone().any(|(_, p)| p.is_some());
        let mut call = QUEUE_ENQUEUE
            .call(&self.task_keys())
            .arg(delay)
            .arg(self.check_legacy)
            .arg(&self.keys.channel)
            .arg(if with_payloads { "1" } else { "0" });
        for (id, payload) in items {
            call = call.arg(id);
            if with_payloads {
                call = call.arg(payload.unwrap_or_default());
            }
        }
        self.replicas_present("enqueued")?;
        let mut got = None;
        let reply = self.legacy_retry(legacy_timeout, interrupt, || {
            let (reply, n) = self.client.run(&self.label, |c| {
                let reply: Vec<Value> = call.query(c)?;
                let n = self.wait_replicas(c, int_at(&reply, 0) >= 0)?;
                Ok((reply, n))
            })?;
            got = n;
            Ok(reply)
        })?;
        self.replicas_confirmed("enqueue", got)?;
        Ok(int_at(&reply, 0).max(0) as usize)
    }

    /// Removes `id` if its score is still exactly `score` (a task queued again
    /// since it was read keeps its place), with its payload. True when
    /// removed. Waits for a legacy client's queue lock as [`Queue::enqueue`] does.
    pub fn dequeue(
        &self,
        id: &[u8],
        score: f64,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        validate::name(id, "task id")?;
        let score = validate::score(score)?;
        let k = &self.keys;
        let call = QUEUE_DEQUEUE
            .call(&[&k.queue, self.legacy_key(), &k.payloads, &k.attempts])
            .arg(id)
            .arg(score)
            .arg(self.check_legacy);
        let reply = self.legacy_retry(legacy_timeout, interrupt, || {
            call.run::<Vec<Value>>(&self.client, &self.label)
        })?;
        Ok(int_at(&reply, 0) == 1)
    }

    /// Acknowledges a reserved task: done, its payload deleted (unless it was
    /// enqueued again meanwhile: then it is queued now, see
    /// [`Queue::enqueue`]). False when the reservation was lost (it expired
    /// and went back to the queue, maybe to another consumer, whose claim is
    /// left untouched). A receipt that is not this task's is an
    /// invalid argument. See [`Queue::ack_valid`] for a lost reply.
    pub fn ack(&self, id: &[u8], receipt: &str) -> Result<bool> {
        self.ack_valid(id, receipt, None)
    }

    /// [`Queue::ack`], knowing until when the reservation is ours
    /// (`valid_until`: [`Task::valid_until`], later if kept alive). An ack is
    /// idempotent: when its reply is lost it is sent again within the call's
    /// time, and one that then finds the reservation gone reports the first
    /// one's success if the reservation was still valid when that was sent.
    /// Out of time, it is sent again once the server answers, and the
    /// `ConnectionError` says so.
    pub fn ack_valid(
        &self,
        id: &[u8],
        receipt: &str,
        valid_until: Option<Instant>,
    ) -> Result<bool> {
        let rid = self.rid(id, receipt)?;
        let make = || {
            QUEUE_ACK
                .call(&self.task_keys())
                .arg(id)
                .arg(rid)
                .arg(&self.keys.channel)
        };
        self.replicas_present("acked")?;
        let reply = self.finish_once(&make, "ack", valid_until)?;
        Ok(int_at(&reply, 0) == 1)
    }

    /// Gives a reserved task back, due `delay` seconds from now, or after its
    /// backoff when `None`; a reservation that was the task's last attempt
    /// sends it to the dead set instead. False when the reservation was lost.
    /// Waits for a legacy client's queue lock as [`Queue::enqueue`] does (up
    /// to the queue's `legacy_lock_timeout`). A lost reply: as
    /// [`Queue::ack_valid`], see [`Queue::nack_valid`].
    pub fn nack(
        &self,
        id: &[u8],
        receipt: &str,
        delay: Option<f64>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        self.nack_valid(id, receipt, delay, None, interrupt)
    }

    /// [`Queue::nack`], knowing until when the reservation is ours (see
    /// [`Queue::ack_valid`]).
    pub fn nack_valid(
        &self,
        id: &[u8],
        receipt: &str,
        delay: Option<f64>,
        valid_until: Option<Instant>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        let rid = self.rid(id, receipt)?;
        let delay = delay.map(|d| validate::offset(d, "delay")).transpose()?;
        let delay = delay.map(|d| d.to_string()).unwrap_or_default();
        let make = || {
            QUEUE_NACK
                .call(&self.task_keys())
                .arg(id)
                .arg(rid)
                .arg(&delay)
                .arg(self.check_legacy)
                .arg(&self.keys.channel)
        };
        let reply = self.legacy_retry(None, interrupt, || {
            self.finish_once(&make, "nack", valid_until)
        })?;
        if int_at(&reply, 0) == 2 {
            self.dead_lettered(id);
        }
        Ok(int_at(&reply, 0) > 0)
    }

    /// Runs the ack or nack `make()` builds (its reply's first integer: 1 or
    /// more done, 0 not ours, -1 a legacy lock), sending it again when its
    /// reply is lost (see `lost.rs`).
    fn finish_once(
        &self,
        make: &dyn Fn() -> crate::scripts::Call,
        what: &'static str,
        valid_until: Option<Instant>,
    ) -> Result<Vec<Value>> {
        let budget = self.client.one_call();
        let sent = Instant::now();
        let call = make();
        // An ack waits for `min_replicas` (a nack need not: lost in a
        // failover, the reservation runs out and the task comes back).
        let wait_for = what == "ack";
        let run = || -> Result<Vec<Value>> {
            let (reply, got) = self.client.run_within(budget, &self.label, |c| {
                let reply = match call.query::<Value>(c)? {
                    Value::Array(list) => list,
                    one => vec![one],
                };
                let got = self.wait_replicas(c, wait_for && int_at(&reply, 0) == 1)?;
                Ok((reply, got))
            })?;
            self.replicas_confirmed(what, got)?;
            Ok(reply)
        };
        let err = match run() {
            Err(e) if e.outcome_unknown() => e,
            other => return other,
        };
        match run() {
            Ok(reply) if int_at(&reply, 0) == 0 && valid_until.is_some_and(|v| sent < v) => {
                // Gone while it was still ours when the first was sent: the
                // first one did it.
                Ok(vec![Value::Int(1)])
            }
            Ok(reply) => Ok(reply),
            Err(_) => {
                let settlement = Box::new(lost::Resend {
                    client: self.client.clone(),
                    call: make(),
                    what,
                    horizon: valid_until.unwrap_or_else(|| Instant::now() + self.opts.visibility),
                    label: self.label.clone(),
                });
                let _ = crate::settle::settle_or_defer(settlement, lost::no_time());
                Err(err.context_after(&format!(
                    "the {what} is sent again once the server answers (a reservation that \
                     ended meanwhile is left alone)"
                )))
            }
        }
    }

    /// Extends a reservation (a heartbeat): it now ends `visibility` from now
    /// (default: the visibility it was reserved with — for a receipt of an
    /// older ferrolock, the queue's). False when the reservation is no
    /// longer ours.
    pub fn touch(&self, id: &[u8], receipt: &str, visibility: Option<Duration>) -> Result<bool> {
        let rid = self.rid(id, receipt)?;
        let visibility = match visibility {
            Some(v) => validate::lifetime(v, "visibility")?,
            None => self.opts.visibility,
        };
        let call = heartbeat::touch_call(
            &self.keys.inflight,
            &self.keys.receipts,
            id,
            rid,
            validate::millis(visibility),
        );
        // A touch is idempotent: a lost reply is sent again within the call's time.
        let budget = self.client.one_call();
        let run = || {
            self.client
                .run_within(budget, &self.label, |c| call.query::<i64>(c))
        };
        let touched = match run() {
            Err(e) if e.outcome_unknown() => run().map_err(|_| e)?,
            other => other?,
        };
        Ok(touched == 1)
    }

    /// Keeps the reservation of `task` alive in the background (a touch
    /// every third of its visibility, by the watchdog) until the returned
    /// guard is dropped or stopped.
    pub fn keep_alive(&self, task: &Task) -> Result<Heartbeat> {
        let receipt = task
            .receipt
            .as_deref()
            .ok_or_else(|| Error::invalid("only a reserved task can be kept alive"))?;
        let rid = self.rid(&task.id, receipt)?;
        let visibility = task.visibility.unwrap_or(self.opts.visibility);
        Ok(heartbeat::start(
            &self.client,
            &self.keys,
            &task.id,
            rid,
            visibility,
        ))
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

    /// The request id of `receipt`, checked against task `id`.
    fn rid<'a>(&self, id: &[u8], receipt: &'a str) -> Result<&'a str> {
        validate::name(id, "task id")?;
        receipt::rid_of(receipt, id)
    }

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
