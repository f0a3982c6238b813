//! One acquire of a [`Lock`]: its scripted attempts, the wait between them
//! that [`wait::wait_loop`] drives, and the same acquire run step by step
//! for event loops ([`AcquireSteps`]).

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::single::Lock;
use super::{Abandon, Tried, full_acquire_call, leave_call, legacy};
use crate::budget::Budget;
use crate::client::Client;
use crate::client::conn::Conn;
use crate::error::Result;
use crate::keys::{LockKeys, new_token};
use crate::settle::Settlement;
use crate::wait::{self, Attempt, Leaving, Step, Ticket, Wait, Waiter};

/// What the round trips of one acquire leave for the lock to know.
pub(super) struct Trail {
    /// When the acquire started (for the wait time metric).
    pub started: Instant,
    /// A round trip failed after sending (its outcome is unknown): the token
    /// may hold the lock although the acquire did not learn it.
    pub unsure: Cell<bool>,
    /// When the last attempt that got a reply was sent: a hold granted
    /// after it (by a hand-over message) was written after that instant.
    pub sent: Cell<Option<Instant>>,
}

impl Default for Trail {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            unsure: Cell::new(false),
            sent: Cell::new(None),
        }
    }
}

impl Trail {
    /// Runs `op` on a connection of `client` within `budget` (see
    /// [`Client::run_noting`]), noting when it was sent (if it got a reply)
    /// or that its outcome is unknown (or that a try before the one that
    /// answered may have run).
    pub(super) fn run<T>(
        &self,
        client: &Client,
        budget: Budget,
        context: &str,
        op: impl FnMut(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let sent = Instant::now();
        let result = client.run_noting(budget, context, &self.unsure, op);
        match &result {
            Ok(_) => self.sent.set(Some(sent)),
            Err(e) if e.outcome_unknown() => self.unsure.set(true),
            Err(_) => {}
        }
        result
    }
}

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
    /// The acquire call's time: no round trip goes past it.
    pub budget: Budget,
    pub trail: &'a Trail,
}

impl LockWaiter<'_> {
    /// One run of the acquire script's full form, registering as `waiter`
    /// while the lock is busy (`""`: not). With legacy interop on, a
    /// waiting attempt (and any attempt while this process knows of a turn)
    /// respects legacy pollers' turns.
    pub(super) fn attempt_as(&self, waiter: &str) -> Result<Tried> {
        let k = self.keys;
        let turn = self.legacy && (!waiter.is_empty() || legacy::is_open(&k.lock));
        let call = full_acquire_call(
            k,
            self.token,
            self.ttl_ms,
            waiter,
            self.fair,
            self.lease_ms,
            turn,
        );
        self.trail
            .run(self.client, self.budget, self.label, |c| call.query(c))
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
        // Not noted as sent: a hold it finds was granted before it ran,
        // after the last attempt (which the hold's validity counts from).
        let budget = budget.min(self.budget);
        let reply: Vec<i64> = self
            .client
            .run_noting(budget, self.label, &self.trail.unsure, |c| call.query(c))
            .inspect_err(|e| {
                if e.outcome_unknown() {
                    self.trail.unsure.set(true);
                }
            })?;
        Ok(match reply.as_slice() {
            [1, fence] => Some(*fence),
            _ => None,
        })
    }

    /// Gives back what the token may hold (a hand-over to the waiter, an
    /// attempt whose reply was lost) and drops the registration.
    fn abandon(&self, waiter: &str) -> Option<Box<dyn Settlement>> {
        let member = format!("{waiter}|{}|{}", self.ttl_ms, self.token);
        Some(Box::new(Abandon::new(
            self.client,
            self.keys,
            self.token,
            Some(member),
            Duration::from_millis(self.ttl_ms),
            self.label,
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
///         Step::Wait(until) => match steps.ticket() {
///             Some(ticket) => {
///                 ticket.wait(Some(until), None)?;
///             }
///             // No wait yet (a pause before the next try): sleep until then.
///             None => std::thread::sleep(until.saturating_duration_since(std::time::Instant::now())),
///         },
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
    deadline: Option<Instant>,
    budget: Budget,
    token: String,
    /// The round trips' trail until the wait starts (then the waiter's).
    trail: Trail,
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

/// The attempts of a stepped acquire, owning their lock and trail.
struct OwnedWaiter {
    lock: Arc<Lock>,
    token: String,
    budget: Budget,
    trail: Trail,
}

impl OwnedWaiter {
    fn waiter(&self) -> LockWaiter<'_> {
        self.lock.waiter(&self.token, self.budget, &self.trail)
    }
}

impl wait::Waiting for OwnedWaiter {
    type Output = i64;

    fn attempt(&self, waiter: &str) -> Result<Attempt<i64>> {
        self.waiter().attempt(waiter)
    }

    fn granted(&self, fence: i64) -> Option<i64> {
        Some(fence)
    }

    fn leave(&self, waiter: &str, how: Leaving, budget: Budget) -> Result<Option<i64>> {
        self.waiter().leave(waiter, how, budget)
    }

    fn abandon(&self, waiter: &str) -> Option<Box<dyn Settlement>> {
        self.waiter().abandon(waiter)
    }
}

impl Lock {
    /// The acquire of `lock` as [`AcquireSteps`] (nothing is sent before
    /// the first step). It is made on behalf of no particular caller (as
    /// [`Lock::acquire_as`] with `None`: an event loop's tasks share a
    /// thread).
    pub fn acquire_steps(lock: &Arc<Lock>, wait: Wait) -> AcquireSteps {
        let deadline = wait.deadline();
        AcquireSteps {
            lock: lock.clone(),
            wait,
            deadline,
            budget: lock.budget_of(wait, deadline),
            token: new_token(),
            trail: Trail::default(),
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
        let taken = match waiter.step() {
            Ok(Step::Wait(at)) => return Ok(Step::Wait(at)),
            Ok(Step::Done(fence)) => Ok(fence.map(|f| (Some(f), true))),
            Err(e) => Err(e),
        };
        self.conclude(taken)
    }

    /// The ticket events arrive on, once the acquire waits (`None` before).
    pub fn ticket(&self) -> Option<&Ticket> {
        self.waiter.as_ref().map(Waiter::ticket)
    }

    /// Gives the wait up: deregisters, giving back anything handed over
    /// meanwhile, within one command timeout (what the server does not
    /// confirm is settled once it answers).
    pub fn cancel(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        if let Some(w) = self.waiter.as_mut() {
            w.cancel()?;
        }
        if self.trail().unsure.get() {
            // An attempt's reply was lost: the token may hold the lock.
            let budget = self.lock.wait_parts().0.one_call().min(self.budget);
            let _ = self.lock.abandon(&self.token, budget);
        }
        Ok(())
    }

    /// The trail of the acquire's round trips.
    fn trail(&self) -> &Trail {
        match &self.waiter {
            Some(w) => &w.waiting().trail,
            None => &self.trail,
        }
    }

    /// The first attempt (a plain `SET NX` where it can be), as
    /// [`Lock::acquire`] makes it.
    fn first_step(&mut self) -> Result<Step<bool>> {
        let lock = self.lock.clone();
        let first = lock.reenter(self.wait, None).and_then(|done| match done {
            Some(done) => Ok(Some(done)),
            None => lock.precheck(self.budget).map(|()| None),
        });
        match first {
            Ok(Some(done)) => {
                self.done = true;
                return Ok(Step::Done(Some(done)));
            }
            Ok(None) => {}
            Err(e) => {
                self.done = true;
                return Err(e);
            }
        }
        match lock.take_first(
            &self.token,
            self.wait,
            self.deadline,
            self.budget,
            &self.trail,
        ) {
            Ok(Some(taken)) => self.conclude(Ok(taken)),
            Err(e) => self.conclude(Err(e)),
            Ok(None) => {
                let (client, keys, label) = lock.wait_parts();
                let owned = OwnedWaiter {
                    lock: lock.clone(),
                    token: self.token.clone(),
                    budget: self.budget,
                    trail: std::mem::take(&mut self.trail),
                };
                let recheck = lock.options().recheck;
                self.waiter = Some(Waiter::new(
                    client,
                    &keys.lock,
                    self.deadline,
                    recheck,
                    label,
                    owned,
                ));
                Ok(Step::Wait(Instant::now()))
            }
        }
    }

    /// The acquire ended with `taken` (see [`Lock::conclude`]).
    fn conclude(&mut self, taken: Result<Option<(Option<i64>, bool)>>) -> Result<Step<bool>> {
        self.done = true;
        let token = std::mem::take(&mut self.token);
        let lock = self.lock.clone();
        lock.conclude(token, taken, self.budget, self.trail(), None)
            .map(|held| Step::Done(Some(held)))
    }
}
