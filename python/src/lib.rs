//! `ferrolock._native`: the Python binding of the ferrolock core.
//!
//! Thin by design: arguments are converted to owned Rust values, the core call
//! runs with the GIL released, and errors are mapped in `errors.rs`. Every
//! semantic lives in the `ferrolock` crate.

mod convert;
mod errors;
mod lock;
mod queue;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<lock::PyCancel>()?;
    m.add_class::<lock::PyLockBase>()?;
    m.add_class::<lock::PyLock>()?;
    m.add_class::<lock::PyRedlock>()?;
    m.add_class::<queue::PyQueue>()?;
    m.add_class::<queue::PyTask>()?;
    Ok(())
}
