//! Waits that cooperate with gevent and eventlet.
//!
//! Under `gevent.monkey.patch_all()` (or `eventlet.monkey_patch()`) every
//! greenlet of a thread runs on that one OS thread: a native wait that blocks
//! it stalls the hub, and the greenlet holding the lock never runs again to
//! release it. So when the caller is a greenlet that may yield, the wait runs
//! on a thread of its own while the greenlet waits, cooperatively, for a byte
//! on a socket pair that the thread writes when done.
//!
//! Detection happens at call time: threading is patched when
//! `_thread.get_ident` is no longer the builtin. Then the package's hook
//! (`ferrolock/_green.py`, registered with [`set_hook`]) says whether this
//! caller can yield (not the hub itself) and how to wait for a file descriptor
//! (`gevent.socket.wait_read`, `eventlet.hubs.trampoline`). Calls go one way:
//! this module never imports the package; the package hands it a function.
//!
//! A greenlet killed while it waits (`Greenlet.kill()`, `gevent.Timeout`,
//! Ctrl-C's `KeyboardInterrupt`) gets its exception at once; the wait on the
//! thread is cancelled (the core cleans up an interrupted wait) and, if it
//! succeeded meanwhile, `undo` gives back what it took (a lock, a reserved
//! task), so nothing is left held by a caller that is gone.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ferrolock::wait::interrupted;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCFunction, PyModule};

/// `_thread`, imported once.
fn thread_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || PyModule::import(py, "_thread").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// The package's hook: `() -> None | (fd) -> None`.
static HOOK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Registers the package's hook (once per process; later calls are ignored).
#[pyfunction]
#[pyo3(name = "_set_green_hook")]
pub fn set_hook(py: Python<'_>, hook: Bound<'_, PyAny>) -> PyResult<()> {
    if !hook.is_callable() {
        return Err(crate::errors::type_error("hook", "callable", &hook));
    }
    let _ = HOOK.set(py, hook.unbind());
    Ok(())
}

/// Who is calling: `threading.get_ident()` as it is now, i.e. the OS thread's
/// id, or under gevent/eventlet the current greenlet's. The identity a
/// same-thread re-acquire check compares (compute it in the caller, before a
/// wait moves to another thread).
pub fn caller_id(py: Python<'_>) -> PyResult<u64> {
    let get_ident = thread_module(py)?.getattr(pyo3::intern!(py, "get_ident"))?;
    if get_ident.is_instance_of::<PyCFunction>() {
        // Not patched: the builtin answers `pthread_self()`, as this does
        // without a call through the interpreter.
        return Ok(ferrolock::caller_thread_id());
    }
    get_ident.call0()?.extract()
}

/// The caller's identity for a same-thread check (see [`caller_id`]).
#[pyfunction]
#[pyo3(name = "_caller_id")]
pub fn py_caller_id(py: Python<'_>) -> PyResult<u64> {
    caller_id(py)
}

/// When the caller is a greenlet that may yield: the function that waits,
/// cooperatively, until a file descriptor is readable. `None` otherwise (the
/// cost then: one attribute read and a type check).
pub fn cooperative_wait(py: Python<'_>) -> PyResult<Option<Bound<'_, PyAny>>> {
    let get_ident = thread_module(py)?.getattr(pyo3::intern!(py, "get_ident"))?;
    if get_ident.is_instance_of::<PyCFunction>() {
        return Ok(None); // threading is not patched
    }
    let Some(hook) = HOOK.get(py) else {
        return Ok(None);
    };
    let wait = hook.bind(py).call0()?;
    Ok((!wait.is_none()).then_some(wait))
}

enum Slot<T> {
    Running,
    Done(ferrolock::Result<T>),
    /// The greenlet left: whoever ends up with a success gives it back.
    Abandoned,
}

struct Shared<T, U> {
    slot: Mutex<Slot<T>>,
    undo: Mutex<Option<U>>,
    cancel: AtomicBool,
}

impl<T, U: FnOnce(T)> Shared<T, U> {
    fn give_back(&self, value: T) {
        let undo = self
            .undo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(undo) = undo {
            undo(value);
        }
    }
}

/// Runs `f` on a thread of its own while the calling greenlet waits through
/// `wait` (see the module documentation). The outer error is the exception
/// that ended the greenlet's wait; the inner result is `f`'s.
pub fn run<T, F, U>(wait: &Bound<'_, PyAny>, f: F, undo: U) -> PyResult<ferrolock::Result<T>>
where
    T: Send + 'static,
    F: for<'a> FnOnce(Option<ferrolock::wait::Interrupt<'a>>) -> ferrolock::Result<T>
        + Send
        + 'static,
    U: FnOnce(T) + Send + 'static,
{
    let (reader, mut writer) =
        UnixStream::pair().map_err(|e| PyOSError::new_err(format!("socketpair: {e}")))?;
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot::Running),
        undo: Mutex::new(Some(undo)),
        cancel: AtomicBool::new(false),
    });
    let worker = shared.clone();
    std::thread::Builder::new()
        .name("ferrolock-green".into())
        .spawn(move || {
            let hook = || -> ferrolock::Result<()> {
                if worker.cancel.load(Ordering::Acquire) {
                    Err(interrupted("cancelled"))
                } else {
                    Ok(())
                }
            };
            let result = f(Some(&hook));
            let mut slot = worker.slot.lock().unwrap_or_else(PoisonError::into_inner);
            if matches!(*slot, Slot::Abandoned) {
                drop(slot);
                if let Ok(value) = result {
                    worker.give_back(value);
                }
            } else {
                *slot = Slot::Done(result);
                drop(slot);
                let _ = writer.write_all(b"!");
            }
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start a wait thread: {e}")))?;
    let fd = reader.as_raw_fd();
    loop {
        let waited = wait.call1((fd,));
        let mut slot = shared.slot.lock().unwrap_or_else(PoisonError::into_inner);
        match waited {
            Ok(_) => {
                if let Slot::Done(_) = &*slot
                    && let Slot::Done(result) = std::mem::replace(&mut *slot, Slot::Abandoned)
                {
                    return Ok(result);
                }
                // Woken before the thread wrote (spurious): wait again.
            }
            Err(exc) => {
                match std::mem::replace(&mut *slot, Slot::Abandoned) {
                    Slot::Running => shared.cancel.store(true, Ordering::Release),
                    Slot::Done(Ok(value)) => {
                        drop(slot);
                        // Off the hub: the undo is a round trip.
                        let owner = shared.clone();
                        let _ = std::thread::Builder::new()
                            .name("ferrolock-undo".into())
                            .spawn(move || owner.give_back(value));
                    }
                    Slot::Done(Err(_)) | Slot::Abandoned => {}
                }
                return Err(exc);
            }
        }
    }
}
