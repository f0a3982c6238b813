//! `Queue` and `Task`.
//!
//! The package subclasses `Queue` in `ferrolock/_queue.py` to add the worker
//! loop, written in Python on top of `_Worker` (`worker.rs`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolock::{
    DEFAULT_BACKOFF, DEFAULT_BACKOFF_CAP, DEFAULT_BACKOFF_JITTER, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE_PREFIX, DEFAULT_VISIBILITY, Heartbeat, QueueOptions, Wait, validate,
};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::convert::{
    arg, blocking, blocking_undo, bytes_str, client, enqueue_items, quick, str_bytes, wait_secs,
};
use crate::errors::{IntoPy, type_error};

/// Where a task came from decides what `ack`/`nack` mean.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `pop()`: already removed from the queue.
    Popped,
    /// `top()`: still in the queue, read only.
    Peeked,
    /// `reserve()`: in flight until acked or nacked.
    Reserved,
    /// `dead()`: in the dead set.
    Dead,
}

/// A task id with its score (and, when reserved, its receipt).
#[pyclass(name = "Task", module = "ferrolock", frozen)]
pub struct PyTask {
    queue: Arc<ferrolock::Queue>,
    task: ferrolock::Task,
    origin: Origin,
    /// The heartbeat of a `with task:` block.
    beat: Mutex<Option<Heartbeat>>,
}

impl PyTask {
    pub(crate) fn new(queue: Arc<ferrolock::Queue>, task: ferrolock::Task, origin: Origin) -> Self {
        Self {
            queue,
            task,
            origin,
            beat: Mutex::new(None),
        }
    }

    /// Until when the reservation is ours at least: while the `with` block's
    /// heartbeat keeps it alive, now; else as reserved.
    fn valid_until(&self) -> Option<Instant> {
        let alive = self
            .beat
            .lock()
            .ok()
            .is_some_and(|b| b.as_ref().is_some_and(|b| !b.is_lost()));
        if alive {
            Some(Instant::now() + Duration::from_millis(100))
        } else {
            self.task.valid_until()
        }
    }
}

/// A task operation as a job for `convert::blocking` or the asyncio executor.
pub(crate) type TaskJob = Box<
    dyn for<'a> FnOnce(Option<ferrolock::wait::Interrupt<'a>>) -> ferrolock::Result<bool> + Send,
>;

impl PyTask {
    /// What `ack` does, for this task's origin (see the stub).
    pub(crate) fn ack_job(&self) -> TaskJob {
        let valid = self.valid_until();
        let (queue, task) = (self.queue.clone(), self.task.clone());
        match self.origin {
            Origin::Popped => Box::new(|_| Ok(true)),
            Origin::Dead => Box::new(|_| Ok(false)),
            Origin::Peeked => Box::new(move |hook| queue.dequeue(&task.id, task.score, None, hook)),
            Origin::Reserved => Box::new(move |_| {
                queue.ack_valid(&task.id, task.receipt.as_deref().unwrap_or(""), valid)
            }),
        }
    }

    /// What `nack(delay)` does, for this task's origin.
    pub(crate) fn nack_job(&self, delay: Option<f64>) -> PyResult<TaskJob> {
        let delay = delay_arg(delay)?;
        let valid = self.valid_until();
        let (queue, task) = (self.queue.clone(), self.task.clone());
        Ok(match self.origin {
            Origin::Popped => Box::new(move |hook| {
                queue
                    .enqueue(&[&task.id], delay.unwrap_or(0.0), None, hook)
                    .map(|n| n == 1)
            }),
            Origin::Peeked | Origin::Dead => Box::new(|_| Ok(false)),
            Origin::Reserved => Box::new(move |hook| {
                let receipt = task.receipt.as_deref().unwrap_or("");
                queue.nack_valid(&task.id, receipt, delay, valid, hook)
            }),
        })
    }

    /// What `touch(visibility)` does.
    pub(crate) fn touch_job(&self, visibility: Option<f64>) -> PyResult<TaskJob> {
        let visibility = visibility
            .map(|v| validate::seconds(v, "visibility", true))
            .transpose()
            .py()?;
        if self.origin != Origin::Reserved {
            return Ok(Box::new(|_| Ok(false)));
        }
        let (queue, task) = (self.queue.clone(), self.task.clone());
        Ok(Box::new(move |_| {
            queue.touch(&task.id, task.receipt.as_deref().unwrap_or(""), visibility)
        }))
    }

    /// Starts keeping a reserved task's reservation alive (no round trip).
    pub(crate) fn start_beat(&self) -> PyResult<()> {
        if self.origin == Origin::Reserved {
            let beat = self.queue.keep_alive(&self.task).py()?;
            if let Ok(mut slot) = self.beat.lock() {
                *slot = Some(beat);
            }
        }
        Ok(())
    }

    /// Stops the heartbeat, if any.
    pub(crate) fn stop_beat(&self) {
        if let Ok(mut slot) = self.beat.lock() {
            slot.take();
        }
    }
}

/// `delay` in seconds (`None` → the task's backoff).
fn delay_arg(delay: Option<f64>) -> PyResult<Option<f64>> {
    delay.map(|d| validate::offset(d, "delay")).transpose().py()
}

#[pymethods]
impl PyTask {
    #[getter]
    fn id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        bytes_str(py, &self.task.id)
    }

    #[getter]
    fn score(&self) -> f64 {
        self.task.score
    }

    #[getter]
    fn receipt(&self) -> Option<String> {
        self.task.receipt.clone()
    }

    #[getter]
    fn deadline(&self) -> Option<f64> {
        self.task.deadline
    }

    #[getter]
    fn attempts(&self) -> u32 {
        self.task.attempts
    }

    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.task.payload.as_deref().map(|p| PyBytes::new(py, p))
    }

    /// Acknowledge: done with this task.
    fn ack(&self, py: Python<'_>) -> PyResult<bool> {
        let job = self.ack_job();
        match self.origin {
            // One round trip: not worth a thread under gevent.
            Origin::Reserved => quick(py, move || job(None)),
            _ => blocking(py, None, job),
        }
    }

    /// Give the task back, due after `delay` seconds (reserved: after its
    /// backoff when None).
    #[pyo3(signature = (delay = None))]
    fn nack(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::opt_delay)] delay: Option<f64>,
    ) -> PyResult<bool> {
        blocking(py, None, self.nack_job(delay)?)
    }

    /// Extend the reservation (see the stub).
    #[pyo3(signature = (visibility = None))]
    fn touch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<bool> {
        let job = self.touch_job(visibility)?;
        quick(py, move || job(None))
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().start_beat()?;
        Ok(slf)
    }

    #[pyo3(signature = (exc_type = None, exc = None, tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        exc: Option<Bound<'_, PyAny>>,
        tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _ = (exc, tb);
        let ok = exc_type.is_none_or(|t| t.is_none());
        let result = if ok {
            self.ack(py).map(drop)
        } else {
            self.nack(py, None).map(drop)
        };
        self.stop_beat(); // renewals stop once the reservation has ended
        if !ok {
            // Best effort: if it fails, the visibility timeout returns the task.
            // A KeyboardInterrupt (or SystemExit) raised by a signal handler
            // while it waited is not an error of the nack: it goes on up.
            if let Err(e) = result
                && !e.is_instance_of::<PyException>(py)
            {
                return Err(e);
            }
            return Ok(false);
        }
        result.map(|()| false)
    }

    fn __repr__(&self) -> String {
        let mut s = format!(
            "Task(id={:?}, score={:?}",
            String::from_utf8_lossy(&self.task.id),
            self.task.score
        );
        if self.task.attempts > 0 {
            s.push_str(&format!(", attempts={}", self.task.attempts));
        }
        if let Some(p) = &self.task.payload {
            s.push_str(&format!(", payload=<{} bytes>", p.len()));
        }
        s.push(')');
        s
    }
}

// The signature below spells out the core's defaults (pyo3 writes only
// literal defaults into `__text_signature__`); checked at build time.
const _: () = assert!(DEFAULT_VISIBILITY.as_secs_f64() == 30.0);
const _: () = assert!(DEFAULT_MAX_ATTEMPTS == 10);
const _: () = assert!(DEFAULT_BACKOFF.as_secs_f64() == 1.0);
const _: () = assert!(DEFAULT_BACKOFF_CAP.as_secs_f64() == 300.0);
const _: () = assert!(DEFAULT_BACKOFF_JITTER == 0.5);

/// A task queue (legacy-compatible `Queue:<name>` sorted set).
#[pyclass(name = "Queue", module = "ferrolock._native", subclass, frozen)]
pub struct PyQueue {
    pub(crate) inner: Arc<ferrolock::Queue>,
}

impl PyQueue {
    pub(crate) fn tasks<'py>(
        &self,
        py: Python<'py>,
        tasks: Vec<ferrolock::Task>,
        origin: Origin,
        count: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut wrapped = tasks
            .into_iter()
            .map(|task| PyTask::new(self.inner.clone(), task, origin));
        match count {
            None => match wrapped.next() {
                Some(t) => Ok(Bound::new(py, t)?.into_any()),
                None => Ok(py.None().into_bound(py)),
            },
            Some(_) => {
                let list = PyList::empty(py);
                for t in wrapped {
                    list.append(Bound::new(py, t)?)?;
                }
                Ok(list.into_any())
            }
        }
    }
}

pub(crate) fn count_arg(count: Option<i64>) -> PyResult<usize> {
    match count {
        None => Ok(1),
        Some(n) => validate::count(n, "count").py(),
    }
}

/// Task ids given as one `str`, an iterable of `str`, or a mapping id → payload.
pub(crate) enum Ids {
    Plain(Vec<Vec<u8>>),
    WithPayloads(Vec<(Vec<u8>, Vec<u8>)>),
}

/// `ids` as `enqueue` takes them (see `convert::enqueue_items`); without
/// `with_mappings`, a mapping is refused.
pub(crate) fn ids_arg(ids: &Bound<'_, PyAny>, with_mappings: bool) -> PyResult<Ids> {
    let items = enqueue_items(ids)?;
    match items.payloads {
        None => Ok(Ids::Plain(items.ids)),
        Some(payloads) if with_mappings => Ok(Ids::WithPayloads(
            items.ids.into_iter().zip(payloads).collect(),
        )),
        Some(_) => Err(type_error("ids", "a str or an iterable of str", ids)),
    }
}

/// Gives back tasks popped for a caller that is gone (a greenlet killed while
/// it waited): each due again at its own score, with its payload.
pub(crate) fn put_back(queue: &ferrolock::Queue, tasks: Vec<ferrolock::Task>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    for task in tasks {
        let delay = task.score - now;
        let _ = match &task.payload {
            Some(p) => queue.enqueue_with_payloads(&[(&task.id, p)], delay, None, None),
            None => queue.enqueue(&[&task.id], delay, None, None),
        };
    }
}

/// A duration in seconds that may be zero (backoffs).
fn seconds_arg(value: f64, what: &str) -> PyResult<Duration> {
    validate::seconds(value, what, true).py()
}

#[pymethods]
impl PyQueue {
    #[new]
    // Defaults are the core's (see `PyLock::new`).
    #[pyo3(
        signature = (name, *, url = None, prefix = DEFAULT_QUEUE_PREFIX.into(),
                     visibility = DEFAULT_VISIBILITY.as_secs_f64(),
                     max_attempts = Some(i64::from(DEFAULT_MAX_ATTEMPTS)),
                     backoff = DEFAULT_BACKOFF.as_secs_f64(),
                     backoff_cap = DEFAULT_BACKOFF_CAP.as_secs_f64(),
                     backoff_jitter = DEFAULT_BACKOFF_JITTER, min_replicas = 0),
        text_signature = "(name, *, url=None, prefix='Queue:', visibility=30.0, max_attempts=10, \
                          backoff=1.0, backoff_cap=300.0, backoff_jitter=0.5, min_replicas=0)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::url)] url: Option<String>,
        #[pyo3(from_py_with = arg::prefix)] prefix: Vec<u8>,
        #[pyo3(from_py_with = arg::visibility)] visibility: f64,
        #[pyo3(from_py_with = arg::max_attempts)] max_attempts: Option<i64>,
        #[pyo3(from_py_with = arg::backoff)] backoff: f64,
        #[pyo3(from_py_with = arg::backoff_cap)] backoff_cap: f64,
        #[pyo3(from_py_with = arg::backoff_jitter)] backoff_jitter: f64,
        #[pyo3(from_py_with = arg::min_replicas)] min_replicas: i64,
    ) -> PyResult<Self> {
        let name = str_bytes(name, "name")?;
        let mut opts = QueueOptions::default();
        opts.prefix = prefix;
        opts.visibility = validate::seconds(visibility, "visibility", true).py()?;
        opts.max_attempts = match max_attempts {
            None => None,
            Some(n) => {
                Some(u32::try_from(validate::count(n, "max_attempts").py()?).unwrap_or(u32::MAX))
            }
        };
        opts.backoff = seconds_arg(backoff, "backoff")?;
        opts.backoff_cap = seconds_arg(backoff_cap, "backoff_cap")?;
        opts.backoff_jitter = backoff_jitter;
        opts.min_replicas = u32::try_from(min_replicas).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "min_replicas must be between 0 and {}, got {min_replicas}",
                u32::MAX
            ))
        })?;
        let queue = ferrolock::Queue::new(&client(url.as_deref())?, &name, opts).py()?;
        Ok(Self {
            inner: Arc::new(queue),
        })
    }

    /// Add one id, many, or ids with payloads (one round trip); returns how
    /// many were new.
    #[pyo3(signature = (ids, *, delay = 0.0))]
    fn enqueue(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::delay)] delay: f64,
    ) -> PyResult<usize> {
        let ids = ids_arg(ids, true)?;
        let queue = self.inner.clone();
        blocking(py, None, move |hook| match &ids {
            Ids::Plain(ids) => queue.enqueue(ids, delay, None, hook),
            Ids::WithPayloads(tasks) => queue.enqueue_with_payloads(tasks, delay, None, hook),
        })
    }

    /// Take due tasks (see the stub for the return shapes).
    #[pyo3(signature = (count = None, *, wait = 0.0))]
    fn pop<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
        #[pyo3(from_py_with = arg::wait)] wait: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count_arg(count)?;
        let wait = wait_secs(wait)?;
        let (queue, back) = (self.inner.clone(), self.inner.clone());
        let tasks = blocking_undo(
            py,
            None,
            move |hook| queue.pop(n, wait, None, hook),
            move |tasks| put_back(&back, tasks),
        )?;
        self.tasks(py, tasks, Origin::Popped, count)
    }

    /// Read due tasks without taking them.
    #[pyo3(signature = (count = None))]
    fn top<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count_arg(count)?;
        let queue = self.inner.clone();
        let tasks = quick(py, move || queue.top(n))?;
        self.tasks(py, tasks, Origin::Peeked, count)
    }

    /// Remove `id` if its score is still exactly `score`.
    fn dequeue(
        &self,
        py: Python<'_>,
        id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::score)] score: f64,
    ) -> PyResult<bool> {
        let id = str_bytes(id, "id")?;
        let queue = self.inner.clone();
        blocking(py, None, move |hook| queue.dequeue(&id, score, None, hook))
    }

    /// Reserve due tasks until acked (see the stub).
    #[pyo3(signature = (count = None, *, wait = 0.0, visibility = None))]
    fn reserve<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
        #[pyo3(from_py_with = arg::wait)] wait: f64,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count_arg(count)?;
        let wait: Wait = wait_secs(wait)?;
        let visibility: Option<Duration> = visibility
            .map(|v| validate::seconds(v, "visibility", true))
            .transpose()
            .py()?;
        let (queue, back) = (self.inner.clone(), self.inner.clone());
        let tasks = blocking_undo(
            py,
            None,
            move |hook| queue.reserve_many(n, visibility, wait, hook),
            move |tasks| {
                // The caller is gone (a greenlet killed while it waited):
                // the reservations go back, due at once.
                for t in tasks {
                    let _ = back.nack(&t.id, t.receipt.as_deref().unwrap_or(""), Some(0.0), None);
                }
            },
        )?;
        self.tasks(py, tasks, Origin::Reserved, count)
    }

    /// Dead tasks, oldest death first (see the stub).
    #[pyo3(signature = (count = 100, *, offset = 0))]
    fn dead<'py>(&self, py: Python<'py>, count: i64, offset: i64) -> PyResult<Bound<'py, PyAny>> {
        let n = validate::count(count, "count").py()?;
        let offset = usize::try_from(offset).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!("offset must be >= 0, got {offset}"))
        })?;
        let queue = self.inner.clone();
        let tasks = quick(py, move || queue.dead(offset, n))?;
        self.tasks(py, tasks, Origin::Dead, Some(count))
    }

    /// Dead tasks back into the queue (see the stub).
    #[pyo3(signature = (ids = None))]
    fn retry_dead(&self, py: Python<'_>, ids: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let ids = dead_ids(ids)?;
        let queue = self.inner.clone();
        quick(py, move || queue.retry_dead(ids.as_deref()))
    }

    /// Dead tasks deleted (see the stub).
    #[pyo3(signature = (ids = None))]
    fn purge_dead(&self, py: Python<'_>, ids: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let ids = dead_ids(ids)?;
        let queue = self.inner.clone();
        quick(py, move || queue.purge_dead(ids.as_deref()))
    }

    /// Counts and the age of the oldest due task (see the stub).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let queue = self.inner.clone();
        let s = quick(py, move || queue.stats())?;
        let d = PyDict::new(py);
        d.set_item("due", s.due)?;
        d.set_item("delayed", s.delayed)?;
        d.set_item("in_flight", s.in_flight)?;
        d.set_item("dead", s.dead)?;
        d.set_item("oldest_due_age", s.oldest_due_age)?;
        Ok(d)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let queue = self.inner.clone();
        quick(py, move || queue.len()).map(|n| n as usize)
    }

    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        bytes_str(py, self.inner.name())
    }

    fn __repr__(&self) -> String {
        format!(
            "<ferrolock.Queue name={:?}>",
            String::from_utf8_lossy(self.inner.name())
        )
    }
}

/// The `ids` of `retry_dead`/`purge_dead` (sync and asyncio): `None` for all.
pub(crate) fn dead_ids(ids: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<Vec<u8>>>> {
    match ids {
        None => Ok(None),
        Some(ids) => match ids_arg(ids, false)? {
            Ids::Plain(ids) => Ok(Some(ids)),
            Ids::WithPayloads(_) => unreachable!("no mappings asked for"),
        },
    }
}
