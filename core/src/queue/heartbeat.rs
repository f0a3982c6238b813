//! Keeping reservations alive in the background: the watchdog (one thread
//! per process, batched per server) touches each reservation every third
//! of its visibility until its [`Heartbeat`] is dropped.

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::keys::QueueKeys;
use crate::scripts::{Call, QUEUE_TOUCH};
use crate::watchdog::{self, Lease, Renew};

/// What the watchdog renews for a reservation: its receipt-checked touch.
struct TouchReservation {
    inflight: Vec<u8>,
    receipts: Vec<u8>,
    id: Vec<u8>,
    rid: String,
}

impl Renew for TouchReservation {
    fn call(&self, _client: &Client, ttl_ms: u64) -> Call {
        touch_call(&self.inflight, &self.receipts, &self.id, &self.rid, ttl_ms)
    }
}

/// The touch script's call: the reservation of `id` by `rid` now ends
/// `visibility_ms` from now; it answers 1, or 0 when it is not `rid`'s.
pub(super) fn touch_call(
    inflight: &[u8],
    receipts: &[u8],
    id: &[u8],
    rid: &str,
    visibility_ms: u64,
) -> Call {
    QUEUE_TOUCH
        .call(&[inflight, receipts])
        .arg(id)
        .arg(rid)
        .arg(visibility_ms)
}

/// Keeps one reservation alive while it exists (see
/// [`Queue::keep_alive`](super::Queue::keep_alive)).
pub struct Heartbeat {
    lease: Arc<Lease>,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat")
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Heartbeat {
    /// True once a touch found the reservation gone (it expired and went
    /// back to the queue, or was acked elsewhere), or no touch succeeded
    /// within its visibility.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Stops renewing (as dropping it does).
    pub fn stop(&self) {
        watchdog::unregister(&self.lease);
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts touching the reservation of `id` by `rid` every third of
/// `visibility` (the first a third from now).
pub(super) fn start(
    client: &Client,
    keys: &QueueKeys,
    id: &[u8],
    rid: &str,
    visibility: Duration,
) -> Heartbeat {
    let renew = Box::new(TouchReservation {
        inflight: keys.inflight.clone(),
        receipts: keys.receipts.clone(),
        id: id.to_vec(),
        rid: rid.to_owned(),
    });
    let lease = Lease::new(client.clone(), renew, visibility);
    watchdog::register(lease.clone());
    Heartbeat { lease }
}
