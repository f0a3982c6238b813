//! `ferrolock._native`: the Python binding of the ferrolock core.
//!
//! Thin by design: arguments are converted to owned Rust values, the core call
//! runs with the GIL released, and errors are mapped in `errors.rs`. Every
//! semantic lives in the `ferrolock` crate.
//!
//! Calls go one way: the `ferrolock` package imports this module and
//! subclasses its lock classes (`ferrolock/_lock.py` adds the decorator and
//! `async with`); nothing here imports a module of the package.

mod aio;
mod convert;
mod errors;
mod green;
mod lock;
mod ops;
mod queue;
mod worker;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The core's defaults, for the package and its users.
    m.add("DEFAULT_TTL", ferrolock::DEFAULT_TTL.as_secs_f64())?;
    m.add("DEFAULT_LOCK_PREFIX", ferrolock::DEFAULT_LOCK_PREFIX)?;
    m.add("DEFAULT_QUEUE_PREFIX", ferrolock::DEFAULT_QUEUE_PREFIX)?;
    m.add(
        "DEFAULT_VISIBILITY",
        ferrolock::DEFAULT_VISIBILITY.as_secs_f64(),
    )?;
    errors::add_to(m)?;
    m.add_function(wrap_pyfunction!(green::set_hook, m)?)?;
    m.add_function(wrap_pyfunction!(green::py_caller_id, m)?)?;
    m.add_function(wrap_pyfunction!(aio::stats, m)?)?;
    m.add_class::<aio::PyOp>()?;
    m.add_class::<aio::PyBridge>()?;
    m.add_class::<aio::PyAsyncLock>()?;
    m.add_class::<aio::PyAsyncQueue>()?;
    m.add_class::<aio::PyAsyncWorker>()?;
    m.add_class::<lock::PyLockBase>()?;
    m.add_class::<lock::PyLock>()?;
    m.add_class::<lock::PyRedlock>()?;
    m.add_class::<queue::PyQueue>()?;
    m.add_class::<queue::PyTask>()?;
    m.add_class::<worker::PyWorker>()?;
    m.add_class::<ops::PyInspector>()?;
    m.add_function(wrap_pyfunction!(ops::enable_events, m)?)?;
    m.add_function(wrap_pyfunction!(ops::wait_events, m)?)?;
    m.add_function(wrap_pyfunction!(ops::wake_events, m)?)?;
    m.add_function(wrap_pyfunction!(ops::set_slow_acquire, m)?)?;
    m.add_function(wrap_pyfunction!(ops::metrics_snapshot, m)?)?;
    Ok(())
}
