//! The one place where core errors become Python exceptions.
//!
//! The exception classes live in `ferrolock/_errors.py` (they need several
//! bases, e.g. `LockTimeout(LockError, TimeoutError)`); they are imported once
//! and cached.

use ferrolock::{Error, ErrorKind};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

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
        static CLASSES: [PyOnceLock<Py<PyType>>; 6] = [const { PyOnceLock::new() }; 6];
        CLASSES[self as usize]
            .get_or_try_init(py, || {
                py.import("ferrolock._errors")?
                    .getattr(self.class_name())?
                    .cast_into::<PyType>()
                    .map(Bound::unbind)
                    .map_err(PyErr::from)
            })
            .map(|t| t.bind(py).clone())
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
        ErrorKind::Quorum => Exc::Lock.err(message),
        _ => Exc::Ferrolock.err(message),
    }
}

/// A `TypeError` naming the argument.
pub fn type_error(what: &str, expected: &str, got: &Bound<'_, PyAny>) -> PyErr {
    let got = got
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!("{what} must be {expected}, not {got}"))
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
