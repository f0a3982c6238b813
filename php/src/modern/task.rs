//! `Ferrolock\Task`: a task taken from (or read in) a `Ferrolock\Queue`, as
//! the Python package's `Task`: `ack()` and `nack()` answer by where it came
//! from; `touch()` and `run()` keep a reservation alive.
// ext-php-rs' `#[php_impl]` rewrites borrowed argument types such as
// `CallableArg<'_>` into paths with a hidden lifetime, which this lint flags.
#![allow(elided_lifetimes_in_paths)]

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ext_php_rs::convert::IntoZval;
use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendClassObject, Zval};
use ferrolock::{Heartbeat, validate};

use super::queue::visibility_of;
use crate::args::{OptNum, bytes_zval, read_args};
use crate::errors::{guard, modern, value_error};
use crate::jobs::{CallableArg, Unwind};

/// Where a task came from decides what `ack()` and `nack()` mean (as for
/// the Python package's `Task`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// `pop()`: already removed from the queue.
    Popped,
    /// `top()`: still in the queue, read only.
    Peeked,
    /// `reserve()` or `work()`: in flight until acked or nacked.
    Reserved,
    /// `dead()`: in the dead set.
    Dead,
}

/// A task taken from (or read in) a queue, as the Python package's
/// `ferrolock.Task`: its id, score, attempts, payload, and for a reserved
/// task its receipt, with `ack()`, `nack()`, `touch()` and `run()`.
#[php_class]
#[php(name = "Ferrolock\\Task")]
pub struct Task {
    queue: Arc<ferrolock::Queue>,
    task: ferrolock::Task,
    origin: Origin,
    /// The heartbeat of a `run()` in progress.
    beat: RefCell<Option<Heartbeat>>,
}

impl Task {
    pub(super) fn new(queue: Arc<ferrolock::Queue>, task: ferrolock::Task, origin: Origin) -> Self {
        Self {
            queue,
            task,
            origin,
            beat: RefCell::new(None),
        }
    }

    fn fail(method: &str, e: ferrolock::Error) -> PhpException {
        modern(&format!("Ferrolock\\Task::{method}()"), e)
    }

    /// Until when the reservation is ours at least: while `run()`'s
    /// heartbeat keeps it alive, now; else as reserved (see
    /// `Queue::ack_valid` in the core).
    fn valid_until(&self) -> Option<Instant> {
        let alive = self
            .beat
            .try_borrow()
            .is_ok_and(|b| b.as_ref().is_some_and(|b| !b.is_lost()));
        if alive {
            Some(Instant::now() + Duration::from_millis(100))
        } else {
            self.task.valid_until()
        }
    }

    fn receipt_str(&self) -> &str {
        self.task.receipt.as_deref().unwrap_or_default()
    }

    fn do_ack(&self) -> PhpResult<bool> {
        let t = &self.task;
        match self.origin {
            Origin::Popped => Ok(true),
            Origin::Dead => Ok(false),
            Origin::Peeked => self.queue.dequeue(&t.id, t.score, None, None),
            Origin::Reserved => self
                .queue
                .ack_valid(&t.id, self.receipt_str(), self.valid_until()),
        }
        .map_err(|e| Self::fail("ack", e))
    }

    fn do_nack(&self, delay: Option<f64>) -> PhpResult<bool> {
        let t = &self.task;
        match self.origin {
            // Back into the queue, with its payload.
            Origin::Popped => {
                let delay = delay.unwrap_or(0.0);
                match &t.payload {
                    Some(p) => self
                        .queue
                        .enqueue_with_payloads(&[(&t.id, p)], delay, None, None),
                    None => self.queue.enqueue(&[&t.id], delay, None, None),
                }
                .map(|n| n == 1)
            }
            Origin::Peeked | Origin::Dead => Ok(false),
            Origin::Reserved => {
                self.queue
                    .nack_valid(&t.id, self.receipt_str(), delay, self.valid_until(), None)
            }
        }
        .map_err(|e| Self::fail("nack", e))
    }
}

#[php_impl]
impl Task {
    /// The task id.
    pub fn id(&self) -> Zval {
        bytes_zval(&self.task.id)
    }

    /// Its score: the unix time (seconds) at which it was due (a dead task:
    /// when it died).
    pub fn score(&self) -> f64 {
        self.task.score
    }

    /// The receipt of a reserved task (null for the others).
    pub fn receipt(&self) -> Option<String> {
        self.task.receipt.clone()
    }

    /// For a reserved task: the unix time after which it returns to the
    /// queue (as of the reserve; `touch()` moves it).
    pub fn deadline(&self) -> Option<f64> {
        self.task.deadline
    }

    /// How many times it has been reserved, this reservation included.
    pub fn attempts(&self) -> i64 {
        i64::from(self.task.attempts)
    }

    /// The data enqueued with it, or null.
    pub fn payload(&self) -> Zval {
        match &self.task.payload {
            Some(p) => bytes_zval(p),
            None => Zval::null(),
        }
    }

    /// Done with the task; see the stubs for each kind of task.
    pub fn ack(&self) -> PhpResult<bool> {
        guard(|| self.do_ack())
    }

    /// Gives the task back, due after `$delay` seconds (reserved: after its
    /// backoff when null); see the stubs.
    #[php(defaults(delay = None))]
    pub fn nack(&self, delay: Option<OptNum>) -> PhpResult<bool> {
        guard(|| {
            read_args!("Ferrolock\\Task::nack", delay);
            let delay = delay
                .map(|d| validate::offset(d, "delay"))
                .transpose()
                .map_err(|e| Self::fail("nack", e))?;
            self.do_nack(delay)
        })
    }

    /// Extends the reservation: it now runs out `$visibility` seconds from
    /// now (null: the visibility it was reserved with). False when it is no
    /// longer ours, or the task was not reserved.
    #[php(defaults(visibility = None))]
    pub fn touch(&self, visibility: Option<OptNum>) -> PhpResult<bool> {
        guard(|| {
            read_args!("Ferrolock\\Task::touch", visibility);
            let visibility = visibility_of(visibility, |e| Self::fail("touch", e))?;
            if self.origin != Origin::Reserved {
                return Ok(false);
            }
            self.queue
                .touch(&self.task.id, self.receipt_str(), visibility)
                .map_err(|e| Self::fail("touch", e))
        })
    }

    /// Runs `$callback($task)`, keeping a reservation alive meanwhile, then
    /// acks the task (returning what the callback returned), or nacks it and
    /// rethrows when the callback throws; see the stubs.
    pub fn run(self_: &mut ZendClassObject<Task>, callback: CallableArg<'_>) -> PhpResult<Zval> {
        guard(|| {
            read_args!("Ferrolock\\Task::run", callback);
            let mut this = Zval::new();
            this.set_object(&mut self_.std);
            let me: &Task = self_;
            if me.origin == Origin::Reserved {
                let beat = me
                    .queue
                    .keep_alive(&me.task)
                    .map_err(|e| Self::fail("run", e))?;
                if let Ok(mut slot) = me.beat.try_borrow_mut() {
                    *slot = Some(beat);
                }
            }
            let called = callback.try_call(vec![&this]);
            let ended = match &called {
                Ok(_) => me.do_ack().map(drop),
                Err(_) => me.do_nack(None).map(drop),
            };
            if let Ok(mut slot) = me.beat.try_borrow_mut() {
                slot.take(); // renewals stop once the reservation has ended
            }
            match called {
                Ok(value) => ended.map(|()| value),
                // exit() in the callback: nacked as for an exception (as
                // Python's `with task:` does for SystemExit); the exit goes on.
                Err(e) if Unwind::of(&e).is_some() => {
                    if let Some(u) = Unwind::of(&e) {
                        drop(e);
                        u.resume();
                    }
                    Ok(Zval::null())
                }
                // Best effort: if the nack fails, the reservation runs out
                // and the task comes back; the callback's exception goes on.
                Err(ext_php_rs::error::Error::Exception(e)) => {
                    Err(PhpException::default(String::new()).with_object(e.into_zval(false)?))
                }
                Err(other) => Err(value_error(format!(
                    "Ferrolock\\Task::run(): the callback could not be called: {other}"
                ))),
            }
        })
    }
}
