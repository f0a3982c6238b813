//! `Ferrolock\Queue`: the Python package's `Queue` for PHP, with the
//! production queue of docs/queue.md (attempts, backoff, dead letters,
//! payloads, batch reserve, stats, the worker loop). Every semantic is the
//! core's; the worker loop is the one `RedisQueue::work()` runs too
//! (`jobs.rs`). Its tasks are `Ferrolock\Task`s (`task.rs`); how
//! `enqueue()` reads its `$ids` is in `enqueue.rs`.
// ext-php-rs' `#[php_impl]` rewrites borrowed argument types such as
// `CallableArg<'_>` into paths with a hidden lifetime, which this lint flags.
#![allow(elided_lifetimes_in_paths)]

use std::sync::Arc;
use std::time::Duration;

use ext_php_rs::convert::IntoZval;
use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, Zval};
use ext_php_rs::zend::ce;
use ferrolock::{
    DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE_PREFIX, QueueOptions, Wait, WorkerOptions, validate,
};

use super::enqueue::{Items, enqueue_items, is_id};
use super::params::{BoolArg, Mixed, NullableInt};
use super::task::{Origin, Task};
use super::{Kind, Settings, Value, bytes, connection_value, invalid, number};
use crate::args::{
    Args, FloatArg, IdArg, IntArg, OptBool, OptInt, OptNum, OptStr, StrArg, bytes_zval, cap_wait,
    read_args, type_error, type_name,
};
use crate::connect::Policy;
use crate::errors::{guard, modern, value_error};
use crate::jobs::{self, CallableArg, Work};
use crate::queue::OptIds;

/// The settings a queue takes: argument name, kind, other `$options` keys.
const SETTINGS: &[(&str, Kind, &[&str])] = &[
    ("connection", Kind::Connection, &[]),
    ("url", Kind::Bytes, &[]),
    ("prefix", Kind::Bytes, &[]),
    ("visibility", Kind::Number, &[]),
    ("lockPrefix", Kind::Bytes, &["lock_prefix"]),
    ("maxAttempts", Kind::IntOrNull, &["max_attempts"]),
    ("backoff", Kind::Number, &[]),
    ("backoffCap", Kind::Number, &["backoff_cap"]),
    ("backoffJitter", Kind::Number, &["backoff_jitter"]),
    ("minReplicas", Kind::Int, &["min_replicas"]),
];

// The constructor's signature spells out the core's default (the stub
// generator writes only literal defaults); checked at build time.
const _: () = assert!(DEFAULT_MAX_ATTEMPTS == 10);

/// A task queue (sorted set `Queue:<name>` shared with the legacy
/// `RedisQueue` and Python), as the Python package's `ferrolock.Queue`.
#[php_class]
#[php(name = "Ferrolock\\Queue")]
#[php(implements(ce = ce::countable, stub = "\\Countable"))]
pub struct Queue {
    inner: Arc<ferrolock::Queue>,
}

impl Queue {
    fn fail(method: &str, e: ferrolock::Error) -> PhpException {
        modern(&format!("Ferrolock\\Queue::{method}()"), e)
    }

    fn task(&self, task: ferrolock::Task, origin: Origin) -> PhpResult<Zval> {
        Ok(Task::new(self.inner.clone(), task, origin).into_zval(false)?)
    }

    /// `$count` null → one Task or null; an int → a list of Tasks.
    fn tasks(
        &self,
        tasks: Vec<ferrolock::Task>,
        count: Option<i64>,
        origin: Origin,
    ) -> PhpResult<Zval> {
        if count.is_none() {
            return match tasks.into_iter().next() {
                Some(t) => self.task(t, origin),
                None => Ok(Zval::null()),
            };
        }
        let mut list = ZendHashTable::new();
        for t in tasks {
            list.push(self.task(t, origin)?)?;
        }
        let mut z = Zval::new();
        z.set_hashtable(list);
        Ok(z)
    }
}

/// A count argument: null → 1 (and the single shape); else at least 1.
fn count_of(count: Option<i64>, method: &str) -> PhpResult<usize> {
    match count {
        None => Ok(1),
        Some(n) => validate::count(n, "count").map_err(|e| Queue::fail(method, e)),
    }
}

/// A wait in seconds: finite and >= 0 (more than ten years: ten years).
fn wait_of(wait: f64, method: &str) -> PhpResult<Wait> {
    Wait::from_secs(Some(cap_wait(wait)), "wait").map_err(|e| Queue::fail(method, e))
}

/// A visibility in seconds (null: the default), from 0.001 to ten years.
pub(super) fn visibility_of(
    visibility: Option<f64>,
    fail: impl Fn(ferrolock::Error) -> PhpException,
) -> PhpResult<Option<Duration>> {
    visibility
        .map(|v| validate::ttl(v, "visibility"))
        .transpose()
        .map_err(fail)
}

#[php_impl]
impl Queue {
    /// `new Queue(string $name, ?array $options = null, ...)`: see the stubs.
    #[php(defaults(
        options = None,
        connection = None,
        url = None,
        prefix = None,
        visibility = None,
        lockPrefix = None,
        maxAttempts = Some(10.into()),
        backoff = None,
        backoffCap = None,
        backoffJitter = None,
        minReplicas = None
    ))]
    #[allow(clippy::too_many_arguments)]
    pub fn __construct(
        name: StrArg,
        options: Option<&Zval>,
        connection: Option<&Zval>,
        url: Option<OptStr>,
        prefix: Option<OptStr>,
        visibility: Option<OptNum>,
        lockPrefix: Option<OptStr>,
        maxAttempts: Option<NullableInt>,
        backoff: Option<OptNum>,
        backoffCap: Option<OptNum>,
        backoffJitter: Option<OptNum>,
        minReplicas: Option<OptInt>,
    ) -> PhpResult<Self> {
        guard(|| {
            const F: &str = "Ferrolock\\Queue::__construct";
            let mut args = Args::new(F);
            let name = args.read("name", name)?;
            let options_at = args.at("options");
            let mut s = Settings::new(F, SETTINGS);
            let connection_at = args.at("connection");
            s.arg("connection", connection_value(&connection_at, connection)?);
            s.arg("url", bytes(args.read("url", url)?));
            s.arg("prefix", bytes(args.read("prefix", prefix)?));
            s.arg("visibility", number(args.read("visibility", visibility)?));
            s.arg("lockPrefix", bytes(args.read("lockPrefix", lockPrefix)?));
            // The default, 10, is "not given" (PHP also fills it in for a
            // skipped named argument), so that `$options` may set it.
            let max_attempts = args
                .read("maxAttempts", maxAttempts)?
                .filter(|v| *v != Some(i64::from(DEFAULT_MAX_ATTEMPTS)));
            s.arg("maxAttempts", max_attempts.map(Value::IntOrNull));
            s.arg("backoff", number(args.read("backoff", backoff)?));
            s.arg("backoffCap", number(args.read("backoffCap", backoffCap)?));
            s.arg(
                "backoffJitter",
                number(args.read("backoffJitter", backoffJitter)?),
            );
            let min_replicas = args.read("minReplicas", minReplicas)?;
            s.arg("minReplicas", min_replicas.map(Value::Int));
            s.options(&options_at, options)?;

            let bad = |e| invalid(F, e);
            let mut opts = QueueOptions::default();
            opts.prefix = s
                .bytes("prefix")
                .unwrap_or_else(|| DEFAULT_QUEUE_PREFIX.as_bytes().to_vec());
            if let Some(p) = s.bytes("lockPrefix") {
                opts.lock_prefix = p;
            }
            if let Some(v) = s.number("visibility") {
                opts.visibility = validate::ttl(v, "visibility").map_err(bad)?;
            }
            match s.int_or_null("maxAttempts") {
                None => {}
                Some(None) => opts.max_attempts = None,
                Some(Some(n)) => {
                    let n = validate::count(n, "maxAttempts").map_err(bad)?;
                    opts.max_attempts = Some(u32::try_from(n).unwrap_or(u32::MAX));
                }
            }
            if let Some(v) = s.number("backoff") {
                opts.backoff = validate::seconds(v, "backoff", true).map_err(bad)?;
            }
            if let Some(v) = s.number("backoffCap") {
                opts.backoff_cap = validate::seconds(v, "backoffCap", true).map_err(bad)?;
            }
            if let Some(v) = s.number("backoffJitter") {
                if !(0.0..=1.0).contains(&v) {
                    return Err(value_error(format!(
                        "{}: backoffJitter must be between 0 and 1, got {v}",
                        s.what()
                    )));
                }
                opts.backoff_jitter = v;
            }
            if let Some(n) = s.int("minReplicas") {
                opts.min_replicas = u32::try_from(n).map_err(|_| {
                    value_error(format!(
                        "{}: minReplicas must be between 0 and {}, got {n}",
                        s.what(),
                        u32::MAX
                    ))
                })?;
            }
            let client = s.client(
                connection_at,
                Policy::Modern("Ferrolock\\Queue::__construct()"),
            )?;
            let inner = ferrolock::Queue::new(&client, &name, opts).map_err(bad)?;
            Ok(Self {
                inner: Arc::new(inner),
            })
        })
    }

    /// Adds one id, an array of ids, or an array of id => payload (see the
    /// stubs for how they are told apart), due `$delay` seconds from now, in
    /// one round trip. Returns how many were new.
    #[php(defaults(delay = Some(0.into()), payloads = None))]
    pub fn enqueue(
        &self,
        ids: Mixed<'_>,
        delay: Option<OptNum>,
        payloads: Option<OptBool>,
    ) -> PhpResult<i64> {
        guard(|| {
            let mut args = Args::new("Ferrolock\\Queue::enqueue");
            let ids_at = args.at("ids");
            let ids = ids.0.dereference();
            if !(ids.is_array() || is_id(ids)) {
                return Err(type_error(&ids_at, "array|string|int", &type_name(ids)));
            }
            let delay = args.read("delay", delay)?.unwrap_or(0.0);
            let payloads = args.read("payloads", payloads)?;
            let added = match enqueue_items(&ids_at, ids, payloads)? {
                Items::Ids(ids) => self.inner.enqueue(&ids, delay, None, None),
                Items::Payloads(tasks) => {
                    self.inner.enqueue_with_payloads(&tasks, delay, None, None)
                }
            }
            .map_err(|e| Self::fail("enqueue", e))?;
            Ok(i64::try_from(added).unwrap_or(i64::MAX))
        })
    }

    /// Takes due tasks (lowest score first), waiting up to `$wait` seconds
    /// for one. `$count` null: a Task or null; an int: a list of up to that
    /// many Tasks (maybe empty).
    #[php(defaults(count = None, wait = Some(0.into())))]
    pub fn pop(&self, count: Option<OptInt>, wait: Option<OptNum>) -> PhpResult<Zval> {
        guard(|| {
            read_args!("Ferrolock\\Queue::pop", count, wait);
            let n = count_of(count, "pop")?;
            let wait = wait_of(wait.unwrap_or(0.0), "pop")?;
            let tasks = self
                .inner
                .pop(n, wait, None, None)
                .map_err(|e| Self::fail("pop", e))?;
            self.tasks(tasks, count, Origin::Popped)
        })
    }

    /// The tasks `pop()` would take, without taking them (same shapes).
    #[php(defaults(count = None))]
    pub fn top(&self, count: Option<OptInt>) -> PhpResult<Zval> {
        guard(|| {
            read_args!("Ferrolock\\Queue::top", count);
            let n = count_of(count, "top")?;
            let tasks = self.inner.top(n).map_err(|e| Self::fail("top", e))?;
            self.tasks(tasks, count, Origin::Peeked)
        })
    }

    /// Removes `$id` (and its payload) if its score is still exactly `$score`.
    pub fn dequeue(&self, id: IdArg, score: FloatArg) -> PhpResult<bool> {
        guard(|| {
            read_args!("Ferrolock\\Queue::dequeue", id, score);
            self.inner
                .dequeue(&id, score, None, None)
                .map_err(|e| Self::fail("dequeue", e))
        })
    }

    /// Reserves due tasks for `$visibility` seconds (null: the queue's),
    /// waiting up to `$wait` seconds for one; each reserve counts an attempt.
    /// `$count` null: a Task or null; an int: a list of up to that many (one
    /// round trip). A task not acked in time returns to the queue after its
    /// backoff.
    #[php(defaults(count = None, wait = Some(0.into()), visibility = None))]
    pub fn reserve(
        &self,
        count: Option<OptInt>,
        wait: Option<OptNum>,
        visibility: Option<OptNum>,
    ) -> PhpResult<Zval> {
        guard(|| {
            read_args!("Ferrolock\\Queue::reserve", count, wait, visibility);
            let n = count_of(count, "reserve")?;
            let wait = wait_of(wait.unwrap_or(0.0), "reserve")?;
            let visibility = visibility_of(visibility, |e| Self::fail("reserve", e))?;
            let tasks = self
                .inner
                .reserve_many(n, visibility, wait, None)
                .map_err(|e| Self::fail("reserve", e))?;
            self.tasks(tasks, count, Origin::Reserved)
        })
    }

    /// Up to `$count` dead tasks from `$offset` on, the oldest death first: a
    /// list of Tasks (`score()`: when it died).
    #[php(defaults(count = Some(100.into()), offset = Some(0.into())))]
    pub fn dead(&self, count: Option<IntArg>, offset: Option<IntArg>) -> PhpResult<Zval> {
        guard(|| {
            read_args!("Ferrolock\\Queue::dead", count, offset);
            let n = validate::count(count, "count").map_err(|e| Self::fail("dead", e))?;
            let from = usize::try_from(offset).map_err(|_| {
                value_error(format!(
                    "Ferrolock\\Queue::dead(): offset must be >= 0, got {offset}"
                ))
            })?;
            let tasks = self
                .inner
                .dead(from, n)
                .map_err(|e| Self::fail("dead", e))?;
            self.tasks(tasks, Some(count), Origin::Dead)
        })
    }

    /// Puts dead tasks back into the queue, due now, attempts reset, payloads
    /// kept: those of `$ids` that are dead, or all (null). Returns how many.
    #[php(defaults(ids = None))]
    pub fn retryDead(&self, ids: Option<OptIds>) -> PhpResult<i64> {
        guard(|| {
            read_args!("Ferrolock\\Queue::retryDead", ids);
            let n = self
                .inner
                .retry_dead(ids.as_deref())
                .map_err(|e| Self::fail("retryDead", e))?;
            Ok(i64::try_from(n).unwrap_or(i64::MAX))
        })
    }

    /// Deletes dead tasks and their payloads: those of `$ids` that are dead,
    /// or all (null). Returns how many.
    #[php(defaults(ids = None))]
    pub fn purgeDead(&self, ids: Option<OptIds>) -> PhpResult<i64> {
        guard(|| {
            read_args!("Ferrolock\\Queue::purgeDead", ids);
            let n = self
                .inner
                .purge_dead(ids.as_deref())
                .map_err(|e| Self::fail("purgeDead", e))?;
            Ok(i64::try_from(n).unwrap_or(i64::MAX))
        })
    }

    /// `['due', 'delayed', 'in_flight', 'dead', 'oldest_due_age']`: one round
    /// trip, never a scan.
    pub fn stats(&self) -> PhpResult<Zval> {
        guard(|| {
            let s = self.inner.stats().map_err(|e| Self::fail("stats", e))?;
            jobs::stats_zval(&s)
        })
    }

    /// The worker loop: `$handler(Task $task)` for each task, acked when it
    /// returns, nacked when it throws; see the stubs.
    #[php(defaults(wait = None, visibility = None, heartbeat = Some(true.into()), maxJobs = None))]
    pub fn work(
        &self,
        handler: CallableArg<'_>,
        wait: Option<OptNum>,
        visibility: Option<OptNum>,
        heartbeat: Option<BoolArg>,
        maxJobs: Option<OptInt>,
    ) -> PhpResult<i64> {
        guard(|| {
            read_args!(
                "Ferrolock\\Queue::work",
                handler,
                wait,
                visibility,
                heartbeat,
                maxJobs
            );
            let fail = |e| Self::fail("work", e);
            let mut opts = WorkerOptions::default();
            opts.wait = Wait::from_secs(wait.map(cap_wait), "wait").map_err(fail)?;
            opts.visibility = visibility_of(visibility, fail)?;
            opts.heartbeat = heartbeat;
            let max_jobs = maxJobs
                .map(|n| validate::count(n, "maxJobs"))
                .transpose()
                .map_err(fail)?;
            let spec = Work {
                what: "Ferrolock\\Queue::work",
                stop_handler: "Ferrolock\\Queue::stop".into(),
                max_jobs: max_jobs.map(|n| u64::try_from(n).unwrap_or(u64::MAX)),
                fail: &fail,
            };
            let queue = self.inner.clone();
            jobs::work(self.inner.clone(), opts, &spec, &handler, &|task| {
                Ok(Task::new(queue.clone(), task.clone(), Origin::Reserved).into_zval(false)?)
            })
        })
    }

    /// Asks every `work()` loop of this process to stop after the task at
    /// hand; see the stubs.
    #[php(defaults(signal = None, info = None))]
    pub fn stop(signal: Option<OptInt>, info: Option<&Zval>) -> PhpResult<()> {
        guard(|| {
            let _ = info; // pcntl's siginfo
            read_args!("Ferrolock\\Queue::stop", signal);
            jobs::stop(signal);
            Ok(())
        })
    }

    /// Number of queued tasks, due or delayed (reserved ones not counted);
    /// also `count($queue)`.
    pub fn count(&self) -> PhpResult<i64> {
        guard(|| {
            let n = self.inner.len().map_err(|e| Self::fail("count", e))?;
            Ok(i64::try_from(n).unwrap_or(i64::MAX))
        })
    }

    /// The queue's name.
    pub fn name(&self) -> Zval {
        bytes_zval(self.inner.name())
    }
}
