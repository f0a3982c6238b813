//! Waiting without polling.
//!
//! # Why pub/sub on a per-waiter channel
//!
//! A blocked caller (a lock acquire, a `pop(wait=…)`) registers in a sorted set
//! of waiters and listens on a channel of its own. Whoever makes progress
//! possible acts on the oldest waiter inside the same script: a lock release
//! *hands the lock over* (sets the key to that waiter's token) and publishes
//! `g:<fencing token>` to it, so the waiter owns the lock the moment it reads
//! the message; an enqueue publishes a plain wake-up. One PUBLISH to one
//! subscriber: O(1) Redis work per release however many wait, and no
//! thundering herd. The alternatives were weighed:
//!
//! - one shared channel per lock wakes every waiter on every release (herd);
//! - `BLPOP` on a per-waiter list cannot be interrupted client-side with the
//!   `redis` crate's blocking connection (a read timeout desynchronises the
//!   reply stream), so Ctrl-C would have to wait for the server-side timeout;
//!   a subscribed connection can be read in short slices instead, checking for
//!   Ctrl-C / cancellation between slices without sending anything to Redis;
//! - keyspace notifications need server configuration we cannot assume.
//!
//! No wake-up is lost: the waiter subscribes *before* its registering
//! attempt, so any release after that attempt finds it listening. A waiter is
//! live when its subscription exists on the node running the script (`PUBSUB
//! NUMSUB` before a hand-over, PUBLISH's receiver count for wake-ups); a
//! waiter whose connection is gone (its process died) is dropped and the next
//! one served: dead waiters never stall the line. A waiter that is alive but
//! stuck (stopped process) is dropped when its lease runs out (it renews the
//! lease at every re-check). After a failover or a slot migration a waiter
//! notices at its next re-check that it listens in the wrong place and
//! subscribes again; a waiter whose subscription connection breaks (a
//! proxy's idle cut, CLIENT KILL, a crashed master) subscribes again at once,
//! and gives up only if it cannot.
//!
//! While waiting, the caller re-checks at least every `recheck` interval (and
//! exactly when the holder's TTL runs out, so a crashed holder's lock is taken
//! as soon as it expires). Those re-checks are the only Redis traffic of an
//! idle waiter; a release is noticed within the time of one PUBLISH.
//!
//! # The rooms
//!
//! This file holds the loop and the `Waiting` trait, the boundary with
//! what waits (a lock's acquire, a queue's take); `listen.rs` the
//! subscription a waiter listens on; `interrupt.rs` how a wait stays
//! interruptible.

mod interrupt;
mod listen;

use std::time::{Duration, Instant};

pub(crate) use self::interrupt::pause;
pub use self::interrupt::{INTERRUPT_SLICE, Interrupt, interrupted};
pub(crate) use self::listen::{listen, subscribed};
use crate::client::Client;
use crate::client::subscriber::Subscriber;
use crate::error::{Error, Result};
use crate::keys::new_token;

/// Default longest interval between two re-checks of a waiting caller.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(1);

/// How many broken subscriptions one wait replaces before it gives up with
/// the last error (a server that keeps closing them is not worth hammering).
const MAX_BROKEN_SUBSCRIPTIONS: u32 = 8;

/// How long a blocking call may wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wait {
    /// One attempt, no waiting.
    Try,
    /// Wait up to this long.
    For(Duration),
    /// Wait until it succeeds (or is interrupted).
    Forever,
}

impl Wait {
    /// `None` → forever, `Some(0)` → try once, `Some(t)` → up to `t` seconds.
    /// Rejects negative, NaN, infinite and absurdly large values.
    pub fn from_secs(timeout: Option<f64>, what: &str) -> Result<Self> {
        match timeout {
            None => Ok(Wait::Forever),
            Some(t) => {
                let d = crate::validate::seconds(t, what, true)?;
                Ok(if d.is_zero() { Wait::Try } else { Wait::For(d) })
            }
        }
    }

    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::For(d) => Some(Instant::now() + d),
            _ => None,
        }
    }
}

/// Options of a wait loop.
#[derive(Clone, Copy)]
pub(crate) struct WaitSpec<'a> {
    /// Give up at this instant (`None`: never).
    pub deadline: Option<Instant>,
    /// Longest interval between re-checks.
    pub recheck: Duration,
    /// Consulted every [`INTERRUPT_SLICE`] while waiting.
    pub interrupt: Option<Interrupt<'a>>,
    /// What waits (`lock "name"`), for error messages.
    pub label: &'a str,
}

/// What an attempt concluded.
pub(crate) enum Attempt<T> {
    /// Done: stop waiting with this value.
    Done(T),
    /// Not yet: wait for a wake-up, but re-check after at most this long.
    Retry(Option<Duration>),
}

/// Lease of a waiter registration, from the re-check interval: a waiter that
/// misses three re-checks in a row is considered gone.
pub(crate) fn lease_for(recheck: Duration) -> Duration {
    recheck * 3 + Duration::from_millis(500)
}

/// How a wait ends for the waiter's registration.
pub(crate) enum Leaving {
    /// The deadline passed: keep the object if it was handed over meanwhile.
    TimedOut,
    /// Interrupted or failed: give back anything handed over meanwhile.
    Abandoned,
}

/// The steps of one waiter, supplied by the lock or queue being waited on.
pub(crate) trait Waiting {
    /// What a successful wait yields.
    type Output;
    /// One attempt, registering as `waiter` when it cannot succeed now.
    fn attempt(&self, waiter: &str) -> Result<Attempt<Self::Output>>;
    /// A message on the waiter's channel that completes the wait by itself
    /// (a lock handed over), or `None` for a plain wake-up.
    fn granted(&self, message: &[u8]) -> Option<Self::Output>;
    /// Deregisters `waiter`; `Some` when it turns out the wait succeeded.
    fn leave(&self, waiter: &str, how: Leaving) -> Result<Option<Self::Output>>;
}

/// A waiter that is only ever woken (never handed the result by a message):
/// queue consumers, whose wake-up means "try again".
pub(crate) struct WakeOnly<A, L> {
    /// One attempt.
    pub attempt: A,
    /// Deregistration.
    pub leave: L,
}

impl<T, A, L> Waiting for WakeOnly<A, L>
where
    A: Fn(&str) -> Result<Attempt<T>>,
    L: Fn(&str) -> Result<()>,
{
    type Output = T;

    fn attempt(&self, waiter: &str) -> Result<Attempt<T>> {
        (self.attempt)(waiter)
    }

    fn granted(&self, _message: &[u8]) -> Option<T> {
        None
    }

    fn leave(&self, waiter: &str, _how: Leaving) -> Result<Option<T>> {
        (self.leave)(waiter).map(|()| None)
    }
}

/// Runs `w.attempt` until it succeeds, a message grants success, the
/// deadline passes (→ `Ok(None)`), or the interrupt hook fails. Between
/// attempts it listens on `channel_prefix + waiter_id`, subscribed on the
/// node serving `node_key` before the first registering attempt.
/// A wait the hook interrupted fails with [`interrupted`]`(spec.label)`.
pub(crate) fn wait_loop<W: Waiting>(
    client: &Client,
    node_key: &[u8],
    channel_prefix: &[u8],
    spec: WaitSpec<'_>,
    w: &W,
) -> Result<Option<W::Output>> {
    let label = spec.label;
    subscribed_loop(client, node_key, channel_prefix, spec, w).map_err(|e| {
        if e.is_interrupted() {
            interrupted(label)
        } else {
            e
        }
    })
}

/// [`wait_loop`], whose errors name the server waited on.
fn subscribed_loop<W: Waiting>(
    client: &Client,
    node_key: &[u8],
    channel_prefix: &[u8],
    spec: WaitSpec<'_>,
    w: &W,
) -> Result<Option<W::Output>> {
    let context = format!("{}: waiting on {}", spec.label, client.redacted_url());
    let spec = WaitSpec {
        label: &context,
        ..spec
    };
    let mut broken = 0;
    loop {
        let waiter_id = new_token();
        let mut channel = channel_prefix.to_vec();
        channel.extend_from_slice(waiter_id.as_bytes());
        let mut sub = subscribed(client, node_key, &channel, &context)?;
        let outcome = run(client, &mut sub, node_key, &channel, spec, &waiter_id, w);
        let outcome = match outcome {
            Ok(Step::Done(v)) => {
                // Success: our registration is gone (the script that granted
                // or served us removed it), so the subscription can wait for
                // the next user of the connection to drop it.
                sub.leftover = Some(channel);
                client.checkin_subscriber(sub);
                return Ok(Some(v));
            }
            // Timed out: deregister; a hand-over that raced the deadline counts.
            Ok(Step::TimedOut) => w.leave(&waiter_id, Leaving::TimedOut),
            Ok(Step::Broken(e)) if broken >= MAX_BROKEN_SUBSCRIPTIONS => {
                let _ = w.leave(&waiter_id, Leaving::Abandoned);
                Err(e)
            }
            // The subscription is on a node that no longer serves the key, or
            // it broke: deregister and start over with a new subscription.
            Ok(step @ (Step::Resubscribe | Step::Broken(_))) => {
                match w.leave(&waiter_id, Leaving::TimedOut) {
                    Ok(Some(v)) => Ok(Some(v)),
                    Ok(None) => {
                        if matches!(step, Step::Broken(_)) {
                            broken += 1;
                        }
                        let _ = sub.conn.unsubscribe_resp3(&channel);
                        continue;
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => {
                // Best effort: the lease expires anyway if this fails too.
                let _ = w.leave(&waiter_id, Leaving::Abandoned);
                Err(e)
            }
        };
        // Unsubscribe without waiting for the confirmation: the next user of
        // the connection skips it. A connection that cannot even send this is
        // dropped.
        if sub.conn.unsubscribe_resp3(&channel).is_ok() {
            client.checkin_subscriber(sub);
        }
        return outcome;
    }
}

/// How one subscription's wait ended.
enum Step<T> {
    Done(T),
    TimedOut,
    /// It listens on a node that no longer serves the key.
    Resubscribe,
    /// Its connection broke (this error).
    Broken(Error),
}

fn run<W: Waiting>(
    client: &Client,
    sub: &mut Subscriber,
    node_key: &[u8],
    channel: &[u8],
    spec: WaitSpec<'_>,
    waiter_id: &str,
    w: &W,
) -> Result<Step<W::Output>> {
    let mut first = true;
    loop {
        if let Some(check) = spec.interrupt {
            check()?;
        }
        if !first && !client.subscriber_is_current(sub, node_key) {
            return Ok(Step::Resubscribe);
        }
        first = false;
        let hint = match w.attempt(waiter_id)? {
            Attempt::Done(v) => return Ok(Step::Done(v)),
            Attempt::Retry(hint) => hint,
        };
        let mut pause = spec.recheck;
        if let Some(h) = hint {
            pause = pause.min(h);
        }
        if let Some(deadline) = spec.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Step::TimedOut);
            }
            pause = pause.min(left);
        }
        match listen(&mut sub.conn, channel, pause, spec.interrupt, spec.label) {
            Ok(Some(message)) => {
                if let Some(v) = w.granted(&message) {
                    return Ok(Step::Done(v));
                }
            }
            Ok(None) => {}
            Err(e) if e.is_interrupted() => return Err(e),
            // The subscription broke (a proxy's idle cut, CLIENT KILL, a
            // failover): nothing can have been granted since (a hand-over
            // needs a live subscription, and `leave` collects one made just
            // before), so subscribe again, on a new connection. If the server
            // is gone, that fails and ends the wait.
            Err(e) => return Ok(Step::Broken(e)),
        }
    }
}
