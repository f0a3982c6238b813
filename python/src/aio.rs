//! The native half of `ferrolock.aio`: core calls for asyncio, off the loop.
//!
//! # How an awaitable call runs
//!
//! Every round trip runs on a small bounded pool of native threads (the
//! *executor*, `FERROLOCK_AIO_THREADS`, default 8, started on demand, idle
//! ones stop after 30 s), without the GIL. A call returns an [`PyOp`]
//! whose `future` (an `asyncio.Future` of the caller's loop) gets the result.
//!
//! Results go back to the loop without the GIL: the executor puts the
//! finished call on its loop's [`Bridge`] and writes one byte to a socket
//! pair the loop watches (`loop.add_reader`); the loop thread then takes
//! every finished call at once and sets the futures. No executor or hub
//! thread ever waits for the GIL, so a busy loop does not slow the hand-overs
//! of other waiters, and one wake-up of the loop delivers many results.
//!
//! # How a wait costs no thread
//!
//! A wait (`acquire`, `reserve(wait=…)`, the worker loop's next task) runs as
//! the core's step machine ([`AcquireSteps`], [`TakeSteps`]): each step is one
//! short round trip on the executor; between steps the wait is only a ticket
//! callback (the hub's reader thread calls it when a release or an enqueue
//! names the waiter) and an entry in the timer thread's heap (its next
//! re-check). 5,000 waiting tasks are 5,000 such entries, no thread each.
//!
//! # Cancellation
//!
//! `PyOp.abandon()` (called by `ferrolock.aio` when the awaiting task is
//! cancelled at that await) gives back what the call did or will do and
//! returns a future that is done once it is given back: a wait in progress
//! is cancelled by its next step (the core deregisters it and gives back a
//! lock handed over meanwhile); a call that succeeded after all (a lock
//! taken, tasks reserved) is undone (released, nacked due at once, popped
//! tasks enqueued again at their scores). Calls that end something (release,
//! ack, nack) are left to finish.
//!
//! [`AcquireSteps`]: ferrolock::AcquireSteps
//! [`TakeSteps`]: ferrolock::TakeSteps

use std::collections::{BinaryHeap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use ferrolock::wait::{Interrupt, Step, Ticket, interrupted};
use ferrolock::{AcquireSteps, Heartbeat, Outcome, TakeSteps, Wait, validate};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use crate::convert::{arg, enqueue_items, str_bytes, wait_for, wait_secs};
use crate::errors::{Exc, IntoPy, to_py};
use crate::lock::{PyLock, PyLockBase};
use crate::queue::{Origin, PyQueue, PyTask, TaskJob, count_arg, log_trouble, outcome_arg};

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------
// The executor and the timers

/// Default number of executor threads.
const DEFAULT_THREADS: usize = 8;

/// An idle executor thread stops after this long.
const IDLE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send>;

/// The bounded pool of threads that run round trips for coroutines.
struct Executor {
    pid: u32,
    max: usize,
    state: Mutex<ExecState>,
    ready: Condvar,
}

#[derive(Default)]
struct ExecState {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

/// Counters for tests and benchmarks (`_aio_stats()`).
static THREADS_PEAK: AtomicUsize = AtomicUsize::new(0);
static JOBS_RUN: AtomicU64 = AtomicU64::new(0);

fn executor() -> Arc<Executor> {
    static EXEC: Mutex<Option<Arc<Executor>>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = locked(&EXEC);
    match &*slot {
        // A forked child has none of its parent's threads: a new pool.
        Some(e) if e.pid == pid => e.clone(),
        _ => {
            let max = std::env::var("FERROLOCK_AIO_THREADS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|n| (1..=256).contains(n))
                .unwrap_or(DEFAULT_THREADS);
            let e = Arc::new(Executor {
                pid,
                max,
                state: Mutex::new(ExecState::default()),
                ready: Condvar::new(),
            });
            *slot = Some(e.clone());
            e
        }
    }
}

impl Executor {
    fn submit(self: &Arc<Self>, job: Job) {
        let mut st = locked(&self.state);
        st.jobs.push_back(job);
        if st.idle > 0 {
            self.ready.notify_one();
        }
        if st.jobs.len() > st.idle && st.threads < self.max {
            st.threads += 1;
            THREADS_PEAK.fetch_max(st.threads, Ordering::Relaxed);
            drop(st);
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("ferrolock-aio".into())
                .spawn(move || me.work());
            if spawned.is_err() {
                locked(&self.state).threads -= 1;
            }
        }
    }

    fn work(&self) {
        let mut st = locked(&self.state);
        loop {
            if let Some(job) = st.jobs.pop_front() {
                drop(st);
                JOBS_RUN.fetch_add(1, Ordering::Relaxed);
                // A panic in a job must not take the thread's count with it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                st = locked(&self.state);
                continue;
            }
            st.idle += 1;
            let (next, timeout) = self
                .ready
                .wait_timeout(st, IDLE)
                .unwrap_or_else(PoisonError::into_inner);
            st = next;
            st.idle -= 1;
            if timeout.timed_out() && st.jobs.is_empty() {
                st.threads -= 1;
                return;
            }
        }
    }
}

/// Something the timer thread wakes at an instant.
trait Wake: Send + Sync {
    /// The timer armed as `generation` is due.
    fn fire(self: Arc<Self>, generation: u64);
}

struct Timer {
    at: Instant,
    seq: u64,
    generation: u64,
    target: Weak<dyn Wake>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    /// Reversed: the heap's top is the earliest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// One thread that wakes waits at their re-check instants and deadlines.
struct Timers {
    pid: u32,
    heap: Mutex<(BinaryHeap<Timer>, u64)>,
    changed: Condvar,
}

fn timers() -> Arc<Timers> {
    static TIMERS: Mutex<Option<Arc<Timers>>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = locked(&TIMERS);
    match &*slot {
        Some(t) if t.pid == pid => t.clone(),
        _ => {
            let t = Arc::new(Timers {
                pid,
                heap: Mutex::new((BinaryHeap::new(), 0)),
                changed: Condvar::new(),
            });
            let me = t.clone();
            let _ = std::thread::Builder::new()
                .name("ferrolock-aio-timers".into())
                .spawn(move || me.run());
            *slot = Some(t.clone());
            t
        }
    }
}

impl Timers {
    fn add(&self, at: Instant, generation: u64, target: Weak<dyn Wake>) {
        let mut h = locked(&self.heap);
        h.1 += 1;
        let seq = h.1;
        let earliest = h.0.peek().is_none_or(|t| at < t.at);
        h.0.push(Timer {
            at,
            seq,
            generation,
            target,
        });
        drop(h);
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let mut h = locked(&self.heap);
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while h.0.peek().is_some_and(|t| t.at <= now) {
                due.extend(h.0.pop());
            }
            if !due.is_empty() {
                drop(h);
                for t in due {
                    if let Some(target) = t.target.upgrade() {
                        target.fire(t.generation);
                    }
                }
                h = locked(&self.heap);
                continue;
            }
            let wait = h.0.peek().map_or(IDLE, |t| t.at - now);
            h = self
                .changed
                .wait_timeout(h, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn len(&self) -> usize {
        locked(&self.heap).0.len()
    }
}

// ---------------------------------------------------------------------------
// The bridge to one event loop

/// Where finished calls wait for their loop (see the module docs).
struct Bridge {
    reader: UnixStream,
    writer: UnixStream,
    pending: Mutex<(Vec<Arc<OpInner>>, bool)>,
}

impl Bridge {
    fn new() -> std::io::Result<Self> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        Ok(Self {
            reader,
            writer,
            pending: Mutex::new((Vec::new(), false)),
        })
    }

    /// Hands a finished call to the loop (from any thread, without the GIL).
    fn push(&self, op: Arc<OpInner>) {
        let mut p = locked(&self.pending);
        p.0.push(op);
        if !std::mem::replace(&mut p.1, true) {
            drop(p);
            // WouldBlock: the socket is full of wake-ups already.
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// The loop's end of a [`Bridge`]: its `_drain` is the reader callback.
#[pyclass(name = "_Bridge", module = "ferrolock._native", frozen)]
pub struct PyBridge {
    inner: Arc<Bridge>,
}

#[pymethods]
impl PyBridge {
    /// Sets the futures of every finished call (run by the loop).
    fn _drain(&self, py: Python<'_>) {
        let mut buf = [0u8; 256];
        while let Ok(n) = (&self.inner.reader).read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        let ops = {
            let mut p = locked(&self.inner.pending);
            p.1 = false;
            std::mem::take(&mut p.0)
        };
        for op in ops {
            if let Err(e) = op.deliver(py) {
                e.write_unraisable(py, None);
            }
        }
    }
}

/// The bridge of the running loop (made and registered on first use).
fn bridge(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Arc<Bridge>)> {
    static BRIDGES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static GET_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get_loop = GET_LOOP.get_or_try_init(py, || {
        py.import("asyncio")?
            .getattr("get_running_loop")
            .map(Bound::unbind)
    })?;
    let event_loop = get_loop.bind(py).call0()?;
    let bridges = BRIDGES
        .get_or_try_init(py, || {
            py.import("weakref")?
                .getattr("WeakKeyDictionary")?
                .call0()
                .map(Bound::unbind)
        })?
        .bind(py);
    if let Ok(b) = bridges
        .call_method1("get", (&event_loop,))?
        .cast::<PyBridge>()
    {
        return Ok((event_loop, b.get().inner.clone()));
    }
    let inner =
        Arc::new(Bridge::new().map_err(|e| PyRuntimeError::new_err(format!("socketpair: {e}")))?);
    let b = Bound::new(
        py,
        PyBridge {
            inner: inner.clone(),
        },
    )?;
    event_loop.call_method1(
        "add_reader",
        (inner.reader.as_raw_fd(), b.getattr("_drain")?),
    )?;
    bridges.set_item(&event_loop, b)?;
    Ok((event_loop, inner))
}

// ---------------------------------------------------------------------------
// Calls

/// Turns a call's result into its Python value (on the loop thread).
type Value = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;
/// Gives back what a call took (on the executor).
type Undo = Box<dyn FnOnce() + Send>;

/// A finished call: its value, and how to give back what it took.
struct Done {
    value: Value,
    undo: Option<Undo>,
}

impl Done {
    fn none() -> Self {
        Self {
            value: Box::new(|py| Ok(py.None())),
            undo: None,
        }
    }

    fn of<T>(v: T) -> Self
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
    {
        Self {
            value: Box::new(move |py| v.into_py_any(py)),
            undo: None,
        }
    }
}

type CallResult = ferrolock::Result<Done>;

/// A call in progress, shared by its `PyOp`, the executor and the bridge.
struct OpInner {
    bridge: Arc<Bridge>,
    /// Asked to stop (the awaiting task was cancelled).
    cancelled: AtomicBool,
    state: Mutex<OpState>,
}

struct OpState {
    outcome: Option<CallResult>,
    future: Option<Py<PyAny>>,
    delivered: bool,
    abandoned: bool,
    /// Kept after the result was delivered: an awaiting task cancelled
    /// after that still gives it back.
    undo: Option<Undo>,
    /// The future `abandon()` returned, set once given back.
    settled: Option<Py<PyAny>>,
    /// The wait driving this call, poked when it is abandoned.
    driver: Option<Arc<dyn Wake>>,
    /// Set once an undo started without `abandon()`: done when it is.
    undoing: Option<Py<PyAny>>,
}

impl OpInner {
    fn new(bridge: Arc<Bridge>, future: Py<PyAny>) -> Arc<Self> {
        Arc::new(Self {
            bridge,
            cancelled: AtomicBool::new(false),
            state: Mutex::new(OpState {
                outcome: None,
                future: Some(future),
                delivered: false,
                abandoned: false,
                undo: None,
                settled: None,
                driver: None,
                undoing: None,
            }),
        })
    }

    /// The call is over (any thread): its loop sets the future.
    fn complete(self: &Arc<Self>, outcome: CallResult) {
        let mut st = locked(&self.state);
        st.outcome = Some(outcome);
        st.driver = None;
        drop(st);
        self.bridge.push(self.clone());
    }

    /// Sets the future (on the loop thread), or gives back the result of a
    /// call abandoned meanwhile.
    fn deliver(self: &Arc<Self>, py: Python<'_>) -> PyResult<()> {
        let mut st = locked(&self.state);
        let Some(outcome) = st.outcome.take() else {
            return Ok(());
        };
        st.delivered = true;
        let future = st.future.take();
        let cancelled = match &future {
            Some(f) => f.bind(py).call_method0("cancelled")?.is_truthy()?,
            None => true,
        };
        let abandoned = st.abandoned || cancelled;
        let settled = st.settled.take();
        drop(st);
        match outcome {
            Ok(done) if abandoned => match done.undo {
                Some(undo) => {
                    let settled = match (settled, &future) {
                        (Some(s), _) => s,
                        // The future was cancelled before `abandon()` came:
                        // it will find this one, done once the undo is.
                        (None, Some(f)) => {
                            let s = f
                                .bind(py)
                                .call_method0("get_loop")?
                                .call_method0("create_future")?
                                .unbind();
                            locked(&self.state).undoing = Some(s.clone_ref(py));
                            s
                        }
                        (None, None) => {
                            spawn_undo(&self.bridge, None, undo);
                            return Ok(());
                        }
                    };
                    spawn_undo(&self.bridge, Some(settled), undo);
                }
                None => resolve(py, settled)?,
            },
            Ok(done) => {
                let future = future.expect("not abandoned: the future is there");
                let f = future.bind(py);
                match (done.value)(py) {
                    Ok(v) => f.call_method1("set_result", (v,))?,
                    Err(e) => f.call_method1("set_exception", (e.into_value(py),))?,
                };
                locked(&self.state).undo = done.undo;
                resolve(py, settled)?;
            }
            Err(e) => {
                if !abandoned && let Some(future) = future {
                    future
                        .bind(py)
                        .call_method1("set_exception", (to_py(e).into_value(py),))?;
                }
                resolve(py, settled)?;
            }
        }
        Ok(())
    }
}

/// Sets `settled` (if any) to `None`.
fn resolve(py: Python<'_>, settled: Option<Py<PyAny>>) -> PyResult<()> {
    if let Some(s) = settled {
        let s = s.bind(py);
        if !s.call_method0("done")?.is_truthy()? {
            s.call_method1("set_result", (py.None(),))?;
        }
    }
    Ok(())
}

/// Runs `undo` on the executor; `settled` (if given) is set once it is done.
fn spawn_undo(bridge: &Arc<Bridge>, settled: Option<Py<PyAny>>, undo: Undo) {
    let op = Arc::new(OpInner {
        bridge: bridge.clone(),
        cancelled: AtomicBool::new(false),
        state: Mutex::new(OpState {
            outcome: None,
            future: settled,
            delivered: false,
            abandoned: false,
            undo: None,
            settled: None,
            driver: None,
            undoing: None,
        }),
    });
    executor().submit(Box::new(move || {
        undo();
        op.complete(Ok(Done::none()));
    }));
}

/// An awaitable core call: `future` gets its result (see the module docs).
#[pyclass(name = "_Op", module = "ferrolock._native", frozen)]
pub struct PyOp {
    inner: Arc<OpInner>,
    future: Py<PyAny>,
    event_loop: Py<PyAny>,
}

#[pymethods]
impl PyOp {
    /// The `asyncio.Future` of the call's result.
    #[getter]
    fn future(&self, py: Python<'_>) -> Py<PyAny> {
        self.future.clone_ref(py)
    }

    /// The awaiting task was cancelled: give back what the call did or will
    /// do. Returns a future that is done once that is done.
    fn abandon(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let new_future = || self.event_loop.bind(py).call_method0("create_future");
        let mut st = locked(&self.inner.state);
        if st.abandoned {
            drop(st);
            let f = new_future()?;
            f.call_method1("set_result", (py.None(),))?;
            return Ok(f.unbind());
        }
        st.abandoned = true;
        self.inner.cancelled.store(true, Ordering::Release);
        if let Some(undoing) = st.undoing.take() {
            return Ok(undoing);
        }
        if !st.delivered {
            let f = new_future()?;
            st.settled = Some(f.clone().unbind());
            let driver = st.driver.clone();
            drop(st);
            if let Some(d) = driver {
                d.fire(u64::MAX);
            }
            return Ok(f.unbind());
        }
        let undo = st.undo.take();
        drop(st);
        let f = new_future()?;
        match undo {
            Some(undo) => spawn_undo(&self.inner.bridge, Some(f.clone().unbind()), undo),
            None => {
                f.call_method1("set_result", (py.None(),))?;
            }
        }
        Ok(f.unbind())
    }
}

/// A new call on the running loop: its op and its shared part.
fn new_op(py: Python<'_>) -> PyResult<(PyOp, Arc<OpInner>)> {
    let (event_loop, bridge) = bridge(py)?;
    let future = event_loop.call_method0("create_future")?.unbind();
    let inner = OpInner::new(bridge, future.clone_ref(py));
    Ok((
        PyOp {
            inner: inner.clone(),
            future,
            event_loop: event_loop.unbind(),
        },
        inner,
    ))
}

/// A job of one or a few round trips. `interruptible`: a cancellation stops
/// its waits (for a legacy queue lock); calls that end something (release,
/// ack, nack) are not interruptible: they finish.
fn run<F>(py: Python<'_>, interruptible: bool, job: F) -> PyResult<PyOp>
where
    F: for<'a> FnOnce(Option<Interrupt<'a>>) -> CallResult + Send + 'static,
{
    let (op, inner) = new_op(py)?;
    executor().submit(Box::new(move || {
        let cancelled = &inner.cancelled;
        let hook = || -> ferrolock::Result<()> {
            if interruptible && cancelled.load(Ordering::Acquire) {
                Err(interrupted("cancelled"))
            } else {
                Ok(())
            }
        };
        let outcome = job(Some(&hook));
        inner.complete(outcome);
    }));
    Ok(op)
}

// ---------------------------------------------------------------------------
// Waits driven step by step

/// A wait the driver runs one step at a time.
trait Stepper: Send + 'static {
    type Out: Send;
    fn step(&mut self) -> ferrolock::Result<Step<Self::Out>>;
    fn ticket(&self) -> Option<Ticket>;
    /// Gives the wait up (the call was abandoned).
    fn cancel(&mut self);
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

type Finisher<O> = Box<dyn FnOnce(Option<O>) -> CallResult + Send>;

/// Runs a [`Stepper`] on the executor between ticket events and timers.
struct Driver<S: Stepper> {
    op: Arc<OpInner>,
    steps: Mutex<S>,
    sched: Mutex<Sched>,
    finish: Mutex<Option<Finisher<S::Out>>>,
    me: Weak<Self>,
}

#[derive(Default)]
struct Sched {
    running: bool,
    again: bool,
    finished: bool,
    generation: u64,
    armed_at: Option<Instant>,
    ticket: Option<Ticket>,
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
    fn start(op: Arc<OpInner>, steps: S, finish: Finisher<S::Out>) {
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
    fn poke(&self) {
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

    fn end(&self, outcome: CallResult) {
        locked(&self.sched).finished = true;
        if let Some(t) = locked(&self.sched).ticket.take() {
            t.clear_callback();
        }
        self.op.complete(outcome);
    }

    fn run(&self) {
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
fn drive<S: Stepper>(py: Python<'_>, steps: S, finish: Finisher<S::Out>) -> PyResult<PyOp> {
    let (op, inner) = new_op(py)?;
    Driver::start(inner, steps, finish);
    Ok(op)
}

// ---------------------------------------------------------------------------
// Locks

/// The awaitable face of a `Lock` or `Redlock` (what `ferrolock.aio.Lock`
/// calls).
#[pyclass(name = "_AsyncLock", module = "ferrolock._native", frozen)]
pub struct PyAsyncLock {
    inner: Arc<dyn ferrolock::DistributedLock>,
    single: Option<Arc<ferrolock::Lock>>,
    timeout: Option<f64>,
    kind: &'static str,
    name: String,
}

impl PyAsyncLock {
    fn acquire_wait(&self, py: Python<'_>, wait: Wait, must: bool) -> PyResult<PyOp> {
        let taken = self.inner.clone();
        let (kind, name) = (self.kind, self.name.clone());
        let finish = move |acquired: Option<bool>| -> CallResult {
            if acquired == Some(true) {
                return Ok(Done {
                    value: Box::new(|py| true.into_py_any(py)),
                    undo: Some(Box::new(move || {
                        let _ = taken.release();
                    })),
                });
            }
            if !must {
                return Ok(Done::of(false));
            }
            let within = match wait {
                Wait::For(d) => format!("within {:.3} s", d.as_secs_f64()),
                _ => "on the first attempt (timeout=0)".to_owned(),
            };
            Ok(Done {
                value: Box::new(move |_| {
                    Err(Exc::Timeout.err(format!("{kind} {name:?}: not acquired {within}")))
                }),
                undo: None,
            })
        };
        match &self.single {
            Some(lock) => drive(
                py,
                ferrolock::Lock::acquire_steps(lock, wait),
                Box::new(finish),
            ),
            None => {
                // A Redlock has no step machine: its wait runs on a thread
                // of its own (not the executor's: it would hold one of them
                // for the whole wait), stopped by a cancellation.
                let (op, inner) = new_op(py)?;
                let lock = self.inner.clone();
                std::thread::Builder::new()
                    .name("ferrolock-aio-redlock".into())
                    .spawn(move || {
                        let cancelled = &inner.cancelled;
                        let hook = || -> ferrolock::Result<()> {
                            if cancelled.load(Ordering::Acquire) {
                                Err(interrupted("cancelled"))
                            } else {
                                Ok(())
                            }
                        };
                        let outcome = match lock.acquire(wait, Some(&hook)) {
                            Ok(a) => finish(Some(a)),
                            Err(e) if e.is_interrupted() => Ok(Done::none()),
                            Err(e) => Err(e),
                        };
                        inner.complete(outcome);
                    })
                    .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
                Ok(op)
            }
        }
    }
}

#[pymethods]
impl PyAsyncLock {
    #[new]
    fn new(lock: &Bound<'_, PyLockBase>) -> Self {
        let base = lock.get();
        let single = lock.cast::<PyLock>().ok().map(|l| l.get().single.clone());
        Self {
            inner: base.inner.clone(),
            single,
            timeout: base.timeout,
            kind: base.kind,
            name: base.display_name(),
        }
    }

    /// `acquire(blocking, timeout)`, awaitable.
    #[pyo3(signature = (blocking = true, timeout = None))]
    fn acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::blocking)] blocking: bool,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<f64>,
    ) -> PyResult<PyOp> {
        let wait = wait_for(blocking, timeout, self.timeout)?;
        self.acquire_wait(py, wait, false)
    }

    /// `async with`'s entry: waits as the lock's `timeout` says, else `LockTimeout`.
    fn enter(&self, py: Python<'_>) -> PyResult<PyOp> {
        let wait = wait_for(true, None, self.timeout)?;
        self.acquire_wait(py, wait, true)
    }

    fn release(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, false, move |_| lock.release().map(|()| Done::none()))
    }

    /// `async with`'s exit: `__exit__`'s rules.
    fn exit(&self, py: Python<'_>, propagating: bool) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        let (kind, name) = (self.kind, self.name.clone());
        run(py, false, move |_| {
            Ok(match lock.release() {
                Ok(()) => Done::none(),
                Err(_) if propagating => Done::none(),
                Err(e) if e.is_not_owned() && lock.lost() => Done {
                    value: Box::new(move |_| {
                        Err(Exc::Lost.err(format!(
                            "{kind} {name:?} was lost inside the with block (expired or taken \
                             over before the release): {e}"
                        )))
                    }),
                    undo: None,
                },
                Err(e) => return Err(e),
            })
        })
    }

    #[pyo3(signature = (ttl = None))]
    fn extend(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::opt_ttl)] ttl: Option<f64>,
    ) -> PyResult<PyOp> {
        let ttl = ttl
            .map(|t| validate::seconds(t, "ttl", true))
            .transpose()
            .py()?;
        let lock = self.inner.clone();
        run(py, false, move |_| lock.extend(ttl).map(|()| Done::none()))
    }

    fn locked(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, true, move |_| lock.locked().map(Done::of))
    }

    fn owned(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, true, move |_| lock.owned().map(Done::of))
    }

    fn fencing_token(&self, py: Python<'_>) -> PyResult<PyOp> {
        let lock = self.inner.clone();
        run(py, true, move |_| lock.fencing_token().map(Done::of))
    }
}

// ---------------------------------------------------------------------------
// Queues

/// Wraps core tasks as `Task` objects: one (or None) when `count` is None,
/// else a list.
fn tasks_value(
    queue: Arc<ferrolock::Queue>,
    tasks: Vec<ferrolock::Task>,
    origin: Origin,
    one: bool,
) -> Value {
    Box::new(move |py| {
        let mut wrapped = tasks
            .into_iter()
            .map(|t| PyTask::new(queue.clone(), t, origin));
        if one {
            return Ok(match wrapped.next() {
                Some(t) => Bound::new(py, t)?.into_any().unbind(),
                None => py.None(),
            });
        }
        let list = PyList::empty(py);
        for t in wrapped {
            list.append(Bound::new(py, t)?)?;
        }
        Ok(list.into_any().unbind())
    })
}

/// Gives back reserved tasks whose taker is gone: due again at once.
fn nack_all(queue: Arc<ferrolock::Queue>, tasks: Vec<ferrolock::Task>) -> Undo {
    Box::new(move || {
        for t in tasks {
            let _ = queue.nack(&t.id, t.receipt.as_deref().unwrap_or(""), Some(0.0), None);
        }
    })
}

/// The awaitable face of a `Queue` (what `ferrolock.aio.Queue` calls).
#[pyclass(name = "_AsyncQueue", module = "ferrolock._native", frozen)]
pub struct PyAsyncQueue {
    inner: Arc<ferrolock::Queue>,
}

#[pymethods]
impl PyAsyncQueue {
    #[new]
    fn new(queue: &Bound<'_, PyQueue>) -> Self {
        Self {
            inner: queue.get().inner.clone(),
        }
    }

    #[pyo3(signature = (ids, *, delay = 0.0))]
    fn enqueue(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::delay)] delay: f64,
    ) -> PyResult<PyOp> {
        let items = enqueue_items(ids)?;
        let queue = self.inner.clone();
        run(py, true, move |hook| {
            let n = match items.payloads {
                None => queue.enqueue(&items.ids, delay, None, hook)?,
                Some(payloads) => {
                    let tasks: Vec<_> = items.ids.into_iter().zip(payloads).collect();
                    queue.enqueue_with_payloads(&tasks, delay, None, hook)?
                }
            };
            Ok(Done::of(n))
        })
    }

    #[pyo3(signature = (count = None, *, wait = 0.0))]
    fn pop(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
        #[pyo3(from_py_with = arg::wait)] wait: f64,
    ) -> PyResult<PyOp> {
        let n = count_arg(count)?;
        let wait = wait_secs(wait)?;
        let steps = ferrolock::Queue::pop_steps(&self.inner, n, wait).py()?;
        let queue = self.inner.clone();
        drive(
            py,
            steps,
            Box::new(move |step: Option<ferrolock::Step>| {
                let tasks = step.map(|s| s.tasks).unwrap_or_default();
                let (back, again) = (queue.clone(), tasks.clone());
                Ok(Done {
                    value: tasks_value(queue, tasks, Origin::Popped, count.is_none()),
                    undo: Some(Box::new(move || crate::queue::put_back(&back, again))),
                })
            }),
        )
    }

    #[pyo3(signature = (count = None))]
    fn top(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
    ) -> PyResult<PyOp> {
        let n = count_arg(count)?;
        let queue = self.inner.clone();
        run(py, true, move |_| {
            let tasks = queue.top(n)?;
            Ok(Done {
                value: tasks_value(queue, tasks, Origin::Peeked, count.is_none()),
                undo: None,
            })
        })
    }

    fn dequeue(
        &self,
        py: Python<'_>,
        id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = arg::score)] score: f64,
    ) -> PyResult<PyOp> {
        let id = str_bytes(id, "id")?;
        let queue = self.inner.clone();
        run(py, true, move |hook| {
            queue.dequeue(&id, score, None, hook).map(Done::of)
        })
    }

    #[pyo3(signature = (count = None, *, wait = 0.0, visibility = None))]
    fn reserve(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::count)] count: Option<i64>,
        #[pyo3(from_py_with = arg::wait)] wait: f64,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<PyOp> {
        let n = count_arg(count)?;
        let wait = wait_secs(wait)?;
        self.reserve_wait(py, n, wait, visibility, count.is_none())
    }

    /// `reserve` waiting forever when `wait` is None (`async for`).
    #[pyo3(signature = (wait = None, visibility = None))]
    fn reserve_next(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::timeout)] wait: Option<f64>,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<PyOp> {
        let wait = Wait::from_secs(wait, "wait").py()?;
        self.reserve_wait(py, 1, wait, visibility, true)
    }

    fn ack(&self, py: Python<'_>, task: &Bound<'_, PyTask>) -> PyResult<PyOp> {
        let t = task.get();
        let job = t.ack_job();
        t.stop_beat();
        task_op(py, job)
    }

    #[pyo3(signature = (task, delay = None))]
    fn nack(
        &self,
        py: Python<'_>,
        task: &Bound<'_, PyTask>,
        #[pyo3(from_py_with = arg::opt_delay)] delay: Option<f64>,
    ) -> PyResult<PyOp> {
        let t = task.get();
        let job = t.nack_job(delay)?;
        t.stop_beat();
        task_op(py, job)
    }

    #[pyo3(signature = (task, visibility = None))]
    fn touch(
        &self,
        py: Python<'_>,
        task: &Bound<'_, PyTask>,
        #[pyo3(from_py_with = arg::opt_visibility)] visibility: Option<f64>,
    ) -> PyResult<PyOp> {
        task_op(py, task.get().touch_job(visibility)?)
    }

    fn len(&self, py: Python<'_>) -> PyResult<PyOp> {
        let queue = self.inner.clone();
        run(py, true, move |_| queue.len().map(Done::of))
    }

    fn stats(&self, py: Python<'_>) -> PyResult<PyOp> {
        let queue = self.inner.clone();
        run(py, true, move |_| {
            let s = queue.stats()?;
            Ok(Done {
                value: Box::new(move |py| {
                    let d = PyDict::new(py);
                    d.set_item("due", s.due)?;
                    d.set_item("delayed", s.delayed)?;
                    d.set_item("in_flight", s.in_flight)?;
                    d.set_item("dead", s.dead)?;
                    d.set_item("oldest_due_age", s.oldest_due_age)?;
                    Ok(d.into_any().unbind())
                }),
                undo: None,
            })
        })
    }
}

impl PyAsyncQueue {
    fn reserve_wait(
        &self,
        py: Python<'_>,
        n: usize,
        wait: Wait,
        visibility: Option<f64>,
        one: bool,
    ) -> PyResult<PyOp> {
        let visibility = visibility
            .map(|v| validate::seconds(v, "visibility", true))
            .transpose()
            .py()?;
        let steps = ferrolock::Queue::reserve_steps(&self.inner, n, visibility, wait).py()?;
        let queue = self.inner.clone();
        drive(
            py,
            steps,
            Box::new(move |step: Option<ferrolock::Step>| {
                let tasks = step.map(|s| s.tasks).unwrap_or_default();
                let undo = nack_all(queue.clone(), tasks.clone());
                Ok(Done {
                    value: tasks_value(queue, tasks, Origin::Reserved, one),
                    undo: Some(undo),
                })
            }),
        )
    }
}

/// A task's ack, nack or touch as an awaitable call (it finishes even if
/// the awaiting task is cancelled).
fn task_op(py: Python<'_>, job: TaskJob) -> PyResult<PyOp> {
    run(py, false, move |hook| job(hook).map(Done::of))
}

// ---------------------------------------------------------------------------
// The worker loop

/// First pause after trouble; doubled up to [`TROUBLE_MAX`] (the core
/// worker's).
const TROUBLE_PAUSE: Duration = Duration::from_millis(50);
const TROUBLE_MAX: Duration = Duration::from_secs(5);

/// One step of `_AsyncWorker.next`: end the current task and reserve the
/// next in one round trip, then, if none is due, wait for one; trouble is
/// logged and ridden out (as `ferrolock::Worker` does).
struct NextTask {
    queue: Arc<ferrolock::Queue>,
    /// The task to end first, how, and until when it is ours.
    finish: Option<(ferrolock::Task, Outcome, Option<Instant>)>,
    visibility: Option<Duration>,
    wait: Wait,
    waiting: Option<TakeSteps>,
    troubles: Arc<AtomicU64>,
}

impl NextTask {
    fn trouble(&self, e: &ferrolock::Error) -> Option<Step<Option<ferrolock::Task>>> {
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

    fn end_alone(&mut self) -> ferrolock::Result<()> {
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
type Current = Option<(ferrolock::Task, Option<Heartbeat>)>;

/// One consumer of `ferrolock.aio.Queue.work`: the awaitable `_Worker`.
#[pyclass(name = "_AsyncWorker", module = "ferrolock._native", frozen)]
pub struct PyAsyncWorker {
    queue: Arc<ferrolock::Queue>,
    wait: Wait,
    visibility: Option<Duration>,
    heartbeat: bool,
    /// The task handed out last and not yet ended, with its heartbeat.
    current: Arc<Mutex<Current>>,
    troubles: Arc<AtomicU64>,
}

impl PyAsyncWorker {
    /// The current task, its heartbeat stopped, with its validity.
    fn take_current(&self) -> Option<(ferrolock::Task, Option<Instant>)> {
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
    fn new(
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
    fn next(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<PyOp> {
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
    fn finish(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<PyOp> {
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

/// Threads and timers of the asyncio executor, for tests and benchmarks:
/// `{"threads": now, "threads_peak": most at once, "max_threads": the bound,
/// "jobs": round-trip jobs run, "timers": pending timer entries}`.
#[pyfunction]
#[pyo3(name = "_aio_stats")]
pub fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let e = executor();
    let d = PyDict::new(py);
    d.set_item("threads", locked(&e.state).threads)?;
    d.set_item("threads_peak", THREADS_PEAK.load(Ordering::Relaxed))?;
    d.set_item("max_threads", e.max)?;
    d.set_item("jobs", JOBS_RUN.load(Ordering::Relaxed))?;
    d.set_item("timers", timers().len())?;
    Ok(d)
}
