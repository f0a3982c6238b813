//! Argument conversion and running core calls with the GIL released.
//!
//! Arguments: every value a caller passes is converted here, by a function
//! that names the argument in its `TypeError` (the `#[pyo3(from_py_with)]`
//! converters below); range rules are the core's (`ferrolock::validate`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrolock::wait::{Interrupt, interrupted};
use ferrolock::{Client, Wait};
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyMapping, PyString};

use crate::errors::{IntoPy, to_py, type_error};

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
///
/// Under gevent or eventlet, a greenlet's wait runs on a thread of its own
/// while the greenlet yields to the hub (see `green.rs`).
pub fn blocking<T, F>(py: Python<'_>, cancel: Option<&AtomicBool>, f: F) -> PyResult<T>
where
    T: Send + 'static,
    F: for<'a> FnOnce(Option<Interrupt<'a>>) -> ferrolock::Result<T> + Send + 'static,
{
    blocking_undo(py, cancel, f, |_| ())
}

/// [`blocking`], with `undo` to give back what `f` took (a lock, a task) when
/// it succeeds after its caller is gone: a greenlet killed while it waited.
/// (A wait interrupted on the caller's own thread cleans up in the core.)
pub fn blocking_undo<T, F, U>(
    py: Python<'_>,
    cancel: Option<&AtomicBool>,
    f: F,
    undo: U,
) -> PyResult<T>
where
    T: Send + 'static,
    F: for<'a> FnOnce(Option<Interrupt<'a>>) -> ferrolock::Result<T> + Send + 'static,
    U: FnOnce(T) + Send + 'static,
{
    // A cancellable wait (asyncio) already runs on a worker thread of its own.
    if cancel.is_none()
        && let Some(wait) = crate::green::cooperative_wait(py)?
    {
        return crate::green::run(&wait, f, undo)?.map_err(|e| signal_or(py, e));
    }
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
    // Without a cancel flag, a hook off the main thread has nothing to
    // check: the wait then sleeps until its next event or re-check instead
    // of waking every 50 ms (2,000 waiting threads woke 40,000 times a
    // second for nothing).
    let needed = cancel.is_some() || main;
    let result = py.detach(|| f(needed.then_some(&hook as Interrupt<'_>)));
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
        .map_err(|_| type_error(what, "a str", value))?;
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

/// A number of seconds: an `int` or a `float` (or anything with
/// `__float__`), not a `bool` and not a `str`.
pub fn seconds_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<f64> {
    number_arg(value, what, "a number of seconds")
}

/// [`seconds_arg`], or `None`.
pub fn opt_seconds_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<f64>> {
    if value.is_none() {
        return Ok(None);
    }
    seconds_arg(value, what).map(Some)
}

fn number_arg(value: &Bound<'_, PyAny>, what: &str, expected: &str) -> PyResult<f64> {
    if !value.is_instance_of::<PyBool>() && !value.is_instance_of::<PyString>() {
        match value.extract::<f64>() {
            Ok(v) => return Ok(v),
            Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
                return Err(PyValueError::new_err(format!(
                    "{what} must be a finite number, got an int too large for a float"
                )));
            }
            Err(_) => {}
        }
    }
    Err(type_error(what, expected, value))
}

/// An `int` (or anything with `__index__`), not a `bool`.
pub fn int_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    if !value.is_instance_of::<PyBool>() {
        match value.extract::<i64>() {
            Ok(v) => return Ok(v),
            Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
                return Err(PyValueError::new_err(format!(
                    "{what} is too large: {}",
                    short_repr(value)
                )));
            }
            Err(_) => {}
        }
    }
    Err(type_error(what, "an int", value))
}

/// [`int_arg`], or `None`.
pub fn opt_int_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<i64>> {
    if value.is_none() {
        return Ok(None);
    }
    int_arg(value, what).map(Some)
}

/// A `bool` (numpy's too), not a truthy object of another type.
pub fn bool_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    value
        .extract::<bool>()
        .map_err(|_| type_error(what, "a bool", value))
}

/// `None` or a `bool`.
pub fn opt_bool_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<bool>> {
    if value.is_none() {
        return Ok(None);
    }
    value
        .extract::<bool>()
        .map(Some)
        .map_err(|_| type_error(what, "a bool or None", value))
}

/// A `str`, as bytes (see [`str_bytes`]).
pub fn str_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    str_bytes(value, what)
}

/// A `str` (valid UTF-8), or `bytes` that are valid UTF-8.
pub fn text_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return String::from_utf8(b.as_bytes().to_vec())
            .map_err(|_| PyValueError::new_err(format!("{what} must be valid UTF-8")));
    }
    value
        .extract::<String>()
        .map_err(|_| type_error(what, "a str or bytes", value))
}

/// A `str`, or `None`.
pub fn opt_text_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<String>> {
    if value.is_none() {
        return Ok(None);
    }
    value
        .extract::<String>()
        .map(Some)
        .map_err(|_| type_error(what, "a str", value))
}

/// The start of `repr(value)`, for messages (a 400-digit int is cut short).
fn short_repr(value: &Bound<'_, PyAny>) -> String {
    let text = value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into());
    if text.chars().count() <= 40 {
        return text;
    }
    let head: String = text.chars().take(20).collect();
    format!("{head}… ({} characters)", text.chars().count())
}

/// `#[pyo3(from_py_with = …)]` converters, one per argument name, so that
/// every `TypeError` names the argument (PyO3's own say only
/// "must be real number, not str").
pub mod arg {
    use pyo3::prelude::*;

    macro_rules! converters {
        ($($name:ident: $ty:ty = $conv:ident($what:literal);)*) => {$(
            #[doc = concat!("The `", $what, "` argument (", stringify!($conv), ").")]
            pub fn $name(value: &Bound<'_, PyAny>) -> PyResult<$ty> {
                super::$conv(value, $what)
            }
        )*};
    }

    converters! {
        ttl: f64 = seconds_arg("ttl");
        opt_ttl: Option<f64> = opt_seconds_arg("ttl");
        timeout: Option<f64> = opt_seconds_arg("timeout");
        visibility: f64 = seconds_arg("visibility");
        opt_visibility: Option<f64> = opt_seconds_arg("visibility");
        wait: f64 = seconds_arg("wait");
        delay: f64 = seconds_arg("delay");
        opt_delay: Option<f64> = opt_seconds_arg("delay");
        backoff: f64 = seconds_arg("backoff");
        backoff_cap: f64 = seconds_arg("backoff_cap");
        max_attempts: Option<i64> = opt_int_arg("max_attempts");
        count: Option<i64> = opt_int_arg("count");
        min_replicas: i64 = int_arg("min_replicas");
        blocking: bool = bool_arg("blocking");
        auto_renew: bool = bool_arg("auto_renew");
        reentrant: bool = bool_arg("reentrant");
        fair: bool = bool_arg("fair");
        legacy_interop: Option<bool> = opt_bool_arg("legacy_interop");
        url: Option<String> = opt_text_arg("url");
        prefix: Vec<u8> = str_arg("prefix");
        token: String = text_arg("token");
    }

    /// The `score` argument: a number (any float; the core checks it is finite).
    pub fn score(value: &Bound<'_, PyAny>) -> PyResult<f64> {
        super::number_arg(value, "score", "a number")
    }

    /// The `backoff_jitter` argument: a number (the core checks its range).
    pub fn backoff_jitter(value: &Bound<'_, PyAny>) -> PyResult<f64> {
        super::number_arg(value, "backoff_jitter", "a number")
    }
}

/// What `Queue.enqueue` was given: ids, and with a mapping `{id: payload}`
/// their payloads (in the same order).
pub struct Enqueue {
    /// The task ids.
    pub ids: Vec<Vec<u8>>,
    /// One payload per id, when `ids` was a mapping.
    pub payloads: Option<Vec<Vec<u8>>>,
}

const IDS: &str = "a str, an iterable of str, or a mapping of id to payload (str or bytes)";

/// `ids` of `enqueue`: a `str` (one id), an iterable of `str`, or a mapping
/// of id (`str`) to payload (`str` or `bytes`). Bytes are refused as ids (an
/// iterable of ints), and a mapping is never read as its keys alone.
pub fn enqueue_items(ids: &Bound<'_, PyAny>) -> PyResult<Enqueue> {
    if ids.is_instance_of::<PyString>() {
        return Ok(Enqueue {
            ids: vec![str_bytes(ids, "ids")?],
            payloads: None,
        });
    }
    if ids.is_instance_of::<PyBytes>() || ids.is_instance_of::<PyByteArray>() {
        return Err(type_error("ids", IDS, ids));
    }
    if let Ok(mapping) = ids.cast::<PyMapping>() {
        let (mut keys, mut payloads) = (Vec::new(), Vec::new());
        for item in mapping.items()?.iter() {
            let (id, payload): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            keys.push(str_bytes(&id, "ids: each id")?);
            payloads.push(payload_bytes(&id, &payload)?);
        }
        return Ok(Enqueue {
            ids: keys,
            payloads: Some(payloads),
        });
    }
    let iter = ids.try_iter().map_err(|_| type_error("ids", IDS, ids))?;
    let ids = iter
        .map(|id| str_bytes(&id?, "ids: each id"))
        .collect::<PyResult<_>>()?;
    Ok(Enqueue {
        ids,
        payloads: None,
    })
}

/// A payload: `bytes` as they are, `str` as UTF-8.
fn payload_bytes(id: &Bound<'_, PyAny>, payload: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = payload.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = payload.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if payload.is_instance_of::<PyString>() {
        return str_bytes(payload, "payload");
    }
    Err(type_error(
        &format!("ids: the payload of id {}", short_repr(id)),
        "str or bytes",
        payload,
    ))
}
