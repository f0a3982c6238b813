//! Waiting without polling.
//!
//! # Why pub/sub on a per-waiter channel
//!
//! A blocked caller (a lock acquire, a `pop(wait=…)`) registers in a sorted set
//! of waiters and listens on a channel of its own. Whoever makes progress
//! possible (a release, an enqueue) wakes the oldest waiter with one `PUBLISH`
//! to that one channel, inside the same script: O(1) Redis work per release
//! however many wait, and no thundering herd. The alternatives were weighed:
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
//! attempt, so any release after that attempt finds it listening. `PUBLISH`
//! returns how many clients heard the message; 0 means the waiter's
//! connection is gone (its process died) and the script drops it and wakes the
//! next one: dead waiters never stall the line. A waiter that is alive but
//! stuck (stopped process) is dropped when its lease runs out (it renews the
//! lease at every re-check).
//!
//! While waiting, the caller re-checks at least every `recheck` interval (and
//! exactly when the holder's TTL runs out, so a crashed holder's lock is taken
//! as soon as it expires). Those re-checks are the only Redis traffic of an
//! idle waiter; a release is noticed within the time of one PUBLISH.

use std::time::{Duration, Instant};

use crate::client::{Client, Subscriber};
use crate::error::{Error, ErrorKind, Result};

/// Default longest interval between two re-checks of a waiting caller.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(1);

/// How often an interrupt hook is consulted while waiting.
pub const INTERRUPT_SLICE: Duration = Duration::from_millis(50);

/// A caller-supplied check run while waiting; an `Err` aborts the wait with that
/// error (the Python binding raises `KeyboardInterrupt` through it).
pub type Interrupt<'a> = &'a (dyn Fn() -> Result<()> + 'a);

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

/// Runs `attempt` until it is done, the deadline passes (→ `Ok(None)`), or the
/// interrupt hook fails. Between attempts it listens on
/// `channel_prefix + waiter_id` (subscribed on the node serving `node_key`).
/// `leave` runs when giving up, to deregister the waiter.
pub(crate) fn wait_loop<T>(
    client: &Client,
    node_key: &[u8],
    channel_prefix: &[u8],
    spec: WaitSpec<'_>,
    mut attempt: impl FnMut(&str) -> Result<Attempt<T>>,
    leave: impl Fn(&str) -> Result<()>,
) -> Result<Option<T>> {
    let waiter_id = crate::new_token();
    let mut channel = channel_prefix.to_vec();
    channel.extend_from_slice(waiter_id.as_bytes());
    let context = "waiting";
    let mut sub: Subscriber = client.checkout_subscriber(node_key)?;
    let outcome = {
        let mut pubsub = sub.conn.as_pubsub();
        let subscribed = pubsub
            .subscribe(&channel)
            .map_err(|e| Error::from_redis(context, e));
        let outcome = match subscribed {
            Err(e) => Err(e),
            Ok(()) => run(&mut pubsub, spec, &waiter_id, &mut attempt),
        };
        // Dropping the PubSub view unsubscribes and reads the confirmations:
        // give it the full command timeout, not what is left of a slice.
        let _ = pubsub.set_read_timeout(Some(client.command_timeout()));
        outcome
    };
    match &outcome {
        Ok(Some(_)) => {}
        // Gave up or failed: deregister (best effort; the lease expires anyway).
        _ => {
            let _ = leave(&waiter_id);
        }
    }
    if outcome.is_ok() {
        client.checkin_subscriber(sub);
    }
    outcome
}

fn run<T>(
    pubsub: &mut redis::PubSub<'_>,
    spec: WaitSpec<'_>,
    waiter_id: &str,
    attempt: &mut impl FnMut(&str) -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    loop {
        if let Some(check) = spec.interrupt {
            check()?;
        }
        let hint = match attempt(waiter_id)? {
            Attempt::Done(v) => return Ok(Some(v)),
            Attempt::Retry(hint) => hint,
        };
        let mut pause = spec.recheck;
        if let Some(h) = hint {
            pause = pause.min(h);
        }
        if let Some(deadline) = spec.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            pause = pause.min(left);
        }
        listen(pubsub, pause, spec.interrupt)?;
    }
}

/// Waits up to `pause` for a message on the subscribed channel, consulting
/// `interrupt` every [`INTERRUPT_SLICE`]. Returns on a message or at the end
/// of the pause; only the interrupt hook or a broken connection are errors.
fn listen(
    pubsub: &mut redis::PubSub<'_>,
    pause: Duration,
    interrupt: Option<Interrupt<'_>>,
) -> Result<()> {
    let until = Instant::now() + pause;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let slice = match interrupt {
            Some(_) => left.min(INTERRUPT_SLICE),
            None => left,
        };
        pubsub
            .set_read_timeout(Some(slice.max(Duration::from_millis(1))))
            .map_err(|e| Error::from_redis("waiting", e))?;
        match pubsub.get_message() {
            Ok(_) => return Ok(()),
            // A slice ended, or a signal interrupted the read (EINTR): the
            // subscription is intact; let the hook decide whether to go on.
            Err(e) if e.is_timeout() || is_eintr(&e) => {
                if let Some(check) = interrupt {
                    check()?;
                }
            }
            Err(e) => return Err(Error::from_redis("waiting", e)),
        }
    }
}

/// A read interrupted by a signal. The `redis` crate keeps the `io::Error`
/// private, so recognise it by its text (`Interrupted system call (os error 4)`).
fn is_eintr(e: &redis::RedisError) -> bool {
    let eintr = std::io::Error::from(std::io::ErrorKind::Interrupted).to_string();
    e.is_io_error() && (e.to_string().contains("os error 4") || e.to_string().contains(&eintr))
}

/// Sleeps up to `pause` in slices, consulting `interrupt` (used where no
/// notification exists: a legacy client's queue lock is released by DEL).
pub(crate) fn pause(pause: Duration, interrupt: Option<Interrupt<'_>>) -> Result<()> {
    let until = Instant::now() + pause;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(INTERRUPT_SLICE));
        if let Some(check) = interrupt {
            check()?;
        }
    }
}

/// The error a wait hook should return to abort a wait.
pub fn interrupted(what: &str) -> Error {
    Error::new(ErrorKind::Interrupted, format!("{what}: interrupted"))
}
