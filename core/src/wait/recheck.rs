//! When a waiter re-checks, and how long its registration lives without one.

use std::time::Duration;

/// Lease of a waiter registration, from the re-check interval: a waiter that
/// misses three re-checks in a row is considered gone.
pub(crate) fn lease_for(recheck: Duration) -> Duration {
    recheck * 3 + Duration::from_millis(500)
}

/// A re-check interval, shortened by a random part of up to a quarter:
/// waits that began together (a burst of callers, a restart that woke every
/// waiter) drift apart instead of re-checking together every interval, so
/// their round trips reach the server spread out rather than hundreds at
/// once. Never longer than `recheck` (the lease counts on it).
pub(super) fn spread(recheck: Duration) -> Duration {
    let quarter = recheck / 4;
    let nanos = u64::try_from(quarter.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return recheck;
    }
    recheck - Duration::from_nanos(crate::keys::random_u64() % nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_recheck_comes_early_by_up_to_a_quarter_and_never_late() {
        let recheck = Duration::from_secs(1);
        let pauses: Vec<Duration> = (0..1000).map(|_| spread(recheck)).collect();
        assert!(pauses.iter().all(|p| *p <= recheck && *p > recheck * 3 / 4));
        let early = pauses.iter().filter(|p| **p < recheck * 7 / 8).count();
        assert!(
            (300..=700).contains(&early),
            "spread over the quarter: {early} of 1000 in its first half"
        );
        assert_eq!(spread(Duration::ZERO), Duration::ZERO);
    }
}
