//! `_Worker`, the native half of `Queue.work` (see `ferrolock/_queue.py`):
//! it takes the next task, ends the last one in the same round trip, and
//! keeps reservations alive; the Python loop calls the handler and knows
//! about signals.

use std::sync::{Arc, Mutex};

use ferrolock::{Outcome, Wait, WorkerOptions, validate};
use pyo3::prelude::*;

use crate::convert::blocking;
use crate::errors::{IntoPy, type_error};
use crate::queue::{Origin, PyQueue, PyTask};

/// One consumer of `Queue.work`: see `ferrolock::Worker`.
#[pyclass(name = "_Worker", module = "ferrolock._native", frozen)]
pub struct PyWorker {
    queue: Arc<ferrolock::Queue>,
    /// Shared with the call running on a thread of its own under gevent.
    inner: Arc<Mutex<ferrolock::Worker>>,
}

/// What the handler's outcome means: `True` done, `False` failed (backoff),
/// a number: retry after that many seconds.
pub(crate) fn outcome_arg(outcome: &Bound<'_, PyAny>) -> PyResult<Outcome> {
    if let Ok(ok) = outcome.extract::<bool>()
        && outcome.is_instance_of::<pyo3::types::PyBool>()
    {
        return Ok(if ok { Outcome::Done } else { Outcome::Failed });
    }
    match outcome.extract::<f64>() {
        Ok(delay) => Ok(Outcome::Retry(validate::offset(delay, "delay").py()?)),
        Err(_) => Err(type_error(
            "outcome",
            "a bool or a number of seconds",
            outcome,
        )),
    }
}

/// Logs a connection trouble of the worker loop (`logging`, logger
/// `ferrolock.worker`).
/// The options of a worker (`Queue.work`'s and `aio.Queue.work`'s).
pub(crate) fn worker_options(
    wait: Option<f64>,
    visibility: Option<f64>,
    heartbeat: bool,
) -> PyResult<WorkerOptions> {
    let mut opts = WorkerOptions::default();
    opts.wait = Wait::from_secs(wait, "wait").py()?;
    opts.visibility = visibility
        .map(|v| validate::seconds(v, "visibility", true))
        .transpose()
        .py()?;
    opts.heartbeat = heartbeat;
    Ok(opts)
}

pub(crate) fn log_trouble(e: &ferrolock::Error) {
    Python::attach(|py| {
        let logged = py.import("logging").and_then(|logging| {
            logging
                .call_method1("getLogger", ("ferrolock.worker",))?
                .call_method1("warning", ("queue worker: %s; trying again", e.to_string()))
                .map(drop)
        });
        if let Err(err) = logged {
            err.write_unraisable(py, None);
        }
    });
}

#[pymethods]
impl PyWorker {
    #[new]
    #[pyo3(signature = (queue, *, wait = None, visibility = None, heartbeat = true))]
    fn new(
        queue: &Bound<'_, PyQueue>,
        wait: Option<f64>,
        visibility: Option<f64>,
        heartbeat: bool,
    ) -> PyResult<Self> {
        let opts = worker_options(wait, visibility, heartbeat)?;
        let queue = queue.get().inner.clone();
        let worker = ferrolock::Worker::new(queue.clone(), opts).py()?;
        Ok(Self {
            queue,
            inner: Arc::new(Mutex::new(worker)),
        })
    }

    /// End the current task as `outcome` says and take the next (None: the
    /// wait ran out, or `stop.is_set()` turned true while waiting).
    fn next<'py>(
        &self,
        py: Python<'py>,
        outcome: &Bound<'py, PyAny>,
        stop: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTask>>> {
        let outcome = outcome_arg(outcome)?;
        let worker = self.inner.clone();
        let task = blocking_stop(py, stop.clone().unbind(), move |hook| {
            let mut w = worker.lock().unwrap_or_else(|p| p.into_inner());
            w.next(outcome, hook, &log_trouble)
        })?;
        match task {
            Some(task) => Ok(Some(Bound::new(
                py,
                PyTask::new(self.queue.clone(), task, Origin::Reserved),
            )?)),
            None => Ok(None),
        }
    }

    /// End the current task as `outcome` says, taking no other.
    fn finish(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<()> {
        let outcome = outcome_arg(outcome)?;
        let worker = self.inner.clone();
        blocking(py, None, move |hook| {
            let mut w = worker.lock().unwrap_or_else(|p| p.into_inner());
            w.finish(outcome, hook)
        })
    }
}

/// [`blocking`], whose wait also ends (with `None`) when `stop.is_set()`
/// turns true.
fn blocking_stop<T: Send + 'static>(
    py: Python<'_>,
    stop: Py<PyAny>,
    f: impl for<'a> FnOnce(Option<ferrolock::wait::Interrupt<'a>>) -> ferrolock::Result<Option<T>>
    + Send
    + 'static,
) -> PyResult<Option<T>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let asked = Arc::new(AtomicBool::new(false));
    let hook_error: Arc<Mutex<Option<PyErr>>> = Arc::default();
    let (asked_in, error_in) = (asked.clone(), hook_error.clone());
    let result = blocking(py, None, move |hook| {
        let both = || -> ferrolock::Result<()> {
            if let Some(h) = hook {
                h()?;
            }
            match Python::attach(|py| stop.bind(py).call_method0("is_set")?.is_truthy()) {
                Ok(false) => Ok(()),
                Ok(true) => {
                    asked_in.store(true, Ordering::Release);
                    Err(ferrolock::wait::interrupted("stop"))
                }
                Err(e) => {
                    if let Ok(mut slot) = error_in.lock() {
                        *slot = Some(e);
                    }
                    Err(ferrolock::wait::interrupted("stop"))
                }
            }
        };
        f(Some(&both))
    });
    if let Some(e) = hook_error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    match result {
        Err(_) if asked.load(Ordering::Acquire) => Ok(None),
        other => other,
    }
}
