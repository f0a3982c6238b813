//! A take (`pop`, `reserve`, the worker loop's `finish_and_reserve`) run
//! step by step, for event loops: [`TakeSteps`], the queue's counterpart of
//! [`AcquireSteps`](crate::AcquireSteps).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::reply::Taken;
use super::take::{PendingFinish, TakeSpec};
use super::task::{Finish, Mode};
use super::{Queue, Step};
use crate::budget::Budget;
use crate::error::Result;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Attempt, Leaving, Ticket, Wait, Waiter};

/// A take of a [`Queue`] run step by step, for an event loop that cannot
/// block a thread for the whole wait for work: each [`TakeSteps::step`]
/// makes at most one short round trip (run it on an executor thread) and
/// says when to step again ([`wait::Step::Wait`]: at an instant, or as soon
/// as [`TakeSteps::ticket`] has an event). The semantics are those of
/// [`Queue::pop`], [`Queue::reserve_many`] and [`Queue::finish_and_reserve`],
/// which make the same attempts: the finish rides on the first attempt only,
/// faults are ridden out until the deadline, a lost reply is settled by the
/// core.
///
/// An attempt that finds a legacy client's queue lock held waits for it on
/// the calling thread (up to the queue's `legacy_lock_timeout`), as the
/// blocking forms do: legacy clients hold it for a few round trips.
///
/// Dropping it in the middle, or [`TakeSteps::cancel`], gives up the wait
/// (its registration as a waiter is dropped). Tasks a step has returned are
/// the caller's: it gives them back if it no longer wants them.
pub struct TakeSteps {
    take: Arc<OwnedTake>,
    waiter: Option<Waiter<Shared>>,
    done: bool,
}

impl std::fmt::Debug for TakeSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeSteps")
            .field("queue", &self.take.queue)
            .field("wait", &self.take.spec.wait)
            .field("done", &self.done)
            .finish()
    }
}

/// The attempts of a stepped take, owning their queue.
struct OwnedTake {
    queue: Arc<Queue>,
    spec: TakeSpec,
    /// The finish still to send (the first attempt that gets a reply sends it).
    pending: Mutex<Option<PendingFinish>>,
    finished: AtomicBool,
}

impl OwnedTake {
    fn attempt(&self, waiter: &str) -> Result<Taken> {
        let finish = self.pending.lock_unpoisoned().clone();
        let taken = self
            .queue
            .take_once(&self.spec, finish.as_ref(), waiter, None)?;
        if let Some(f) = &finish {
            *self.pending.lock_unpoisoned() = None;
            self.finished
                .store(taken.finish_code() > 0, Ordering::Release);
            self.queue.finished_by_take(f, taken.finish_code());
        }
        Ok(taken)
    }
}

/// [`OwnedTake`] shared between the steps and their waiter.
struct Shared(Arc<OwnedTake>);

impl wait::Waiting for Shared {
    type Output = Vec<super::Task>;

    fn attempt(&self, waiter: &str) -> Result<Attempt<Vec<super::Task>>> {
        Ok(match self.0.attempt(waiter)? {
            Taken::Tasks(t, _) => Attempt::Done(t),
            Taken::Empty(hint, _) => Attempt::Retry(hint),
        })
    }

    fn granted(&self, _fence: i64) -> Option<Vec<super::Task>> {
        None
    }

    fn leave(
        &self,
        waiter: &str,
        _how: Leaving,
        _budget: Budget,
    ) -> Result<Option<Vec<super::Task>>> {
        self.0.queue.leave(waiter).map(|()| None)
    }
}

impl Queue {
    /// [`Queue::reserve_many`] as [`TakeSteps`] (nothing is sent before the
    /// first step).
    pub fn reserve_steps(
        queue: &Arc<Queue>,
        count: usize,
        visibility: Option<std::time::Duration>,
        wait: Wait,
    ) -> Result<TakeSteps> {
        Self::finish_and_reserve_steps(queue, Finish::Nothing, count, visibility, wait)
    }

    /// [`Queue::finish_and_reserve`] as [`TakeSteps`]: the finish is
    /// checked now and sent by the first attempt.
    pub fn finish_and_reserve_steps(
        queue: &Arc<Queue>,
        finish: Finish<'_>,
        count: usize,
        visibility: Option<std::time::Duration>,
        wait: Wait,
    ) -> Result<TakeSteps> {
        validate::task_count(count, "count")?;
        let visibility = match visibility {
            Some(v) => validate::lifetime(v, "visibility")?,
            None => queue.opts.visibility,
        };
        let pending = queue.pending_finish(finish)?;
        let spec = queue.take_spec(Mode::Reserve, count, Some(visibility), wait, None);
        Ok(TakeSteps::new(queue, spec, pending))
    }

    /// [`Queue::pop`] as [`TakeSteps`].
    pub fn pop_steps(queue: &Arc<Queue>, count: usize, wait: Wait) -> Result<TakeSteps> {
        validate::task_count(count, "count")?;
        let spec = queue.take_spec(Mode::Pop, count, None, wait, None);
        Ok(TakeSteps::new(queue, spec, None))
    }
}

impl TakeSteps {
    fn new(queue: &Arc<Queue>, spec: TakeSpec, pending: Option<PendingFinish>) -> Self {
        Self {
            take: Arc::new(OwnedTake {
                queue: queue.clone(),
                spec,
                pending: Mutex::new(pending),
                finished: AtomicBool::new(false),
            }),
            waiter: None,
            done: false,
        }
    }

    /// One step: `Done(Some(step))` with the tasks taken (none when the wait
    /// ran out) and whether the finish took effect; `Wait(at)` to be called
    /// again then, or when the ticket has an event. After `Done`, further
    /// steps answer `Done(None)`.
    pub fn step(&mut self) -> Result<wait::Step<Step>> {
        if self.done {
            return Ok(wait::Step::Done(None));
        }
        let Some(waiter) = self.waiter.as_mut() else {
            return self.first_step();
        };
        match waiter.step() {
            Ok(wait::Step::Wait(at)) => Ok(wait::Step::Wait(at)),
            Ok(wait::Step::Done(tasks)) => Ok(self.finish(tasks.unwrap_or_default())),
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// The ticket events arrive on, once the take waits (`None` before).
    pub fn ticket(&self) -> Option<&Ticket> {
        self.waiter.as_ref().map(Waiter::ticket)
    }

    /// Gives the wait up: deregisters within one command timeout.
    pub fn cancel(&mut self) -> Result<()> {
        self.done = true;
        match self.waiter.as_mut() {
            Some(w) => w.cancel(),
            None => Ok(()),
        }
    }

    fn first_step(&mut self) -> Result<wait::Step<Step>> {
        let wait = self.take.spec.wait;
        match self.take.attempt("") {
            Ok(Taken::Tasks(tasks, _)) => return Ok(self.finish(tasks)),
            Ok(Taken::Empty(..)) if wait == Wait::Try => return Ok(self.finish(Vec::new())),
            Ok(Taken::Empty(..)) => {}
            Err(e) if wait != Wait::Try && e.is_transient() => {}
            Err(e) => {
                self.done = true;
                return Err(e);
            }
        }
        let q = &self.take.queue;
        self.waiter = Some(Waiter::new(
            &q.client,
            &q.keys.queue,
            self.take.spec.deadline,
            q.opts.recheck,
            &q.label,
            Shared(self.take.clone()),
        ));
        Ok(wait::Step::Wait(Instant::now()))
    }

    fn finish(&mut self, tasks: Vec<super::Task>) -> wait::Step<Step> {
        self.done = true;
        wait::Step::Done(Some(Step {
            finished: self.take.finished.load(Ordering::Acquire),
            tasks,
        }))
    }
}
