//! A [`Redlock`] acquire run step by step, for event loops:
//! [`RedlockSteps`], the counterpart of [`AcquireSteps`](crate::AcquireSteps).

use std::sync::Arc;
use std::time::Instant;

use super::acquire::{Attempts, Next};
use super::{Inner, Redlock, renew};
use crate::error::Result;
use crate::wait::{self, Step, Ticket, Wait};

/// An acquire of a [`Redlock`] run step by step, for an event loop (an
/// asyncio binding) that cannot block a thread for the whole wait: each
/// [`RedlockSteps::step`] makes one attempt on every master (in parallel,
/// each within the master budget: run it on an executor thread) and says
/// when to step again ([`Step::Wait`]: at an instant, or as soon as
/// [`RedlockSteps::ticket`] has an event). The semantics are those of
/// [`Redlock::acquire`], which makes the same attempts with the same pauses:
/// masters that do not answer are ridden out until the deadline, a quorum
/// counts only with its validity left, the waiter's registrations are
/// closed when the call ends, and the call is counted in the metrics.
///
/// [`RedlockSteps::cancel`] gives the wait up within one command timeout;
/// dropping it in the middle does the same on a thread of its own.
pub struct RedlockSteps {
    inner: Arc<Inner>,
    /// The call's attempts; `None` once it is over.
    attempts: Option<Attempts>,
}

impl std::fmt::Debug for RedlockSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockSteps")
            .field("lock", &self.inner.label)
            .field("done", &self.attempts.is_none())
            .finish()
    }
}

impl Redlock {
    /// [`Redlock::acquire`] as [`RedlockSteps`].
    pub fn acquire_steps(&self, wait: Wait) -> RedlockSteps {
        RedlockSteps {
            attempts: Some(self.inner.attempts(wait)),
            inner: self.inner.clone(),
        }
    }
}

impl RedlockSteps {
    /// One attempt; `Done(Some(acquired))` when the call is over.
    pub fn step(&mut self) -> Result<Step<bool>> {
        let Some(a) = self.attempts.as_mut() else {
            return Ok(Step::Done(None));
        };
        if let Some(t) = a.waiter.as_ref().and_then(|w| w.ticket()) {
            t.take(); // whatever woke us, this attempt looks at every master
        }
        let outcome = match self.inner.attempt(a) {
            Ok(Next::Done(acquired)) => Ok(acquired),
            Ok(Next::Again) => return Ok(Step::Wait(Instant::now())),
            Ok(Next::Pause(pause) | Next::Listen(pause)) => {
                return Ok(Step::Wait(Instant::now() + pause));
            }
            Err(e) => Err(e),
        };
        let Some(a) = self.attempts.take() else {
            return Ok(Step::Done(None));
        };
        let acquired = self.inner.conclude(a, outcome)?;
        if acquired {
            renew::start_if_on(&self.inner);
        }
        Ok(Step::Done(Some(acquired)))
    }

    /// What a master's hand-over or wake-up sets while the call listens for
    /// one (`None`: only the instant of [`Step::Wait`] counts).
    pub fn ticket(&self) -> Option<&Ticket> {
        self.attempts.as_ref()?.waiter.as_ref()?.ticket()
    }

    /// Gives the wait up: what the call may have left on masters is undone
    /// (or settled once they answer), its registrations closed.
    pub fn cancel(&mut self) {
        if let Some(a) = self.attempts.take() {
            let _ = self
                .inner
                .conclude(a, Err(wait::interrupted(&self.inner.label)));
        }
    }
}

impl Drop for RedlockSteps {
    fn drop(&mut self) {
        if let Some(a) = self.attempts.take() {
            let inner = self.inner.clone();
            let give_up = move || {
                let _ = inner.conclude(a, Err(wait::interrupted(&inner.label)));
            };
            // Without a thread to be had, the registrations lapse with their
            // leases, and keys taken by no quorum with their TTL.
            let _ = std::thread::Builder::new()
                .name("ferrolock-redlock-cancel".into())
                .spawn(give_up);
        }
    }
}
