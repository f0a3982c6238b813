//! Fork safety: the cached pid, and the hooks other modules run around `fork()`.
//!
//! Forking servers (gunicorn, Celery's prefork pool, PHP's `pcntl_fork`) may
//! fork while other threads of ours are busy: the watchdog renewing leases,
//! a thread checking a connection out of a pool. A mutex held by such a
//! thread at the instant of `fork()` stays locked forever in the child, where
//! that thread does not exist, and the child's first lock would hang.
//!
//! So each module that owns such mutexes (the client registry, the pools,
//! the watchdog) [`register`]s [`Hooks`] here: in a `pthread_atfork`
//! *prepare* handler, `fork()` waits until it holds every mutex a child may
//! need, which also means no half-finished update is copied into the child;
//! the *parent* and *child* handlers release them again. Those mutexes are
//! only ever held for bookkeeping, never across network I/O (a Sentinel
//! lookup runs with none held, see `Client::master_client`), and none of them
//! is taken while another of them is held, so the wait is short and cannot
//! deadlock. The child then sees its new pid ([`current_pid`]): pools and the
//! watchdog forget what belongs to the parent and start afresh.
//!
//! This module knows none of the modules that register: it is a leaf.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

static PID: AtomicU32 = AtomicU32::new(0);

/// What one module does around `fork()`; all three run in the forking thread.
#[derive(Clone, Copy)]
pub(crate) struct Hooks {
    /// Before the fork: take the module's mutexes.
    pub prepare: fn(),
    /// After the fork, in the parent: release them.
    pub parent: fn(),
    /// After the fork, in the child: release them (the pid is already new).
    pub child: fn(),
}

/// Room for the modules that register (each registers once).
const MAX_HOOKS: usize = 8;

/// Registered hooks, in registration order. Fixed slots read with atomic
/// loads: the handlers take no lock and allocate nothing of their own.
static HOOKS: [OnceLock<Hooks>; MAX_HOOKS] = [const { OnceLock::new() }; MAX_HOOKS];
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

/// Runs `hooks` around every later `fork()` of this process. Prepare hooks
/// run in registration order, parent and child hooks in the reverse order.
/// Each module registers once (behind a `Once`) before it first takes the
/// mutexes its hooks hold.
pub(crate) fn register(hooks: Hooks) {
    install();
    let slot = REGISTERED.fetch_add(1, Ordering::AcqRel);
    let registered = HOOKS
        .get(slot)
        .expect("more fork hooks than MAX_HOOKS")
        .set(hooks);
    debug_assert!(registered.is_ok(), "a fork hook slot was set twice");
}

/// The id of this process, without a system call per operation: cached, and
/// refreshed in a forked child.
pub(crate) fn current_pid() -> u32 {
    install();
    PID.load(Ordering::Relaxed)
}

/// Caches the pid and installs the handlers, once per process.
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        PID.store(std::process::id(), Ordering::Relaxed);
        // SAFETY: the handlers are plain functions that stay valid for the
        // life of the process (this library is never unloaded while running:
        // PHP keeps extensions loaded, CPython never unloads modules).
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

fn registered() -> impl DoubleEndedIterator<Item = &'static Hooks> {
    HOOKS.iter().filter_map(OnceLock::get)
}

extern "C" fn prepare() {
    registered().for_each(|h| (h.prepare)());
}

extern "C" fn parent() {
    registered().rev().for_each(|h| (h.parent)());
}

extern "C" fn child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    registered().rev().for_each(|h| (h.child)());
}

/// Defines `fn $name()`, which registers (once) the `fork()` hooks that hold
/// the mutex `$mutex` (an expression of type `&'static Mutex<$ty>`) across
/// a fork: taken in the prepare handler, released in the parent and the
/// child, so that no half-finished update behind it is copied into a child.
/// Call `$name()` before the mutex is first taken.
macro_rules! hold_mutex_across_forks {
    ($name:ident, $ty:ty, $mutex:expr) => {
        fn $name() {
            thread_local! {
                /// The mutex's guard, held by `fork()`'s prepare handler.
                static HOLD: ::std::cell::RefCell<Option<::std::sync::MutexGuard<'static, $ty>>> =
                    const { ::std::cell::RefCell::new(None) };
            }
            fn release() {
                let _ = HOLD.try_with(|h| h.borrow_mut().take());
            }
            static ONCE: ::std::sync::Once = ::std::sync::Once::new();
            ONCE.call_once(|| {
                $crate::fork::register($crate::fork::Hooks {
                    prepare: || {
                        let guard = $crate::sync::LockUnpoisoned::lock_unpoisoned($mutex);
                        let _ = HOLD.try_with(|h| *h.borrow_mut() = Some(guard));
                    },
                    parent: release,
                    child: release,
                })
            });
        }
    };
}
pub(crate) use hold_mutex_across_forks;
