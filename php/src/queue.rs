//! `RedisQueue`: the legacy class's methods over `ferrolock::Queue`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ext_php_rs::exception::PhpResult;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, Zval};
use ferrolock::{Client, DEFAULT_VISIBILITY, Queue, QueueOptions, Task, Wait, validate};

use crate::args::{
    FloatArg, IdArg, IdsArg, IntArg, NumArg, StrArg, bytes_zval, cap_wait, read_args,
};
use crate::connect::settings;
use crate::errors::{exception, guard, lock_exception, settle, warn};

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

impl RedisQueue {
    /// The queue `name` names; `None` (and a warning) for an invalid name, as
    /// the legacy class answered those.
    fn open(&mut self, name: &[u8]) -> PhpResult<Option<Arc<Queue>>> {
        settle(self.queue(name))
    }

    /// [`RedisQueue::open`] plus a task count checked the legacy way.
    fn open_counted(&mut self, name: &[u8], count: i64) -> PhpResult<Option<(Arc<Queue>, usize)>> {
        let Some(queue) = self.open(name)? else {
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

/// `reserve()`'s default visibility: the core's, spelled as a literal because
/// PHP reflection shows the default as PHP source (checked at compile time).
const _: () = assert!(DEFAULT_VISIBILITY.as_secs() == 30 && DEFAULT_VISIBILITY.subsec_nanos() == 0);

#[php_impl]
impl RedisQueue {
    /// `new RedisQueue(string|array|null $param = null)`.
    #[php(defaults(param = None))]
    pub fn __construct(param: Option<&Zval>) -> PhpResult<Self> {
        guard(|| {
            let s = settings("RedisQueue::__construct", param)?;
            let client = s.client.ok_or_else(|| {
                lock_exception("RedisQueue needs one Redis URL ('servers' is for RedisLock)")
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
        id: IdsArg,
        timeout: Option<IntArg>,
        afterInterval: Option<NumArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisQueue::enqueue", name, id, timeout, afterInterval);
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
            if id.is_empty() {
                warn("no task id given");
                return Ok(false);
            }
            if timeout <= 0 {
                warn(&format!("timeout must be > 0, got {timeout}"));
                return Ok(false);
            }
            let Some(delay) = settle(validate::offset(afterInterval, "afterInterval"))? else {
                return Ok(false);
            };
            Ok(settle(queue.enqueue(&id, delay, Some(seconds(timeout)), None))?.is_some())
        })
    }

    /// Removes `$id` if its score is still exactly `$score`.
    #[php(defaults(timeout = Some(10.into())))]
    pub fn dequeue(
        &mut self,
        name: StrArg,
        id: IdArg,
        score: FloatArg,
        timeout: Option<IntArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisQueue::dequeue", name, id, score, timeout);
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
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
            read_args!("RedisQueue::pop", name, count, timeout);
            let Some((queue, n)) = self.open_counted(&name, count)? else {
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
            read_args!("RedisQueue::top", name, count);
            let Some((queue, n)) = self.open_counted(&name, count)? else {
                return Ok(Fallback::EmptyArray.zval());
            };
            match settle(queue.top(n))? {
                Some(tasks) => tasks_zval(&tasks, count),
                None => Ok(Fallback::False.zval()),
            }
        })
    }

    /// Extra: reserves one due task for `$visibility` seconds (default: the
    /// core's, 30), waiting up to `$wait` seconds for one (more than ten years
    /// waits ten years). `['id', 'score', 'receipt']` or false. Ack it with
    /// `ack()`; if not acked in time it returns to the queue.
    #[php(defaults(visibility = Some(30.into()), wait = Some(0.into())))]
    pub fn reserve(
        &mut self,
        name: StrArg,
        visibility: Option<NumArg>,
        wait: Option<NumArg>,
    ) -> PhpResult<Zval> {
        guard(|| {
            read_args!("RedisQueue::reserve", name, visibility, wait);
            let Some(queue) = self.open(&name)? else {
                return Ok(Fallback::False.zval());
            };
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
    pub fn ack(&mut self, name: StrArg, id: IdArg, receipt: StrArg) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisQueue::ack", name, id, receipt);
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
            let receipt = String::from_utf8_lossy(&receipt).into_owned();
            Ok(settle(queue.ack(&id, &receipt))?.unwrap_or(false))
        })
    }

    /// Extra: gives a reserved task back, due after `$delay` seconds.
    #[php(defaults(delay = Some(0.into())))]
    pub fn nack(
        &mut self,
        name: StrArg,
        id: IdArg,
        receipt: StrArg,
        delay: Option<NumArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisQueue::nack", name, id, receipt, delay);
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
            let receipt = String::from_utf8_lossy(&receipt).into_owned();
            Ok(settle(queue.nack(&id, &receipt, delay, None))?.unwrap_or(false))
        })
    }

    /// Extra: number of queued tasks (due or delayed; reserved ones excluded).
    pub fn len(&mut self, name: StrArg) -> PhpResult<i64> {
        guard(|| {
            read_args!("RedisQueue::len", name);
            let Some(queue) = self.open(&name)? else {
                return Ok(0);
            };
            let n = queue.len().map_err(exception)?;
            Ok(i64::try_from(n).unwrap_or(i64::MAX))
        })
    }
}
