//! The background renewal of a Redlock hold ([`Redlock::auto_renew`]): a
//! thread per hold, which extends it every ttl/3 with the quorum and
//! validity checks of an extend, and reports it lost when so many masters
//! answer that the key is no longer this hold's that no quorum can renew it,
//! or no renewal succeeded within its validity (masters that do not answer
//! in time make a renewal fail: it is tried again while the validity lasts).
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

use std::sync::atomic::Ordering;
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

/// Starts renewing `lock`'s current hold if its auto-renewal is on.
pub(super) fn start_if_on(lock: &Arc<Inner>) {
    if lock.auto_renew.load(Ordering::Acquire) {
        start(lock);
    }
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
        let masters = self.masters.clients().len();
        let why = match self.try_extend(&held, held.ttl, budget) {
            Extended::Done => return Renewed::Yes,
            // So many masters no longer have it that no quorum can extend it.
            Extended::Refused { yes, no } if no > masters - self.quorum() => {
                return lost(&format!(
                    "a renewal found it gone on {no} of {masters} masters, held on {yes} \
                     (quorum {})",
                    self.quorum()
                ));
            }
            // Masters that did not answer in time: not a quorum, not a loss.
            Extended::Refused { yes, .. } => format!(
                "only {yes} of {masters} masters extended it in time (quorum {})",
                self.quorum()
            ),
            Extended::Unreachable(e) => e.to_string(),
        };
        if Instant::now() >= held.valid_until {
            return lost(&format!(
                "no renewal succeeded within its validity (the last: {why})"
            ));
        }
        if !failing && self.holds(token) {
            crate::ops::renewal_failed(&self.me, &why);
        }
        Renewed::Failed
    }
}
