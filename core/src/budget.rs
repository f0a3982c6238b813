//! How long a call may spend talking to Redis.
//!
//! Every public operation runs under a [`Budget`]: a blocking call with a
//! timeout `t` ends within `t` plus one command timeout, whatever Redis does
//! (pauses, restarts, a network that swallows packets); a call that does not
//! wait (release, extend, ack, a try-once, len, …) ends within one command
//! timeout. The client caps every connect and every round trip by the time
//! left, never starts one after the end, and spends the same budget on its
//! retries (a stale pooled connection, a Sentinel re-lookup, a reconnect in a
//! wait).

use std::time::{Duration, Instant};

/// The hard end of a call's time with Redis (`None`: unbounded, a wait
/// without timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    end: Option<Instant>,
}

#[allow(dead_code)] // the waits adopt the rest (`wait`, `unbounded`, `min`, `end`)
impl Budget {
    /// Until `end`.
    pub(crate) fn until(end: Instant) -> Self {
        Self { end: Some(end) }
    }

    /// No end: only a wait without timeout (it still stops on interrupt).
    pub(crate) fn unbounded() -> Self {
        Self { end: None }
    }

    /// A call that does not wait: one command timeout from now.
    pub(crate) fn one_call(command_timeout: Duration) -> Self {
        Self::until(Instant::now() + command_timeout)
    }

    /// A wait until `deadline` (`None`: forever): the deadline plus one
    /// command timeout, so the round trip that ends the wait (giving back a
    /// registration, say) still has its full time.
    pub(crate) fn wait(deadline: Option<Instant>, command_timeout: Duration) -> Self {
        Self {
            end: deadline.map(|d| d + command_timeout),
        }
    }

    /// The end, if any.
    pub(crate) fn end(self) -> Option<Instant> {
        self.end
    }

    /// Time left (`None`: unbounded); zero once the end has passed.
    pub(crate) fn left(self) -> Option<Duration> {
        self.end
            .map(|end| end.saturating_duration_since(Instant::now()))
    }

    /// True once less than a millisecond is left: no round trip may start.
    pub(crate) fn is_spent(self) -> bool {
        self.left().is_some_and(|d| d < Duration::from_millis(1))
    }

    /// `limit`, or the time left if that is shorter (never below 1 ms: a
    /// socket timeout of zero would mean "forever").
    pub(crate) fn cap(self, limit: Duration) -> Duration {
        match self.left() {
            Some(left) => limit.min(left).max(Duration::from_millis(1)),
            None => limit,
        }
    }

    /// The shorter of the two budgets.
    pub(crate) fn min(self, other: Budget) -> Budget {
        match (self.end, other.end) {
            (Some(a), Some(b)) => Budget::until(a.min(b)),
            (a, b) => Budget { end: a.or(b) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_ends() {
        let b = Budget::until(Instant::now() + Duration::from_secs(2));
        assert_eq!(b.cap(Duration::from_millis(10)), Duration::from_millis(10));
        assert!(b.cap(Duration::from_secs(60)) <= Duration::from_secs(2));
        assert!(!b.is_spent());
        let spent = Budget::until(Instant::now());
        assert!(spent.is_spent());
        assert_eq!(spent.cap(Duration::from_secs(3)), Duration::from_millis(1));
        let forever = Budget::unbounded();
        assert_eq!(forever.cap(Duration::from_secs(3)), Duration::from_secs(3));
        assert!(!forever.is_spent());
        assert_eq!(forever.min(b), b);
        assert_eq!(b.min(spent), spent);
        assert_eq!(Budget::wait(None, Duration::from_secs(3)), forever);
    }
}
