//! One acquire of a [`Lock`]: its scripted attempts, the wait between them
//! that [`wait::wait_loop`] drives, and the same acquire run step by step
//! for event loops ([`AcquireSteps`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::single::Lock;
use super::{Abandon, Tried, acquire_call, leave_call, legacy};
use crate::budget::Budget;
use crate::client::Client;
use crate::error::Result;
use crate::keys::{LockKeys, new_token};
use crate::settle::Settlement;
use crate::wait::{self, Attempt, Leaving, Step, Ticket, Wait, Waiter};

/// One acquire with `token` of the lock whose keys are `keys`.
pub(super) struct LockWaiter<'a> {
    pub client: &'a Client,
    pub keys: &'a LockKeys,
    /// `lock "name"`, for messages.
    pub label: &'a str,
    pub token: &'a str,
    /// The TTL of the hold it takes.
    pub ttl_ms: u64,
    pub fair: bool,
    /// The lease of its registration as a waiter.
    pub lease_ms: u64,
    /// Legacy interop is on: attempts respect legacy pollers' turns.
    pub legacy: bool,
}

impl LockWaiter<'_> {
    /// One run of the acquire script, registering as `waiter` while the
    /// lock is busy (`""`: not). With legacy interop on, a waiting attempt
    /// (and any attempt while this process knows of a turn) respects legacy
    /// pollers' turns.
    pub(super) fn attempt_as(&self, waiter: &str) -> Result<Tried> {
        let k = self.keys;
        let turn = self.legacy && (!waiter.is_empty() || legacy::is_open(&k.lock));
        acquire_call(
            k,
            self.token,
            self.ttl_ms,
            waiter,
            self.fair,
            self.lease_ms,
            turn,
        )
        .run(self.client, self.label)
    }
}

impl wait::Waiting for LockWaiter<'_> {
    type Output = i64;

    fn attempt(&self, waiter: &str) -> Result<Attempt<i64>> {
        Ok(match self.attempt_as(waiter)? {
            Tried::Acquired(f) => Attempt::Done(f),
            Tried::Busy(hint) => Attempt::Retry(hint),
        })
    }

    /// The release script handed the lock over, with this fencing token.
    fn granted(&self, fence: i64) -> Option<i64> {
        Some(fence)
    }

    fn leave(&self, waiter: &str, how: Leaving, budget: Budget) -> Result<Option<i64>> {
        let give_back = matches!(how, Leaving::Abandoned);
        let call = leave_call(self.keys, waiter, self.token, self.ttl_ms, give_back);
        let budget = budget.min(self.client.one_call());
        let reply: Vec<i64> = self
            .client
            .run_within(budget, self.label, |c| call.query(c))?;
        Ok(match reply.as_slice() {
            [1, fence] => Some(*fence),
            _ => None,
        })
    }

    /// Gives back what the token may hold (a hand-over to the waiter, an
    /// attempt whose reply was lost) and drops the registration.
    fn abandon(&self, waiter: &str) -> Option<Box<dyn Settlement>> {
        let until = Duration::from_millis(self.lease_ms + self.ttl_ms);
        Some(Box::new(Abandon::new(
            self.client,
            self.keys,
            self.label,
            self.token,
            Some(waiter),
            self.ttl_ms,
            until,
        )))
    }
}

/// An acquire of a [`Lock`] run step by step, for an event loop (an asyncio
/// binding) that cannot block a thread for the whole wait: each
/// [`AcquireSteps::step`] makes at most one short round trip (run it on an
/// executor thread), and says when to step again ([`Step::Wait`]: at an
/// instant, or as soon as [`AcquireSteps::ticket`] has an event; register a
/// callback with [`Ticket::on_event`]). The semantics are those of
/// [`Lock::acquire`], which runs the same steps (riding out faults until
/// the deadline, the final deregistration within the call's budget, a hand
/// over that raced the deadline counted).
///
/// Dropping it in the middle gives up the wait: what it may have left (a
/// registration, a lock handed over meanwhile) is settled in the
/// background. [`AcquireSteps::cancel`] does the same within one command
/// timeout.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use ferrolock::{Client, Lock, LockOptions, Wait};
/// # use ferrolock::wait::Step;
/// let client = Client::shared("redis://127.0.0.1:6379/0")?;
/// let lock = Arc::new(Lock::new(&client, b"orders", LockOptions::default())?);
/// let mut steps = Lock::acquire_steps(&lock, Wait::For(std::time::Duration::from_secs(5)));
/// let acquired = loop {
///     match steps.step()? {
///         Step::Done(acquired) => break acquired.unwrap_or(false),
///         // An event loop awaits the ticket's callback or the instant here.
///         Step::Wait(until) => {
///             if let Some(ticket) = steps.ticket() {
///                 ticket.wait(Some(until), None)?;
///             }
///         }
///     }
/// };
/// # Ok::<(), ferrolock::Error>(())
/// ```
///
/// [`Lock`]: super::single::Lock
/// [`Lock::acquire`]: super::single::Lock::acquire
/// [`Ticket::on_event`]: crate::wait::Ticket::on_event
pub struct AcquireSteps {
    lock: Arc<Lock>,
    wait: Wait,
    token: String,
    waiter: Option<Waiter<OwnedWaiter>>,
    done: bool,
}

impl std::fmt::Debug for AcquireSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcquireSteps")
            .field("lock", &self.lock)
            .field("wait", &self.wait)
            .field("done", &self.done)
            .finish()
    }
}

/// The attempts of a stepped acquire, owning their lock.
struct OwnedWaiter {
    lock: Arc<Lock>,
    token: String,
}

impl wait::Waiting for OwnedWaiter {
    type Output = i64;

    fn attempt(&self, waiter: &str) -> Result<Attempt<i64>> {
        self.lock.waiter(&self.token).attempt(waiter)
    }

    fn granted(&self, fence: i64) -> Option<i64> {
        Some(fence)
    }

    fn leave(&self, waiter: &str, how: Leaving, budget: Budget) -> Result<Option<i64>> {
        self.lock.waiter(&self.token).leave(waiter, how, budget)
    }

    fn abandon(&self, waiter: &str) -> Option<Box<dyn Settlement>> {
        self.lock.waiter(&self.token).abandon(waiter)
    }
}

impl Lock {
    /// The acquire of `lock` as [`AcquireSteps`] (nothing is sent before
    /// the first step).
    pub fn acquire_steps(lock: &Arc<Lock>, wait: Wait) -> AcquireSteps {
        AcquireSteps {
            lock: lock.clone(),
            wait,
            token: new_token(),
            waiter: None,
            done: false,
        }
    }
}

impl AcquireSteps {
    /// One step (see [`AcquireSteps`]): `Done(Some(true))` once the lock is
    /// held, `Done(Some(false))` when the wait ran out (or a try-once found
    /// it busy), `Wait(at)` to be called again then, or when the ticket has
    /// an event. After `Done`, further steps answer `Done(None)`.
    pub fn step(&mut self) -> Result<Step<bool>> {
        if self.done {
            return Ok(Step::Done(None));
        }
        let Some(waiter) = self.waiter.as_mut() else {
            return self.first_step();
        };
        match waiter.step() {
            Ok(Step::Wait(at)) => Ok(Step::Wait(at)),
            Ok(Step::Done(fence)) => {
                self.done = true;
                match fence {
                    Some(f) => self.finish(Some(f), true),
                    None => Ok(Step::Done(Some(false))),
                }
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// The ticket events arrive on, once the acquire waits (`None` before).
    pub fn ticket(&self) -> Option<&Ticket> {
        self.waiter.as_ref().map(Waiter::ticket)
    }

    /// Gives the wait up: deregisters, giving back anything handed over
    /// meanwhile, within one command timeout (what the server does not
    /// confirm is settled once it answers).
    pub fn cancel(&mut self) -> Result<()> {
        self.done = true;
        match self.waiter.as_mut() {
            Some(w) => w.cancel(),
            None => Ok(()),
        }
    }

    /// The first attempt (a plain `SET NX` where it can be), as
    /// [`Lock::acquire`] makes it.
    fn first_step(&mut self) -> Result<Step<bool>> {
        let lock = self.lock.clone();
        if lock.reenter() {
            self.done = true;
            return Ok(Step::Done(Some(true)));
        }
        let first = match lock.first_attempt(&self.token, self.wait) {
            Err(e) if self.wait != Wait::Try && e.is_transient() => None,
            first => first.inspect_err(|_| self.done = true)?,
        };
        match first {
            Some(fence) => {
                self.done = true;
                self.finish(fence, false)
            }
            None if self.wait == Wait::Try => {
                self.done = true;
                Ok(Step::Done(Some(false)))
            }
            None => {
                let (client, keys, label) = lock.wait_parts();
                let owned = OwnedWaiter {
                    lock: lock.clone(),
                    token: self.token.clone(),
                };
                let recheck = lock.options().recheck;
                self.waiter = Some(Waiter::new(
                    client,
                    &keys.lock,
                    self.wait.deadline(),
                    recheck,
                    label,
                    owned,
                ));
                Ok(Step::Wait(Instant::now()))
            }
        }
    }

    fn finish(&mut self, fence: Option<i64>, waited: bool) -> Result<Step<bool>> {
        let token = std::mem::take(&mut self.token);
        self.lock
            .take_hold(token, fence, waited)
            .map(|held| Step::Done(Some(held)))
    }
}
