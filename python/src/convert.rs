//! Argument conversion and running core calls with the GIL released.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrolock::wait::{Interrupt, interrupted};
use ferrolock::{Client, Wait};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::{IntoPy, to_py};

/// Runs `f` with the GIL released. `f` gets an interrupt hook that, while it
/// waits, re-takes the GIL every 50 ms to run Python signal handlers (so
/// Ctrl-C raises `KeyboardInterrupt`) and checks `cancel` (asyncio).
pub fn blocking<T: Send>(
    py: Python<'_>,
    cancel: Option<&AtomicBool>,
    f: impl for<'a> FnOnce(Option<Interrupt<'a>>) -> ferrolock::Result<T> + Send,
) -> PyResult<T> {
    let pending: Mutex<Option<PyErr>> = Mutex::new(None);
    let hook = || -> ferrolock::Result<()> {
        if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
            return Err(interrupted("cancelled"));
        }
        Python::attach(|py| py.check_signals()).map_err(|e| {
            if let Ok(mut slot) = pending.lock() {
                *slot = Some(e);
            }
            interrupted("signal")
        })
    };
    let result = py.detach(|| f(Some(&hook)));
    match result {
        Ok(v) => Ok(v),
        Err(e) => match pending.lock().ok().and_then(|mut p| p.take()) {
            Some(signal_error) => Err(signal_error),
            None => Err(signal_or(py, e)),
        },
    }
}

/// Runs a short core call (one round trip) with the GIL released.
pub fn quick<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> ferrolock::Result<T> + Send,
) -> PyResult<T> {
    py.detach(f).map_err(|e| signal_or(py, e))
}

/// A call that failed while a signal's handler raised (Ctrl-C during a
/// connect, say): report the signal (e.g. KeyboardInterrupt), not the error.
/// (Round trips themselves are not cut short by signals: see the core's
/// `signals.rs`.)
fn signal_or(py: Python<'_>, e: ferrolock::Error) -> PyErr {
    match py.check_signals() {
        Err(signal_error) => signal_error,
        Ok(()) => to_py(e),
    }
}

/// The client of `url`, or of `$REDIS_URL`, or of the default URL.
pub fn client(url: Option<&str>) -> PyResult<Client> {
    let url = match url {
        Some(u) => u.to_owned(),
        None => ferrolock::default_url(),
    };
    Client::shared(&url).py()
}

/// `str` → bytes (UTF-8; lone surrogates from `surrogateescape` round-trip).
pub fn str_bytes(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    let s = value
        .cast::<PyString>()
        .map_err(|_| crate::errors::type_error(what, "str", value))?;
    match s.extract::<String>() {
        Ok(text) => Ok(text.into_bytes()),
        Err(_) => {
            let encoded = s.call_method1("encode", ("utf-8", "surrogateescape"))?;
            Ok(encoded.cast::<PyBytes>()?.as_bytes().to_vec())
        }
    }
}

/// Bytes → `str` (invalid UTF-8 from other clients is kept with `surrogateescape`).
pub fn bytes_str<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyString>> {
    match std::str::from_utf8(raw) {
        Ok(text) => Ok(PyString::new(py, text)),
        Err(_) => PyBytes::new(py, raw)
            .call_method1("decode", ("utf-8", "surrogateescape"))?
            .cast_into::<PyString>()
            .map_err(PyErr::from),
    }
}

/// `(blocking, timeout)` → how long to wait. `timeout` None falls back to
/// `default`; None there too means forever; 0 means one attempt.
pub fn wait_for(blocking: bool, timeout: Option<f64>, default: Option<f64>) -> PyResult<Wait> {
    if !blocking {
        return Ok(Wait::Try);
    }
    Wait::from_secs(timeout.or(default), "timeout").py()
}

/// A non-negative wait in seconds (0 → one attempt).
pub fn wait_secs(wait: f64) -> PyResult<Wait> {
    Wait::from_secs(Some(wait), "wait").py()
}
