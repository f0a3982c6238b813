//! The background renewal of a Redlock hold ([`Redlock::auto_renew`]): a
//! thread per hold, which extends it every ttl/3 with the quorum and
//! validity checks of an extend, and reports it lost when the quorum is
//! gone or no renewal succeeded within its validity.
//!
//! One thread per hold, not the watchdog's one thread per process: a
//! Redlock renewal asks every master in parallel and waits for a quorum
//! (each master within its budget), which the watchdog's pipelined
//! per-client batches do not express. The thread holds the lock weakly:
//! dropping the `Redlock` ends it, and so does the end of the hold
//! (released, given up: the [`Renewal`] is dropped, which wakes it). A
//! forked child inherits no thread, and no hold (holds are per process).
//!
//! [`Redlock::auto_renew`]: super::Redlock::auto_renew

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{Extended, Inner};
use crate::sync::LockUnpoisoned;

/// Pause after a renewal that failed (capped by ttl/10), before the next.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(200);

/// The renewal of one hold: dropping it ends its thread at once.
pub(super) struct Renewal {
    _stop: mpsc::Sender<()>,
}

/// What one renewal did.
enum Renewed {
    /// Extended: the next is due in ttl/3.
    Yes,
    /// Failed, the validity lasts: tried again soon.
    Failed,
    /// The hold is over (released, given up, lost): the thread ends.
    Over,
}

/// Starts renewing `lock`'s current hold (replacing the renewal of an
/// earlier hold, if any).
pub(super) fn start(lock: &Arc<Inner>) {
    let Some(token) = lock.held().map(|h| h.token) else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    let weak = Arc::downgrade(lock);
    let spawned = std::thread::Builder::new()
        .name("ferrolock-redlock-renew".into())
        .spawn(move || run(&weak, &token, &rx));
    match spawned {
        Ok(_) => *lock.renewal.lock_unpoisoned() = Some(Renewal { _stop: tx }),
        Err(e) => crate::ops::renewal_failed(
            &lock.me,
            &format!("no thread to renew it could be started: {e}"),
        ),
    }
}

fn run(lock: &Weak<Inner>, token: &str, stop: &Receiver<()>) {
    let mut failing = false;
    loop {
        let pause = match lock.upgrade().and_then(|l| l.held().map(|h| h.ttl)) {
            Some(ttl) if failing => RETRY_AFTER_ERROR.min(ttl / 10),
            Some(ttl) => ttl / 3,
            None => return,
        };
        match stop.recv_timeout(pause) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Some(lock) = lock.upgrade() else {
            return;
        };
        match lock.renew(token, failing) {
            Renewed::Yes => failing = false,
            Renewed::Failed => failing = true,
            Renewed::Over => return,
        }
    }
}

impl Inner {
    /// Stops renewing the current hold (its thread ends).
    pub(super) fn stop_renewal(&self) {
        let renewal = self.renewal.lock_unpoisoned().take();
        drop(renewal);
    }

    /// Renews `token`'s hold if it is still the current one; `failing`: the
    /// last renewal failed (a new failure is not reported again).
    fn renew(&self, token: &str, failing: bool) -> Renewed {
        let Some(held) = self.held().filter(|h| h.token == token) else {
            return Renewed::Over;
        };
        let budget = self.one_call();
        let key_ttl = held.ttl;
        let lost = |why: &str| {
            // Released meanwhile (its keys gone by the release): not lost.
            if self.holds(token) {
                self.report_lost(why, true);
                self.give_up(token, key_ttl, budget);
            }
            Renewed::Over
        };
        if Instant::now() >= held.valid_until {
            return lost("no renewal succeeded within its validity (ttl − elapsed − clock drift)");
        }
        match self.try_extend(&held, held.ttl, budget) {
            Extended::Done => Renewed::Yes,
            Extended::Refused(count) => lost(&format!(
                "a renewal found only {count} of {} masters holding it (quorum {})",
                self.masters.clients().len(),
                self.quorum()
            )),
            Extended::Unreachable(e) if Instant::now() < held.valid_until => {
                if !failing && self.holds(token) {
                    crate::ops::renewal_failed(&self.me, &e.to_string());
                }
                Renewed::Failed
            }
            Extended::Unreachable(e) => lost(&format!(
                "no renewal succeeded within its validity (the last: {e})"
            )),
        }
    }
}
