//! Calls: the `_Op` an awaitable call returns, its result, and how a
//! cancelled call gives back what it took.

use super::*;

/// Turns a call's result into its Python value (on the loop thread).
pub(super) type Value = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;
/// Gives back what a call took (on the executor).
pub(super) type Undo = Box<dyn FnOnce() + Send>;

/// A finished call: its value, and how to give back what it took.
pub(super) struct Done {
    pub(super) value: Value,
    pub(super) undo: Option<Undo>,
}

impl Done {
    pub(super) fn none() -> Self {
        Self {
            value: Box::new(|py| Ok(py.None())),
            undo: None,
        }
    }

    pub(super) fn of<T>(v: T) -> Self
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
    {
        Self {
            value: Box::new(move |py| v.into_py_any(py)),
            undo: None,
        }
    }
}

pub(super) type CallResult = ferrolock::Result<Done>;

/// A call in progress, shared by its `PyOp`, the executor and the bridge.
pub(super) struct OpInner {
    pub(super) bridge: Arc<Bridge>,
    /// Asked to stop (the awaiting task was cancelled).
    pub(super) cancelled: AtomicBool,
    pub(super) state: Mutex<OpState>,
}

pub(super) struct OpState {
    pub(super) outcome: Option<CallResult>,
    pub(super) future: Option<Py<PyAny>>,
    pub(super) delivered: bool,
    pub(super) abandoned: bool,
    /// Kept after the result was delivered: an awaiting task cancelled
    /// after that still gives it back.
    pub(super) undo: Option<Undo>,
    /// The future `abandon()` returned, set once given back.
    pub(super) settled: Option<Py<PyAny>>,
    /// The wait driving this call, poked when it is abandoned.
    pub(super) driver: Option<Arc<dyn Wake>>,
    /// Set once an undo started without `abandon()`: done when it is.
    pub(super) undoing: Option<Py<PyAny>>,
}

impl OpInner {
    pub(super) fn new(bridge: Arc<Bridge>, future: Py<PyAny>) -> Arc<Self> {
        Arc::new(Self {
            bridge,
            cancelled: AtomicBool::new(false),
            state: Mutex::new(OpState {
                outcome: None,
                future: Some(future),
                delivered: false,
                abandoned: false,
                undo: None,
                settled: None,
                driver: None,
                undoing: None,
            }),
        })
    }

    /// The call is over (any thread): its loop sets the future.
    pub(super) fn complete(self: &Arc<Self>, outcome: CallResult) {
        let mut st = locked(&self.state);
        st.outcome = Some(outcome);
        st.driver = None;
        drop(st);
        self.bridge.push(self.clone());
    }

    /// Sets the future (on the loop thread), or gives back the result of a
    /// call abandoned meanwhile.
    pub(super) fn deliver(self: &Arc<Self>, py: Python<'_>) -> PyResult<()> {
        let mut st = locked(&self.state);
        let Some(outcome) = st.outcome.take() else {
            return Ok(());
        };
        st.delivered = true;
        let future = st.future.take();
        let cancelled = match &future {
            Some(f) => f.bind(py).call_method0("cancelled")?.is_truthy()?,
            None => true,
        };
        let abandoned = st.abandoned || cancelled;
        let settled = st.settled.take();
        drop(st);
        match outcome {
            Ok(done) if abandoned => match done.undo {
                Some(undo) => {
                    let settled = match (settled, &future) {
                        (Some(s), _) => s,
                        // The future was cancelled before `abandon()` came:
                        // it will find this one, done once the undo is.
                        (None, Some(f)) => {
                            let s = f
                                .bind(py)
                                .call_method0("get_loop")?
                                .call_method0("create_future")?
                                .unbind();
                            locked(&self.state).undoing = Some(s.clone_ref(py));
                            s
                        }
                        (None, None) => {
                            spawn_undo(&self.bridge, None, undo);
                            return Ok(());
                        }
                    };
                    spawn_undo(&self.bridge, Some(settled), undo);
                }
                None => resolve(py, settled)?,
            },
            Ok(done) => {
                let future = future.expect("not abandoned: the future is there");
                let f = future.bind(py);
                match (done.value)(py) {
                    Ok(v) => f.call_method1("set_result", (v,))?,
                    Err(e) => f.call_method1("set_exception", (e.into_value(py),))?,
                };
                locked(&self.state).undo = done.undo;
                resolve(py, settled)?;
            }
            Err(e) => {
                if !abandoned && let Some(future) = future {
                    future
                        .bind(py)
                        .call_method1("set_exception", (to_py(e).into_value(py),))?;
                }
                resolve(py, settled)?;
            }
        }
        Ok(())
    }
}

/// Sets `settled` (if any) to `None`.
pub(super) fn resolve(py: Python<'_>, settled: Option<Py<PyAny>>) -> PyResult<()> {
    if let Some(s) = settled {
        let s = s.bind(py);
        if !s.call_method0("done")?.is_truthy()? {
            s.call_method1("set_result", (py.None(),))?;
        }
    }
    Ok(())
}

/// Runs `undo` on the executor; `settled` (if given) is set once it is done.
pub(super) fn spawn_undo(bridge: &Arc<Bridge>, settled: Option<Py<PyAny>>, undo: Undo) {
    let op = Arc::new(OpInner {
        bridge: bridge.clone(),
        cancelled: AtomicBool::new(false),
        state: Mutex::new(OpState {
            outcome: None,
            future: settled,
            delivered: false,
            abandoned: false,
            undo: None,
            settled: None,
            driver: None,
            undoing: None,
        }),
    });
    executor().submit(Box::new(move || {
        undo();
        op.complete(Ok(Done::none()));
    }));
}

/// An awaitable core call: `future` gets its result (see the module docs).
#[pyclass(name = "_Op", module = "ferrolock._native", frozen)]
pub struct PyOp {
    pub(super) inner: Arc<OpInner>,
    pub(super) future: Py<PyAny>,
    pub(super) event_loop: Py<PyAny>,
}

#[pymethods]
impl PyOp {
    /// The `asyncio.Future` of the call's result.
    #[getter]
    pub(super) fn future(&self, py: Python<'_>) -> Py<PyAny> {
        self.future.clone_ref(py)
    }

    /// The awaiting task was cancelled: give back what the call did or will
    /// do. Returns a future that is done once that is done.
    pub(super) fn abandon(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let new_future = || self.event_loop.bind(py).call_method0("create_future");
        let mut st = locked(&self.inner.state);
        if st.abandoned {
            drop(st);
            let f = new_future()?;
            f.call_method1("set_result", (py.None(),))?;
            return Ok(f.unbind());
        }
        st.abandoned = true;
        self.inner.cancelled.store(true, Ordering::Release);
        if let Some(undoing) = st.undoing.take() {
            return Ok(undoing);
        }
        if !st.delivered {
            let f = new_future()?;
            st.settled = Some(f.clone().unbind());
            let driver = st.driver.clone();
            drop(st);
            if let Some(d) = driver {
                d.fire(u64::MAX);
            }
            return Ok(f.unbind());
        }
        let undo = st.undo.take();
        drop(st);
        let f = new_future()?;
        match undo {
            Some(undo) => spawn_undo(&self.inner.bridge, Some(f.clone().unbind()), undo),
            None => {
                f.call_method1("set_result", (py.None(),))?;
            }
        }
        Ok(f.unbind())
    }
}

/// A new call on the running loop: its op and its shared part.
pub(super) fn new_op(py: Python<'_>) -> PyResult<(PyOp, Arc<OpInner>)> {
    let (event_loop, bridge) = bridge(py)?;
    let future = event_loop.call_method0("create_future")?.unbind();
    let inner = OpInner::new(bridge, future.clone_ref(py));
    Ok((
        PyOp {
            inner: inner.clone(),
            future,
            event_loop: event_loop.unbind(),
        },
        inner,
    ))
}

/// A job of one or a few round trips. `interruptible`: a cancellation stops
/// its waits (for a legacy queue lock); calls that end something (release,
/// ack, nack) are not interruptible: they finish.
pub(super) fn run<F>(py: Python<'_>, interruptible: bool, job: F) -> PyResult<PyOp>
where
    F: for<'a> FnOnce(Option<Interrupt<'a>>) -> CallResult + Send + 'static,
{
    let (op, inner) = new_op(py)?;
    executor().submit(Box::new(move || {
        let cancelled = &inner.cancelled;
        let hook = || -> ferrolock::Result<()> {
            if interruptible && cancelled.load(Ordering::Acquire) {
                Err(interrupted("cancelled"))
            } else {
                Ok(())
            }
        };
        let outcome = job(Some(&hook));
        inner.complete(outcome);
    }));
    Ok(op)
}
