//! The legacy queue lock: legacy PHP takes `Lock:Queue:<name>` around its
//! multi-step queue operations. Our scripts check it in the same round trip
//! and answer `{-1, pttl}` while it is held; [`retry`] then polls, since
//! legacy clients release it with a plain DEL, which notifies nobody.

use std::time::{Duration, Instant};

use redis::Value;

use super::reply::int_at;
use crate::error::{Error, ErrorKind, Result};
use crate::wait::{self, Interrupt};

/// Longest pause between polls of a legacy queue lock (legacy clients
/// release it with a plain DEL, which notifies nobody).
const LEGACY_POLL_MAX: Duration = Duration::from_millis(50);

/// Runs `op` again while it reports that a legacy client holds the queue
/// lock `key` (`{-1, pttl}`), polling with backoff up to `timeout`.
/// `label` names the queue in the error.
pub(super) fn retry(
    label: &str,
    key: &[u8],
    timeout: Duration,
    interrupt: Option<Interrupt<'_>>,
    mut op: impl FnMut() -> Result<Vec<Value>>,
) -> Result<Vec<Value>> {
    let until = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(1);
    loop {
        let reply = op()?;
        if int_at(&reply, 0) != -1 {
            return Ok(reply);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::new(
                ErrorKind::QueueLocked,
                format!(
                    "{}: a legacy client held {:?} for longer than {:.3} s",
                    label,
                    String::from_utf8_lossy(key),
                    timeout.as_secs_f64()
                ),
            ));
        }
        let pttl = Duration::from_millis(int_at(&reply, 1).max(1) as u64);
        wait::pause(backoff.min(pttl).min(left), interrupt)?;
        backoff = (backoff * 2).min(LEGACY_POLL_MAX);
    }
}
