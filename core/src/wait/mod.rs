//! Waiting without polling.
//!
//! # How a waiter is woken
//!
//! A blocked caller (a lock acquire, a `pop(wait=…)`) registers in a sorted
//! set of waiters as `<hub-id>:<waiter-id>` and waits for a message. Whoever
//! makes progress possible acts on the oldest waiter inside the same script:
//! a lock release *hands the lock over* (sets the key to that waiter's
//! token) and publishes `g:<waiter-id>:<fencing token>`, so the waiter owns
//! the lock the moment the message arrives; an enqueue publishes
//! `w:<waiter-id>`. One PUBLISH to one subscriber: O(1) Redis work per
//! release however many wait, and no thundering herd.
//!
//! The message goes to the channel of the waiter's *process*, not of the
//! waiter: every wait of a process shares one subscription connection per
//! server, read by one thread that hands each message to the waiter it
//! names (the hub, `hub.rs`; a waiter's [`Ticket`] is where it arrives). A
//! waiter is live while its process listens on the server running the
//! script (`PUBSUB NUMSUB` before a hand-over, PUBLISH's receiver count for
//! wake-ups): a dead process's waiters are dropped and the next one served.
//! A waiter that is alive but stuck is dropped when its lease runs out (it
//! renews the lease at every re-check).
//!
//! No wake-up is lost: the hub listens before the waiter's first
//! registering attempt, and a grant made while it did not (its connection
//! broke) either was never made (the script dropped the waiter, who
//! registers again) or is found by the next attempt (the key holds the
//! waiter's token). While waiting, the caller re-checks at least every
//! `recheck` interval (and exactly when the holder's TTL runs out, so a
//! crashed holder's lock is taken as soon as it expires). Those re-checks
//! are the only Redis traffic of an idle waiter; each comes a random part
//! of up to a quarter interval early, so that waits that began together do
//! not re-check together (`recheck.rs`).
//!
//! # Riding out faults
//!
//! A wait with time left does not fail on a fault: a connection error, a
//! timeout, or a server that answers `LOADING`, `READONLY`, `MASTERDOWN`,
//! `TRYAGAIN` or `CLUSTERDOWN` makes it back off (50 ms doubling to 1 s,
//! never past its deadline) and try again, on a new connection if need be;
//! registering again is idempotent (same waiter id, same token). Only when
//! the deadline passes with the server still not answering does it fail,
//! with a `Connection` error saying for how long it tried and what the last
//! error was. [`Wait::Forever`] tries until it succeeds or is interrupted.
//! A wait gives up its registration when it ends, within its budget (its
//! timeout plus one command timeout): if the server does not answer then,
//! what it may have left (a registration, a lock handed to it) is settled
//! once the server answers (`settle.rs`).
//!
//! # Driving a wait step by step
//!
//! The loop is a state machine (`Waiter`): each `Waiter::step` makes at
//! most one short round trip and says when to call again ([`Step::Wait`]):
//! at an instant, or earlier if the waiter's [`Ticket`] gets an event. The
//! blocking form (`wait_loop`) waits on the ticket's condition variable (in
//! 50 ms slices when it has an interrupt hook); an event loop runs each step
//! on an executor and waits on the ticket's callback instead, so the
//! semantics stay here. [`AcquireSteps`](crate::AcquireSteps) is the
//! public form for a lock.
//!
//! # The rooms
//!
//! This file holds the [`Wait`] spec, the `Waiting` trait (the boundary
//! with what waits: a lock's acquire, a queue's take) and the machine;
//! `hub.rs` the shared subscriptions; `ticket.rs` where a waiter's events
//! arrive; `interrupt.rs` how a wait stays interruptible; `recheck.rs` when
//! a waiter re-checks and how long its registration lives.

pub(crate) mod hub;
pub(crate) mod interrupt;
mod recheck;
mod ticket;

use std::sync::Arc;
use std::time::{Duration, Instant};

use self::hub::Hub;
pub(crate) use self::interrupt::pause;
pub use self::interrupt::{INTERRUPT_SLICE, Interrupt, interrupted};
pub(crate) use self::recheck::lease_for;
use self::recheck::spread;
pub use self::ticket::{Callback, Event, Ticket};
use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::settle::Settlement;

/// Default longest interval between two re-checks of a waiting caller.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(1);

/// First pause after a failed attempt; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// Longest pause between two attempts while the server does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How long a blocking call may wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wait {
    /// One attempt, no waiting.
    Try,
    /// Wait up to this long.
    For(Duration),
    /// Wait until it succeeds (or is interrupted).
    Forever,
}

impl Wait {
    /// `None` → forever, `Some(0)` → try once, `Some(t)` → up to `t` seconds.
    /// Rejects negative, NaN, infinite and absurdly large values.
    pub fn from_secs(timeout: Option<f64>, what: &str) -> Result<Self> {
        match timeout {
            None => Ok(Wait::Forever),
            Some(t) => {
                let d = crate::validate::seconds(t, what, true)?;
                Ok(if d.is_zero() { Wait::Try } else { Wait::For(d) })
            }
        }
    }

    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::For(d) => Some(Instant::now() + d),
            _ => None,
        }
    }
}

/// Options of a wait loop.
#[derive(Clone, Copy)]
pub(crate) struct WaitSpec<'a> {
    /// Give up at this instant (`None`: never).
    pub deadline: Option<Instant>,
    /// Longest interval between re-checks.
    pub recheck: Duration,
    /// Consulted every [`INTERRUPT_SLICE`] while waiting.
    pub interrupt: Option<Interrupt<'a>>,
    /// What waits (`lock "name"`), for error messages.
    pub label: &'a str,
}

/// What an attempt concluded.
pub(crate) enum Attempt<T> {
    /// Done: stop waiting with this value.
    Done(T),
    /// Not yet: wait for a wake-up, but re-check after at most this long.
    Retry(Option<Duration>),
}

/// How a wait ends for the waiter's registration.
pub(crate) enum Leaving {
    /// The deadline passed: keep the object if it was handed over meanwhile.
    TimedOut,
    /// Interrupted or failed: give back anything handed over meanwhile.
    Abandoned,
}

/// The steps of one waiter, supplied by the lock or queue being waited on.
/// `waiter` is the waiter's name in the waiter list (`<hub-id>:<waiter-id>`).
pub(crate) trait Waiting {
    /// What a successful wait yields.
    type Output;
    /// One attempt, registering as `waiter` when it cannot succeed now.
    fn attempt(&self, waiter: &str) -> Result<Attempt<Self::Output>>;
    /// A grant (a lock handed over with this fencing token) that completes
    /// the wait by itself, or `None` if this kind of wait is only woken.
    fn granted(&self, fence: i64) -> Option<Self::Output>;
    /// Deregisters `waiter` within `budget`; `Some` when it turns out the
    /// wait succeeded.
    fn leave(&self, waiter: &str, how: Leaving, budget: Budget) -> Result<Option<Self::Output>>;
    /// What puts things right if the wait ends without the server
    /// confirming that `waiter` left (a lock: give back a hold that was, or
    /// will be, handed to it, and drop its registration). `None`: nothing
    /// to put right (the registration's lease runs out by itself).
    fn abandon(&self, _waiter: &str) -> Option<Box<dyn Settlement>> {
        None
    }
}

impl<W: Waiting + ?Sized> Waiting for &W {
    type Output = W::Output;

    fn attempt(&self, waiter: &str) -> Result<Attempt<W::Output>> {
        (**self).attempt(waiter)
    }

    fn granted(&self, fence: i64) -> Option<W::Output> {
        (**self).granted(fence)
    }

    fn leave(&self, waiter: &str, how: Leaving, budget: Budget) -> Result<Option<W::Output>> {
        (**self).leave(waiter, how, budget)
    }

    fn abandon(&self, waiter: &str) -> Option<Box<dyn Settlement>> {
        (**self).abandon(waiter)
    }
}

/// A waiter that is only ever woken (never handed the result by a message):
/// queue consumers, whose wake-up means "try again".
pub(crate) struct WakeOnly<A, L> {
    /// One attempt.
    pub attempt: A,
    /// Deregistration.
    pub leave: L,
}

impl<T, A, L> Waiting for WakeOnly<A, L>
where
    A: Fn(&str) -> Result<Attempt<T>>,
    L: Fn(&str) -> Result<()>,
{
    type Output = T;

    fn attempt(&self, waiter: &str) -> Result<Attempt<T>> {
        (self.attempt)(waiter)
    }

    fn granted(&self, _fence: i64) -> Option<T> {
        None
    }

    /// (One round trip of its own: it starts before the budget is spent.)
    fn leave(&self, waiter: &str, _how: Leaving, _budget: Budget) -> Result<Option<T>> {
        (self.leave)(waiter).map(|()| None)
    }
}

/// Runs `w.attempt` until it succeeds, a grant completes it, the deadline
/// passes (→ `Ok(None)`), or the interrupt hook fails (→ [`interrupted`]
/// `(spec.label)`). Between attempts it waits for its process's hub to hand
/// it a message, listening where grants for `node_key` are published.
/// Faults are ridden out until the deadline (see the module docs).
/// (`_channel_prefix` is kept for callers: the scripts name the channel.)
pub(crate) fn wait_loop<W: Waiting>(
    client: &Client,
    node_key: &[u8],
    _channel_prefix: &[u8],
    spec: WaitSpec<'_>,
    w: W,
) -> Result<Option<W::Output>> {
    let mut waiter = Waiter::new(client, node_key, spec.deadline, spec.recheck, spec.label, w);
    loop {
        if let Some(check) = spec.interrupt
            && check().is_err()
        {
            let _ = waiter.cancel();
            return Err(interrupted(spec.label));
        }
        match waiter.step()? {
            Step::Done(v) => return Ok(v),
            Step::Wait(until) => {
                if let Err(e) = waiter.ticket().wait(Some(until), spec.interrupt) {
                    let _ = waiter.cancel();
                    return Err(if e.is_interrupted() {
                        interrupted(spec.label)
                    } else {
                        e
                    });
                }
            }
        }
    }
}

/// What a `Waiter` step concluded.
#[derive(Debug)]
pub enum Step<T> {
    /// The wait is over: its result (`None`: the deadline passed first).
    Done(Option<T>),
    /// Call `Waiter::step` again at this instant, or as soon as the
    /// waiter's ticket has an event ([`Ticket::wait`] / [`Ticket::on_event`]).
    Wait(Instant),
}

/// The server stopped answering: since when, the last error, the next pause.
struct Failing {
    since: Instant,
    error: Error,
    backoff: Duration,
}

/// One wait, run step by step (see the module docs).
pub(crate) struct Waiter<W: Waiting> {
    client: Client,
    key: Vec<u8>,
    w: W,
    deadline: Option<Instant>,
    started: Instant,
    recheck: Duration,
    label: String,
    budget: Budget,
    ticket: Ticket,
    hub: Option<Arc<Hub>>,
    member: String,
    /// When to attempt again without an event.
    next: Option<Instant>,
    failing: Option<Failing>,
    /// An attempt carrying our registration may have reached the server.
    sent: bool,
    /// An attempt may have left our registration in the waiter list.
    registered: bool,
    finished: bool,
}

impl<W: Waiting> Waiter<W> {
    /// A wait on `key` (where grants for it are published) until
    /// `deadline` (`None`: forever), re-checking every `recheck` at least.
    /// Nothing is sent before the first step.
    pub(crate) fn new(
        client: &Client,
        key: &[u8],
        deadline: Option<Instant>,
        recheck: Duration,
        label: &str,
        w: W,
    ) -> Self {
        Self {
            budget: Budget::wait(deadline, client.command_timeout()),
            client: client.clone(),
            key: key.to_vec(),
            w,
            deadline,
            started: Instant::now(),
            recheck,
            label: label.to_owned(),
            ticket: Ticket::new(),
            hub: None,
            member: String::new(),
            next: None,
            failing: None,
            sent: false,
            registered: false,
            finished: false,
        }
    }

    /// The ticket events arrive on: wait on it between steps.
    pub(crate) fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// What waits (the lock's or queue's side of the wait).
    pub(crate) fn waiting(&self) -> &W {
        &self.w
    }

    /// One step: takes the ticket's event, then makes at most one attempt
    /// (or, at the deadline, the deregistration). See [`Step`].
    pub(crate) fn step(&mut self) -> Result<Step<W::Output>> {
        if self.finished {
            return Ok(Step::Done(None));
        }
        let mut now_please = self.next.is_none();
        match self.ticket.take() {
            Some(Event::Granted(fence)) => match self.w.granted(fence) {
                Some(v) => return Ok(self.finish(Some(v), None)),
                None => now_please = true,
            },
            Some(Event::Woken | Event::Recheck) => now_please = true,
            None => {}
        }
        let now = Instant::now();
        if self.deadline.is_some_and(|d| now >= d) {
            return self.time_out();
        }
        if !now_please && let Some(next) = self.next.filter(|n| now < *n) {
            return Ok(Step::Wait(next));
        }
        match self.attempt() {
            Ok(Attempt::Done(v)) => Ok(self.finish(Some(v), None)),
            Ok(Attempt::Retry(hint)) => {
                self.failing = None;
                let mut pause = spread(self.recheck);
                if let Some(h) = hint {
                    pause = pause.min(h);
                }
                Ok(Step::Wait(self.pause_until(pause)))
            }
            Err(e) if e.is_transient() => {
                let backoff = match &mut self.failing {
                    Some(f) => {
                        f.error = e;
                        f.backoff = (f.backoff * 2).min(MAX_BACKOFF);
                        f.backoff
                    }
                    None => {
                        self.failing = Some(Failing {
                            since: now,
                            error: e,
                            backoff: FIRST_BACKOFF,
                        });
                        FIRST_BACKOFF
                    }
                };
                Ok(Step::Wait(self.pause_until(backoff)))
            }
            Err(e) => {
                self.give_up();
                Err(e)
            }
        }
    }

    /// Ends the wait now (interrupted, cancelled): deregisters, giving back
    /// anything handed over meanwhile, within one command timeout (what the
    /// server does not confirm is settled once it answers).
    pub(crate) fn cancel(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.give_up();
        Ok(())
    }

    /// Now plus `pause`, not past the deadline; the next attempt's time.
    fn pause_until(&mut self, pause: Duration) -> Instant {
        let mut at = Instant::now() + pause;
        if let Some(d) = self.deadline {
            at = at.min(d);
        }
        self.next = Some(at);
        at
    }

    /// One attempt, listening first where its grant would be published.
    fn attempt(&mut self) -> Result<Attempt<W::Output>> {
        let hub = match &self.hub {
            Some(hub) => hub.clone(),
            None => {
                let hub = self.client.hub().map_err(|e| e.context(&self.label))?;
                hub.enroll(&self.ticket);
                self.member = hub.member(&self.ticket);
                self.hub = Some(hub.clone());
                hub
            }
        };
        hub.ensure(&self.client, &self.key, &self.ticket, self.budget)
            .map_err(|e| e.context(&format!("{}: listening for wake-ups", self.label)))?;
        let result = self.w.attempt(&self.member);
        match &result {
            Ok(Attempt::Done(_)) => self.sent = true,
            Ok(Attempt::Retry(_)) => (self.sent, self.registered) = (true, true),
            Err(e) if e.outcome_unknown() => (self.sent, self.registered) = (true, true),
            Err(_) => {}
        }
        result
    }

    /// The deadline passed: deregister (a hand-over that raced the deadline
    /// counts), within the call's budget.
    fn time_out(&mut self) -> Result<Step<W::Output>> {
        if !self.sent {
            return match self.failing.take() {
                Some(f) => {
                    self.finish(None, None);
                    Err(self.gave_up(f))
                }
                None => Ok(self.finish(None, None)),
            };
        }
        match self.w.leave(&self.member, Leaving::TimedOut, self.budget) {
            Ok(v) => Ok(self.finish(v, None)),
            Err(e) => {
                let failing = self.failing.take().unwrap_or(Failing {
                    since: Instant::now(),
                    error: e,
                    backoff: FIRST_BACKOFF,
                });
                self.leave_unconfirmed(self.budget);
                Err(self.gave_up(failing))
            }
        }
    }

    /// Ends the wait on the caller's request or a hard error: deregisters
    /// and gives back what was handed over, within one command timeout.
    fn give_up(&mut self) {
        if !self.sent {
            self.finish(None, None);
            return;
        }
        let budget = Budget::one_call(self.client.command_timeout()).min(self.budget);
        match self.w.leave(&self.member, Leaving::Abandoned, budget) {
            Ok(_) => {
                self.finish(None, None);
            }
            Err(_) => self.leave_unconfirmed(budget),
        }
    }

    /// The server did not confirm the deregistration: the registration may
    /// still be there, and a lock may have been (or be) handed to it. The
    /// hub keeps the waiter as departed until its lease has run out (a
    /// grant then is given back), and the abandonment is settled now if the
    /// server answers within `budget`, else by the keeper.
    fn leave_unconfirmed(&mut self, budget: Budget) {
        let until = Instant::now() + lease_for(self.recheck) + Duration::from_secs(1);
        let on_grant = self.w.abandon(&self.member);
        self.finish(None, Some((until, on_grant)));
        if let Some(settlement) = self.w.abandon(&self.member) {
            let _ = crate::settle::settle_or_defer(settlement, budget);
        }
    }

    /// Marks the wait over and tells the hub (see [`Hub::retire`]).
    fn finish(
        &mut self,
        v: Option<W::Output>,
        departed: Option<(Instant, Option<Box<dyn Settlement>>)>,
    ) -> Step<W::Output> {
        self.finished = true;
        if let Some(hub) = &self.hub {
            // Ended with the lock after registering: a stale copy of the
            // registration may be served again (see `hub/dispatch.rs`).
            let held = match (&v, &departed) {
                (Some(_), None) if self.registered => self.w.abandon(&self.member),
                _ => None,
            };
            match held {
                Some(settlement) => {
                    let until = Instant::now() + lease_for(self.recheck) + Duration::from_secs(1);
                    hub.retire_held(&self.ticket, until, settlement);
                }
                None => hub.retire(&self.ticket, departed),
            }
        }
        Step::Done(v)
    }

    /// The error of a wait whose deadline passed while the server did not
    /// answer.
    fn gave_up(&self, f: Failing) -> Error {
        let waited = self.started.elapsed().as_secs_f64();
        let failing = f.since.elapsed().as_secs_f64();
        Error::new(
            ErrorKind::Connection,
            format!(
                "{}: waiting on {}: gave up after {waited:.1} s (the timeout): the server did \
                 not answer for the last {failing:.1} s, tried again with backoff; last error: {}",
                self.label,
                self.client.redacted_url(),
                f.error
            ),
        )
    }
}

impl<W: Waiting> Drop for Waiter<W> {
    /// A wait dropped in the middle (an async task cancelled without
    /// [`Waiter::cancel`]): what it may have left is settled in the
    /// background, without blocking here.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let until = Instant::now() + lease_for(self.recheck) + Duration::from_secs(1);
        let on_grant = self.w.abandon(&self.member);
        if self.sent
            && let Some(settlement) = self.w.abandon(&self.member)
        {
            crate::settle::defer(settlement);
        }
        self.finish(None, Some((until, on_grant)));
    }
}
