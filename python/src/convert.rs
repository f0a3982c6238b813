//! Argument conversion and running core calls with the GIL released.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrolock::wait::{Interrupt, interrupted};
use ferrolock::{Client, Wait};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::{IntoPy, to_py};

thread_local! {
    /// Whether this thread is the interpreter's main thread (asked once per
    /// thread, with the GIL).
    static MAIN_THREAD: std::cell::OnceCell<bool> = const { std::cell::OnceCell::new() };
}

/// True in the interpreter's main thread: the only one where Python runs
/// signal handlers (`PyErr_CheckSignals` does nothing elsewhere).
fn in_main_thread(py: Python<'_>) -> bool {
    MAIN_THREAD.with(|m| {
        *m.get_or_init(|| {
            let is_main = || -> PyResult<bool> {
                let threading = py.import("threading")?;
                let current = threading.call_method0("current_thread")?;
                let main = threading.call_method0("main_thread")?;
                Ok(current.is(&main))
            };
            is_main().unwrap_or(true)
        })
    })
}

/// Runs `f` with the GIL released. `f` gets an interrupt hook that, while it
/// waits, checks `cancel` (asyncio) every 50 ms and, in the main thread,
/// re-takes the GIL to run Python signal handlers (so Ctrl-C raises
/// `KeyboardInterrupt`). Other threads never run signal handlers, so their
/// hook leaves the GIL alone: 500 waiting threads would otherwise take it
/// 10,000 times a second, and a woken waiter would queue behind them.
pub fn blocking<T: Send>(
    py: Python<'_>,
    cancel: Option<&AtomicBool>,
    f: impl for<'a> FnOnce(Option<Interrupt<'a>>) -> ferrolock::Result<T> + Send,
) -> PyResult<T> {
    let pending: Mutex<Option<PyErr>> = Mutex::new(None);
    let main = in_main_thread(py);
    let hook = || -> ferrolock::Result<()> {
        if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
            return Err(interrupted("cancelled"));
        }
        if !main {
            return Ok(());
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
