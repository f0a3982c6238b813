//! The native half of `ferrolock.aio`: core calls for asyncio, off the loop.
//!
//! # How an awaitable call runs
//!
//! Every round trip runs on a small bounded pool of native threads (the
//! *executor*, `FERROLOCK_AIO_THREADS`, default 8, started on demand, idle
//! ones stop after 30 s), without the GIL. A call returns an [`PyOp`]
//! whose `future` (an `asyncio.Future` of the caller's loop) gets the result.
//!
//! Results go back to the loop without the GIL: the executor puts the
//! finished call on its loop's [`Bridge`] and writes one byte to a socket
//! pair the loop watches (`loop.add_reader`); the loop thread then takes
//! every finished call at once and sets the futures. No executor or hub
//! thread ever waits for the GIL, so a busy loop does not slow the hand-overs
//! of other waiters, and one wake-up of the loop delivers many results.
//!
//! # How a wait costs no thread
//!
//! A wait (`acquire`, `reserve(wait=…)`, the worker loop's next task) runs as
//! the core's step machine ([`AcquireSteps`], [`TakeSteps`]): each step is one
//! short round trip on the executor; between steps the wait is only a ticket
//! callback (the hub's reader thread calls it when a release or an enqueue
//! names the waiter) and an entry in the timer thread's heap (its next
//! re-check). 5,000 waiting tasks are 5,000 such entries, no thread each.
//!
//! # Cancellation
//!
//! `PyOp.abandon()` (called by `ferrolock.aio` when the awaiting task is
//! cancelled at that await) gives back what the call did or will do and
//! returns a future that is done once it is given back: a wait in progress
//! is cancelled by its next step (the core deregisters it and gives back a
//! lock handed over meanwhile); a call that succeeded after all (a lock
//! taken, tasks reserved) is undone (released, nacked due at once, popped
//! tasks enqueued again at their scores). Calls that end something (release,
//! ack, nack) are left to finish.
//!
//! # Files
//!
//! `executor.rs` (the round-trip pool and the timer thread), `bridge.rs`
//! (results back to one event loop), `call.rs` (the `_Op` of a call and its
//! undo), `steps.rs` (waits driven step by step), `lock.rs`, `queue.rs`,
//! `worker.rs` (the classes `ferrolock.aio` wraps).
//!
//! [`AcquireSteps`]: ferrolock::AcquireSteps
//! [`TakeSteps`]: ferrolock::TakeSteps

mod bridge;
mod call;
mod executor;
mod lock;
mod queue;
mod steps;
mod worker;

// What the files of this module share: they `use super::*`.
use std::collections::{BinaryHeap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use ferrolock::wait::{Interrupt, Step, Ticket, interrupted};
use ferrolock::{AcquireSteps, TakeSteps, Wait, validate};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use crate::convert::{arg, enqueue_items, str_bytes, wait_for, wait_secs};
use crate::errors::{Exc, IntoPy, to_py};
use crate::lock::{PyLock, PyLockBase, PyRedlock};
use crate::queue::{Origin, PyQueue, PyTask, TaskJob, count_arg, dead_ids};
use crate::worker::{log_trouble, outcome_arg, worker_options};

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub use self::bridge::*;
pub use self::call::*;
use self::executor::*;
pub use self::lock::*;
pub use self::queue::*;
use self::steps::*;
pub use self::worker::*;

/// Threads and timers of the asyncio executor, for tests and benchmarks:
/// `{"threads": now, "threads_peak": most at once, "max_threads": the bound,
/// "jobs": round-trip jobs run, "timers": pending timer entries}`.
#[pyfunction]
#[pyo3(name = "_aio_stats")]
pub fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let e = executor();
    let d = PyDict::new(py);
    d.set_item("threads", locked(&e.state).threads)?;
    d.set_item("threads_peak", THREADS_PEAK.load(Ordering::Relaxed))?;
    d.set_item("max_threads", e.max)?;
    d.set_item("jobs", JOBS_RUN.load(Ordering::Relaxed))?;
    d.set_item("timers", timers().len())?;
    Ok(d)
}
