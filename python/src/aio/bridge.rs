//! The bridge to one event loop: finished calls handed to the loop thread
//! through a socket pair it watches.

use super::*;

/// Where finished calls wait for their loop (see the module docs).
pub(super) struct Bridge {
    pub(super) reader: UnixStream,
    pub(super) writer: UnixStream,
    pub(super) pending: Mutex<(Vec<Arc<OpInner>>, bool)>,
}

impl Bridge {
    pub(super) fn new() -> std::io::Result<Self> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        Ok(Self {
            reader,
            writer,
            pending: Mutex::new((Vec::new(), false)),
        })
    }

    /// Hands a finished call to the loop (from any thread, without the GIL).
    pub(super) fn push(&self, op: Arc<OpInner>) {
        let mut p = locked(&self.pending);
        p.0.push(op);
        if !std::mem::replace(&mut p.1, true) {
            drop(p);
            // WouldBlock: the socket is full of wake-ups already.
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// The loop's end of a [`Bridge`]: its `_drain` is the reader callback.
#[pyclass(name = "_Bridge", module = "ferrolock._native", frozen)]
pub struct PyBridge {
    pub(super) inner: Arc<Bridge>,
}

#[pymethods]
impl PyBridge {
    /// Sets the futures of every finished call (run by the loop).
    pub(super) fn _drain(&self, py: Python<'_>) {
        let mut buf = [0u8; 256];
        while let Ok(n) = (&self.inner.reader).read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        let ops = {
            let mut p = locked(&self.inner.pending);
            p.1 = false;
            std::mem::take(&mut p.0)
        };
        for op in ops {
            if let Err(e) = op.deliver(py) {
                e.write_unraisable(py, None);
            }
        }
    }
}

/// The bridge of the running loop (made and registered on first use).
pub(super) fn bridge(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Arc<Bridge>)> {
    static BRIDGES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static GET_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get_loop = GET_LOOP.get_or_try_init(py, || {
        py.import("asyncio")?
            .getattr("get_running_loop")
            .map(Bound::unbind)
    })?;
    let event_loop = get_loop.bind(py).call0()?;
    let bridges = BRIDGES
        .get_or_try_init(py, || {
            py.import("weakref")?
                .getattr("WeakKeyDictionary")?
                .call0()
                .map(Bound::unbind)
        })?
        .bind(py);
    if let Ok(b) = bridges
        .call_method1("get", (&event_loop,))?
        .cast::<PyBridge>()
    {
        return Ok((event_loop, b.get().inner.clone()));
    }
    let inner =
        Arc::new(Bridge::new().map_err(|e| PyRuntimeError::new_err(format!("socketpair: {e}")))?);
    let b = Bound::new(
        py,
        PyBridge {
            inner: inner.clone(),
        },
    )?;
    event_loop.call_method1(
        "add_reader",
        (inner.reader.as_raw_fd(), b.getattr("_drain")?),
    )?;
    bridges.set_item(&event_loop, b)?;
    Ok((event_loop, inner))
}
