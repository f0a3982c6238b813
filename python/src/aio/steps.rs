//! Waits driven step by step: the core's step machines run on the
//! executor, woken by hub tickets and timers.

use super::*;

/// A wait the driver runs one step at a time.
pub(super) trait Stepper: Send + 'static {
    type Out: Send;
    fn step(&mut self) -> ferrolock::Result<Step<Self::Out>>;
    fn ticket(&self) -> Option<Ticket>;
    /// Gives the wait up (the call was abandoned).
    fn cancel(&mut self);
}

impl Stepper for ferrolock::NextSteps {
    type Out = Option<ferrolock::Task>;
    fn step(&mut self) -> ferrolock::Result<Step<Option<ferrolock::Task>>> {
        ferrolock::NextSteps::step(self, &log_trouble)
    }
    fn ticket(&self) -> Option<Ticket> {
        ferrolock::NextSteps::ticket(self).cloned()
    }
    fn cancel(&mut self) {
        ferrolock::NextSteps::cancel(self);
    }
}

impl Stepper for ferrolock::RedlockSteps {
    type Out = bool;
    fn step(&mut self) -> ferrolock::Result<Step<bool>> {
        ferrolock::RedlockSteps::step(self)
    }
    fn ticket(&self) -> Option<Ticket> {
        ferrolock::RedlockSteps::ticket(self).cloned()
    }
    fn cancel(&mut self) {
        ferrolock::RedlockSteps::cancel(self);
    }
}

impl Stepper for AcquireSteps {
    type Out = bool;
    fn step(&mut self) -> ferrolock::Result<Step<bool>> {
        AcquireSteps::step(self)
    }
    fn ticket(&self) -> Option<Ticket> {
        AcquireSteps::ticket(self).cloned()
    }
    fn cancel(&mut self) {
        let _ = AcquireSteps::cancel(self);
    }
}

impl Stepper for TakeSteps {
    type Out = ferrolock::Step;
    fn step(&mut self) -> ferrolock::Result<Step<ferrolock::Step>> {
        TakeSteps::step(self)
    }
    fn ticket(&self) -> Option<Ticket> {
        TakeSteps::ticket(self).cloned()
    }
    fn cancel(&mut self) {
        let _ = TakeSteps::cancel(self);
    }
}

pub(super) type Finisher<O> = Box<dyn FnOnce(Option<O>) -> CallResult + Send>;

/// Runs a [`Stepper`] on the executor between ticket events and timers.
pub(super) struct Driver<S: Stepper> {
    pub(super) op: Arc<OpInner>,
    pub(super) steps: Mutex<S>,
    pub(super) sched: Mutex<Sched>,
    pub(super) finish: Mutex<Option<Finisher<S::Out>>>,
    pub(super) me: Weak<Self>,
}

#[derive(Default)]
pub(super) struct Sched {
    pub(super) running: bool,
    pub(super) again: bool,
    pub(super) finished: bool,
    pub(super) generation: u64,
    pub(super) armed_at: Option<Instant>,
    pub(super) ticket: Option<Ticket>,
}

impl<S: Stepper> Wake for Driver<S> {
    fn fire(self: Arc<Self>, generation: u64) {
        {
            let mut s = locked(&self.sched);
            if generation != u64::MAX {
                if generation != s.generation {
                    return; // a timer armed before a later step
                }
                s.armed_at = None;
            }
        }
        self.poke();
    }
}

impl<S: Stepper> Driver<S> {
    pub(super) fn start(op: Arc<OpInner>, steps: S, finish: Finisher<S::Out>) {
        let d = Arc::new_cyclic(|me| Self {
            op,
            steps: Mutex::new(steps),
            sched: Mutex::new(Sched::default()),
            finish: Mutex::new(Some(finish)),
            me: me.clone(),
        });
        locked(&d.op.state).driver = Some(d.clone());
        d.poke();
    }

    /// Runs a step on the executor now, or right after the one running.
    pub(super) fn poke(&self) {
        let mut s = locked(&self.sched);
        if s.finished {
            return;
        }
        if s.running {
            s.again = true;
            return;
        }
        s.running = true;
        drop(s);
        if let Some(me) = self.me.upgrade() {
            executor().submit(Box::new(move || me.run()));
        }
    }

    pub(super) fn end(&self, outcome: CallResult) {
        locked(&self.sched).finished = true;
        if let Some(t) = locked(&self.sched).ticket.take() {
            t.clear_callback();
        }
        self.op.complete(outcome);
    }

    pub(super) fn run(&self) {
        loop {
            let mut steps = locked(&self.steps);
            if self.op.cancelled.load(Ordering::Acquire) {
                steps.cancel();
                drop(steps);
                self.end(Ok(Done::none()));
                return;
            }
            let step = steps.step();
            let ticket = match &step {
                Ok(Step::Wait(_)) => steps.ticket(),
                _ => None,
            };
            drop(steps);
            match step {
                Ok(Step::Done(v)) => {
                    let finish = locked(&self.finish).take();
                    let outcome = match finish {
                        Some(f) => f(v),
                        None => Ok(Done::none()),
                    };
                    self.end(outcome);
                    return;
                }
                Err(e) => {
                    self.end(Err(e));
                    return;
                }
                // Due now (the first step hands over to the registering
                // one): step again in this job, so that waiters register in
                // the order they tried (fair locks serve them in that order).
                Ok(Step::Wait(until)) if until <= Instant::now() => continue,
                Ok(Step::Wait(until)) => {
                    let mut s = locked(&self.sched);
                    if s.armed_at.is_none_or(|a| a != until) {
                        s.generation += 1;
                        s.armed_at = Some(until);
                        let me: Weak<dyn Wake> = self.me.clone();
                        timers().add(until, s.generation, me);
                    }
                    // A new ticket (the first wait, or a worker's wait
                    // started again after trouble): listen on it.
                    let fresh =
                        ticket.filter(|t| s.ticket.as_ref().is_none_or(|old| old.id() != t.id()));
                    let old = match &fresh {
                        Some(t) => s.ticket.replace(t.clone()),
                        None => None,
                    };
                    drop(s);
                    if let Some(old) = old {
                        old.clear_callback();
                    }
                    if let Some(t) = fresh {
                        let me = self.me.clone();
                        t.on_event(Box::new(move |_| {
                            if let Some(d) = me.upgrade() {
                                d.poke();
                            }
                        }));
                    }
                    let mut s = locked(&self.sched);
                    if std::mem::take(&mut s.again) {
                        continue;
                    }
                    s.running = false;
                    return;
                }
            }
        }
    }
}

/// Runs `steps` as an awaitable call whose result `finish` makes.
pub(super) fn drive<S: Stepper>(
    py: Python<'_>,
    steps: S,
    finish: Finisher<S::Out>,
) -> PyResult<PyOp> {
    let (op, inner) = new_op(py)?;
    Driver::start(inner, steps, finish);
    Ok(op)
}
