//! One acquire of a [`Lock`](super::single::Lock): its scripted attempts, and
//! the wait between them that [`wait::wait_loop`] drives.

use std::time::Duration;

use super::{Abandon, Tried, acquire_call, leave_call, legacy};
use crate::client::Client;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::settle::Settlement;
use crate::wait::{self, Attempt, Leaving};

/// One acquire with `token` of the lock whose keys are `keys`.
pub(super) struct LockWaiter<'a> {
    pub client: &'a Client,
    pub keys: &'a LockKeys,
    /// `lock "name"`, for messages.
    pub label: &'a str,
    pub token: &'a str,
    /// The TTL of the hold it takes.
    pub ttl_ms: u64,
    pub fair: bool,
    /// The lease of its registration as a waiter.
    pub lease_ms: u64,
    /// Legacy interop is on: attempts respect legacy pollers' turns.
    pub legacy: bool,
}

impl LockWaiter<'_> {
    /// One run of the acquire script, registering as `waiter` while the
    /// lock is busy (`""`: not). With legacy interop on, a waiting attempt
    /// (and any attempt while this process knows of a turn) respects legacy
    /// pollers' turns.
    pub(super) fn attempt_as(&self, waiter: &str) -> Result<Tried> {
        let k = self.keys;
        let turn = self.legacy && (!waiter.is_empty() || legacy::is_open(&k.lock));
        acquire_call(
            k,
            self.token,
            self.ttl_ms,
            waiter,
            self.fair,
            self.lease_ms,
            turn,
        )
        .run(self.client, self.label)
    }
}

impl wait::Waiting for LockWaiter<'_> {
    type Output = i64;

    fn attempt(&self, waiter: &str) -> Result<Attempt<i64>> {
        Ok(match self.attempt_as(waiter)? {
            Tried::Acquired(f) => Attempt::Done(f),
            Tried::Busy(hint) => Attempt::Retry(hint),
        })
    }

    /// The release script handed the lock over, with this fencing token.
    fn granted(&self, fence: i64) -> Option<i64> {
        Some(fence)
    }

    fn leave(&self, waiter: &str, how: Leaving) -> Result<Option<i64>> {
        let give_back = matches!(how, Leaving::Abandoned);
        let call = leave_call(self.keys, waiter, self.token, self.ttl_ms, give_back);
        let reply: Vec<i64> = call.run(self.client, self.label)?;
        Ok(match reply.as_slice() {
            [1, fence] => Some(*fence),
            _ => None,
        })
    }

    /// Gives back what the token may hold (a hand-over to the waiter, an
    /// attempt whose reply was lost) and drops the registration.
    fn abandon(&self, waiter: &str) -> Option<Box<dyn Settlement>> {
        let until = Duration::from_millis(self.lease_ms + self.ttl_ms);
        Some(Box::new(Abandon::new(
            self.client,
            self.keys,
            self.label,
            self.token,
            Some(waiter),
            self.ttl_ms,
            until,
        )))
    }
}
