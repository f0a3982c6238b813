//! `_AsyncLock`: the awaitable calls of a lock.

use super::*;

/// The awaitable face of a `Lock` or `Redlock` (what `ferrolock.aio.Lock`
/// calls).
#[pyclass(name = "_AsyncLock", module = "ferrolock._native", frozen)]
pub struct PyAsyncLock {
    pub(super) inner: Arc<dyn ferrolock::DistributedLock>,
    pub(super) single: Option<Arc<ferrolock::Lock>>,
    pub(super) redlock: Option<Arc<ferrolock::Redlock>>,
    pub(super) timeout: Option<f64>,
    pub(super) kind: &'static str,
    pub(super) name: String,
}

impl PyAsyncLock {
    pub(super) fn acquire_wait(&self, py: Python<'_>, wait: Wait, must: bool) -> PyResult<PyOp> {
        let taken = self.inner.clone();
        let (kind, name) = (self.kind, self.name.clone());
        let finish = move |acquired: Option<bool>| -> CallResult {
            if acquired == Some(true) {
                return Ok(Done {
                    value: Box::new(|py| true.into_py_any(py)),
                    undo: Some(Box::new(move || {
                        let _ = taken.release();
                    })),
                });
            }
            if !must {
                return Ok(Done::of(false));
            }
            let within = match wait {
                Wait::For(d) => format!("within {:.3} s", d.as_secs_f64()),
                _ => "on the first attempt (timeout=0)".to_owned(),
            };
            Ok(Done {
                value: Box::new(move |_| {
                    Err(Exc::Timeout.err(format!("{kind} {name:?}: not acquired {within}")))
                }),
                undo: None,
            })
        };
        match (&self.single, &self.redlock) {
            (Some(lock), _) => drive(
                py,
                ferrolock::Lock::acquire_steps(lock, wait),
                Box::new(finish),
            ),
            (None, Some(redlock)) => drive(py, redlock.acquire_steps(wait), Box::new(finish)),
            (None, None) => Err(PyRuntimeError::new_err(
                "neither a Lock nor a Redlock: nothing to acquire",
            )),
        }
    }
}

#[pymethods]
impl PyAsyncLock {
    #[new]
    pub(super) fn new(lock: &Bound<'_, PyLockBase>) -> Self {
        let base = lock.get();
        let single = lock.cast::<PyLock>().ok().map(|l| l.get().single.clone());
        let redlock = lock
            .cast::<PyRedlock>()
            .ok()
            .map(|l| l.get().redlock.clone());
        Self {
            inner: base.inner.clone(),
            single,
            redlock,
            timeout: base.timeout,
            kind: base.kind,
            name: base.display_name(),
        }
    }

    /// `acquire(blocking, timeout)`, awaitable.
    #[pyo3(signature = (blocking = true, timeout = None))]
    pub(super) fn acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::blocking)] blocking: bool,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<f64>,
    ) -> PyResult<PyOp> {
        let wait = wait_for(blocking, timeout, self.timeout)?;
        self.acquire_wait(py, wait, false)
    }

    /// `async with`'s entry: waits as the lock's `timeout` says, else `LockTimeout`.
    pub(super) fn enter(&self, py: Python<'_>) -> PyResult<PyOp> {
        let wait = wait_for(true, None, self.timeout)?;
        self.acquire_wait(py, wait, true)
    }

    pub(super) fn release(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, false, move |_| lock.release().map(|()| Done::none()))
    }

    /// `async with`'s exit: `__exit__`'s rules.
    pub(super) fn exit(&self, py: Python<'_>, propagating: bool) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        let (kind, name) = (self.kind, self.name.clone());
        run(py, false, move |_| {
            Ok(match lock.release() {
                Ok(()) => Done::none(),
                Err(_) if propagating => Done::none(),
                Err(e) if e.is_not_owned() && lock.lost() => Done {
                    value: Box::new(move |_| {
                        Err(Exc::Lost.err(format!(
                            "{kind} {name:?} was lost inside the with block (expired or taken \
                             over before the release): {e}"
                        )))
                    }),
                    undo: None,
                },
                Err(e) => return Err(e),
            })
        })
    }

    #[pyo3(signature = (ttl = None))]
    pub(super) fn extend(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::opt_ttl)] ttl: Option<f64>,
    ) -> PyResult<PyOp> {
        let ttl = ttl
            .map(|t| validate::seconds(t, "ttl", true))
            .transpose()
            .py()?;
        let lock = self.inner.clone();
        run(py, false, move |_| lock.extend(ttl).map(|()| Done::none()))
    }

    pub(super) fn locked(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, true, move |_| lock.locked().map(Done::of))
    }

    pub(super) fn owned(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, true, move |_| lock.owned().map(Done::of))
    }

    pub(super) fn fencing_token(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, true, move |_| lock.fencing_token().map(Done::of))
    }
}
