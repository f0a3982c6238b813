//! Operations: the `Inspector` (what the CLI shows), this process's events
//! (for `ferrolock/_events.py`, which logs them and calls `on_lost`) and
//! metrics (for `ferrolock/metrics.py`). Every semantic is the core's
//! `ferrolock::ops`; this converts its answers to dicts.

use std::time::{Duration, UNIX_EPOCH};

use ferrolock::ops::{events, metrics};
use ferrolock::{
    DEFAULT_LOCK_PREFIX, DEFAULT_QUEUE_PREFIX, InFlight, Inspector, LockInfo, QueueInfo, validate,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::convert::{arg, bytes_str, client, int_arg, quick, str_bytes};
use crate::errors::IntoPy;

/// What an operator sees of locks and queues (native `ferrolock.Inspector`).
#[pyclass(name = "Inspector", module = "ferrolock.ops", frozen)]
pub struct PyInspector {
    inner: Inspector,
}

/// A count argument: 0 ≤ n (the core checks the upper bound).
fn count_of(value: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let n = int_arg(value, what)?;
    usize::try_from(n).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!("{what} must be >= 0, got {n}"))
    })
}

/// `#[pyo3(from_py_with = …)]` converters naming their argument.
mod args {
    use pyo3::prelude::*;

    pub fn waiters(v: &Bound<'_, PyAny>) -> PyResult<usize> {
        super::count_of(v, "waiters")
    }
    pub fn limit(v: &Bound<'_, PyAny>) -> PyResult<usize> {
        super::count_of(v, "limit")
    }
    pub fn offset(v: &Bound<'_, PyAny>) -> PyResult<usize> {
        super::count_of(v, "offset")
    }
    pub fn count(v: &Bound<'_, PyAny>) -> PyResult<usize> {
        super::count_of(v, "count")
    }
    pub fn lock_prefix(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
        crate::convert::str_bytes(v, "lock_prefix")
    }
    pub fn queue_prefix(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
        crate::convert::str_bytes(v, "queue_prefix")
    }
}

/// The `names` argument: an iterable of str (not one str).
fn names_arg(names: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    let expected = "an iterable of str";
    if names.is_instance_of::<pyo3::types::PyString>() {
        return Err(crate::errors::type_error("names", expected, names));
    }
    names
        .try_iter()
        .map_err(|_| crate::errors::type_error("names", expected, names))?
        .map(|n| str_bytes(&n?, "names: each name"))
        .collect()
}

fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

fn lock_dict<'py>(py: Python<'py>, info: &LockInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", bytes_str(py, &info.name)?)?;
    d.set_item("key", bytes_str(py, &info.key)?)?;
    d.set_item("holder", &info.holder)?;
    d.set_item("ttl", secs(info.ttl))?;
    d.set_item("expires", info.expires)?;
    d.set_item("fence", info.fence)?;
    d.set_item("waiting", info.waiting)?;
    let waiters = PyList::empty(py);
    for w in &info.waiters {
        let wd = PyDict::new(py);
        wd.set_item("id", &w.id)?;
        wd.set_item("token", &w.token)?;
        wd.set_item("ttl", secs(w.ttl))?;
        wd.set_item("waited", w.waited.as_secs_f64())?;
        wd.set_item("lease", secs(w.lease))?;
        waiters.append(wd)?;
    }
    d.set_item("waiters", waiters)?;
    Ok(d)
}

fn queue_dict<'py>(py: Python<'py>, info: &QueueInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let s = &info.stats;
    d.set_item("name", bytes_str(py, &info.name)?)?;
    d.set_item("key", bytes_str(py, &info.key)?)?;
    d.set_item("due", s.due)?;
    d.set_item("delayed", s.delayed)?;
    d.set_item("in_flight", s.in_flight)?;
    d.set_item("dead", s.dead)?;
    d.set_item("oldest_due_age", s.oldest_due_age)?;
    Ok(d)
}

fn in_flight_dict<'py>(py: Python<'py>, r: &InFlight) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", bytes_str(py, &r.id)?)?;
    d.set_item("deadline", r.deadline)?;
    d.set_item("left", r.left)?;
    d.set_item("attempt", r.attempt)?;
    d.set_item("max_attempts", r.max_attempts)?;
    d.set_item("visibility", secs(r.visibility))?;
    Ok(d)
}

fn listing<'py>(
    py: Python<'py>,
    items: Vec<Bound<'py, PyDict>>,
    complete: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("items", PyList::new(py, items)?)?;
    d.set_item("complete", complete)?;
    Ok(d)
}

#[pymethods]
impl PyInspector {
    #[new]
    #[pyo3(
        signature = (url = None, *, lock_prefix = DEFAULT_LOCK_PREFIX.into(),
                     queue_prefix = DEFAULT_QUEUE_PREFIX.into()),
        text_signature = "(url=None, *, lock_prefix='Lock:', queue_prefix='Queue:')"
    )]
    fn new(
        #[pyo3(from_py_with = arg::url)] url: Option<String>,
        #[pyo3(from_py_with = args::lock_prefix)] lock_prefix: Vec<u8>,
        #[pyo3(from_py_with = args::queue_prefix)] queue_prefix: Vec<u8>,
    ) -> PyResult<Self> {
        Ok(Self {
            inner: Inspector::with_prefixes(&client(url.as_deref())?, &lock_prefix, &queue_prefix),
        })
    }

    /// One lock in detail (see the stub).
    #[pyo3(signature = (name, *, waiters = 10))]
    fn lock<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::waiters)] waiters: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let name = str_bytes(name, "name")?;
        let inner = self.inner.clone();
        let info = quick(py, move || inner.lock(&name, waiters))?;
        lock_dict(py, &info)
    }

    /// The locks held under a name prefix (see the stub).
    #[pyo3(signature = (prefix = None, *, limit = 100))]
    fn locks<'py>(
        &self,
        py: Python<'py>,
        prefix: Option<&Bound<'py, PyAny>>,
        #[pyo3(from_py_with = args::limit)] limit: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let prefix = prefix.map(|p| str_bytes(p, "prefix")).transpose()?;
        let inner = self.inner.clone();
        let found = quick(py, move || {
            inner.locks(prefix.as_deref().unwrap_or_default(), limit)
        })?;
        let items = found
            .items
            .iter()
            .map(|i| lock_dict(py, i))
            .collect::<PyResult<_>>()?;
        listing(py, items, found.complete)
    }

    /// The named locks, held or not (see the stub).
    fn locks_named<'py>(
        &self,
        py: Python<'py>,
        names: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let names = names_arg(names)?;
        let inner = self.inner.clone();
        let found = quick(py, move || {
            let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
            inner.locks_named(&names)
        })?;
        let items = found
            .iter()
            .map(|i| lock_dict(py, i))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// The named queues' counts (see the stub).
    fn queues_named<'py>(
        &self,
        py: Python<'py>,
        names: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let names = names_arg(names)?;
        let inner = self.inner.clone();
        let found = quick(py, move || {
            let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
            inner.queues_named(&names)
        })?;
        let items = found
            .iter()
            .map(|i| queue_dict(py, i))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Frees a lock whoever holds it (see the stub).
    fn force_release(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let name = str_bytes(name, "name")?;
        let inner = self.inner.clone();
        quick(py, move || inner.force_release(&name))
    }

    /// The queues under a name prefix, with their counts (see the stub).
    #[pyo3(signature = (prefix = None, *, limit = 100))]
    fn queues<'py>(
        &self,
        py: Python<'py>,
        prefix: Option<&Bound<'py, PyAny>>,
        #[pyo3(from_py_with = args::limit)] limit: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let prefix = prefix.map(|p| str_bytes(p, "prefix")).transpose()?;
        let inner = self.inner.clone();
        let found = quick(py, move || {
            inner.queues(prefix.as_deref().unwrap_or_default(), limit)
        })?;
        let items = found
            .items
            .iter()
            .map(|i| queue_dict(py, i))
            .collect::<PyResult<_>>()?;
        listing(py, items, found.complete)
    }

    /// One queue's counts (see the stub).
    fn queue<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let name = str_bytes(name, "name")?;
        let inner = self.inner.clone();
        let info = quick(py, move || inner.queue(&name))?;
        queue_dict(py, &info)
    }

    /// A page of a queue's reservations (see the stub).
    #[pyo3(signature = (name, *, offset = 0, count = 100))]
    fn in_flight<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::offset)] offset: usize,
        #[pyo3(from_py_with = args::count)] count: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let name = str_bytes(name, "name")?;
        let inner = self.inner.clone();
        let page = quick(py, move || inner.in_flight(&name, offset, count))?;
        let d = PyDict::new(py);
        d.set_item("total", page.total)?;
        let items = page
            .items
            .iter()
            .map(|r| in_flight_dict(py, r))
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("items", PyList::new(py, items)?)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        "<ferrolock.Inspector>".to_owned()
    }
}

/// Starts (or stops) keeping this process's events for `_wait_events`.
#[pyfunction]
#[pyo3(name = "_enable_events")]
pub fn enable_events(on: bool) {
    events::enable(on);
}

/// Waits up to `timeout` seconds (GIL released) for this process's events;
/// returns them as `(kind, level, message, name, lock_id, seconds, at,
/// holder, origin)`.
#[pyfunction]
#[pyo3(name = "_wait_events")]
pub fn wait_events<'py>(py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyList>> {
    let timeout = validate::seconds(timeout, "timeout", true).py()?;
    let got = py.detach(move || events::wait(timeout, None)).py()?;
    let out = PyList::empty(py);
    for e in got {
        let at =
            e.at.duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
        let item = PyTuple::new(
            py,
            [
                e.kind.as_str().into_pyobject(py)?.into_any(),
                e.kind.level().as_str().into_pyobject(py)?.into_any(),
                e.message.into_pyobject(py)?.into_any(),
                bytes_str(py, &e.name)?.into_any(),
                e.lock_id.into_pyobject(py)?.into_any(),
                e.seconds.into_pyobject(py)?.into_any(),
                at.into_pyobject(py)?.into_any(),
                e.holder.into_pyobject(py)?.into_any(),
                e.origin.into_pyobject(py)?.into_any(),
            ],
        )?;
        out.append(item)?;
    }
    Ok(out)
}

/// Ends a `_wait_events` under way (the listener shuts down).
#[pyfunction]
#[pyo3(name = "_wake_events")]
pub fn wake_events() {
    events::wake();
}

/// Sets the slow acquire threshold in seconds (`None`: off).
#[pyfunction]
#[pyo3(signature = (seconds))]
pub fn set_slow_acquire(seconds: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let threshold = match seconds {
        None => None,
        Some(s) => {
            let s = crate::convert::seconds_arg(s, "seconds")?;
            Some(validate::seconds(s, "seconds", true).py()?)
        }
    };
    events::set_slow_acquire(threshold);
    Ok(())
}

/// This process's lock figures (see `ferrolock/metrics.py`).
#[pyfunction]
#[pyo3(name = "_metrics")]
pub fn metrics_snapshot(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = metrics::snapshot();
    let d = PyDict::new(py);
    d.set_item("buckets", metrics::BUCKETS.to_vec())?;
    for (key, h) in [("lock_wait", &s.lock_wait), ("lock_hold", &s.lock_hold)] {
        let hd = PyDict::new(py);
        hd.set_item("cumulative", h.cumulative.clone())?;
        hd.set_item("count", h.count)?;
        hd.set_item("sum", h.sum)?;
        d.set_item(key, hd)?;
    }
    d.set_item("acquires_missed", s.acquires_missed)?;
    d.set_item("locks_lost", s.locks_lost)?;
    d.set_item("forced_releases", s.forced_releases)?;
    d.set_item("dead_lettered", s.dead_lettered)?;
    d.set_item("settlements_pending", s.settlements_pending)?;
    d.set_item("events_dropped", events::dropped())?;
    Ok(d)
}
