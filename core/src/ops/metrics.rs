//! This process's lock figures, for an exporter: how long acquires waited,
//! how long locks were held, how many were lost, how many acquires gave up.
//!
//! Counted with relaxed atomics where they happen (a few nanoseconds on a
//! path that costs a round trip). Per process, not per lock name: names are
//! unbounded (`order:1234`), a label per name would be too. A forked child
//! starts from zero (its parent reports its own).
//!
//! Queue figures are not here: they live in Redis, read with
//! [`Queue::stats`](crate::Queue::stats).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the histogram buckets; a last bucket, `+Inf`,
/// takes the rest. From half a millisecond (an uncontended acquire on a
/// local network) to a minute.
pub const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A histogram of durations, in [`BUCKETS`].
pub(crate) struct Histogram {
    /// Per bucket (not cumulative), the last one `+Inf`.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    const fn new() -> Self {
        Self {
            counts: [const { AtomicU64::new(0) }; BUCKETS.len() + 1],
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Counts one duration.
    pub(crate) fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = Vec::with_capacity(self.counts.len());
        let mut total = 0;
        for c in &self.counts {
            total += c.load(Ordering::Relaxed);
            cumulative.push(total);
        }
        HistogramSnapshot {
            cumulative,
            count: total,
            sum: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }

    fn reset(&self) {
        for c in &self.counts {
            c.store(0, Ordering::Relaxed);
        }
        self.sum_ns.store(0, Ordering::Relaxed);
    }
}

/// A histogram read at one moment, in the shape Prometheus exposes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HistogramSnapshot {
    /// Cumulative counts: `cumulative[i]` observations took at most
    /// `BUCKETS[i]` seconds; the last one (`+Inf`) is [`count`](Self::count).
    pub cumulative: Vec<u64>,
    /// Observations.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum: f64,
}

/// This process's lock figures at one moment.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// How long successful acquires took, waiting included (nested acquires
    /// of a reentrant lock are not counted).
    pub lock_wait: HistogramSnapshot,
    /// How long locks were held, acquire to release (for holds that were
    /// released: a lost hold counts under `locks_lost`).
    pub lock_hold: HistogramSnapshot,
    /// Acquires that gave up: the wait ran out, or a try-once found the
    /// lock held.
    pub acquires_missed: u64,
    /// Holds found lost (see [`EventKind::LockLost`](super::events::EventKind::LockLost)).
    pub locks_lost: u64,
    /// Locks freed by an operator's forced release from this process.
    pub forced_releases: u64,
    /// Tasks this process's nacks sent to the dead set.
    pub dead_lettered: u64,
    /// Lost replies not yet settled (see [`crate::pending_settlements`]).
    pub settlements_pending: usize,
}

pub(crate) static LOCK_WAIT: Histogram = Histogram::new();
pub(crate) static LOCK_HOLD: Histogram = Histogram::new();
pub(crate) static ACQUIRES_MISSED: AtomicU64 = AtomicU64::new(0);
pub(crate) static LOCKS_LOST: AtomicU64 = AtomicU64::new(0);
pub(crate) static FORCED_RELEASES: AtomicU64 = AtomicU64::new(0);
pub(crate) static DEAD_LETTERED: AtomicU64 = AtomicU64::new(0);

/// Adds one to `counter`.
pub(crate) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Reads every figure.
pub fn snapshot() -> Snapshot {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Snapshot {
        lock_wait: LOCK_WAIT.snapshot(),
        lock_hold: LOCK_HOLD.snapshot(),
        acquires_missed: load(&ACQUIRES_MISSED),
        locks_lost: load(&LOCKS_LOST),
        forced_releases: load(&FORCED_RELEASES),
        dead_lettered: load(&DEAD_LETTERED),
        settlements_pending: crate::settle::pending_settlements(),
    }
}

/// In a forked child (the events module's fork hook): every figure back to 0.
pub(crate) fn reset_in_child() {
    LOCK_WAIT.reset();
    LOCK_HOLD.reset();
    for c in [
        &ACQUIRES_MISSED,
        &LOCKS_LOST,
        &FORCED_RELEASES,
        &DEAD_LETTERED,
    ] {
        c.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_into_cumulative_buckets() {
        let h = Histogram::new();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(120));
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.cumulative.len(), BUCKETS.len() + 1);
        assert_eq!(s.cumulative[0], 1); // <= 0.5 ms
        assert_eq!(s.cumulative[2], 1); // <= 2.5 ms
        assert_eq!(s.cumulative[3], 3); // <= 5 ms
        assert_eq!(s.cumulative[BUCKETS.len() - 1], 3); // <= 60 s
        assert_eq!(s.cumulative[BUCKETS.len()], 4); // +Inf
        assert!((s.sum - 120.0061).abs() < 1e-6);
    }
}
