//! `Ferrolock\Queue` and `Ferrolock\Task`: the Python package's `Queue` and
//! `Task` for PHP, over today's core queue (enqueue, pop, top, dequeue,
//! reserve, ack, nack, len).

use std::sync::Arc;

use ext_php_rs::convert::IntoZval;
use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, Zval};
use ext_php_rs::zend::ce;
use ferrolock::{DEFAULT_QUEUE_PREFIX, QueueOptions, Wait, validate};

use super::{Kind, Settings, bytes, connection_value, invalid, number};
use crate::args::{
    Args, FloatArg, IdArg, IdsArg, OptInt, OptNum, OptStr, StrArg, bytes_zval, cap_wait, read_args,
};
use crate::connect::Policy;
use crate::errors::{guard, modern};

/// The settings a queue takes: argument name, kind, other `$options` keys.
const SETTINGS: &[(&str, Kind, &[&str])] = &[
    ("connection", Kind::Connection, &[]),
    ("url", Kind::Bytes, &[]),
    ("prefix", Kind::Bytes, &[]),
    ("visibility", Kind::Number, &[]),
    ("lockPrefix", Kind::Bytes, &["lock_prefix"]),
];

/// A task queue (sorted set `Queue:<name>` shared with the legacy
/// `RedisQueue` and Python), as the Python package's `ferrolock.Queue`.
#[php_class]
#[php(name = "Ferrolock\\Queue")]
#[php(implements(ce = ce::countable, stub = "\\Countable"))]
pub struct Queue {
    inner: Arc<ferrolock::Queue>,
}

/// A task taken from (or read in) a queue, as the Python package's
/// `ferrolock.Task`: its id, score, and for a reserved task its receipt,
/// with `ack()` and `nack()`.
#[php_class]
#[php(name = "Ferrolock\\Task")]
pub struct Task {
    queue: Arc<ferrolock::Queue>,
    task: ferrolock::Task,
}

impl Queue {
    fn fail(method: &str, e: ferrolock::Error) -> PhpException {
        modern(&format!("Ferrolock\\Queue::{method}()"), e)
    }

    fn task(&self, task: ferrolock::Task) -> PhpResult<Zval> {
        Ok(Task {
            queue: self.inner.clone(),
            task,
        }
        .into_zval(false)?)
    }

    /// `$count` null → one Task or null; an int → a list of Tasks.
    fn tasks(&self, tasks: Vec<ferrolock::Task>, count: Option<i64>) -> PhpResult<Zval> {
        if count.is_none() {
            return match tasks.into_iter().next() {
                Some(t) => self.task(t),
                None => Ok(Zval::null()),
            };
        }
        let mut list = ZendHashTable::new();
        for t in tasks {
            list.push(self.task(t)?)?;
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

#[php_impl]
impl Queue {
    /// `new Queue(string $name, ?array $options = null, ...)`: see the stubs.
    #[php(defaults(
        options = None,
        connection = None,
        url = None,
        prefix = None,
        visibility = None,
        lockPrefix = None
    ))]
    pub fn __construct(
        name: StrArg,
        options: Option<&Zval>,
        connection: Option<&Zval>,
        url: Option<OptStr>,
        prefix: Option<OptStr>,
        visibility: Option<OptNum>,
        lockPrefix: Option<OptStr>,
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
            s.options(&options_at, options)?;
            let mut opts = QueueOptions::default();
            opts.prefix = s
                .bytes("prefix")
                .unwrap_or_else(|| DEFAULT_QUEUE_PREFIX.as_bytes().to_vec());
            if let Some(p) = s.bytes("lockPrefix") {
                opts.lock_prefix = p;
            }
            if let Some(v) = s.number("visibility") {
                opts.visibility = validate::ttl(v, "visibility").map_err(|e| invalid(F, e))?;
            }
            let client = s.client(
                connection_at,
                Policy::Modern("Ferrolock\\Queue::__construct()"),
            )?;
            let inner = ferrolock::Queue::new(&client, &name, opts).map_err(|e| invalid(F, e))?;
            Ok(Self {
                inner: Arc::new(inner),
            })
        })
    }

    /// Adds one id or an array of ids, due `$delay` seconds from now
    /// (negative: earlier); ids already queued keep their score. Returns how
    /// many were new.
    #[php(defaults(delay = Some(0.into())))]
    pub fn enqueue(&self, ids: IdsArg, delay: Option<OptNum>) -> PhpResult<i64> {
        guard(|| {
            read_args!("Ferrolock\\Queue::enqueue", ids, delay);
            let delay = delay.unwrap_or(0.0);
            let added = self
                .inner
                .enqueue(&ids, delay, None, None)
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
            self.tasks(tasks, count)
        })
    }

    /// The tasks `pop()` would take, without taking them (same shapes).
    #[php(defaults(count = None))]
    pub fn top(&self, count: Option<OptInt>) -> PhpResult<Zval> {
        guard(|| {
            read_args!("Ferrolock\\Queue::top", count);
            let n = count_of(count, "top")?;
            let tasks = self.inner.top(n).map_err(|e| Self::fail("top", e))?;
            self.tasks(tasks, count)
        })
    }

    /// Removes `$id` if its score is still exactly `$score`.
    pub fn dequeue(&self, id: IdArg, score: FloatArg) -> PhpResult<bool> {
        guard(|| {
            read_args!("Ferrolock\\Queue::dequeue", id, score);
            self.inner
                .dequeue(&id, score, None, None)
                .map_err(|e| Self::fail("dequeue", e))
        })
    }

    /// Reserves one due task for `$visibility` seconds (null: the queue's),
    /// waiting up to `$wait` seconds for one: a Task to `ack()` or `nack()`,
    /// or null. A task not acked in time returns to the queue.
    #[php(defaults(wait = Some(0.into()), visibility = None))]
    pub fn reserve(&self, wait: Option<OptNum>, visibility: Option<OptNum>) -> PhpResult<Zval> {
        guard(|| {
            read_args!("Ferrolock\\Queue::reserve", wait, visibility);
            let wait = wait_of(wait.unwrap_or(0.0), "reserve")?;
            let visibility = visibility
                .map(|v| validate::ttl(v, "visibility"))
                .transpose()
                .map_err(|e| Self::fail("reserve", e))?;
            match self
                .inner
                .reserve(visibility, wait, None)
                .map_err(|e| Self::fail("reserve", e))?
            {
                Some(t) => self.task(t),
                None => Ok(Zval::null()),
            }
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

#[php_impl]
impl Task {
    /// The task id.
    pub fn id(&self) -> Zval {
        bytes_zval(&self.task.id)
    }

    /// Its score: the unix time (seconds) at which it was due.
    pub fn score(&self) -> f64 {
        self.task.score
    }

    /// The receipt of a reserved task (null for popped or read tasks).
    pub fn receipt(&self) -> Option<String> {
        self.task.receipt.clone()
    }

    /// For a reserved task: the unix time after which it returns to the queue.
    pub fn deadline(&self) -> Option<f64> {
        self.task.deadline
    }

    /// Acknowledges a reserved task (done: it leaves the queue for good).
    /// False when the reservation was lost (it expired and went back);
    /// `\LogicException` for a task that was not reserved.
    pub fn ack(&self) -> PhpResult<bool> {
        guard(|| {
            let receipt = self.receipt_or_refuse("ack")?;
            self.queue
                .ack(&self.task.id, &receipt)
                .map_err(|e| Queue::fail("ack", e))
        })
    }

    /// Gives a reserved task back, due after `$delay` seconds, or after its
    /// backoff when null (at its last attempt it goes to the dead set).
    /// False when the reservation was lost.
    #[php(defaults(delay = None))]
    pub fn nack(&self, delay: Option<OptNum>) -> PhpResult<bool> {
        guard(|| {
            read_args!("Ferrolock\\Task::nack", delay);
            let receipt = self.receipt_or_refuse("nack")?;
            self.queue
                .nack(&self.task.id, &receipt, delay, None)
                .map_err(|e| Queue::fail("nack", e))
        })
    }
}

impl Task {
    fn receipt_or_refuse(&self, method: &str) -> PhpResult<String> {
        self.task.receipt.clone().ok_or_else(|| {
            crate::errors::logic_exception(format!(
                "Ferrolock\\Task::{method}(): only a reserved task (Queue::reserve()) can be acked or nacked; this one was popped or read"
            ))
        })
    }
}
