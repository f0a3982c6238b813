//! Calls whose reply was lost (faults-design §3): the outcome of a take,
//! ack, nack or touch is unknown when the round trip failed after the
//! command was sent ([`Error::outcome_unknown`]).
//!
//! - A **take** (pop, reserve, the worker's finish-and-reserve) carries a
//!   request id, and the script records what it took under it. While the
//!   caller still waits, the same call is sent again: the record answers it
//!   (the tasks it took, the finish it did), or the take runs then. When the
//!   caller's time is up, the take is given up ([`GiveUpTake`], run by the
//!   keeper once the server answers): the tasks go back as they were, and a
//!   tombstone keeps the take, should it still arrive, from doing anything.
//! - An **ack or nack** is idempotent by its receipt: sent again within the
//!   call's time; a retry that finds the reservation gone while it was still
//!   valid when the first was sent reports the first one's success. Out of
//!   time, the keeper sends it again once the server answers ([`Resend`]):
//!   a reservation that ended meanwhile is left alone by the receipt check.
//!
//! [`Error::outcome_unknown`]: crate::Error::outcome_unknown

use std::time::{Duration, Instant};

use redis::Value;

use crate::budget::Budget;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::scripts::{Call, QUEUE_SETTLE};
use crate::settle::Settlement;

/// How long a take's record lives (the script's `PX`): after that a late
/// take cannot arrive any more, and nothing is left to give up.
pub(super) const RECORD_TTL: Duration = Duration::from_secs(300);

/// First pause between two sends of a take whose reply was lost (doubling).
const RESEND_PAUSE: Duration = Duration::from_millis(50);

/// Longest pause between two sends.
const RESEND_PAUSE_MAX: Duration = Duration::from_secs(1);

/// The pause before the `n`-th resend (0-based).
pub(super) fn resend_pause(n: u32) -> Duration {
    RESEND_PAUSE
        .saturating_mul(1 << n.min(10))
        .min(RESEND_PAUSE_MAX)
}

/// A take given up: its tasks back, its record a tombstone
/// (`queue_settle`). Idempotent.
pub(super) struct GiveUpTake {
    pub client: Client,
    /// The queue's ten task keys and the take's record key.
    pub keys: Vec<Vec<u8>>,
    pub rid: String,
    pub channel: Vec<u8>,
    pub horizon: Instant,
    pub label: String,
}

impl Settlement for GiveUpTake {
    fn settle(&self, budget: Budget) -> Result<()> {
        let keys: Vec<&[u8]> = self.keys.iter().map(Vec::as_slice).collect();
        let call = QUEUE_SETTLE.call(&keys).arg(&self.rid).arg(&self.channel);
        self.client
            .run_within(budget, &self.label, |c| call.query::<i64>(c))
            .map(drop)
    }

    fn horizon(&self) -> Instant {
        self.horizon
    }

    fn describe(&self) -> String {
        format!("take {} of {}", self.rid, self.label)
    }

    fn client_id(&self) -> *const () {
        self.client.pool_id()
    }
}

/// An ack or nack sent again once the server answers (its receipt check
/// makes a second one harmless).
pub(super) struct Resend {
    pub client: Client,
    pub call: Call,
    pub what: &'static str,
    pub horizon: Instant,
    pub label: String,
}

impl Settlement for Resend {
    fn settle(&self, budget: Budget) -> Result<()> {
        let reply: Value = self
            .client
            .run_within(budget, &self.label, |c| self.call.query(c))?;
        // A nack waits while a legacy client holds the queue lock: {-1, pttl}.
        match reply {
            Value::Array(v) if matches!(v.first(), Some(Value::Int(-1))) => Err(Error::new(
                ErrorKind::QueueLocked,
                format!("{}: a legacy client holds the queue lock", self.label),
            )),
            _ => Ok(()),
        }
    }

    fn horizon(&self) -> Instant {
        self.horizon
    }

    fn describe(&self) -> String {
        format!("{} of {}", self.what, self.label)
    }

    fn client_id(&self) -> *const () {
        self.client.pool_id()
    }
}

/// A budget already spent: a settlement handed to the keeper at once (the
/// caller's own time is up).
pub(super) fn no_time() -> Budget {
    Budget::until(Instant::now())
}
