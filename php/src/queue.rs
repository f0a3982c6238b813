//! `RedisQueue`: the legacy class's methods over `ferrolock::Queue`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ext_php_rs::exception::PhpResult;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, Zval};
use ferrolock::{Client, ErrorKind, Queue, QueueOptions, Task, Wait, validate};

use crate::args::{
    At, FloatArg, IntArg, StrArg, at, bytes_zval, cap_wait, exception, guard, id_bytes, type_error,
    type_name, warn,
};
use crate::connect::settings;

/// Queues kept per object (their key names are computed once).
const QUEUE_CACHE: usize = 1024;

// ext-php-rs shows reflection (and so the stub test) only the tokens of a
// default, so `reserve()` spells out the core's default visibility: checked
// at build time.
const _: () = assert!(ferrolock::DEFAULT_VISIBILITY.as_secs() == 30);

/// A task queue with the API of the legacy `RedisQueue` class.
#[php_class]
#[php(name = "RedisQueue")]
pub struct RedisQueue {
    client: Client,
    prefix: Vec<u8>,
    lock_prefix: Vec<u8>,
    queues: HashMap<Vec<u8>, Arc<Queue>>,
}

/// What a legacy method returns for bad input: `false` or `[]`.
#[derive(Clone, Copy)]
enum Fallback {
    False,
    EmptyArray,
}

impl Fallback {
    fn zval(self) -> Zval {
        let mut z = Zval::new();
        match self {
            Fallback::False => z.set_bool(false),
            Fallback::EmptyArray => z.set_hashtable(ZendHashTable::new()),
        }
        z
    }
}

/// Outcome of a core call in legacy terms: bad input and a legacy queue lock
/// held too long give the legacy value plus a warning; Redis trouble throws.
fn settle<T>(result: ferrolock::Result<T>) -> PhpResult<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_invalid_argument() || e.kind() == ErrorKind::QueueLocked => {
            warn(e.message());
            Ok(None)
        }
        Err(e) => Err(exception(e)),
    }
}

fn task_array(task: &Task, with_receipt: bool) -> PhpResult<Zval> {
    let mut row = ZendHashTable::new();
    row.insert("id", bytes_zval(&task.id))?;
    row.insert("score", task.score)?;
    if with_receipt {
        row.insert("receipt", task.receipt.clone().unwrap_or_default())?;
    }
    let mut z = Zval::new();
    z.set_hashtable(row);
    Ok(z)
}

/// Legacy shapes: `$count == 1` → one `['id', 'score']` or false; else a list.
fn tasks_zval(tasks: &[Task], count: i64) -> PhpResult<Zval> {
    if count == 1 {
        return match tasks.first() {
            Some(t) => task_array(t, false),
            None => Ok(Fallback::False.zval()),
        };
    }
    let mut list = ZendHashTable::new();
    for t in tasks {
        list.push(task_array(t, false)?)?;
    }
    let mut z = Zval::new();
    z.set_hashtable(list);
    Ok(z)
}

/// `string|int|array $id` → ids (an array: every element a scalar).
fn ids_of(id: &Zval, at: &At) -> PhpResult<Vec<Vec<u8>>> {
    match id.array() {
        Some(list) => list.iter().map(|(_, v)| id_bytes(v, at)).collect(),
        None => Ok(vec![id_bytes(id, at)?]),
    }
}

impl RedisQueue {
    /// The queue `$name` names: a TypeError for a non-string, `None` (and a
    /// warning) for an invalid name, as the legacy class answered those.
    fn open(&mut self, name: StrArg, at: &At) -> PhpResult<Option<Arc<Queue>>> {
        let name = name.get(at)?;
        settle(self.queue(&name))
    }

    /// [`RedisQueue::open`] plus a task count checked the legacy way.
    fn open_counted(
        &mut self,
        name: StrArg,
        at: &At,
        count: i64,
    ) -> PhpResult<Option<(Arc<Queue>, usize)>> {
        let Some(queue) = self.open(name, at)? else {
            return Ok(None);
        };
        Ok(settle(validate::count(count, "count"))?.map(|n| (queue, n)))
    }

    fn queue(&mut self, name: &[u8]) -> ferrolock::Result<Arc<Queue>> {
        if let Some(q) = self.queues.get(name) {
            return Ok(q.clone());
        }
        if self.queues.len() >= QUEUE_CACHE {
            self.queues.clear();
        }
        let mut opts = QueueOptions::default();
        opts.prefix = self.prefix.clone();
        opts.lock_prefix = self.lock_prefix.clone();
        let q = Arc::new(Queue::new(&self.client, name, opts)?);
        self.queues.insert(name.to_vec(), q.clone());
        Ok(q)
    }
}

fn seconds(value: i64) -> Duration {
    Duration::from_secs(value.clamp(0, validate::MAX_SECONDS as i64) as u64)
}

#[php_impl]
impl RedisQueue {
    /// `new RedisQueue(string|array|null $param = null)`.
    #[php(defaults(param = None))]
    pub fn __construct(param: Option<&Zval>) -> PhpResult<Self> {
        guard(|| {
            let s = settings(param, "RedisQueue::__construct")?;
            let client = s.client.ok_or_else(|| {
                crate::args::lock_exception(
                    "RedisQueue needs one Redis URL ('servers' is for RedisLock)",
                )
            })?;
            Ok(Self {
                client,
                prefix: s
                    .prefix
                    .unwrap_or_else(|| ferrolock::DEFAULT_QUEUE_PREFIX.as_bytes().to_vec()),
                lock_prefix: s
                    .lock_prefix
                    .unwrap_or_else(|| ferrolock::DEFAULT_LOCK_PREFIX.as_bytes().to_vec()),
                queues: HashMap::new(),
            })
        })
    }

    /// Adds one id or an array of ids, due `$afterInterval` seconds from now;
    /// ids already queued keep their score. `$timeout`: how long to wait for a
    /// legacy client's queue lock.
    #[php(defaults(timeout = Some(10.into()), afterInterval = Some(0.into())))]
    pub fn enqueue(
        &mut self,
        name: StrArg,
        id: &Zval,
        timeout: Option<IntArg>,
        afterInterval: Option<FloatArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            const F: &str = "RedisQueue::enqueue";
            let Some(queue) = self.open(name, &at(F, 1, "name"))? else {
                return Ok(false);
            };
            if id.is_null() || id.is_bool() || id.is_object() {
                return Err(type_error(
                    &at(F, 2, "id"),
                    "array|string|int",
                    &type_name(id),
                ));
            }
            let ids = ids_of(id, &at(F, 2, "id"))?;
            let timeout = IntArg::or_zero(timeout).get(&at(F, 3, "timeout"))?;
            let delay =
                FloatArg::or_zero(afterInterval).get(&at(F, 4, "afterInterval"), "int|float")?;
            if ids.is_empty() {
                warn("no task id given");
                return Ok(false);
            }
            if timeout <= 0 {
                warn(&format!("timeout must be > 0, got {timeout}"));
                return Ok(false);
            }
            let Some(delay) = settle(validate::offset(delay, "afterInterval"))? else {
                return Ok(false);
            };
            Ok(settle(queue.enqueue(&ids, delay, Some(seconds(timeout)), None))?.is_some())
        })
    }

    /// Removes `$id` if its score is still exactly `$score`.
    #[php(defaults(timeout = Some(10.into())))]
    pub fn dequeue(
        &mut self,
        name: StrArg,
        id: &Zval,
        score: FloatArg,
        timeout: Option<IntArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            const F: &str = "RedisQueue::dequeue";
            let Some(queue) = self.open(name, &at(F, 1, "name"))? else {
                return Ok(false);
            };
            let id = id_bytes(id, &at(F, 2, "id"))?;
            let score = score.get(&at(F, 3, "score"), "float")?;
            let timeout = IntArg::or_zero(timeout).get(&at(F, 4, "timeout"))?;
            Ok(settle(queue.dequeue(&id, score, Some(seconds(timeout)), None))?.unwrap_or(false))
        })
    }

    /// Takes up to `$count` due tasks. `$count == 1`: `['id' => …, 'score' => …]`
    /// or false; more: a list of those (maybe empty).
    #[php(defaults(count = Some(1.into()), timeout = Some(10.into())))]
    pub fn pop(
        &mut self,
        name: StrArg,
        count: Option<IntArg>,
        timeout: Option<IntArg>,
    ) -> PhpResult<Zval> {
        guard(|| {
            const F: &str = "RedisQueue::pop";
            let count = IntArg::or_zero(count).get(&at(F, 2, "count"))?;
            let timeout = IntArg::or_zero(timeout).get(&at(F, 3, "timeout"))?;
            let Some((queue, n)) = self.open_counted(name, &at(F, 1, "name"), count)? else {
                return Ok(Fallback::EmptyArray.zval());
            };
            match settle(queue.pop(n, Wait::Try, Some(seconds(timeout)), None))? {
                Some(tasks) => tasks_zval(&tasks, count),
                None => Ok(Fallback::False.zval()),
            }
        })
    }

    /// The tasks `pop` would take, without taking them (same shapes).
    #[php(defaults(count = Some(1.into())))]
    pub fn top(&mut self, name: StrArg, count: Option<IntArg>) -> PhpResult<Zval> {
        guard(|| {
            const F: &str = "RedisQueue::top";
            let count = IntArg::or_zero(count).get(&at(F, 2, "count"))?;
            let Some((queue, n)) = self.open_counted(name, &at(F, 1, "name"), count)? else {
                return Ok(Fallback::EmptyArray.zval());
            };
            match settle(queue.top(n))? {
                Some(tasks) => tasks_zval(&tasks, count),
                None => Ok(Fallback::False.zval()),
            }
        })
    }

    /// Extra: reserves one due task for `$visibility` seconds, waiting up to
    /// `$wait` seconds for one (more than ten years waits ten years).
    /// `['id', 'score', 'receipt']` or false. Ack it with `ack()`; if not acked
    /// in time it returns to the queue.
    #[php(defaults(visibility = Some(30.into()), wait = Some(0.into())))]
    pub fn reserve(
        &mut self,
        name: StrArg,
        visibility: Option<FloatArg>,
        wait: Option<FloatArg>,
    ) -> PhpResult<Zval> {
        guard(|| {
            const F: &str = "RedisQueue::reserve";
            let Some(queue) = self.open(name, &at(F, 1, "name"))? else {
                return Ok(Fallback::False.zval());
            };
            let visibility =
                FloatArg::or_zero(visibility).get(&at(F, 2, "visibility"), "int|float")?;
            let wait = FloatArg::or_zero(wait).get(&at(F, 3, "wait"), "int|float")?;
            let Some(visibility) = settle(validate::seconds(visibility, "visibility", true))?
            else {
                return Ok(Fallback::False.zval());
            };
            let Some(wait) = settle(Wait::from_secs(Some(cap_wait(wait)), "wait"))? else {
                return Ok(Fallback::False.zval());
            };
            match settle(queue.reserve(Some(visibility), wait, None))?.flatten() {
                Some(task) => task_array(&task, true),
                None => Ok(Fallback::False.zval()),
            }
        })
    }

    /// Extra: acknowledges a reserved task; false when the reservation was
    /// lost (expired and handed out again).
    pub fn ack(&mut self, name: StrArg, id: &Zval, receipt: StrArg) -> PhpResult<bool> {
        guard(|| {
            const F: &str = "RedisQueue::ack";
            let Some(queue) = self.open(name, &at(F, 1, "name"))? else {
                return Ok(false);
            };
            let id = id_bytes(id, &at(F, 2, "id"))?;
            let receipt = String::from_utf8_lossy(&receipt.get(&at(F, 3, "receipt"))?).into_owned();
            Ok(settle(queue.ack(&id, &receipt))?.unwrap_or(false))
        })
    }

    /// Extra: gives a reserved task back, due after `$delay` seconds.
    #[php(defaults(delay = Some(0.into())))]
    pub fn nack(
        &mut self,
        name: StrArg,
        id: &Zval,
        receipt: StrArg,
        delay: Option<FloatArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            const F: &str = "RedisQueue::nack";
            let Some(queue) = self.open(name, &at(F, 1, "name"))? else {
                return Ok(false);
            };
            let id = id_bytes(id, &at(F, 2, "id"))?;
            let receipt = String::from_utf8_lossy(&receipt.get(&at(F, 3, "receipt"))?).into_owned();
            let delay = FloatArg::or_zero(delay).get(&at(F, 4, "delay"), "int|float")?;
            Ok(settle(queue.nack(&id, &receipt, delay, None))?.unwrap_or(false))
        })
    }

    /// Extra: number of queued tasks (due or delayed; reserved ones excluded).
    pub fn len(&mut self, name: StrArg) -> PhpResult<i64> {
        guard(|| {
            let Some(queue) = self.open(name, &at("RedisQueue::len", 1, "name"))? else {
                return Ok(0);
            };
            let n = queue.len().map_err(exception)?;
            Ok(i64::try_from(n).unwrap_or(i64::MAX))
        })
    }
}
