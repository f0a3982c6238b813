//! One acquire of a [`Lock`](super::single::Lock): its scripted attempts, and
//! the wait between them that [`wait::wait_loop`] drives.

use std::cell::Cell;
use std::time::Instant;

use super::{Tried, full_acquire_call, leave_call};
use crate::budget::Budget;
use crate::client::Client;
use crate::client::conn::Conn;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::wait::{self, Attempt, Leaving};

/// What the round trips of one acquire leave for the lock to know.
#[derive(Default)]
pub(super) struct Trail {
    /// A round trip failed after sending (its outcome is unknown): the token
    /// may hold the lock although the acquire did not learn it.
    pub unsure: Cell<bool>,
    /// When the last attempt that got a reply was sent: a hold granted
    /// after it (by a hand-over message) was written after that instant.
    pub sent: Cell<Option<Instant>>,
}

impl Trail {
    /// Runs `op` on a connection of `client` within `budget` (see
    /// [`Client::run_noting`]), noting when it was sent (if it got a reply)
    /// or that its outcome is unknown (or that a try before the one that
    /// answered may have run).
    pub(super) fn run<T>(
        &self,
        client: &Client,
        budget: Budget,
        context: &str,
        op: impl FnMut(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let sent = Instant::now();
        let result = client.run_noting(budget, context, &self.unsure, op);
        match &result {
            Ok(_) => self.sent.set(Some(sent)),
            Err(e) if e.outcome_unknown() => self.unsure.set(true),
            Err(_) => {}
        }
        result
    }
}

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
    /// The acquire call's time: no round trip goes past it.
    pub budget: Budget,
    pub trail: &'a Trail,
}

impl LockWaiter<'_> {
    /// One run of the acquire script's full form, registering as `waiter`
    /// while the lock is busy (`""`: not).
    pub(super) fn attempt_as(&self, waiter: &str) -> Result<Tried> {
        let k = self.keys;
        let call = full_acquire_call(k, self.token, self.ttl_ms, waiter, self.fair, self.lease_ms);
        self.trail
            .run(self.client, self.budget, self.label, |c| call.query(c))
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

    /// The release script handed the lock over: `g:<fencing token>`.
    fn granted(&self, message: &[u8]) -> Option<i64> {
        std::str::from_utf8(message.strip_prefix(b"g:")?)
            .ok()?
            .parse()
            .ok()
    }

    fn leave(&self, waiter: &str, how: Leaving) -> Result<Option<i64>> {
        let give_back = matches!(how, Leaving::Abandoned);
        let call = leave_call(self.keys, waiter, self.token, self.ttl_ms, give_back);
        // Not noted as sent: a hold it finds was granted before it ran,
        // after the last attempt (which the hold's validity counts from).
        let reply: Vec<i64> = self
            .client
            .run_noting(self.budget, self.label, &self.trail.unsure, |c| {
                call.query(c)
            })
            .inspect_err(|e| {
                if e.outcome_unknown() {
                    self.trail.unsure.set(true);
                }
            })?;
        Ok(match reply.as_slice() {
            [1, fence] => Some(*fence),
            _ => None,
        })
    }
}
