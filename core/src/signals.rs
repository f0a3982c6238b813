//! Signals during round trips.
//!
//! A signal whose handler was installed without `SA_RESTART` interrupts a
//! blocked read (`EINTR`). CPython installs every Python-level handler that
//! way (SIGINT's included), and so does PHP's `pcntl_signal` with
//! `$restart_syscalls = false`. The redis crate reports the interrupted read as
//! an I/O error and skips the late reply, yet Redis has run the command: a
//! popped task would be gone without being returned, an acquired lock held by
//! a token nobody knows until its TTL ran out.
//!
//! Plain connections (TCP or a Unix socket, RESP2) are ferrolock's own
//! (`client/wire.rs`): their reads go on after `EINTR`, so a signal costs
//! nothing unless one arrives. The round trips that still go through the
//! redis crate's connections (TLS, RESP3, a cluster; subscribing in
//! `wait/listen.rs`) run with the asynchronous signals blocked on their
//! thread ([`Deferred`]): a signal sent meanwhile stays pending, or is taken
//! by another thread, and its handler runs as soon as the round trip is
//! over, at most one command timeout later (on a cluster, the redis crate's
//! own retries of a command, with their pauses, count as part of it). Connecting (DNS, TCP,
//! handshake, a Sentinel lookup) stays interruptible: nothing was sent yet, so
//! an interrupted connect fails harmlessly. Waits between attempts are not
//! covered either: they listen in short slices and consult the caller's
//! interrupt hook, so Ctrl-C stops them.
//!
//! ferrolock's own threads (the watchdog) block these signals for good
//! ([`block_in_this_thread`]): a signal meant for the application is never
//! spent interrupting a renewal.

/// The signals that arrive asynchronously: every one except those the kernel
/// raises for a fault of the running thread (blocking those is undefined).
#[cfg(unix)]
fn asynchronous() -> libc::sigset_t {
    // SAFETY: sigfillset/sigdelset only write the set we own; the signal
    // numbers are valid constants.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for fault in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGABRT,
        ] {
            libc::sigdelset(&mut set, fault);
        }
        set
    }
}

/// Asynchronous signals blocked on this thread until dropped; then the mask
/// the thread had before is restored and pending signals are delivered.
pub(crate) struct Deferred {
    #[cfg(unix)]
    previous: libc::sigset_t,
    /// Not `Send`: the mask belongs to the thread that made the guard.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Deferred {
    /// Blocks the asynchronous signals on the calling thread.
    pub(crate) fn new() -> Self {
        #[cfg(unix)]
        {
            let set = asynchronous();
            // SAFETY: pthread_sigmask reads `set` and writes `previous`, both
            // ours; it only changes the calling thread's mask.
            unsafe {
                let mut previous: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous);
                Self {
                    previous,
                    _thread: std::marker::PhantomData,
                }
            }
        }
        #[cfg(not(unix))]
        Self {
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`, on the same thread (the
        // guard is not `Send`).
        #[cfg(unix)]
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// Blocks the asynchronous signals on the calling thread for good (for
/// ferrolock's own background threads).
pub(crate) fn block_in_this_thread() {
    std::mem::forget(Deferred::new());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn blocked(sig: libc::c_int) -> bool {
        // SAFETY: queries the calling thread's mask into a set we own.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            libc::sigismember(&now, sig) == 1
        }
    }

    #[cfg(unix)]
    #[test]
    fn deferred_blocks_asynchronous_signals_and_restores_the_mask() {
        std::thread::spawn(|| {
            assert!(!blocked(libc::SIGINT));
            {
                let _outer = Deferred::new();
                assert!(blocked(libc::SIGINT) && blocked(libc::SIGALRM) && blocked(libc::SIGTERM));
                assert!(!blocked(libc::SIGSEGV) && !blocked(libc::SIGBUS));
                {
                    let _inner = Deferred::new();
                    assert!(blocked(libc::SIGINT));
                }
                assert!(
                    blocked(libc::SIGINT),
                    "an inner guard restores the outer mask"
                );
            }
            assert!(!blocked(libc::SIGINT));
        })
        .join()
        .unwrap();
    }
}
