//! How many replicas the master has (for `min_replicas`): `INFO
//! replication`'s `connected_slaves`, cached per client. While the count is
//! below what a caller needs it is asked again at most every second (so a
//! replica that reattaches is seen within a second); otherwise every ten.
//! A failed `WAIT` forgets it, so the next caller asks.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Client;
use crate::error::Result;
use crate::sync::LockUnpoisoned;

/// How long a count below the target is trusted.
const SHORT: Duration = Duration::from_secs(1);

/// How long a count that met the target is trusted.
const LONG: Duration = Duration::from_secs(10);

/// Counts by client (pool identity), with when they were read.
static KNOWN: Mutex<Option<HashMap<usize, (u32, Instant)>>> = Mutex::new(None);

impl Client {
    /// The master's connected replicas (cached, see the module), for a
    /// caller that needs `want` of them.
    pub(crate) fn connected_replicas(&self, want: u32, context: &str) -> Result<u32> {
        let id = self.pool_id() as usize;
        if let Some((n, at)) = KNOWN.lock_unpoisoned().as_ref().and_then(|m| m.get(&id)) {
            let fresh_for = if *n >= want { LONG } else { SHORT };
            if at.elapsed() < fresh_for {
                return Ok(*n);
            }
        }
        let info: String = self.query(context, redis::cmd("INFO").arg("replication"))?;
        let n = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        KNOWN
            .lock_unpoisoned()
            .get_or_insert_with(HashMap::new)
            .insert(id, (n, Instant::now()));
        Ok(n)
    }

    /// A `WAIT` fell short: the next caller asks the master again.
    pub(crate) fn forget_replicas(&self) {
        if let Some(m) = KNOWN.lock_unpoisoned().as_mut() {
            m.remove(&(self.pool_id() as usize));
        }
    }
}
