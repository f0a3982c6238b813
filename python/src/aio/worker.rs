//! The worker loop of `ferrolock.aio`: `_AsyncWorker`.

use super::*;

/// First pause after trouble; doubled up to [`TROUBLE_MAX`] (the core
/// worker's).
pub(super) const TROUBLE_PAUSE: Duration = Duration::from_millis(50);
pub(super) const TROUBLE_MAX: Duration = Duration::from_secs(5);

/// One step of `_AsyncWorker.next`: end the current task and reserve the
/// next in one round trip, then, if none is due, wait for one; trouble is
/// logged and ridden out (as `ferrolock::Worker` does).
pub(super) struct NextTask {
    pub(super) queue: Arc<ferrolock::Queue>,
    /// The task to end first, how, and until when it is ours.
    pub(super) finish: Option<(ferrolock::Task, Outcome, Option<Instant>)>,
    pub(super) visibility: Option<Duration>,
    pub(super) wait: Wait,
    pub(super) waiting: Option<TakeSteps>,
    pub(super) troubles: Arc<AtomicU64>,
}

impl NextTask {
    pub(super) fn trouble(&self, e: &ferrolock::Error) -> Option<Step<Option<ferrolock::Task>>> {
        let retry = e.is_transient()
            || matches!(
                e.kind(),
                ferrolock::ErrorKind::QueueLocked | ferrolock::ErrorKind::Quorum
            );
        if !retry {
            return None;
        }
        log_trouble(e);
        let n = self.troubles.fetch_add(1, Ordering::Relaxed);
        let pause = TROUBLE_PAUSE
            .saturating_mul(1 << n.min(10))
            .min(TROUBLE_MAX);
        Some(Step::Wait(Instant::now() + pause))
    }

    pub(super) fn end_alone(&mut self) -> ferrolock::Result<()> {
        let Some((task, outcome, valid)) = &self.finish else {
            return Ok(());
        };
        let receipt = task.receipt.as_deref().unwrap_or_default();
        match outcome {
            Outcome::Done => self.queue.ack_valid(&task.id, receipt, *valid),
            Outcome::Failed => self.queue.nack_valid(&task.id, receipt, None, *valid, None),
            Outcome::Retry(d) => self
                .queue
                .nack_valid(&task.id, receipt, Some(*d), *valid, None),
        }
        .map(drop)?;
        self.finish = None;
        Ok(())
    }
}

impl Stepper for NextTask {
    type Out = Option<ferrolock::Task>;

    fn step(&mut self) -> ferrolock::Result<Step<Option<ferrolock::Task>>> {
        if let Some(steps) = self.waiting.as_mut() {
            return match steps.step() {
                Ok(Step::Wait(at)) => Ok(Step::Wait(at)),
                Ok(Step::Done(s)) => {
                    self.troubles.store(0, Ordering::Relaxed);
                    let task = s.and_then(|s| s.tasks.into_iter().next());
                    Ok(Step::Done(Some(task)))
                }
                Err(e) => {
                    self.waiting = None;
                    match self.trouble(&e) {
                        Some(pause) => {
                            self.waiting = Some(ferrolock::Queue::reserve_steps(
                                &self.queue,
                                1,
                                self.visibility,
                                self.wait,
                            )?);
                            Ok(pause)
                        }
                        None => Err(e),
                    }
                }
            };
        }
        // Replicas must confirm an ack (`WAIT`), which the take's script
        // cannot do: with `min_replicas` the finish is a call of its own.
        if self.queue.options().min_replicas > 0
            && self.finish.is_some()
            && let Err(e) = self.end_alone()
        {
            return self.trouble(&e).ok_or(e);
        }
        let finish = match &self.finish {
            Some((t, Outcome::Done, _)) => ferrolock::Finish::Ack(t),
            Some((t, Outcome::Failed, _)) => ferrolock::Finish::Nack(t, None),
            Some((t, Outcome::Retry(d), _)) => ferrolock::Finish::Nack(t, Some(*d)),
            None => ferrolock::Finish::Nothing,
        };
        let got = match self
            .queue
            .finish_and_reserve(finish, 1, self.visibility, Wait::Try, None)
        {
            Ok(got) => got,
            Err(e) => return self.trouble(&e).ok_or(e),
        };
        self.finish = None;
        self.troubles.store(0, Ordering::Relaxed);
        if let Some(task) = got.tasks.into_iter().next() {
            return Ok(Step::Done(Some(Some(task))));
        }
        if self.wait == Wait::Try {
            return Ok(Step::Done(Some(None)));
        }
        self.waiting = Some(ferrolock::Queue::reserve_steps(
            &self.queue,
            1,
            self.visibility,
            self.wait,
        )?);
        Ok(Step::Wait(Instant::now()))
    }

    fn ticket(&self) -> Option<Ticket> {
        self.waiting.as_ref().and_then(|w| w.ticket().cloned())
    }

    /// A cancelled step still ends the task it was to end (or it would stay
    /// reserved until its visibility ran out).
    fn cancel(&mut self) {
        if let Some(w) = self.waiting.as_mut() {
            let _ = w.cancel();
        }
        let _ = self.end_alone();
    }
}

/// The task a worker handed out last and has not ended, with its heartbeat.
pub(super) type Current = Option<(ferrolock::Task, Option<Heartbeat>)>;

/// One consumer of `ferrolock.aio.Queue.work`: the awaitable `_Worker`.
#[pyclass(name = "_AsyncWorker", module = "ferrolock._native", frozen)]
pub struct PyAsyncWorker {
    pub(super) queue: Arc<ferrolock::Queue>,
    pub(super) wait: Wait,
    pub(super) visibility: Option<Duration>,
    pub(super) heartbeat: bool,
    /// The task handed out last and not yet ended, with its heartbeat.
    pub(super) current: Arc<Mutex<Current>>,
    pub(super) troubles: Arc<AtomicU64>,
}

impl PyAsyncWorker {
    /// The current task, its heartbeat stopped, with its validity.
    pub(super) fn take_current(&self) -> Option<(ferrolock::Task, Option<Instant>)> {
        let (task, beat) = locked(&self.current).take()?;
        let valid = match &beat {
            Some(b) if !b.is_lost() => Some(Instant::now() + Duration::from_millis(100)),
            _ => task.valid_until(),
        };
        Some((task, valid))
    }
}

#[pymethods]
impl PyAsyncWorker {
    #[new]
    #[pyo3(signature = (queue, *, wait = None, visibility = None, heartbeat = true))]
    pub(super) fn new(
        queue: &Bound<'_, PyQueue>,
        wait: Option<f64>,
        visibility: Option<f64>,
        heartbeat: bool,
    ) -> PyResult<Self> {
        Ok(Self {
            queue: queue.get().inner.clone(),
            wait: Wait::from_secs(wait, "wait").py()?,
            visibility: visibility
                .map(|v| validate::seconds(v, "visibility", true))
                .transpose()
                .py()?,
            heartbeat,
            current: Arc::default(),
            troubles: Arc::default(),
        })
    }

    /// End the current task as `outcome` says and reserve the next (None:
    /// the wait ran out).
    pub(super) fn next(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<PyOp> {
        let outcome = outcome_arg(outcome)?;
        let finish = self.take_current().map(|(t, v)| (t, outcome, v));
        let steps = NextTask {
            queue: self.queue.clone(),
            finish,
            visibility: self.visibility,
            wait: self.wait,
            waiting: None,
            troubles: self.troubles.clone(),
        };
        let (queue, current, heartbeat) =
            (self.queue.clone(), self.current.clone(), self.heartbeat);
        drive(
            py,
            steps,
            Box::new(move |got: Option<Option<ferrolock::Task>>| {
                let Some(task) = got.flatten() else {
                    return Ok(Done::none());
                };
                let beat = if heartbeat {
                    Some(queue.keep_alive(&task)?)
                } else {
                    None
                };
                *locked(&current) = Some((task.clone(), beat));
                let undo_current = current.clone();
                let undo = nack_all(queue.clone(), vec![task.clone()]);
                Ok(Done {
                    value: tasks_value(queue, vec![task], Origin::Reserved, true),
                    undo: Some(Box::new(move || {
                        locked(&undo_current).take();
                        undo();
                    })),
                })
            }),
        )
    }

    /// End the current task as `outcome` says, taking no other (one try).
    pub(super) fn finish(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<PyOp> {
        let outcome = outcome_arg(outcome)?;
        let current = self.take_current();
        let queue = self.queue.clone();
        run(py, false, move |_| {
            let Some((task, valid)) = current else {
                return Ok(Done::none());
            };
            let receipt = task.receipt.as_deref().unwrap_or_default();
            match outcome {
                Outcome::Done => queue.ack_valid(&task.id, receipt, valid),
                Outcome::Failed => queue.nack_valid(&task.id, receipt, None, valid, None),
                Outcome::Retry(d) => queue.nack_valid(&task.id, receipt, Some(d), valid, None),
            }
            .map(|_| Done::none())
        })
    }
}
