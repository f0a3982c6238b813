//! The executor (a bounded pool of native threads for round trips) and
//! the timer thread (re-checks of waits).

use super::*;

/// Default number of executor threads.
pub(super) const DEFAULT_THREADS: usize = 8;

/// An idle executor thread stops after this long.
pub(super) const IDLE: Duration = Duration::from_secs(30);

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The bounded pool of threads that run round trips for coroutines.
pub(super) struct Executor {
    pub(super) pid: u32,
    pub(super) max: usize,
    pub(super) state: Mutex<ExecState>,
    pub(super) ready: Condvar,
}

#[derive(Default)]
pub(super) struct ExecState {
    pub(super) jobs: VecDeque<Job>,
    pub(super) threads: usize,
    pub(super) idle: usize,
}

/// Counters for tests and benchmarks (`_aio_stats()`).
pub(super) static THREADS_PEAK: AtomicUsize = AtomicUsize::new(0);
pub(super) static JOBS_RUN: AtomicU64 = AtomicU64::new(0);

pub(super) fn executor() -> Arc<Executor> {
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
    pub(super) fn submit(self: &Arc<Self>, job: Job) {
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

    pub(super) fn work(&self) {
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
pub(super) trait Wake: Send + Sync {
    /// The timer armed as `generation` is due.
    fn fire(self: Arc<Self>, generation: u64);
}

pub(super) struct Timer {
    pub(super) at: Instant,
    pub(super) seq: u64,
    pub(super) generation: u64,
    pub(super) target: Weak<dyn Wake>,
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
pub(super) struct Timers {
    pub(super) pid: u32,
    pub(super) heap: Mutex<(BinaryHeap<Timer>, u64)>,
    pub(super) changed: Condvar,
}

pub(super) fn timers() -> Arc<Timers> {
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
    pub(super) fn add(&self, at: Instant, generation: u64, target: Weak<dyn Wake>) {
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

    pub(super) fn run(&self) {
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

    pub(super) fn len(&self) -> usize {
        locked(&self.heap).0.len()
    }
}
