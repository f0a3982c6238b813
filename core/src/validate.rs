//! Argument checks shared by every entry point, so both bindings reject the
//! same inputs with the same messages — before anything is sent to Redis.
//!
//! Each rule is one function with one message naming the argument, and is
//! applied once on the way from a binding to a script: a binding converts a
//! caller's number of seconds with [`seconds`] (a value that is a duration
//! at all), and the core checks the rule where the value is taken in (a
//! lock's ttl by [`lifetime`] in `Lock::new` and `extend`, a queue's
//! visibility in `Queue::new` and `reserve`).

use std::time::Duration;

use crate::error::{Error, Result};

/// Longest accepted lock/queue name and task id, in bytes. Redis would accept
/// more, but a multi-kilobyte name is a bug in the caller, not a name.
pub const MAX_NAME_LEN: usize = 4096;

/// Largest accepted duration (ttl, timeout, delay, visibility): ten years.
pub const MAX_SECONDS: f64 = 10.0 * 365.0 * 24.0 * 3600.0;

/// Checks a lock or queue name, or a task id (`what` names it in the message).
pub fn name(value: &[u8], what: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long; the limit is {MAX_NAME_LEN}",
            value.len()
        )));
    }
    Ok(())
}

/// Checks a duration in seconds: finite, not negative (zero allowed only if
/// `zero_ok`), at most [`MAX_SECONDS`].
pub fn seconds(value: f64, what: &str, zero_ok: bool) -> Result<Duration> {
    if !value.is_finite() {
        return Err(Error::invalid(format!(
            "{what} must be a finite number of seconds, got {}",
            shown(value)
        )));
    }
    if value < 0.0 || (value == 0.0 && !zero_ok) {
        let bound = if zero_ok { ">= 0" } else { "> 0" };
        return Err(Error::invalid(format!(
            "{what} must be {bound} seconds, got {}",
            shown(value)
        )));
    }
    if value > MAX_SECONDS {
        return Err(Error::invalid(format!(
            "{what} must be at most {MAX_SECONDS} seconds (ten years), got {}",
            shown(value)
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

/// A caller's number as messages show it: `1e300`, not its 301 digits.
fn shown(value: f64) -> String {
    if value != 0.0 && value.is_finite() && !(1e-6..1e15).contains(&value.abs()) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// The shortest lifetime: Redis counts key lifetimes in milliseconds.
pub const MIN_LIFETIME: Duration = Duration::from_millis(1);

/// The rule for a lifetime (a lock's ttl, a reservation's visibility): from
/// [`MIN_LIFETIME`] to [`MAX_SECONDS`].
pub fn lifetime(value: Duration, what: &str) -> Result<Duration> {
    if value < MIN_LIFETIME || value.as_secs_f64() > MAX_SECONDS {
        return Err(Error::invalid(format!(
            "{what} must be between 0.001 and {MAX_SECONDS} seconds (ten years), got {}",
            value.as_secs_f64()
        )));
    }
    Ok(value)
}

/// A lifetime given in seconds: [`seconds`], then [`lifetime`]. For callers
/// that check before building options; the core checks the options again.
pub fn ttl(value: f64, what: &str) -> Result<Duration> {
    lifetime(seconds(value, what, true)?, what)
}

/// An interval that must not be zero (a wait's re-check interval).
pub fn interval(value: Duration, what: &str) -> Result<Duration> {
    if value.is_zero() {
        return Err(Error::invalid(format!("{what} must be > 0")));
    }
    Ok(value)
}

/// A signed offset in seconds (queue delays may be negative: due earlier).
pub fn offset(value: f64, what: &str) -> Result<f64> {
    if !value.is_finite() || value.abs() > MAX_SECONDS {
        return Err(Error::invalid(format!(
            "{what} must be a finite number of seconds within ±{MAX_SECONDS}, got {}",
            shown(value)
        )));
    }
    Ok(value)
}

/// A queue score given back by the caller (`dequeue`): any finite float.
pub fn score(value: f64) -> Result<f64> {
    if !value.is_finite() {
        return Err(Error::invalid(format!(
            "score must be a finite number, got {}",
            shown(value)
        )));
    }
    Ok(value)
}

/// A task count given by a caller: at least 1.
pub fn count(value: i64, what: &str) -> Result<usize> {
    if value < 1 {
        return Err(fewer_than_one(what, value));
    }
    usize::try_from(value).map_err(|_| Error::invalid(format!("{what} is too large: {value}")))
}

/// A task count already unsigned (the core's own API): at least 1.
pub fn task_count(value: usize, what: &str) -> Result<usize> {
    if value < 1 {
        return Err(fewer_than_one(what, value));
    }
    Ok(value)
}

fn fewer_than_one(what: &str, value: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{what} must be >= 1, got {value}"))
}

/// Milliseconds for Redis (PX): rounded up so a tiny TTL never becomes 0.
pub(crate) fn millis(d: Duration) -> u64 {
    let ms = d.as_micros().div_ceil(1000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names() {
        assert!(name(b"0", "lock name").is_ok());
        assert!(name(b"", "lock name").unwrap_err().is_invalid_argument());
        assert!(name(&vec![b'x'; MAX_NAME_LEN + 1], "lock name").is_err());
        assert!(name(b"\xff\xfe{}\n", "lock name").is_ok());
    }

    #[test]
    fn durations() {
        assert!(seconds(0.0, "timeout", true).unwrap().is_zero());
        assert!(seconds(0.0, "ttl", false).is_err());
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300] {
            assert!(seconds(bad, "ttl", true).unwrap_err().is_invalid_argument());
        }
        assert!(ttl(0.0001, "ttl").is_err());
        assert!(lifetime(Duration::ZERO, "ttl").is_err());
        assert!(lifetime(Duration::from_secs_f64(MAX_SECONDS * 2.0), "ttl").is_err());
        assert_eq!(lifetime(MIN_LIFETIME, "ttl").unwrap(), MIN_LIFETIME);
        let e = lifetime(Duration::ZERO, "visibility").unwrap_err();
        assert!(e.is_invalid_argument() && e.message().starts_with("visibility must be"));
        assert!(interval(Duration::ZERO, "recheck interval").is_err());
        assert!(task_count(0, "count").is_err() && task_count(3, "count").unwrap() == 3);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(offset(-5.0, "delay").unwrap(), -5.0);
        assert!(count(0, "count").is_err());
    }

    #[test]
    fn messages_show_numbers_short() {
        let e = seconds(1e300, "ttl", true).unwrap_err();
        assert!(e.message().ends_with("got 1e300"), "{e}");
        assert!(e.message().len() < 80, "{e}");
        assert!(offset(-1e-300, "delay").is_ok());
        let e = offset(-1e300, "delay").unwrap_err();
        assert!(e.message().ends_with("got -1e300"), "{e}");
        let e = seconds(-1.0, "ttl", true).unwrap_err();
        assert!(e.message().ends_with("got -1"), "{e}");
        let e = seconds(-0.5, "ttl", true).unwrap_err();
        assert!(e.message().ends_with("got -0.5"), "{e}");
        assert_eq!(shown(f64::NAN), "NaN");
        assert_eq!(shown(1e-9), "1e-9");
    }

    proptest! {
        #[test]
        fn seconds_accepts_exactly_the_sane_values(v in proptest::num::f64::ANY) {
            let ok = seconds(v, "x", true).is_ok();
            prop_assert_eq!(ok, (0.0..=MAX_SECONDS).contains(&v));
        }

        #[test]
        fn ttl_millis_never_zero(v in 0.001f64..MAX_SECONDS) {
            let d = ttl(v, "ttl").unwrap();
            prop_assert!(millis(d) >= 1);
        }

        #[test]
        fn names_accept_any_bytes_up_to_the_limit(b in proptest::collection::vec(any::<u8>(), 0..5000)) {
            prop_assert_eq!(name(&b, "n").is_ok(), !b.is_empty() && b.len() <= MAX_NAME_LEN);
        }

        #[test]
        fn count_accepts_positive(v in any::<i64>()) {
            prop_assert_eq!(count(v, "count").is_ok(), v >= 1);
        }
    }
}
