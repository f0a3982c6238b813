//! The worker loop's steps, shared by both bindings: end the task just
//! handled and reserve the next in one round trip, keep the reservation
//! alive while the handler runs, and ride out connection trouble.
//!
//! The bindings run the loop (they call the handler, and know about
//! signals); [`Worker`] does everything else. An event loop runs
//! [`Worker::next`] as [`NextSteps`] instead (the same attempts, the same
//! pauses after trouble, and no thread blocked while waiting for work).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::heartbeat::Heartbeat;
use super::task::{Finish, Task};
use super::{Queue, TakeSteps};
use crate::error::{Error, ErrorKind, Result};
use crate::wait::{self, Interrupt, Ticket, Wait};

/// First pause after a failed round trip; doubled after each further one.
const TROUBLE_PAUSE: Duration = Duration::from_millis(50);

/// Longest pause between two tries while Redis cannot be reached.
const TROUBLE_PAUSE_MAX: Duration = Duration::from_secs(5);

/// How the handler of a task did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// It succeeded: ack.
    Done,
    /// It failed: nack, due again after the task's backoff (or dead at its
    /// last attempt).
    Failed,
    /// Try again after this many seconds: nack with that delay (the
    /// attempt still counts).
    Retry(f64),
}

impl Outcome {
    fn finish(self, task: &Task) -> Finish<'_> {
        match self {
            Outcome::Done => Finish::Ack(task),
            Outcome::Failed => Finish::Nack(task, None),
            Outcome::Retry(delay) => Finish::Nack(task, Some(delay)),
        }
    }
}

/// Settings of a [`Worker`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Visibility of each reservation (default: the queue's).
    pub visibility: Option<Duration>,
    /// How long to wait for work when none is due before
    /// [`Worker::next`] answers `None`: [`Wait::Try`] drains the queue and
    /// stops, [`Wait::Forever`] waits until interrupted.
    pub wait: Wait,
    /// Keep each reservation alive in the background while it is handled,
    /// so a task that runs longer than its visibility is not handed out twice.
    pub heartbeat: bool,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            visibility: None,
            wait: Wait::Forever,
            heartbeat: true,
        }
    }
}

/// Consecutive failed round trips of one worker, and the pause the next
/// failure earns: the one retry policy of [`Worker`] and [`NextSteps`].
#[derive(Debug, Clone, Default)]
struct Troubles(Arc<AtomicU32>);

impl Troubles {
    /// The pause before trying again after `e` (50 ms, doubling up to 5 s),
    /// having reported `e` to `log`; `None` when `e` is not ridden out
    /// (anything but a connection error, a timeout, a legacy queue lock held
    /// too long or a missing quorum).
    fn pause_after(&self, e: &Error, log: &dyn Fn(&Error)) -> Option<Duration> {
        let ridden_out =
            e.is_transient() || matches!(e.kind(), ErrorKind::QueueLocked | ErrorKind::Quorum);
        if !ridden_out {
            return None;
        }
        log(e);
        let n = self.0.fetch_add(1, Ordering::Relaxed);
        Some(
            TROUBLE_PAUSE
                .saturating_mul(1 << n.min(10))
                .min(TROUBLE_PAUSE_MAX),
        )
    }

    /// A round trip went through.
    fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// One consumer of a worker loop: hands out one task at a time.
pub struct Worker {
    queue: Arc<Queue>,
    opts: WorkerOptions,
    /// The task handed out and not yet ended, with its heartbeat.
    current: Option<(Task, Option<Heartbeat>)>,
    troubles: Troubles,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.queue)
            .field("current", &self.current.as_ref().map(|(t, _)| &t.id))
            .finish()
    }
}

impl Worker {
    /// A worker on `queue`.
    pub fn new(queue: Arc<Queue>, opts: WorkerOptions) -> Result<Self> {
        if let Some(v) = opts.visibility {
            crate::validate::lifetime(v, "visibility")?;
        }
        Ok(Self {
            queue,
            opts,
            current: None,
            troubles: Troubles::default(),
        })
    }

    /// The task handed out last and not yet ended.
    pub fn current(&self) -> Option<&Task> {
        self.current.as_ref().map(|(t, _)| t)
    }

    /// Ends the current task (if any) as `outcome` says and reserves the
    /// next: one round trip while work is due. `None` when the options'
    /// `wait` ran out with nothing due.
    ///
    /// Connection errors, timeouts and a legacy queue lock held too long are
    /// reported to `log`, then the step is tried again after a pause (50 ms,
    /// doubling up to 5 s): the loop never dies of them. An interrupt (the
    /// hook's error) and any other error are returned; the current task is
    /// then still the worker's.
    pub fn next(
        &mut self,
        outcome: Outcome,
        interrupt: Option<Interrupt<'_>>,
        log: &dyn Fn(&Error),
    ) -> Result<Option<Task>> {
        if let Some((_, Some(beat))) = &self.current {
            beat.stop();
        }
        if self.queue.options().min_replicas > 0
            && let Some((task, valid)) = self.take_current()
        {
            // Replicas must confirm the ack (`WAIT`), which the take's script
            // cannot do: with `min_replicas` the finish is a call of its own,
            // tried until the master has the replicas (a fail-fast refusal
            // wrote nothing) or the ack is done.
            let queue = self.queue.clone();
            let ended = self.retrying(interrupt, log, |_| {
                outcome.end(&queue, &task, valid, interrupt)
            });
            if let Err(e) = ended {
                self.current = Some((task, None));
                return Err(e);
            }
        }
        let visibility = self.opts.visibility;
        // The finish rides on a take that does not wait, so that it is
        // known to be done before any wait starts.
        let first = self.retrying(interrupt, log, |w| {
            let finish = match &w.current {
                Some((t, _)) => outcome.finish(t),
                None => Finish::Nothing,
            };
            w.queue
                .finish_and_reserve(finish, 1, visibility, Wait::Try, interrupt)
        })?;
        self.current = None;
        if let Some(task) = first.tasks.into_iter().next() {
            return self.hand_out(task).map(Some);
        }
        if self.opts.wait == Wait::Try {
            return Ok(None);
        }
        let wait = self.opts.wait;
        let got = self.retrying(interrupt, log, |w| {
            w.queue.reserve_many(1, visibility, wait, interrupt)
        })?;
        match got.into_iter().next() {
            Some(task) => self.hand_out(task).map(Some),
            None => Ok(None),
        }
    }

    /// Ends the current task as `outcome` says, taking no other (the loop
    /// stops). Tried once: when Redis cannot be reached the error is
    /// returned, and the reservation runs out by itself (the task comes back
    /// after its visibility and backoff; nothing is lost).
    pub fn finish(&mut self, outcome: Outcome, interrupt: Option<Interrupt<'_>>) -> Result<()> {
        let Some((task, valid)) = self.take_current() else {
            return Ok(());
        };
        outcome.end(&self.queue, &task, valid, interrupt)
    }

    /// [`Worker::next`] as steps, for an event loop: ends the current task
    /// (its heartbeat stops now) as `outcome` says and reserves the next,
    /// waiting for work as the options say, trouble logged to the `log` of
    /// each [`NextSteps::step`] and ridden out with the same pauses. The
    /// task the steps end with is not yet the worker's: hand it to
    /// [`Worker::hand_out`] (or give it back).
    pub fn next_steps(&mut self, outcome: Outcome) -> NextSteps {
        NextSteps {
            queue: self.queue.clone(),
            finish: self.take_current().map(|(t, valid)| (t, outcome, valid)),
            visibility: self.opts.visibility,
            wait: self.opts.wait,
            waiting: None,
            troubles: self.troubles.clone(),
        }
    }

    /// Makes `task` (reserved by [`NextSteps`]) the current task, kept alive
    /// by a heartbeat if the options say so.
    pub fn hand_out(&mut self, task: Task) -> Result<Task> {
        let beat = if self.opts.heartbeat {
            Some(self.queue.keep_alive(&task)?)
        } else {
            None
        };
        self.current = Some((task.clone(), beat));
        Ok(task)
    }

    /// Forgets the current task without ending it (its heartbeat stops):
    /// for a caller that gives it back itself.
    pub fn forget(&mut self) -> Option<Task> {
        self.current.take().map(|(t, _)| t)
    }

    /// Takes the current task out, its heartbeat stopped, with the instant
    /// until which its reservation is ours at least: for a caller that ends
    /// it itself ([`Outcome::end`]), off the thread that holds the worker.
    pub fn take_current(&mut self) -> Option<(Task, Option<Instant>)> {
        let (task, beat) = self.current.take()?;
        let valid = validity(&task, beat);
        Some((task, valid))
    }

    /// Runs `op` until it succeeds, pausing after trouble (see [`Worker::next`]).
    fn retrying<T>(
        &mut self,
        interrupt: Option<Interrupt<'_>>,
        log: &dyn Fn(&Error),
        mut op: impl FnMut(&Self) -> Result<T>,
    ) -> Result<T> {
        loop {
            match op(self) {
                Ok(v) => {
                    self.troubles.clear();
                    return Ok(v);
                }
                Err(e) => match self.troubles.pause_after(&e, log) {
                    Some(pause) => wait::pause(pause, interrupt)?,
                    None => return Err(e),
                },
            }
        }
    }
}

/// Until when the reservation of `task` is ours at least: kept alive by
/// `beat` until now, else as reserved. Stops the heartbeat.
fn validity(task: &Task, beat: Option<Heartbeat>) -> Option<Instant> {
    match &beat {
        Some(b) if !b.is_lost() => Some(Instant::now() + Duration::from_millis(100)),
        _ => task.valid_until(),
    }
}

impl Outcome {
    /// Ends the reservation of `task` as this outcome says, on its own
    /// (`valid`: until when the reservation is ours at least; see
    /// [`Worker::take_current`]). Tried once.
    pub fn end(
        self,
        queue: &Queue,
        task: &Task,
        valid: Option<Instant>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<()> {
        let receipt = task.receipt.as_deref().unwrap_or_default();
        match self {
            Outcome::Done => queue.ack_valid(&task.id, receipt, valid),
            Outcome::Failed => queue.nack_valid(&task.id, receipt, None, valid, interrupt),
            Outcome::Retry(d) => queue.nack_valid(&task.id, receipt, Some(d), valid, interrupt),
        }
        .map(drop)
    }
}

/// One [`Worker::next`] run step by step ([`Worker::next_steps`]), for an
/// event loop: each [`NextSteps::step`] makes at most one short round trip
/// (run it on an executor thread) and says when to step again
/// ([`wait::Step::Wait`]: at an instant, or as soon as
/// [`NextSteps::ticket`] has an event). It ends with the next task, or
/// `None` when the wait for work ran out.
pub struct NextSteps {
    queue: Arc<Queue>,
    /// The task to end first, how, and until when it is ours.
    finish: Option<(Task, Outcome, Option<Instant>)>,
    visibility: Option<Duration>,
    wait: Wait,
    /// The wait for work, once the first take found none due.
    waiting: Option<TakeSteps>,
    troubles: Troubles,
}

impl std::fmt::Debug for NextSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NextSteps")
            .field("queue", &self.queue)
            .field("finish", &self.finish.as_ref().map(|(t, o, _)| (&t.id, o)))
            .field("waiting", &self.waiting.is_some())
            .finish()
    }
}

impl NextSteps {
    /// One step: the finish and a take that does not wait (one round trip),
    /// then the wait for work. Trouble is reported to `log` and answered
    /// with a pause (the step is tried again after it); other errors are
    /// returned, the task to end still pending.
    pub fn step(&mut self, log: &dyn Fn(&Error)) -> Result<wait::Step<Option<Task>>> {
        if let Some(steps) = self.waiting.as_mut() {
            return match steps.step() {
                Ok(wait::Step::Wait(at)) => Ok(wait::Step::Wait(at)),
                Ok(wait::Step::Done(got)) => {
                    self.troubles.clear();
                    let task = got.and_then(|s| s.tasks.into_iter().next());
                    Ok(wait::Step::Done(Some(task)))
                }
                Err(e) => {
                    let pause = self.troubles.pause_after(&e, log).ok_or(e)?;
                    // The wait starts again after the pause.
                    self.waiting = Some(Queue::reserve_steps(
                        &self.queue,
                        1,
                        self.visibility,
                        self.wait,
                    )?);
                    Ok(wait::Step::Wait(Instant::now() + pause))
                }
            };
        }
        match self.finish_and_try() {
            Ok(step) => {
                self.troubles.clear();
                Ok(step)
            }
            Err(e) => {
                let pause = self.troubles.pause_after(&e, log).ok_or(e)?;
                Ok(wait::Step::Wait(Instant::now() + pause))
            }
        }
    }

    /// The finish and a take that does not wait; then, if nothing was due
    /// and the options allow, the wait for work starts.
    fn finish_and_try(&mut self) -> Result<wait::Step<Option<Task>>> {
        // Replicas must confirm an ack (`WAIT`), which the take's script
        // cannot do: with `min_replicas` the finish is a call of its own.
        if self.queue.options().min_replicas > 0
            && let Some((task, outcome, valid)) = &self.finish
        {
            outcome.end(&self.queue, task, *valid, None)?;
            self.finish = None;
        }
        let finish = match &self.finish {
            Some((t, outcome, _)) => outcome.finish(t),
            None => Finish::Nothing,
        };
        let got = self
            .queue
            .finish_and_reserve(finish, 1, self.visibility, Wait::Try, None)?;
        self.finish = None;
        if let Some(task) = got.tasks.into_iter().next() {
            return Ok(wait::Step::Done(Some(Some(task))));
        }
        if self.wait == Wait::Try {
            return Ok(wait::Step::Done(Some(None)));
        }
        self.waiting = Some(Queue::reserve_steps(
            &self.queue,
            1,
            self.visibility,
            self.wait,
        )?);
        Ok(wait::Step::Wait(Instant::now()))
    }

    /// What wakes the wait for work early, once it is on.
    pub fn ticket(&self) -> Option<&Ticket> {
        self.waiting.as_ref().and_then(TakeSteps::ticket)
    }

    /// Gives the steps up (the call was abandoned): the wait for work is
    /// dropped, and a task still to end is ended alone (one try), or it
    /// would stay reserved until its visibility ran out.
    pub fn cancel(&mut self) {
        if let Some(w) = self.waiting.as_mut() {
            let _ = w.cancel();
        }
        if let Some((task, outcome, valid)) = self.finish.take() {
            let _ = outcome.end(&self.queue, &task, valid, None);
        }
    }
}
