//! `_AsyncQueue`: the awaitable calls of a queue and its tasks.

use super::*;

/// Wraps core tasks as `Task` objects: one (or None) when `count` is None,
/// else a list.
pub(super) fn tasks_value(
    queue: Arc<ferrolock::Queue>,
    tasks: Vec<ferrolock::Task>,
    origin: Origin,
    one: bool,
) -> Value {
    Box::new(move |py| {
        let mut wrapped = tasks
            .into_iter()
            .map(|t| PyTask::new(queue.clone(), t, origin));
        if one {
            return Ok(match wrapped.next() {
                Some(t) => Bound::new(py, t)?.into_any().unbind(),
                None => py.None(),
            });
        }
        let list = PyList::empty(py);
        for t in wrapped {
            list.append(Bound::new(py, t)?)?;
        }
        Ok(list.into_any().unbind())
    })
}

/// Gives back reserved tasks whose taker is gone: due again at once.
pub(super) fn nack_all(queue: Arc<ferrolock::Queue>, tasks: Vec<ferrolock::Task>) -> Undo {
    Box::new(move || {
        for t in tasks {
            let _ = queue.nack(&t.id, t.receipt.as_deref().unwrap_or(""), Some(0.0), None);
        }
    })
}

/// The awaitable face of a `Queue` (what `ferrolock.aio.Queue` calls).
#[pyclass(name = "_AsyncQueue", module = "ferrolock._native", frozen)]
pub struct PyAsyncQueue {
    pub(super) inner: Arc<ferrolock::Queue>,
}

#[pymethods]
impl PyAsyncQueue {
    #[new]
    pub(super) fn new(queue: &Bound<'_, PyQueue>) -> Self {
        Self {
            inner: queue.get().inner.clone(),
        }
    }

    #[pyo3(signature = (ids, *, delay = 0.0))]
    pub(super) fn enqueue(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::delay)] delay: f64,
    ) -> PyResult<PyOp> {
        let items = enqueue_items(ids)?;
        let queue = self.inner.clone();
        run(py, true, move |hook| {
            let n = match items.payloads {
                None => queue.enqueue(&items.ids, delay, None, hook)?,
                Some(payloads) => {
                    let tasks: Vec<_> = items.ids.into_iter().zip(payloads).collect();
                    queue.enqueue_with_payloads(&tasks, delay, None, hook)?
                }
            };
            Ok(Done::of(n))
        })
    }

    #[pyo3(signature = (count = None, *, wait = 0.0))]
    pub(super) fn pop(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
        #[pyo3(from_py_with = arg::wait)] wait: f64,
    ) -> PyResult<PyOp> {
        let n = count_arg(count)?;
        let wait = wait_secs(wait)?;
        let steps = ferrolock::Queue::pop_steps(&self.inner, n, wait).py()?;
        let queue = self.inner.clone();
        drive(
            py,
            steps,
            Box::new(move |step: Option<ferrolock::Step>| {
                let tasks = step.map(|s| s.tasks).unwrap_or_default();
                let (back, again) = (queue.clone(), tasks.clone());
                Ok(Done {
                    value: tasks_value(queue, tasks, Origin::Popped, count.is_none()),
                    undo: Some(Box::new(move || crate::queue::put_back(&back, again))),
                })
            }),
        )
    }

    #[pyo3(signature = (count = None))]
    pub(super) fn top(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
    ) -> PyResult<PyOp> {
        let n = count_arg(count)?;
        let queue = self.inner.clone();
        run(py, true, move |_| {
            let tasks = queue.top(n)?;
            Ok(Done {
                value: tasks_value(queue, tasks, Origin::Peeked, count.is_none()),
                undo: None,
            })
        })
    }

    pub(super) fn dequeue(
        &self,
        py: Python<'_>,
        id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::score)] score: f64,
    ) -> PyResult<PyOp> {
        let id = str_bytes(id, "id")?;
        let queue = self.inner.clone();
        run(py, true, move |hook| {
            queue.dequeue(&id, score, None, hook).map(Done::of)
        })
    }

    #[pyo3(signature = (count = None, *, wait = 0.0, visibility = None))]
    pub(super) fn reserve(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
        #[pyo3(from_py_with = arg::wait)] wait: f64,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<PyOp> {
        let n = count_arg(count)?;
        let wait = wait_secs(wait)?;
        self.reserve_wait(py, n, wait, visibility, count.is_none())
    }

    /// `reserve` waiting forever when `wait` is None (`async for`).
    #[pyo3(signature = (wait = None, visibility = None))]
    pub(super) fn reserve_next(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::timeout)] wait: Option<f64>,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<PyOp> {
        let wait = Wait::from_secs(wait, "wait").py()?;
        self.reserve_wait(py, 1, wait, visibility, true)
    }

    pub(super) fn ack(&self, py: Python<'_>, task: &Bound<'_, PyTask>) -> PyResult<PyOp> {
        let t = task.get();
        let job = t.ack_job();
        t.stop_beat();
        task_op(py, job)
    }

    #[pyo3(signature = (task, delay = None))]
    pub(super) fn nack(
        &self,
        py: Python<'_>,
        task: &Bound<'_, PyTask>,
        #[pyo3(from_py_with = arg::opt_delay)] delay: Option<f64>,
    ) -> PyResult<PyOp> {
        let t = task.get();
        let job = t.nack_job(delay)?;
        t.stop_beat();
        task_op(py, job)
    }

    #[pyo3(signature = (task, visibility = None))]
    pub(super) fn touch(
        &self,
        py: Python<'_>,
        task: &Bound<'_, PyTask>,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<PyOp> {
        task_op(py, task.get().touch_job(visibility)?)
    }

    /// Dead tasks, oldest death first: `ferrolock.Queue.dead`.
    #[pyo3(signature = (count = 100, *, offset = 0))]
    pub(super) fn dead(&self, py: Python<'_>, count: i64, offset: i64) -> PyResult<PyOp> {
        let n = validate::count(count, "count").py()?;
        let offset = usize::try_from(offset).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!("offset must be >= 0, got {offset}"))
        })?;
        let queue = self.inner.clone();
        run(py, true, move |_| {
            let tasks = queue.dead(offset, n)?;
            Ok(Done {
                value: tasks_value(queue, tasks, Origin::Dead, false),
                undo: None,
            })
        })
    }

    /// Dead tasks back into the queue: `ferrolock.Queue.retry_dead`. Not
    /// interruptible: once sent, it finishes even if the awaiting task is
    /// cancelled.
    #[pyo3(signature = (ids = None))]
    pub(super) fn retry_dead(
        &self,
        py: Python<'_>,
        ids: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyOp> {
        let ids = dead_ids(ids)?;
        let queue = self.inner.clone();
        run(py, false, move |_| {
            queue.retry_dead(ids.as_deref()).map(Done::of)
        })
    }

    /// Dead tasks deleted: `ferrolock.Queue.purge_dead` (finishes as
    /// `retry_dead` does).
    #[pyo3(signature = (ids = None))]
    pub(super) fn purge_dead(
        &self,
        py: Python<'_>,
        ids: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyOp> {
        let ids = dead_ids(ids)?;
        let queue = self.inner.clone();
        run(py, false, move |_| {
            queue.purge_dead(ids.as_deref()).map(Done::of)
        })
    }

    pub(super) fn len(&self, py: Python<'_>) -> PyResult<PyOp> {
        let queue = self.inner.clone();
        run(py, true, move |_| queue.len().map(Done::of))
    }

    pub(super) fn stats(&self, py: Python<'_>) -> PyResult<PyOp> {
        let queue = self.inner.clone();
        run(py, true, move |_| {
            let s = queue.stats()?;
            Ok(Done {
                value: Box::new(move |py| {
                    let d = PyDict::new(py);
                    d.set_item("due", s.due)?;
                    d.set_item("delayed", s.delayed)?;
                    d.set_item("in_flight", s.in_flight)?;
                    d.set_item("dead", s.dead)?;
                    d.set_item("oldest_due_age", s.oldest_due_age)?;
                    Ok(d.into_any().unbind())
                }),
                undo: None,
            })
        })
    }
}

impl PyAsyncQueue {
    pub(super) fn reserve_wait(
        &self,
        py: Python<'_>,
        n: usize,
        wait: Wait,
        visibility: Option<f64>,
        one: bool,
    ) -> PyResult<PyOp> {
        let visibility = visibility
            .map(|v| validate::seconds(v, "visibility", true))
            .transpose()
            .py()?;
        let steps = ferrolock::Queue::reserve_steps(&self.inner, n, visibility, wait).py()?;
        let queue = self.inner.clone();
        drive(
            py,
            steps,
            Box::new(move |step: Option<ferrolock::Step>| {
                let tasks = step.map(|s| s.tasks).unwrap_or_default();
                let undo = nack_all(queue.clone(), tasks.clone());
                Ok(Done {
                    value: tasks_value(queue, tasks, Origin::Reserved, one),
                    undo: Some(undo),
                })
            }),
        )
    }
}

/// A task's ack, nack or touch as an awaitable call (it finishes even if
/// the awaiting task is cancelled).
pub(super) fn task_op(py: Python<'_>, job: TaskJob) -> PyResult<PyOp> {
    run(py, false, move |hook| job(hook).map(Done::of))
}
