//! `Lock` and `Redlock`: one base class over `ferrolock::DistributedLock`.
//!
//! These are the native halves of `ferrolock.Lock` and `ferrolock.Redlock`:
//! the package subclasses them in `ferrolock/_lock.py` to add the decorator
//! and `async with` forms, written in Python on top of the methods here.
//! Nothing here calls back into the package.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ferrolock::{
    DEFAULT_LOCK_PREFIX, DEFAULT_TTL, DistributedLock, LockOptions, Redlock, Wait, validate,
};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::convert::{arg, blocking_undo, bytes_str, client, quick, str_bytes, wait_for};
use crate::errors::{Exc, IntoPy};

/// Who acquires: `threading.get_ident()` as it is now — the calling OS
/// thread, or under gevent/eventlet the current greenlet (taken here, before
/// a greenlet's wait moves to a thread of its own) — so that a caller
/// re-acquiring a non-reentrant lock it holds gets `LockError` instead of
/// waiting for itself (the core's `Lock::acquire_as`).
fn caller(py: Python<'_>) -> PyResult<Option<u64>> {
    crate::green::caller_id(py).map(Some)
}

/// What `Lock` and `Redlock` share: every method but the constructor.
#[pyclass(name = "_LockBase", module = "ferrolock._native", subclass, frozen)]
pub struct PyLockBase {
    pub(crate) inner: Arc<dyn DistributedLock>,
    /// Default wait of `acquire()` and `with` (None: forever).
    pub(crate) timeout: Option<f64>,
    pub(crate) kind: &'static str,
}

impl PyLockBase {
    fn new(
        inner: Arc<dyn DistributedLock>,
        timeout: Option<f64>,
        kind: &'static str,
    ) -> PyResult<Self> {
        // Reject a bad default now rather than at the first acquire.
        wait_for(true, timeout, None)?;
        Ok(Self {
            inner,
            timeout,
            kind,
        })
    }

    pub(crate) fn display_name(&self) -> String {
        String::from_utf8_lossy(self.inner.name()).into_owned()
    }

    /// Acquires, waiting as `wait` says, on behalf of `caller` (see
    /// [`caller`]). A lock taken for a greenlet that was killed meanwhile is
    /// released (see `convert::blocking_undo`).
    fn acquire_wait(
        &self,
        py: Python<'_>,
        cancel: Option<&AtomicBool>,
        wait: Wait,
        caller: Option<u64>,
    ) -> PyResult<bool> {
        // A greenlet's wait moves to a thread of its own (`green.rs`): try
        // once here first, so the uncontended case costs one round trip, not
        // a thread and two trips through the hub.
        if wait != Wait::Try && cancel.is_none() && crate::green::cooperative_wait(py)?.is_some() {
            let inner = self.inner.clone();
            if quick(py, move || inner.acquire_as(Wait::Try, None, caller))? {
                return Ok(true);
            }
        }
        let (inner, taken) = (self.inner.clone(), self.inner.clone());
        blocking_undo(
            py,
            cancel,
            move |hook| inner.acquire_as(wait, hook, caller),
            move |acquired| {
                if acquired {
                    let _ = taken.release();
                }
            },
        )
    }

    /// Waits as the lock's default timeout says; `LockTimeout` if not
    /// acquired. `caller`: see [`caller`].
    fn enter(
        &self,
        py: Python<'_>,
        cancel: Option<&AtomicBool>,
        caller: Option<u64>,
    ) -> PyResult<()> {
        let wait = wait_for(true, None, self.timeout)?;
        let acquired = self.acquire_wait(py, cancel, wait, caller)?;
        if acquired {
            return Ok(());
        }
        let within = match wait {
            Wait::For(d) => format!("within {:.3} s", d.as_secs_f64()),
            _ => "on the first attempt (timeout=0)".to_owned(),
        };
        Err(Exc::Timeout.err(format!(
            "{} {:?}: not acquired {within}",
            self.kind,
            self.display_name()
        )))
    }
}

#[pymethods]
impl PyLockBase {
    /// Acquire the lock; see the stub for the timeout rules.
    #[pyo3(signature = (blocking = true, timeout = None))]
    fn acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::blocking)] blocking: bool,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<f64>,
    ) -> PyResult<bool> {
        let wait = wait_for(blocking, timeout, self.timeout)?;
        let caller = caller(py)?;
        if wait == Wait::Try {
            // One attempt, one round trip (a lost reply is retried within
            // one command timeout, as a release is): it waits for nothing,
            // so it needs neither the interrupt hook nor, under gevent, a
            // thread of its own.
            return quick(py, || self.inner.acquire_as(Wait::Try, None, caller));
        }
        self.acquire_wait(py, None, wait, caller)
    }

    /// Release the lock.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        quick(py, || self.inner.release())
    }

    /// Set the remaining TTL.
    #[pyo3(signature = (ttl = None))]
    fn extend(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::opt_ttl)] ttl: Option<f64>,
    ) -> PyResult<()> {
        let ttl = ttl
            .map(|t| validate::seconds(t, "ttl", true))
            .transpose()
            .py()?;
        let inner = self.inner.clone();
        quick(py, move || inner.extend(ttl))
    }

    /// True when anyone holds the lock.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.inner.clone();
        quick(py, move || inner.locked())
    }

    /// True when this object holds the lock (checked in Redis).
    fn owned(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.inner.clone();
        quick(py, move || inner.owned())
    }

    #[getter]
    fn token(&self) -> Option<String> {
        self.inner.token()
    }

    /// The first read of a hold's token may ask Redis (see the core's
    /// `Lock::fencing_token`).
    #[getter]
    fn fencing_token(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        let inner = self.inner.clone();
        quick(py, move || inner.fencing_token())
    }

    #[getter]
    fn lost(&self) -> bool {
        self.inner.lost()
    }

    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        bytes_str(py, self.inner.name())
    }

    #[getter]
    fn ttl(&self) -> f64 {
        self.inner.ttl().as_secs_f64()
    }

    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.timeout
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().enter(slf.py(), None, caller(slf.py())?)?;
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
        let inner = self.inner.clone();
        let released = py.detach(move || inner.release());
        let propagating = exc_type.is_some_and(|t| !t.is_none());
        match released {
            Ok(()) => Ok(false),
            // Another exception is on its way out: let it through unchanged.
            Err(_) if propagating => Ok(false),
            // Not lost: released already inside the block (LockNotOwnedError).
            Err(e) if e.is_not_owned() && self.inner.lost() => Err(Exc::Lost.err(format!(
                "{} {:?} was lost inside the with block (expired or taken over before the release): {e}",
                self.kind,
                self.display_name()
            ))),
            Err(e) => Err(crate::errors::to_py(e)),
        }
    }

    fn __repr__(&self) -> String {
        let state = if self.inner.token().is_some() {
            "held"
        } else {
            "not held"
        };
        format!(
            "<ferrolock.{} name={:?} ttl={:?} {state}>",
            self.kind,
            self.display_name(),
            self.inner.ttl().as_secs_f64()
        )
    }
}

/// A distributed lock on one Redis deployment (native half of `ferrolock.Lock`).
#[pyclass(name = "Lock", module = "ferrolock._native", extends = PyLockBase, subclass, frozen)]
pub struct PyLock {
    /// The same lock as the base's `inner`, with the methods only a `Lock` has.
    pub(crate) single: Arc<ferrolock::Lock>,
}

#[pymethods]
impl PyLock {
    #[new]
    // Defaults are the core's; `text_signature` spells them for `help()` and
    // stubtest (tests/python/test_binding.py checks them against the core's).
    #[pyo3(
        signature = (name, *, ttl = DEFAULT_TTL.as_secs_f64(), timeout = None, auto_renew = true,
                     reentrant = false, fair = false, url = None, prefix = DEFAULT_LOCK_PREFIX.into(),
                     min_replicas = 0, legacy_interop = None, on_lost = None),
        text_signature = "(name, *, ttl=30.0, timeout=None, auto_renew=True, reentrant=False, \
                          fair=False, url=None, prefix='Lock:', min_replicas=0, \
                          legacy_interop=None, on_lost=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::ttl)] ttl: f64,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<f64>,
        #[pyo3(from_py_with = arg::auto_renew)] auto_renew: bool,
        #[pyo3(from_py_with = arg::reentrant)] reentrant: bool,
        #[pyo3(from_py_with = arg::fair)] fair: bool,
        #[pyo3(from_py_with = arg::url)] url: Option<String>,
        #[pyo3(from_py_with = arg::prefix)] prefix: Vec<u8>,
        #[pyo3(from_py_with = arg::min_replicas)] min_replicas: i64,
        #[pyo3(from_py_with = arg::legacy_interop)] legacy_interop: Option<bool>,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        // Kept by the package (`ferrolock/_events.py`, from `Lock.__init__`),
        // which calls it when the core reports this lock object lost.
        if let Some(hook) = on_lost.filter(|h| !h.is_none() && !h.is_callable()) {
            return Err(crate::errors::type_error(
                "on_lost",
                "callable or None",
                hook,
            ));
        }
        let name = str_bytes(name, "name")?;
        let mut opts = LockOptions::default();
        opts.ttl = validate::seconds(ttl, "ttl", true).py()?;
        opts.auto_renew = auto_renew;
        opts.reentrant = reentrant;
        opts.fair = fair;
        opts.prefix = prefix;
        opts.legacy_interop = legacy_interop;
        opts.min_replicas = u32::try_from(min_replicas).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "min_replicas must be between 0 and {}, got {min_replicas}",
                u32::MAX
            ))
        })?;
        let lock = Arc::new(ferrolock::Lock::new(&client(url.as_deref())?, &name, opts).py()?);
        Ok(
            PyClassInitializer::from(PyLockBase::new(lock.clone(), timeout, "Lock")?)
                .add_subclass(Self { single: lock }),
        )
    }

    /// `acquire` with the caller's owner token (for `ferrolock.redis.Lock`'s
    /// `acquire(token=…)`).
    #[pyo3(signature = (token, blocking = true, timeout = None))]
    fn _acquire_with_token(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = arg::token)] token: String,
        #[pyo3(from_py_with = arg::blocking)] blocking: bool,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<f64>,
    ) -> PyResult<bool> {
        let wait = wait_for(blocking, timeout, slf.as_super().get().timeout)?;
        let (lock, taken) = (slf.get().single.clone(), slf.get().single.clone());
        blocking_undo(
            slf.py(),
            None,
            move |hook| lock.acquire_with_token(&token, wait, hook),
            move |acquired| {
                if acquired {
                    let _ = taken.release();
                }
            },
        )
    }

    /// This object's id in the core's events (`ferrolock/_events.py`).
    #[getter]
    fn _id(&self) -> u64 {
        self.single.id()
    }

    /// Remaining TTL of the key in seconds, whoever holds it (`None`: not
    /// held, or no TTL).
    fn _remaining(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        let lock = self.single.clone();
        quick(py, move || lock.remaining()).map(|d| d.map(|d| d.as_secs_f64()))
    }
}

/// A lock over several independent Redis masters (native half of `ferrolock.Redlock`).
#[pyclass(name = "Redlock", module = "ferrolock._native", extends = PyLockBase, subclass, frozen)]
pub struct PyRedlock {
    /// The same lock as the base's `inner`, with the methods only a `Redlock` has.
    pub(crate) redlock: Arc<Redlock>,
}

#[pymethods]
impl PyRedlock {
    #[new]
    #[pyo3(
        signature = (name, urls, *, ttl = DEFAULT_TTL.as_secs_f64(), timeout = None,
                     prefix = DEFAULT_LOCK_PREFIX.into(), auto_renew = false, on_lost = None),
        text_signature = "(name, urls, *, ttl=30.0, timeout=None, prefix='Lock:', \
                          auto_renew=False, on_lost=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &Bound<'_, PyAny>,
        urls: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::ttl)] ttl: f64,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<f64>,
        #[pyo3(from_py_with = arg::prefix)] prefix: Vec<u8>,
        #[pyo3(from_py_with = arg::auto_renew)] auto_renew: bool,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        // Kept by the package (`ferrolock/_events.py`, from `Redlock.__init__`).
        if let Some(hook) = on_lost.filter(|h| !h.is_none() && !h.is_callable()) {
            return Err(crate::errors::type_error(
                "on_lost",
                "callable or None",
                hook,
            ));
        }
        let name = str_bytes(name, "name")?;
        if urls.is_instance_of::<PyString>() {
            return Err(crate::errors::type_error(
                "urls",
                "a list of URL strings (str)",
                urls,
            ));
        }
        let mut clients = Vec::new();
        let each = urls
            .try_iter()
            .map_err(|_| crate::errors::type_error("urls", "a list of URL strings (str)", urls))?;
        for url in each {
            let url = url?;
            let text: String = url
                .extract()
                .map_err(|_| crate::errors::type_error("urls: each url", "a str", &url))?;
            clients.push(client(Some(&text))?);
        }
        let ttl = validate::seconds(ttl, "ttl", true).py()?;
        let lock = Arc::new(
            Redlock::new(clients, &name, ttl, &prefix)
                .py()?
                .auto_renew(auto_renew),
        );
        Ok(
            PyClassInitializer::from(PyLockBase::new(lock.clone(), timeout, "Redlock")?)
                .add_subclass(Self { redlock: lock }),
        )
    }

    /// This object's id in the core's events (`ferrolock/_events.py`).
    #[getter]
    fn _id(&self) -> u64 {
        self.redlock.id()
    }
}
