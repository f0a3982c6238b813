//! How many replicas the master has (for `min_replicas`): known before an
//! acquire, so that one that cannot be confirmed fails at once instead of
//! taking the key for the whole `WAIT` (and making everyone queue behind
//! it).
//!
//! The count is read with `ROLE` (or `INFO replication` where an ACL
//! refuses `ROLE`), on the master the pool talks to, and kept with the
//! pool: a count that meets the target is trusted until the pool's epoch
//! changes (a failover seen or suspected) or a `WAIT` confirms fewer; one
//! below the target is read again at most every [`RECHECK_BELOW`], so an
//! acquire succeeds again within that time of a replica reattaching.

use std::time::{Duration, Instant};

use redis::Value;

use super::Client;
use crate::budget::Budget;
use crate::error::Result;

/// How long a count below the target is trusted before it is read again.
const RECHECK_BELOW: Duration = Duration::from_secs(1);

/// A count read at `at` (`None`: the server would not say).
#[derive(Debug, Clone, Copy)]
pub(super) struct Replicas {
    count: Option<u32>,
    at: Instant,
}

impl Replicas {
    /// The count, if it can still be trusted for a target of `want`.
    fn trusted(self, want: u32, now: Instant) -> Option<Option<u32>> {
        match self.count {
            Some(n) if n < want && now.duration_since(self.at) >= RECHECK_BELOW => None,
            count => Some(count),
        }
    }
}

impl Client {
    /// The number of replicas connected to the master, as far as known for
    /// a target of `want` (read within `budget` when not); `None` when the
    /// server does not say (an ACL refusing `ROLE` and `INFO`) or on a
    /// Cluster (each master has its own).
    pub(crate) fn connected_replicas(
        &self,
        want: u32,
        budget: Budget,
        context: &str,
    ) -> Result<Option<u32>> {
        if self.is_cluster() {
            return Ok(None);
        }
        let epoch = {
            let idle = self.inner.pool.state();
            if let Some(known) = idle.replicas.and_then(|r| r.trusted(want, Instant::now())) {
                return Ok(known);
            }
            idle.epoch
        };
        let at = Instant::now();
        let count = self.run_within(budget, context, |c| {
            match redis::cmd("ROLE").query::<Value>(c) {
                Ok(role) => Ok(role_replicas(&role)),
                // Refused (an ACL without `@dangerous`, a proxy): ask INFO.
                Err(e) if e.code().is_some() => {
                    match redis::cmd("INFO").arg("replication").query::<String>(c) {
                        Ok(info) => Ok(info_replicas(&info)),
                        Err(e) if e.code().is_some() => Ok(None),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            }
        })?;
        let mut idle = self.inner.pool.state();
        if idle.epoch == epoch {
            idle.replicas = Some(Replicas { count, at });
        }
        Ok(count)
    }

    /// A `WAIT` confirmed fewer replicas than the count said: read it again
    /// before the next acquire.
    pub(crate) fn forget_replicas(&self) {
        self.inner.pool.state().replicas = None;
    }
}

/// The replicas a `ROLE` reply lists: its third element on a master; 0 on a
/// replica (it has none that count: it is not the master).
fn role_replicas(role: &Value) -> Option<u32> {
    let Value::Array(items) = role else {
        return None;
    };
    let kind = match items.first()? {
        Value::BulkString(b) => b.as_slice(),
        Value::SimpleString(s) => s.as_bytes(),
        _ => return None,
    };
    if kind != b"master" {
        return Some(0);
    }
    match items.get(2)? {
        Value::Array(replicas) => u32::try_from(replicas.len()).ok(),
        _ => None,
    }
}

/// `connected_slaves:<n>` of `INFO replication`.
fn info_replicas(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_from_role_and_info() {
        let master = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(100),
            Value::Array(vec![Value::Array(vec![]), Value::Array(vec![])]),
        ]);
        assert_eq!(role_replicas(&master), Some(2));
        let replica = Value::Array(vec![Value::BulkString(b"slave".to_vec())]);
        assert_eq!(role_replicas(&replica), Some(0));
        assert_eq!(role_replicas(&Value::Nil), None);
        assert_eq!(
            info_replicas("# Replication\r\nrole:master\r\nconnected_slaves:3\r\n"),
            Some(3)
        );
        assert_eq!(info_replicas("role:master"), None);
    }

    #[test]
    fn a_count_below_the_target_is_read_again_after_a_second() {
        let now = Instant::now();
        let low = Replicas {
            count: Some(0),
            at: now,
        };
        assert_eq!(low.trusted(1, now), Some(Some(0)));
        assert_eq!(low.trusted(1, now + RECHECK_BELOW), None);
        let enough = Replicas {
            count: Some(1),
            at: now,
        };
        assert_eq!(enough.trusted(1, now + RECHECK_BELOW * 60), Some(Some(1)));
    }
}
