//! `_AsyncWorker`: the worker loop's steps (`ferrolock::NextSteps`) as
//! awaitables.

use super::*;

/// One consumer of `ferrolock.aio.Queue.work`: the awaitable `_Worker`, on
/// the core's `Worker` (the same attempts and pauses as the blocking one).
#[pyclass(name = "_AsyncWorker", module = "ferrolock._native", frozen)]
pub struct PyAsyncWorker {
    pub(super) queue: Arc<ferrolock::Queue>,
    pub(super) worker: Arc<Mutex<ferrolock::Worker>>,
}

#[pymethods]
impl PyAsyncWorker {
    #[new]
    #[pyo3(signature = (queue, *, wait = None, visibility = None, heartbeat = true))]
    pub(super) fn new(
        queue: &Bound<'_, PyQueue>,
        wait: Option<f64>,
        visibility: Option<f64>,
        heartbeat: bool,
    ) -> PyResult<Self> {
        let queue = queue.get().inner.clone();
        let opts = worker_options(wait, visibility, heartbeat)?;
        let worker = ferrolock::Worker::new(queue.clone(), opts).py()?;
        Ok(Self {
            queue,
            worker: Arc::new(Mutex::new(worker)),
        })
    }

    /// End the current task as `outcome` says and reserve the next (None:
    /// the wait ran out).
    pub(super) fn next(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<PyOp> {
        let outcome = outcome_arg(outcome)?;
        let steps = locked(&self.worker).next_steps(outcome);
        let (queue, worker) = (self.queue.clone(), self.worker.clone());
        drive(
            py,
            steps,
            Box::new(move |got: Option<Option<ferrolock::Task>>| {
                let Some(task) = got.flatten() else {
                    return Ok(Done::none());
                };
                let task = locked(&worker).hand_out(task)?;
                let undo = nack_all(queue.clone(), vec![task.clone()]);
                Ok(Done {
                    value: tasks_value(queue, vec![task], Origin::Reserved, true),
                    undo: Some(Box::new(move || {
                        locked(&worker).forget();
                        undo();
                    })),
                })
            }),
        )
    }

    /// End the current task as `outcome` says, taking no other (one try).
    pub(super) fn finish(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<PyOp> {
        let outcome = outcome_arg(outcome)?;
        let current = locked(&self.worker).take_current();
        let queue = self.queue.clone();
        run(py, false, move |_| {
            if let Some((task, valid)) = current {
                outcome.end(&queue, &task, valid, None)?;
            }
            Ok(Done::none())
        })
    }
}
