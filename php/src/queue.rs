//! `RedisQueue`: the legacy class's methods over `ferrolock::Queue`, and
//! the extras of the production queue (reserve/ack/nack/touch, dead
//! letters, stats, payloads, the worker loop).
// ext-php-rs' `#[php_impl]` rewrites borrowed argument types such as
// `ArrayArg<'_>` into paths with a hidden lifetime, which this lint flags.
#![allow(elided_lifetimes_in_paths)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ext_php_rs::convert::FromZval;
use ext_php_rs::exception::PhpResult;
use ext_php_rs::flags::DataType;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendHashTable, Zval};
use ferrolock::{
    Client, Outcome, Queue, QueueOptions, Task, Wait, Worker, WorkerOptions, validate,
};

use crate::args::{
    Args, FloatArg, IdArg, IdsArg, IntArg, NumArg, Param, StrArg, bytes_zval, cap_wait, read_args,
    scalar_bytes, type_error, type_name,
};
use crate::connect::settings;
use crate::errors::{exception, guard, lock_exception, settle, warn};

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

/// Set by `RedisQueue::stop()` (and the signal handlers `work()` installs):
/// every `work()` loop of this process stops after the task at hand.
static STOP: AtomicBool = AtomicBool::new(false);

/// The queue settings a constructor array may hold besides the connection:
/// `visibility`, `max_attempts` (null: unlimited), `backoff`, `backoff_cap`,
/// `backoff_jitter`, `min_replicas`. Unknown keys are the connection's (see `connect.rs`).
fn queue_settings(param: Option<&Zval>, opts: &mut QueueOptions) -> PhpResult<()> {
    let Some(array) = param.and_then(Zval::array) else {
        return Ok(());
    };
    let bad = |key: &str, allowed: &str, value: &Zval| {
        lock_exception(format!(
            "connection array: '{key}' must be {allowed}, got {}",
            type_name(value)
        ))
    };
    let number = |key: &str, value: &Zval| -> PhpResult<f64> {
        value
            .double()
            .or_else(|| value.long().map(|l| l as f64))
            .filter(|v| v.is_finite())
            .ok_or_else(|| bad(key, "a number of seconds", value))
    };
    let secs = |key: &str, value: &Zval, zero_ok: bool| -> PhpResult<Duration> {
        validate::seconds(number(key, value)?, key, zero_ok).map_err(exception)
    };
    for (key, value) in array.iter() {
        let key = key.to_string();
        let value = value.dereference();
        match key.as_str() {
            "visibility" => opts.visibility = secs(&key, value, true)?,
            "backoff" => opts.backoff = secs(&key, value, true)?,
            "backoff_cap" => opts.backoff_cap = secs(&key, value, true)?,
            "backoff_jitter" => opts.backoff_jitter = number(&key, value)?,
            "min_replicas" => {
                let n = value
                    .long()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad(&key, "an int >= 0", value))?;
                opts.min_replicas = u32::try_from(n).unwrap_or(u32::MAX);
            }
            "max_attempts" if value.is_null() => opts.max_attempts = None,
            "max_attempts" => {
                let n = value
                    .long()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad(&key, "an int >= 1 or null (unlimited)", value))?;
                opts.max_attempts = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
            _ => {}
        }
    }
    Ok(())
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

/// What a task array holds besides `id` and `score` (and `payload`, when
/// the task has one).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The legacy pop/top array.
    Legacy,
    /// A reservation: `receipt`, `attempts`.
    Reserved,
    /// A dead task: `attempts` (its score: when it died).
    Dead,
}

fn task_array(task: &Task, shape: Shape) -> PhpResult<Zval> {
    let mut row = ZendHashTable::new();
    row.insert("id", bytes_zval(&task.id))?;
    row.insert("score", task.score)?;
    if shape == Shape::Reserved {
        row.insert("receipt", task.receipt.clone().unwrap_or_default())?;
    }
    if shape != Shape::Legacy {
        row.insert("attempts", i64::from(task.attempts))?;
    }
    if let Some(p) = &task.payload {
        row.insert("payload", bytes_zval(p))?;
    }
    let mut z = Zval::new();
    z.set_hashtable(row);
    Ok(z)
}

/// Legacy shapes: `$count == 1` → one array or false; else a list.
fn tasks_zval(tasks: &[Task], count: i64, shape: Shape) -> PhpResult<Zval> {
    if count == 1 {
        return match tasks.first() {
            Some(t) => task_array(t, shape),
            None => Ok(Fallback::False.zval()),
        };
    }
    list_zval(tasks, shape)
}

fn list_zval(tasks: &[Task], shape: Shape) -> PhpResult<Zval> {
    let mut list = ZendHashTable::new();
    for t in tasks {
        list.push(task_array(t, shape)?)?;
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
            let s = queue.stats().map_err(exception)?;
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let mut row = ZendHashTable::new();
            row.insert("due", n(s.due))?;
            row.insert("delayed", n(s.delayed))?;
            row.insert("in_flight", n(s.in_flight))?;
            row.insert("dead", n(s.dead))?;
            row.insert("oldest_due_age", s.oldest_due_age)?;
            let mut z = Zval::new();
            z.set_hashtable(row);
            Ok(z)
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
            let mut worker = Worker::new(queue, worker_opts).map_err(exception)?;
            STOP.store(false, Ordering::Release);
            let signals = Signals::install();
            let hook = || -> ferrolock::Result<()> {
                signals.dispatch();
                if STOP.load(Ordering::Acquire) {
                    return Err(ferrolock::wait::interrupted("RedisQueue::work"));
                }
                Ok(())
            };
            let log = |e: &ferrolock::Error| {
                error_log(&format!("ferrolock: RedisQueue::work: {e}; trying again"));
            };
            let mut outcome = Outcome::Done;
            let mut handled: i64 = 0;
            let mut next = worker.next(outcome, Some(&hook), &log);
            let result = loop {
                let task = match next {
                    Ok(Some(task)) => task,
                    Ok(None) => break Ok(()),
                    Err(e) if e.is_interrupted() => break Ok(()),
                    Err(e) => break Err(exception(e)),
                };
                let row = task_array(&task, Shape::Reserved)?;
                outcome = match handler.try_call(vec![&row]) {
                    Ok(_) => Outcome::Done,
                    Err(e) => {
                        error_log(&format!(
                            "ferrolock: RedisQueue::work: task {:?} failed (attempt {}): {}",
                            String::from_utf8_lossy(&task.id),
                            task.attempts,
                            describe(e)
                        ));
                        Outcome::Failed
                    }
                };
                handled += 1;
                signals.dispatch();
                if STOP.load(Ordering::Acquire) || (max_jobs > 0 && handled >= max_jobs) {
                    break Ok(());
                }
                next = worker.next(outcome, Some(&hook), &log);
            };
            if let Err(e) = worker.finish(outcome, None) {
                error_log(&format!(
                    "ferrolock: RedisQueue::work: could not finish the last task: {e} \
                     (it returns when its reservation runs out)"
                ));
            }
            signals.restore();
            result.map(|()| handled)
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
            STOP.store(true, Ordering::Release);
            if signal == Some(SIGINT) {
                call("pcntl_signal", vec![&SIGINT, &0i64]);
            }
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

/// `work()`'s options: the worker's, and `max_jobs` (0: no limit). A wrong
/// type is a `TypeError`; a bad value, a warning (through `settle`).
fn work_options(options: Option<&ZendHashTable>) -> ferrolock::Result<(WorkerOptions, i64)> {
    let mut opts = WorkerOptions::default();
    let mut max_jobs = 0;
    let Some(array) = options else {
        return Ok((opts, max_jobs));
    };
    let number = |key: &str, z: &Zval| -> ferrolock::Result<f64> {
        z.double()
            .or_else(|| z.long().map(|l| l as f64))
            .ok_or_else(|| {
                ferrolock::Error::invalid(format!(
                    "{key} must be a number of seconds or null, got {}",
                    type_name(z)
                ))
            })
    };
    for (key, value) in array.iter() {
        let key = key.to_string();
        let value = value.dereference();
        match key.as_str() {
            "wait" if value.is_null() => opts.wait = Wait::Forever,
            "wait" => {
                opts.wait = Wait::from_secs(Some(cap_wait(number(&key, value)?)), "wait")?;
            }
            "visibility" if value.is_null() => opts.visibility = None,
            "visibility" => {
                opts.visibility = Some(validate::ttl(number(&key, value)?, "visibility")?);
            }
            "heartbeat" => opts.heartbeat = value.coerce_to_bool(),
            "max_jobs" => match value.long() {
                Some(n) if n >= 0 => max_jobs = n,
                _ => {
                    return Err(ferrolock::Error::invalid(format!(
                        "max_jobs must be an int >= 0, got {}",
                        type_name(value)
                    )));
                }
            },
            other => {
                return Err(ferrolock::Error::invalid(format!(
                    "unknown option '{other}' (wait, visibility, heartbeat, max_jobs)"
                )));
            }
        }
    }
    Ok((opts, max_jobs))
}

/// An optional `int|float|null` of seconds, where null means "the default"
/// (reflection: `?float`).
pub struct OptSeconds(Option<NumArg>);

impl<'a> FromZval<'a> for OptSeconds {
    const TYPE: DataType = DataType::Double;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        if z.is_null() {
            Some(OptSeconds(None))
        } else {
            NumArg::from_zval(z).map(|n| OptSeconds(Some(n)))
        }
    }
}

impl Param for Option<OptSeconds> {
    type Value = Option<f64>;
    fn read(self, at: &crate::args::At) -> PhpResult<Option<f64>> {
        match self.and_then(|s| s.0) {
            None => Ok(None),
            Some(n) => n.read(at).map(Some),
        }
    }
}

/// An optional `int|null` (reflection: `?int`): null is `None`.
pub struct OptInt(Option<IntArg>);

impl<'a> FromZval<'a> for OptInt {
    const TYPE: DataType = DataType::Long;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        if z.is_null() {
            Some(OptInt(None))
        } else {
            IntArg::from_zval(z).map(|n| OptInt(Some(n)))
        }
    }
}

impl Param for Option<OptInt> {
    type Value = Option<i64>;
    fn read(self, at: &crate::args::At) -> PhpResult<Option<i64>> {
        match self.and_then(|s| s.0) {
            None => Ok(None),
            Some(n) => n.read(at).map(Some),
        }
    }
}

/// Optional task ids: one id, an array of them, or null (`None`).
pub struct OptIds(Option<IdsArg>);

impl<'a> FromZval<'a> for OptIds {
    const TYPE: DataType = DataType::Mixed;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        if z.is_null() {
            Some(OptIds(None))
        } else {
            IdsArg::from_zval(z).map(|n| OptIds(Some(n)))
        }
    }
}

impl Param for Option<OptIds> {
    type Value = Option<Vec<Vec<u8>>>;
    fn read(self, at: &crate::args::At) -> PhpResult<Option<Vec<Vec<u8>>>> {
        match self.and_then(|s| s.0) {
            None => Ok(None),
            Some(ids) => ids.read(at).map(Some),
        }
    }
}

/// An `array` parameter (reflection: `array`), any other value a `TypeError`.
pub struct ArrayArg<'a>(&'a Zval);

impl<'a> FromZval<'a> for ArrayArg<'a> {
    const TYPE: DataType = DataType::Array;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(ArrayArg(z))
    }
}

impl<'a> Param for ArrayArg<'a> {
    type Value = &'a ZendHashTable;
    fn read(self, at: &crate::args::At) -> PhpResult<&'a ZendHashTable> {
        self.0
            .array()
            .ok_or_else(|| type_error(at, "array", &type_name(self.0)))
    }
}

/// An optional `?array` (null: `None`).
impl<'a> Param for Option<ArrayArg<'a>> {
    type Value = Option<&'a ZendHashTable>;
    fn read(self, at: &crate::args::At) -> PhpResult<Option<&'a ZendHashTable>> {
        match self.filter(|a| !a.0.is_null()) {
            None => Ok(None),
            Some(a) => a.read(at).map(Some),
        }
    }
}

/// A `callable` parameter (reflection: `callable`).
pub struct CallableArg<'a>(&'a Zval);

impl<'a> FromZval<'a> for CallableArg<'a> {
    const TYPE: DataType = DataType::Callable;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(CallableArg(z))
    }
}

impl<'a> Param for CallableArg<'a> {
    type Value = ZendCallable<'a>;
    fn read(self, at: &crate::args::At) -> PhpResult<ZendCallable<'a>> {
        ZendCallable::new(self.0).map_err(|_| type_error(at, "callable", &type_name(self.0)))
    }
}

/// Signal numbers (the same on Linux and the BSDs).
const SIGINT: i64 = 2;
const SIGTERM: i64 = 15;

/// Calls the PHP function `name`, if it exists; its result, if it returned.
fn call(name: &str, args: Vec<&dyn ext_php_rs::convert::IntoZvalDyn>) -> Option<Zval> {
    ZendCallable::try_from_name(name).ok()?.try_call(args).ok()
}

/// Logs `message` with PHP's `error_log()` (stderr in the CLI, else the
/// configured log).
fn error_log(message: &str) {
    call("error_log", vec![&message]);
}

/// What a handler threw, as a log line.
fn describe(e: ext_php_rs::error::Error) -> String {
    match e {
        ext_php_rs::error::Error::Exception(obj) => {
            let class = obj.get_class_name().unwrap_or_else(|_| "exception".into());
            let message = obj
                .try_call_method("getMessage", vec![])
                .ok()
                .and_then(|m| m.string())
                .unwrap_or_default();
            format!("{class}: {message}")
        }
        other => other.to_string(),
    }
}

/// SIGTERM and SIGINT handled by `RedisQueue::stop` while `work()` runs
/// (when pcntl is loaded), the previous handlers restored after.
struct Signals {
    dispatch: Option<ZendCallable<'static>>,
    previous: Vec<(i64, Zval)>,
    /// `pcntl_async_signals()` before: it is on while `work()` runs, so that
    /// a signal is handled at once, inside a long handler too (the first
    /// SIGINT then sets the second one to kill).
    was_async: Option<Zval>,
}

impl Signals {
    fn install() -> Self {
        let mut me = Self {
            dispatch: None,
            previous: Vec::new(),
            was_async: None,
        };
        if ZendCallable::try_from_name("pcntl_signal").is_err() {
            return me;
        }
        let handler = format!(
            "{}::stop",
            <RedisQueue as ext_php_rs::class::RegisteredClass>::CLASS_NAME
        );
        for sig in [SIGTERM, SIGINT] {
            let Some(previous) = call("pcntl_signal_get_handler", vec![&sig]) else {
                continue;
            };
            if call("pcntl_signal", vec![&sig, &handler.as_str()]).is_some() {
                me.previous.push((sig, previous));
            }
        }
        me.dispatch = ZendCallable::try_from_name("pcntl_signal_dispatch").ok();
        me.was_async = call("pcntl_async_signals", vec![&true]);
        me
    }

    /// Runs the PHP signal handlers of signals that arrived.
    fn dispatch(&self) {
        if let Some(d) = &self.dispatch {
            let _ = d.try_call(vec![]);
        }
    }

    fn restore(&self) {
        for (sig, previous) in &self.previous {
            call("pcntl_signal", vec![sig, previous]);
        }
        if let Some(was) = &self.was_async {
            call("pcntl_async_signals", vec![was]);
        }
    }
}
