//! Fork safety.
//!
//! Forking servers (gunicorn, Celery's prefork pool, PHP's `pcntl_fork`) may
//! fork while other threads of ours are busy: the watchdog renewing leases,
//! a thread checking a connection out of a pool. A mutex held by such a
//! thread at the instant of `fork()` stays locked forever in the child, where
//! that thread does not exist, and the child's first lock would hang.
//!
//! So `fork()` waits, in a `pthread_atfork` *prepare* handler, until it holds
//! every mutex a child may need (the client registry, the list of pools, each
//! pool, the watchdog), which also means no half-finished update is copied
//! into the child; the *parent* and *child* handlers release them again. Those
//! mutexes are only ever held for bookkeeping, never across network I/O (a
//! Sentinel lookup runs with none held, see `Client::master_client`), and
//! none of them is taken while another of them is held, so the wait is short
//! and cannot deadlock. The child then sees its new pid (below): pools and the
//! watchdog forget what belongs to the parent and start afresh.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

static PID: AtomicU32 = AtomicU32::new(0);

/// The id of this process, without a system call per operation: cached, and
/// refreshed in a forked child. The first call installs the fork handlers.
pub(crate) fn current_pid() -> u32 {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        PID.store(std::process::id(), Ordering::Relaxed);
        // SAFETY: the handlers are plain functions that stay valid for the
        // life of the process (this library is never unloaded while running:
        // PHP keeps extensions loaded, CPython never unloads modules).
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
    PID.load(Ordering::Relaxed)
}

extern "C" fn prepare() {
    crate::client::hold_for_fork();
    crate::watchdog::hold_for_fork();
}

extern "C" fn parent() {
    crate::watchdog::release_after_fork();
    crate::client::release_after_fork(false);
}

extern "C" fn child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    crate::watchdog::release_after_fork();
    crate::client::release_after_fork(true);
}
