//! What the two queue classes, `RedisQueue` (`queue.rs`) and
//! `Ferrolock\Queue` (`modern/queue.rs`), share: the worker loop of their
//! `work()` over the core's [`Worker`], the signal handling that stops it,
//! and the `stats()` array. Each class only says how a task reaches its
//! handler (an array, a `Ferrolock\Task`) and how errors are reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ext_php_rs::convert::FromZval;
use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::flags::DataType;
use ext_php_rs::types::{ZendCallable, ZendHashTable, ZendObject, Zval};
use ferrolock::{Outcome, Queue, QueueStats, Task, Worker, WorkerOptions};

use crate::args::{At, Param, type_error, type_name};

// Zend API (not in ext-php-rs' bindings), resolved when PHP loads the
// extension (PHP 8.1+).
unsafe extern "C" {
    fn zend_is_unwind_exit(ex: *const ZendObject) -> bool;
    fn zend_is_graceful_exit(ex: *const ZendObject) -> bool;
    fn zend_throw_unwind_exit();
    fn zend_throw_graceful_exit();
}

/// `exit()` (or a fiber's destruction) unwinding through a call of PHP
/// code. It travels as an internal exception object, which a call from Rust
/// takes like any exception: it is not the code's failure, and must go on
/// once the caller's cleanup is done (rethrowing the object as an exception
/// would be a fatal error, logging it a crash).
#[derive(Clone, Copy, Debug)]
pub enum Unwind {
    /// `exit()` / `die()`.
    Exit,
    /// A graceful exit (a fiber destroyed while suspended).
    Graceful,
}

impl Unwind {
    /// The unwinding that ended a call with `e`, if it was one.
    pub fn of(e: &ext_php_rs::error::Error) -> Option<Self> {
        let ext_php_rs::error::Error::Exception(obj) = e else {
            return None;
        };
        let ptr: *const ZendObject = &**obj;
        // SAFETY: `ptr` is a live object (held by `e`); both only read it.
        unsafe {
            if zend_is_unwind_exit(ptr) {
                Some(Unwind::Exit)
            } else if zend_is_graceful_exit(ptr) {
                Some(Unwind::Graceful)
            } else {
                None
            }
        }
    }

    /// Starts the unwinding again (the exit status is still the executor's):
    /// PHP goes on with it when the method returns.
    pub fn resume(self) {
        // SAFETY: called from a method of this request, with no exception
        // pending (the call's was taken); it sets the executor's exception.
        unsafe {
            match self {
                Unwind::Exit => zend_throw_unwind_exit(),
                Unwind::Graceful => zend_throw_graceful_exit(),
            }
        }
    }
}

/// Set by `stop()` (and the signal handlers `work()` installs): every
/// `work()` loop of this process, of either class, stops after the task at
/// hand.
static STOP: AtomicBool = AtomicBool::new(false);

/// Signal numbers (the same on Linux and the BSDs).
const SIGINT: i64 = 2;
const SIGTERM: i64 = 15;

/// One `work()` call: who runs it and how it reports.
pub struct Work<'a> {
    /// The method, for log lines: `RedisQueue::work`.
    pub what: &'static str,
    /// The static method installed as the pcntl handler of SIGTERM and
    /// SIGINT: `RedisQueue::stop`.
    pub stop_handler: String,
    /// Stop after this many tasks (`None`: no limit).
    pub max_jobs: Option<u64>,
    /// A core error as the class reports it.
    pub fail: &'a dyn Fn(ferrolock::Error) -> PhpException,
}

/// Runs the worker loop: reserves a task, calls `handler` with what
/// `argument` makes of it, acks it when the handler returns and nacks it
/// (backoff, or the dead set at its last attempt) when it throws, the
/// exception logged with `error_log()`. Each step is one round trip (the
/// ack of a task reserves the next); the reservation is kept alive while the
/// handler runs when `opts.heartbeat`; connection errors are logged and
/// ridden out. Stops on `stop()`, on SIGTERM or SIGINT when pcntl is loaded
/// (the task at hand is finished first; a second SIGINT kills), after
/// `max_jobs`, or when nothing came within `opts.wait`. Returns how many
/// tasks were handled. An `exit()` in the handler nacks its task and ends
/// the loop, then the exit goes on.
pub fn work(
    queue: Arc<Queue>,
    opts: WorkerOptions,
    spec: &Work<'_>,
    handler: &ZendCallable<'_>,
    argument: &dyn Fn(&Task) -> PhpResult<Zval>,
) -> PhpResult<i64> {
    let mut worker = Worker::new(queue, opts).map_err(spec.fail)?;
    STOP.store(false, Ordering::Release);
    let signals = Signals::install(&spec.stop_handler);
    let hook = || -> ferrolock::Result<()> {
        signals.dispatch();
        if STOP.load(Ordering::Acquire) {
            return Err(ferrolock::wait::interrupted(spec.what));
        }
        Ok(())
    };
    let log = |e: &ferrolock::Error| {
        error_log(&format!("ferrolock: {}: {e}; trying again", spec.what));
    };
    let mut outcome = Outcome::Done;
    let mut handled: i64 = 0;
    let mut unwind = None;
    let mut next = worker.next(outcome, Some(&hook), &log);
    let result = loop {
        let task = match next {
            Ok(Some(task)) => task,
            Ok(None) => break Ok(()),
            Err(e) if e.is_interrupted() => break Ok(()),
            Err(e) => break Err((spec.fail)(e)),
        };
        let arg = match argument(&task) {
            Ok(arg) => arg,
            Err(e) => break Err(e),
        };
        outcome = match handler.try_call(vec![&arg]) {
            Ok(_) => Outcome::Done,
            Err(e) if Unwind::of(&e).is_some() => {
                // exit() in the handler: the task was not done; the loop
                // ends here, and the exit goes on after the cleanup.
                unwind = Unwind::of(&e);
                outcome = Outcome::Failed;
                break Ok(());
            }
            Err(e) => {
                error_log(&format!(
                    "ferrolock: {}: task {:?} failed (attempt {}): {}",
                    spec.what,
                    String::from_utf8_lossy(&task.id),
                    task.attempts,
                    describe(e)
                ));
                Outcome::Failed
            }
        };
        handled += 1;
        signals.dispatch();
        let enough = spec
            .max_jobs
            .is_some_and(|max| u64::try_from(handled).unwrap_or(u64::MAX) >= max);
        if STOP.load(Ordering::Acquire) || enough {
            break Ok(());
        }
        next = worker.next(outcome, Some(&hook), &log);
    };
    if let Err(e) = worker.finish(outcome, None) {
        error_log(&format!(
            "ferrolock: {}: could not finish the last task: {e} \
             (it returns when its reservation runs out)",
            spec.what
        ));
    }
    signals.restore();
    if let Some(u) = unwind {
        u.resume();
    }
    result.map(|()| handled)
}

/// `stop()`: asks every `work()` loop of this process to stop after the
/// task at hand. Installed by `work()` as the pcntl handler of SIGTERM and
/// SIGINT: on a SIGINT it restores the default handler, so that a second
/// one kills the process, as without a handler.
pub fn stop(signal: Option<i64>) {
    STOP.store(true, Ordering::Release);
    if signal == Some(SIGINT) {
        call("pcntl_signal", vec![&SIGINT, &0i64]);
    }
}

/// `stats()`'s array: `due`, `delayed`, `in_flight`, `dead` (ints) and
/// `oldest_due_age` (float seconds).
pub fn stats_zval(s: &QueueStats) -> PhpResult<Zval> {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut row = ZendHashTable::new();
    row.insert("due", n(s.due))?;
    row.insert("delayed", n(s.delayed))?;
    row.insert("in_flight", n(s.in_flight))?;
    row.insert("dead", n(s.dead))?;
    row.insert("oldest_due_age", s.oldest_due_age)?;
    let mut z = Zval::new();
    z.set_hashtable(row);
    Ok(z)
}

/// A `callable` parameter (reflection: `callable`).
pub struct CallableArg<'a>(&'a Zval);

impl<'a> FromZval<'a> for CallableArg<'a> {
    const TYPE: DataType = DataType::Callable;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(CallableArg(z))
    }
}

impl<'a> Param for CallableArg<'a> {
    type Value = ZendCallable<'a>;
    fn read(self, at: &At) -> PhpResult<ZendCallable<'a>> {
        ZendCallable::new(self.0).map_err(|_| type_error(at, "callable", &type_name(self.0)))
    }
}

/// Calls the PHP function `name`, if it exists; its result, if it returned.
fn call(name: &str, args: Vec<&dyn ext_php_rs::convert::IntoZvalDyn>) -> Option<Zval> {
    ZendCallable::try_from_name(name).ok()?.try_call(args).ok()
}

/// Logs `message` with PHP's `error_log()` (stderr in the CLI, else the
/// configured log).
pub fn error_log(message: &str) {
    call("error_log", vec![&message]);
}

/// What a handler threw, as a log line.
pub fn describe(e: ext_php_rs::error::Error) -> String {
    match e {
        ext_php_rs::error::Error::Exception(obj) => {
            let class = obj.get_class_name().unwrap_or_else(|_| "exception".into());
            let message = obj
                .try_call_method("getMessage", vec![])
                .ok()
                .and_then(|m| m.string())
                .unwrap_or_default();
            format!("{class}: {message}")
        }
        other => other.to_string(),
    }
}

/// SIGTERM and SIGINT handled by a `stop()` method while `work()` runs
/// (when pcntl is loaded), the previous handlers restored after.
struct Signals {
    dispatch: Option<ZendCallable<'static>>,
    previous: Vec<(i64, Zval)>,
    /// `pcntl_async_signals()` before: it is on while `work()` runs, so that
    /// a signal is handled at once, inside a long handler too (the first
    /// SIGINT then sets the second one to kill).
    was_async: Option<Zval>,
}

impl Signals {
    /// Installs `handler` (`Class::stop`) for SIGTERM and SIGINT.
    fn install(handler: &str) -> Self {
        let mut me = Self {
            dispatch: None,
            previous: Vec::new(),
            was_async: None,
        };
        if ZendCallable::try_from_name("pcntl_signal").is_err() {
            return me;
        }
        for sig in [SIGTERM, SIGINT] {
            let Some(previous) = call("pcntl_signal_get_handler", vec![&sig]) else {
                continue;
            };
            if call("pcntl_signal", vec![&sig, &handler]).is_some() {
                me.previous.push((sig, previous));
            }
        }
        me.dispatch = ZendCallable::try_from_name("pcntl_signal_dispatch").ok();
        me.was_async = call("pcntl_async_signals", vec![&true]);
        me
    }

    /// Runs the PHP signal handlers of signals that arrived.
    fn dispatch(&self) {
        if let Some(d) = &self.dispatch {
            let _ = d.try_call(vec![]);
        }
    }

    fn restore(&self) {
        for (sig, previous) in &self.previous {
            call("pcntl_signal", vec![sig, previous]);
        }
        if let Some(was) = &self.was_async {
            call("pcntl_async_signals", vec![was]);
        }
    }
}
