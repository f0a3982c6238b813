//! `RedisQueue`: the legacy class's methods over `ferrolock::Queue`, and
//! the extras of the production queue (reserve/ack/nack/touch, dead
//! letters, stats, payloads, the worker loop). The settings it reads are in
//! `options.rs`, the arrays it answers with in `shapes.rs`, the argument
//! types both queue classes use in `params.rs`.
// ext-php-rs' `#[php_impl]` rewrites borrowed argument types such as
// `ArrayArg<'_>` into paths with a hidden lifetime, which this lint flags.
#![allow(elided_lifetimes_in_paths)]

mod options;
mod params;
mod shapes;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ext_php_rs::exception::PhpResult;
use ext_php_rs::prelude::*;
use ext_php_rs::types::Zval;
use ferrolock::{Client, Queue, QueueOptions, Task, Wait, validate};

use self::options::{queue_settings, work_options};
pub use self::params::{ArrayArg, OptIds, OptSeconds};
use self::shapes::{Fallback, Shape, list_zval, task_array, tasks_zval};
use crate::args::{
    Args, FloatArg, IdArg, IdsArg, IntArg, NumArg, OptInt, Param, StrArg, cap_wait, read_args,
    scalar_bytes, type_error, type_name,
};
use crate::connect::settings;
use crate::errors::{exception, guard, lock_exception, settle, warn};
use crate::jobs::{self, CallableArg, Work};

/// Queues kept per object (their key names are computed once).
const QUEUE_CACHE: usize = 1024;

/// A task queue with the API of the legacy `RedisQueue` class.
#[php_class]
#[php(name = "RedisQueue")]
pub struct RedisQueue {
    client: Client,
    /// The options of every queue of this object (prefixes, visibility,
    /// attempts, backoff), from the constructor's array.
    opts: QueueOptions,
    queues: HashMap<Vec<u8>, Arc<Queue>>,
    /// Until when the reservations this object handed out (and touched) are
    /// ours at least, by receipt: an ack or nack whose reply is lost is
    /// judged by it (see `Queue::ack_valid`).
    valid: HashMap<String, Instant>,
}

/// Receipts whose validity an object remembers (the oldest are forgotten:
/// their acks are judged as from an unknown receipt).
const VALID_MAX: usize = 4096;

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
        let q = Arc::new(Queue::new(&self.client, name, self.opts.clone())?);
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
            let s = settings("RedisQueue::__construct", param)?;
            let client = s.client.ok_or_else(|| {
                lock_exception("RedisQueue needs one Redis URL ('servers' is for RedisLock)")
            })?;
            let mut opts = QueueOptions::default();
            if let Some(p) = s.prefix {
                opts.prefix = p;
            }
            if let Some(p) = s.lock_prefix {
                opts.lock_prefix = p;
            }
            queue_settings(param, &mut opts)?;
            // Checked now, not at the first call.
            Queue::new(&client, b"-", opts.clone()).map_err(exception)?;
            Ok(Self {
                client,
                opts,
                queues: HashMap::new(),
                valid: HashMap::new(),
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
                Some(tasks) => tasks_zval(&tasks, count, Shape::Legacy),
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
                Some(tasks) => tasks_zval(&tasks, count, Shape::Legacy),
                None => Ok(Fallback::False.zval()),
            }
        })
    }

    /// Extra: adds tasks with payloads, `[id => payload, ...]` (payloads are
    /// strings, binary safe), due `$afterInterval` seconds from now. Ids
    /// already queued keep their score and take the new payload; an id in
    /// flight is queued again, with it, when its reservation ends.
    #[php(defaults(timeout = Some(10.into()), afterInterval = Some(0.into())))]
    pub fn enqueueWithPayloads(
        &mut self,
        name: StrArg,
        tasks: ArrayArg<'_>,
        timeout: Option<IntArg>,
        afterInterval: Option<NumArg>,
    ) -> PhpResult<bool> {
        guard(|| {
            let mut args = Args::new("RedisQueue::enqueueWithPayloads");
            let name = args.read("name", name)?;
            let at = args.at("tasks");
            let array = tasks.read(&at)?;
            let mut items = Vec::with_capacity(array.len());
            for (key, value) in array.iter() {
                let id = key.to_string().into_bytes();
                let value = value.dereference();
                let payload = match scalar_bytes(value) {
                    Some(p) if value.is_string() || value.is_long() || value.is_double() => p,
                    _ => {
                        return Err(type_error(
                            &at,
                            "array of id => string payload",
                            &format!(
                                "{} (the payload of {:?})",
                                type_name(value),
                                String::from_utf8_lossy(&id)
                            ),
                        ));
                    }
                };
                items.push((id, payload));
            }
            let timeout = args.read("timeout", timeout)?;
            let afterInterval = args.read("afterInterval", afterInterval)?;
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
            if items.is_empty() {
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
            let added = queue.enqueue_with_payloads(&items, delay, Some(seconds(timeout)), None);
            Ok(settle(added)?.is_some())
        })
    }

    /// Extra: reserves up to `$count` due tasks for `$visibility` seconds
    /// (null: the object's visibility, 30 s by default), waiting up to
    /// `$wait` seconds for one (woken by enqueues). `$count == 1`: one array
    /// or false; more: a list (maybe empty). Each array: `id`, `score`,
    /// `receipt`, `attempts` (this reservation included), and `payload`
    /// when the task has one. Ack it with `ack()`; one not acked in time
    /// returns to the queue after its backoff.
    #[php(defaults(visibility = None, wait = Some(0.into()), count = Some(1.into())))]
    pub fn reserve(
        &mut self,
        name: StrArg,
        visibility: Option<OptSeconds>,
        wait: Option<NumArg>,
        count: Option<IntArg>,
    ) -> PhpResult<Zval> {
        guard(|| {
            read_args!("RedisQueue::reserve", name, visibility, wait, count);
            let fail = || {
                if count == 1 {
                    Fallback::False.zval()
                } else {
                    Fallback::EmptyArray.zval()
                }
            };
            let Some((queue, n)) = self.open_counted(&name, count)? else {
                return Ok(fail());
            };
            let Some(visibility) = settle(
                visibility
                    .map(|v| validate::seconds(v, "visibility", true))
                    .transpose(),
            )?
            else {
                return Ok(fail());
            };
            let Some(wait) = settle(Wait::from_secs(Some(cap_wait(wait)), "wait"))? else {
                return Ok(fail());
            };
            match settle(queue.reserve_many(n, visibility, wait, None))? {
                Some(tasks) => {
                    for t in &tasks {
                        self.remember(t);
                    }
                    tasks_zval(&tasks, count, Shape::Reserved)
                }
                None => Ok(fail()),
            }
        })
    }

    /// Extra: acknowledges a reserved task; false when the reservation was
    /// lost (expired and handed out again). A receipt of another task is
    /// refused with a warning, and nothing changes.
    pub fn ack(&mut self, name: StrArg, id: IdArg, receipt: StrArg) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisQueue::ack", name, id, receipt);
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
            let receipt = String::from_utf8_lossy(&receipt).into_owned();
            let valid = self.valid.remove(&receipt);
            Ok(settle(queue.ack_valid(&id, &receipt, valid))?.unwrap_or(false))
        })
    }

    /// Extra: gives a reserved task back, due after `$delay` seconds, or
    /// after its backoff when null; at its last attempt it goes to the dead
    /// set instead. False when the reservation was lost.
    #[php(defaults(delay = None))]
    pub fn nack(
        &mut self,
        name: StrArg,
        id: IdArg,
        receipt: StrArg,
        delay: Option<OptSeconds>,
    ) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisQueue::nack", name, id, receipt, delay);
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
            let receipt = String::from_utf8_lossy(&receipt).into_owned();
            let valid = self.valid.remove(&receipt);
            Ok(settle(queue.nack_valid(&id, &receipt, delay, valid, None))?.unwrap_or(false))
        })
    }

    /// Extra: extends a reservation (a heartbeat): it now runs out
    /// `$visibility` seconds from now (null: the visibility it was reserved
    /// with). False when it is no longer ours.
    #[php(defaults(visibility = None))]
    pub fn touch(
        &mut self,
        name: StrArg,
        id: IdArg,
        receipt: StrArg,
        visibility: Option<OptSeconds>,
    ) -> PhpResult<bool> {
        guard(|| {
            read_args!("RedisQueue::touch", name, id, receipt, visibility);
            let Some(queue) = self.open(&name)? else {
                return Ok(false);
            };
            let receipt = String::from_utf8_lossy(&receipt).into_owned();
            let Some(visibility) = settle(
                visibility
                    .map(|v| validate::seconds(v, "visibility", true))
                    .transpose(),
            )?
            else {
                return Ok(false);
            };
            let sent = Instant::now();
            let touched = settle(queue.touch(&id, &receipt, visibility))?.unwrap_or(false);
            if touched {
                let v = visibility.unwrap_or(self.opts.visibility);
                self.valid.insert(receipt, sent + v);
            }
            Ok(touched)
        })
    }

    /// Extra: up to `$count` dead tasks (they used their last attempt) from
    /// `$offset` on, the oldest death first: a list of `['id', 'score' =>
    /// when it died, 'attempts', 'payload' when it has one]`.
    #[php(defaults(count = Some(100.into()), offset = Some(0.into())))]
    pub fn dead(
        &mut self,
        name: StrArg,
        count: Option<IntArg>,
        offset: Option<IntArg>,
    ) -> PhpResult<Zval> {
        guard(|| {
            read_args!("RedisQueue::dead", name, count, offset);
            let Some((queue, n)) = self.open_counted(&name, count)? else {
                return Ok(Fallback::EmptyArray.zval());
            };
            if offset < 0 {
                warn(&format!("offset must be >= 0, got {offset}"));
                return Ok(Fallback::EmptyArray.zval());
            }
            let offset = usize::try_from(offset).unwrap_or(usize::MAX);
            match settle(queue.dead(offset, n))? {
                Some(tasks) => list_zval(&tasks, Shape::Dead),
                None => Ok(Fallback::EmptyArray.zval()),
            }
        })
    }

    /// Extra: puts dead tasks back into the queue, due now, attempts reset,
    /// payloads kept: those of `$ids` (an id or an array) that are dead, or
    /// all when null. Returns how many.
    #[php(defaults(ids = None))]
    pub fn retryDead(&mut self, name: StrArg, ids: Option<OptIds>) -> PhpResult<i64> {
        guard(|| self.dead_op("RedisQueue::retryDead", name, ids, true))
    }

    /// Extra: deletes dead tasks and their payloads: those of `$ids` that
    /// are dead, or all when null. Returns how many.
    #[php(defaults(ids = None))]
    pub fn purgeDead(&mut self, name: StrArg, ids: Option<OptIds>) -> PhpResult<i64> {
        guard(|| self.dead_op("RedisQueue::purgeDead", name, ids, false))
    }

    /// Extra: `['due', 'delayed', 'in_flight', 'dead', 'oldest_due_age']`:
    /// counts, and how long the oldest due task has been due (seconds). One
    /// round trip, never a scan.
    pub fn stats(&mut self, name: StrArg) -> PhpResult<Zval> {
        guard(|| {
            read_args!("RedisQueue::stats", name);
            let Some(queue) = self.open(&name)? else {
                return Ok(Fallback::False.zval());
            };
            jobs::stats_zval(&queue.stats().map_err(exception)?)
        })
    }

    /// Extra: a worker loop for CLI workers. Calls `$handler($task)` for each
    /// task (the array `reserve()` gives); a handler that returns acks the
    /// task, one that throws nacks it (backoff, or the dead set at its last
    /// attempt; the exception is logged with `error_log`). Each step is one
    /// round trip: the ack of a task reserves the next. The reservation is
    /// kept alive while the handler runs. Connection errors are logged and
    /// ridden out. Stops when `RedisQueue::stop()` is called, on SIGTERM or
    /// SIGINT when pcntl is loaded (the task at hand is finished first; a
    /// second SIGINT kills), after `max_jobs`, or when nothing came within
    /// `wait`. Options: `wait` (seconds to wait for work; null: forever;
    /// 0: drain what is due), `visibility`, `heartbeat` (bool, default true),
    /// `max_jobs` (0: no limit). Returns how many tasks were handled.
    #[php(defaults(options = None))]
    pub fn work(
        &mut self,
        name: StrArg,
        handler: CallableArg<'_>,
        options: Option<ArrayArg<'_>>,
    ) -> PhpResult<i64> {
        guard(|| {
            read_args!("RedisQueue::work", name, handler, options);
            let Some(opts) = settle(work_options(options))? else {
                return Ok(0);
            };
            let Some(queue) = self.open(&name)? else {
                return Ok(0);
            };
            let (worker_opts, max_jobs) = opts;
            let spec = Work {
                what: "RedisQueue::work",
                // Its name as registered (`Ferrolock\RedisQueue` with the
                // global names off).
                stop_handler: format!("{}::stop", crate::legacy::class_name("RedisQueue")),
                max_jobs: (max_jobs > 0).then(|| u64::try_from(max_jobs).unwrap_or(u64::MAX)),
                fail: &exception,
            };
            jobs::work(queue, worker_opts, &spec, &handler, &|task| {
                task_array(task, Shape::Reserved)
            })
        })
    }

    /// Extra: asks every `work()` loop of this process to stop after the
    /// task at hand. `work()` installs it as the pcntl handler of SIGTERM and
    /// SIGINT (hence its parameters, which it ignores but for SIGINT: a
    /// second one then kills the process, as without a handler).
    #[php(defaults(signal = None, info = None))]
    pub fn stop(signal: Option<OptInt>, info: Option<ArrayArg<'_>>) -> PhpResult<()> {
        guard(|| {
            read_args!("RedisQueue::stop", signal, info);
            let _ = info;
            jobs::stop(signal);
            Ok(())
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

impl RedisQueue {
    /// Remembers until when the reservation of `task` is ours.
    fn remember(&mut self, task: &Task) {
        if let (Some(receipt), Some(until)) = (&task.receipt, task.valid_until()) {
            if self.valid.len() >= VALID_MAX {
                let now = Instant::now();
                self.valid.retain(|_, v| *v > now);
                if self.valid.len() >= VALID_MAX {
                    self.valid.clear();
                }
            }
            self.valid.insert(receipt.clone(), until);
        }
    }

    /// `retryDead()` / `purgeDead()`.
    fn dead_op(
        &mut self,
        function: &'static str,
        name: StrArg,
        ids: Option<OptIds>,
        retry: bool,
    ) -> PhpResult<i64> {
        read_args!(function, name, ids);
        let Some(queue) = self.open(&name)? else {
            return Ok(0);
        };
        let done = if retry {
            queue.retry_dead(ids.as_deref())
        } else {
            queue.purge_dead(ids.as_deref())
        };
        Ok(settle(done)?.map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX)))
    }
}
