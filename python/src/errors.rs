//! The one place where core errors become Python exceptions.
//!
//! The exception classes are defined here, in the native module, so that
//! raising one never imports a Python module of the package (calls go one
//! way: the package imports `_native`, never the reverse). Some need two
//! bases (`LockTimeout(LockError, TimeoutError)`), which PyO3's
//! `create_exception!` cannot express, so each is made by calling `type()`,
//! exactly as a `class` statement would.

use ferrolock::{Error, ErrorKind};
use pyo3::exceptions::{PyConnectionError, PyException, PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The ferrolock exception classes.
#[derive(Clone, Copy)]
pub enum Exc {
    Ferrolock,
    Lock,
    Timeout,
    NotOwned,
    Lost,
    Connection,
}

/// Every class, in [`Exc`] order.
const ALL: [Exc; 6] = [
    Exc::Ferrolock,
    Exc::Lock,
    Exc::Timeout,
    Exc::NotOwned,
    Exc::Lost,
    Exc::Connection,
];

/// `class <name>(*bases): "<doc>"` in module `ferrolock`.
fn new_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: &[&Bound<'py, PyType>],
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__doc__", doc)?;
    // The public name: `ferrolock.LockTimeout` in tracebacks and pickles.
    namespace.set_item("__module__", "ferrolock")?;
    py.get_type::<PyType>()
        .call1((name, PyTuple::new(py, bases)?, namespace))?
        .cast_into::<PyType>()
        .map_err(PyErr::from)
}

/// The classes, made once per process.
fn classes(py: Python<'_>) -> PyResult<&[Py<PyType>; 6]> {
    static CLASSES: PyOnceLock<[Py<PyType>; 6]> = PyOnceLock::new();
    CLASSES.get_or_try_init(py, || {
        let base = new_class(
            py,
            "FerrolockError",
            &[&py.get_type::<PyException>()],
            "Base class of every ferrolock error.",
        )?;
        let lock = new_class(py, "LockError", &[&base], "A lock operation failed.")?;
        let timeout = new_class(
            py,
            "LockTimeout",
            &[&lock, &py.get_type::<PyTimeoutError>()],
            "The lock (or a legacy queue lock) was not acquired within the timeout.",
        )?;
        let not_owned = new_class(
            py,
            "LockNotOwnedError",
            &[&lock],
            "Release or extend of a lock this object does not hold (never acquired,\n\
             expired, or taken over by another owner).",
        )?;
        let lost = new_class(
            py,
            "LockLostError",
            &[&lock],
            "The lock was lost while held: it expired or was taken over inside a\n\
             ``with`` block, or the watchdog could not renew it.",
        )?;
        let connection = new_class(
            py,
            "ConnectionError",
            &[&base, &py.get_type::<PyConnectionError>()],
            "Redis could not be reached, did not answer in time, or refused the\n\
             credentials.",
        )?;
        Ok([base, lock, timeout, not_owned, lost, connection].map(Bound::unbind))
    })
}

/// Adds the exception classes to the module.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for exc in ALL {
        m.add(exc.class_name(), exc.class(m.py())?)?;
    }
    Ok(())
}

impl Exc {
    fn class_name(self) -> &'static str {
        match self {
            Exc::Ferrolock => "FerrolockError",
            Exc::Lock => "LockError",
            Exc::Timeout => "LockTimeout",
            Exc::NotOwned => "LockNotOwnedError",
            Exc::Lost => "LockLostError",
            Exc::Connection => "ConnectionError",
        }
    }

    /// The Python class.
    pub fn class(self, py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
        Ok(classes(py)?[self as usize].bind(py).clone())
    }

    /// A new exception of this class with `message`.
    pub fn err(self, message: impl Into<String>) -> PyErr {
        let message = message.into();
        Python::attach(|py| match self.class(py) {
            Ok(class) => PyErr::from_type(class, message),
            Err(e) => e,
        })
    }
}

/// Maps a core error to the matching Python exception.
pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    match err.kind() {
        ErrorKind::InvalidArgument | ErrorKind::Config => PyValueError::new_err(message),
        ErrorKind::Connection | ErrorKind::Auth | ErrorKind::Timeout => {
            Exc::Connection.err(message)
        }
        ErrorKind::NotOwned => Exc::NotOwned.err(message),
        ErrorKind::Lost => Exc::Lost.err(message),
        ErrorKind::QueueLocked => Exc::Timeout.err(message),
        ErrorKind::Quorum | ErrorKind::WouldDeadlock => Exc::Lock.err(message),
        _ => Exc::Ferrolock.err(message),
    }
}

/// A `TypeError` naming the argument: "ttl must be a number of seconds, got str".
pub fn type_error(what: &str, expected: &str, got: &Bound<'_, PyAny>) -> PyErr {
    let got = if got.is_none() {
        "None".to_owned()
    } else {
        got.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into())
    };
    PyTypeError::new_err(format!("{what} must be {expected}, got {got}"))
}

/// Extension: `.py()` on core results.
pub trait IntoPy<T> {
    /// Maps the error with [`to_py`].
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
