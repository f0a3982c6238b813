//! `Queue` and `Task`.

use std::sync::Arc;
use std::time::Duration;

use ferrolock::{DEFAULT_QUEUE_PREFIX, DEFAULT_VISIBILITY, QueueOptions, Wait, validate};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use crate::convert::{
    arg, blocking, blocking_undo, bytes_str, client, enqueue_items, quick, str_bytes, wait_secs,
};
use crate::errors::IntoPy;

/// Where a task came from decides what `ack`/`nack` mean.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `pop()`: already removed from the queue.
    Popped,
    /// `top()`: still in the queue, read only.
    Peeked,
    /// `reserve()`: in flight until acked or nacked.
    Reserved,
}

/// A task id with its score (and, when reserved, its receipt).
#[pyclass(name = "Task", module = "ferrolock", frozen)]
pub struct PyTask {
    queue: Arc<ferrolock::Queue>,
    task: ferrolock::Task,
    origin: Origin,
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

    /// Acknowledge: done with this task.
    fn ack(&self, py: Python<'_>) -> PyResult<bool> {
        let (queue, task) = (self.queue.clone(), self.task.clone());
        match self.origin {
            Origin::Popped => Ok(true),
            Origin::Peeked => blocking(py, None, move |hook| {
                queue.dequeue(&task.id, task.score, None, hook)
            }),
            Origin::Reserved => quick(py, move || {
                queue.ack(&task.id, task.receipt.as_deref().unwrap_or(""))
            }),
        }
    }

    /// Give the task back, due after `delay` seconds.
    #[pyo3(signature = (delay = 0.0))]
    fn nack(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::delay)] delay: f64,
    ) -> PyResult<bool> {
        let delay = validate::offset(delay, "delay").py()?;
        let (queue, task) = (self.queue.clone(), self.task.clone());
        match self.origin {
            Origin::Popped => blocking(py, None, move |hook| {
                queue
                    .enqueue(&[&task.id], delay, None, hook)
                    .map(|n| n == 1)
            }),
            Origin::Peeked => Ok(false),
            Origin::Reserved => blocking(py, None, move |hook| {
                queue.nack(&task.id, task.receipt.as_deref().unwrap_or(""), delay, hook)
            }),
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
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
        if exc_type.is_some_and(|t| !t.is_none()) {
            // Best effort: if it fails, the visibility timeout returns the task.
            // A KeyboardInterrupt (or SystemExit) raised by a signal handler
            // while it waited is not an error of the nack: it goes on up.
            if let Err(e) = self.nack(py, 0.0)
                && !e.is_instance_of::<pyo3::exceptions::PyException>(py)
            {
                return Err(e);
            }
        } else {
            self.ack(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Task(id={:?}, score={:?})",
            String::from_utf8_lossy(&self.task.id),
            self.task.score
        )
    }
}

// The signature below spells out the core's default visibility (pyo3 writes
// only literal defaults into `__text_signature__`); checked at build time.
const _: () = assert!(ferrolock::DEFAULT_VISIBILITY.as_secs_f64() == 30.0);

/// A task queue (legacy-compatible `Queue:<name>` sorted set).
#[pyclass(name = "Queue", module = "ferrolock", frozen)]
pub struct PyQueue {
    inner: Arc<ferrolock::Queue>,
}

impl PyQueue {
    fn tasks<'py>(
        &self,
        py: Python<'py>,
        tasks: Vec<ferrolock::Task>,
        origin: Origin,
        count: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut wrapped = tasks.into_iter().map(|task| PyTask {
            queue: self.inner.clone(),
            task,
            origin,
        });
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

/// Gives back tasks popped for a caller that is gone (a greenlet killed while
/// it waited): each due again at its own score.
fn put_back(queue: &ferrolock::Queue, tasks: Vec<ferrolock::Task>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    for task in tasks {
        let _ = queue.enqueue(&[&task.id], task.score - now, None, None);
    }
}

fn count_arg(count: Option<i64>) -> PyResult<usize> {
    match count {
        None => Ok(1),
        Some(n) => validate::count(n, "count").py(),
    }
}

#[pymethods]
impl PyQueue {
    #[new]
    // Defaults are the core's (see `PyLock::new`).
    #[pyo3(
        signature = (name, *, url = None, prefix = DEFAULT_QUEUE_PREFIX.into(),
                     visibility = DEFAULT_VISIBILITY.as_secs_f64()),
        text_signature = "(name, *, url=None, prefix='Queue:', visibility=30.0)"
    )]
    fn new(
        name: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::url)] url: Option<String>,
        #[pyo3(from_py_with = arg::prefix)] prefix: Vec<u8>,
        #[pyo3(from_py_with = arg::visibility)] visibility: f64,
    ) -> PyResult<Self> {
        let name = str_bytes(name, "name")?;
        let mut opts = QueueOptions::default();
        opts.prefix = prefix;
        opts.visibility = validate::seconds(visibility, "visibility", true).py()?;
        let queue = ferrolock::Queue::new(&client(url.as_deref())?, &name, opts).py()?;
        Ok(Self {
            inner: Arc::new(queue),
        })
    }

    /// Add one id or many (one round trip); returns how many were new.
    #[pyo3(signature = (ids, *, delay = 0.0))]
    fn enqueue(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::delay)] delay: f64,
    ) -> PyResult<usize> {
        let items = enqueue_items(ids)?;
        if items.payloads.is_some() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "ids: payloads (a mapping of id to payload) are not supported by this version",
            ));
        }
        let ids = items.ids;
        let queue = self.inner.clone();
        blocking(py, None, move |hook| queue.enqueue(&ids, delay, None, hook))
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

    /// Reserve one due task until acked (see the stub).
    #[pyo3(signature = (*, wait = 0.0, visibility = None))]
    fn reserve<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = arg::wait)] wait: f64,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wait: Wait = wait_secs(wait)?;
        let visibility: Option<Duration> = visibility
            .map(|v| validate::seconds(v, "visibility", true))
            .transpose()
            .py()?;
        let (queue, back) = (self.inner.clone(), self.inner.clone());
        let task = blocking_undo(
            py,
            None,
            move |hook| queue.reserve(visibility, wait, hook),
            move |task| {
                if let Some(t) = task {
                    let _ = back.nack(&t.id, t.receipt.as_deref().unwrap_or(""), 0.0, None);
                }
            },
        )?;
        self.tasks(py, task.into_iter().collect(), Origin::Reserved, None)
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
