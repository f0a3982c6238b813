//! The worker loop's steps, shared by both bindings: end the task just
//! handled and reserve the next in one round trip, keep the reservation
//! alive while the handler runs, and ride out connection trouble.
//!
//! The bindings run the loop (they call the handler, and know about
//! signals); [`Worker`] does everything else.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Queue;
use super::heartbeat::Heartbeat;
use super::task::{Finish, Task};
use crate::error::{Error, ErrorKind, Result};
use crate::wait::{self, Interrupt, Wait};

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

/// One consumer of a worker loop: hands out one task at a time.
pub struct Worker {
    queue: Arc<Queue>,
    opts: WorkerOptions,
    /// The task handed out and not yet ended, with its heartbeat.
    current: Option<(Task, Option<Heartbeat>)>,
    /// Consecutive failed round trips.
    troubles: u32,
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
            troubles: 0,
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
            && let Some((task, beat)) = self.current.take()
        {
            // Replicas must confirm the ack (`WAIT`), which the take's script
            // cannot do: with `min_replicas` the finish is a call of its own,
            // tried until the master has the replicas (a fail-fast refusal
            // wrote nothing) or the ack is done.
            let valid = validity(&task, beat);
            let queue = self.queue.clone();
            let ended = self.retrying(interrupt, log, |_| {
                end(&queue, &task, outcome, valid, interrupt)
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
        let Some((task, beat)) = self.current.take() else {
            return Ok(());
        };
        let valid = validity(&task, beat);
        end(&self.queue, &task, outcome, valid, interrupt)
    }

    fn hand_out(&mut self, task: Task) -> Result<Task> {
        let beat = if self.opts.heartbeat {
            Some(self.queue.keep_alive(&task)?)
        } else {
            None
        };
        self.current = Some((task.clone(), beat));
        Ok(task)
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
                    self.troubles = 0;
                    return Ok(v);
                }
                Err(e)
                    if e.is_transient()
                        || matches!(e.kind(), ErrorKind::QueueLocked | ErrorKind::Quorum) =>
                {
                    log(&e);
                    let pause = TROUBLE_PAUSE
                        .saturating_mul(1 << self.troubles.min(10))
                        .min(TROUBLE_PAUSE_MAX);
                    self.troubles += 1;
                    wait::pause(pause, interrupt)?;
                }
                Err(e) => return Err(e),
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

/// Ends the reservation of `task` as `outcome` says, on its own.
fn end(
    queue: &Queue,
    task: &Task,
    outcome: Outcome,
    valid: Option<Instant>,
    interrupt: Option<Interrupt<'_>>,
) -> Result<()> {
    let receipt = task.receipt.as_deref().unwrap_or_default();
    match outcome {
        Outcome::Done => queue.ack_valid(&task.id, receipt, valid),
        Outcome::Failed => queue.nack_valid(&task.id, receipt, None, valid, interrupt),
        Outcome::Retry(d) => queue.nack_valid(&task.id, receipt, Some(d), valid, interrupt),
    }
    .map(drop)
}
