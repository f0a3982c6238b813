//! Leader and followers: a blocked waiter reads its link itself.
//!
//! Handed to the reader thread, a grant costs two thread wake-ups: the
//! reader's, then the waiter's (on a busy machine each may wait for a core).
//! So a blocked waiter whose link nobody reads takes the link's connection
//! and reads it itself (it *leads*): a grant for itself costs one wake-up,
//! and one for another waiter of the process is dispatched as the reader
//! would. The other blocked waiters park on their tickets (*followers*).
//! When the leader's wait ends it gives the lead up, offering it to the
//! oldest follower: waiters are served oldest first, so the next grant to
//! this process is most likely for that one.
//!
//! A waiter leads only while the link has nothing but reading to do, and in
//! slices (the interrupt slice, else [`READ_SLICE`]) so that it sees its
//! deadline and hook. Everything else stays the reader thread's (connecting
//! with backoff, subscribing, following a master change, trimming idle
//! connections, ending after [`LINGER`](super::LINGER)): a leader that finds
//! such work steps down, and the reader, which checks at least every
//! [`READ_SLICE`], does it. The reader reads the link itself when no waiter
//! can: a waiter called back by an event loop waits there, a subscription
//! is to be confirmed, or no blocked waiter came to read for a
//! [`READ_SLICE`] (grants for departed waiters are read within it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Hub, READ_SLICE, Status};
use crate::client::Client;
use crate::client::conn::Node;
use crate::error::Result;
use crate::wait::interrupt::{INTERRUPT_SLICE, Interrupt};
use crate::wait::ticket::Ticket;

impl Hub {
    /// Waits until `ticket` has an event (`Ok(true)`) or `until` passes
    /// (`Ok(false)`), leading its link when it can (see the module docs) and
    /// consulting `interrupt` every [`INTERRUPT_SLICE`] (its error ends the
    /// wait).
    pub(crate) fn wait(
        &self,
        client: &Client,
        ticket: &Ticket,
        until: Option<Instant>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        let slice = match interrupt {
            Some(_) => INTERRUPT_SLICE,
            None => READ_SLICE,
        };
        loop {
            if ticket.pending() {
                return Ok(true);
            }
            let now = Instant::now();
            let end = match until {
                Some(u) if u <= now => return Ok(false),
                Some(u) => u.min(now + slice),
                None => now + slice,
            };
            if !self.lead(client, ticket, end) {
                let parked = self.park(ticket);
                ticket.park(end);
                if let Some(seq) = parked {
                    self.unpark(ticket, seq);
                }
            }
            if !ticket.pending()
                && let Some(check) = interrupt
            {
                check()?;
            }
        }
    }

    /// Reads the link of `ticket` until the ticket has an event, `end`
    /// passes or the link needs its reader; `false` when it could not lead.
    fn lead(&self, client: &Client, ticket: &Ticket, end: Instant) -> bool {
        let Some(node) = self.placed(ticket) else {
            return false;
        };
        let Some(slot) = self.state().links.get(&node).map(|l| l.slot.clone()) else {
            return false;
        };
        let Ok(mut guard) = slot.try_lock() else {
            return false;
        };
        if !self.take_lead(client, &node, guard.conn.is_some()) {
            return false;
        }
        loop {
            if ticket.pending() || !self.may_read(client, &node) {
                break;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let value = {
                // A signal must not cut a frame in two (see signals.rs): it
                // is handled when the slice ends.
                let _signals = crate::signals::Deferred::new();
                self.read_slot(
                    client,
                    &node,
                    &mut guard,
                    left.max(Duration::from_millis(1)),
                )
            };
            if let Some(value) = value {
                self.handle(client, &node, value);
            }
        }
        drop(guard);
        self.step_down(&node);
        true
    }

    /// The link `ticket` is placed on.
    fn placed(&self, ticket: &Ticket) -> Option<Option<Node>> {
        match self.state().entries.get(ticket.id()) {
            Some(super::Entry::Waiting {
                place: Some((node, _)),
                ..
            }) => Some(node.clone()),
            _ => None,
        }
    }

    /// Whether the link to `node` has nothing to do but be read (connected,
    /// every channel sent, the master unchanged).
    fn may_read(&self, client: &Client, node: &Option<Node>) -> bool {
        let epoch = client.epoch();
        let st = self.state();
        st.links.get(node).is_some_and(|l| {
            l.reader
                && l.connected
                && (self.cluster || l.epoch >= epoch)
                && !l.channels.values().any(|s| *s == Status::Unsent)
        })
    }

    /// Marks the link to `node` led, if nobody leads it and it may be read.
    fn take_lead(&self, client: &Client, node: &Option<Node>, open: bool) -> bool {
        if !open || !self.may_read(client, node) {
            return false;
        }
        let mut st = self.state();
        match st.links.get_mut(node) {
            Some(l) if !l.leading => {
                l.leading = true;
                true
            }
            _ => false,
        }
    }

    /// The leader of `node`'s link stops reading: the oldest follower is
    /// offered the lead, and the reader told.
    fn step_down(&self, node: &Option<Node>) {
        let mut st = self.state();
        let next = st.links.get_mut(node).and_then(|l| {
            l.leading = false;
            l.led_at = Some(Instant::now());
            l.parked.values().next().cloned()
        });
        drop(st);
        if let Some(t) = next {
            t.offer();
        }
        self.changed.notify_all();
    }

    /// Parks `ticket` on its link as a follower; its age, to unpark it.
    fn park(&self, ticket: &Ticket) -> Option<u64> {
        let mut st = self.state();
        let (node, seq) = match st.entries.get(ticket.id()) {
            Some(super::Entry::Waiting {
                place: Some((node, _)),
                seq,
                ..
            }) => (node.clone(), *seq),
            _ => return None,
        };
        let link = st.links.get_mut(&node)?;
        link.parked.insert(seq, ticket.inner.clone());
        Some(seq)
    }

    /// Takes `ticket` (parked at age `seq`) off its link's followers.
    fn unpark(&self, ticket: &Ticket, seq: u64) {
        let mut st = self.state();
        for link in st.links.values_mut() {
            if link
                .parked
                .get(&seq)
                .is_some_and(|t| Arc::ptr_eq(t, &ticket.inner))
            {
                link.parked.remove(&seq);
            }
        }
    }

    /// `Some(pause)` when the reader of `node`'s link should leave it to
    /// the waiters for up to `pause` (see the module docs); `None` when it
    /// has work to do or reads itself.
    pub(super) fn stand_aside(&self, node: &Option<Node>, epoch: u64) -> Option<Duration> {
        let mut st = self.state();
        // What `next_task` does on every turn, which a reader standing aside
        // does not reach.
        st.purge();
        let link = st.links.get(node)?;
        if !link.connected
            || (!self.cluster && link.epoch < epoch)
            || link.channels.values().any(|s| *s != Status::Confirmed)
        {
            return None;
        }
        if link.leading {
            return Some(READ_SLICE);
        }
        if let Some(t) = link.parked.values().next() {
            t.offer();
            return Some(READ_SLICE);
        }
        let called_back = st.entries.values().any(|e| {
            matches!(e, super::Entry::Waiting { ticket, place: Some((n, _)), .. }
                if n == node && ticket.called_back())
        });
        if called_back {
            return None;
        }
        link.led_at
            .map(|t| READ_SLICE.saturating_sub(t.elapsed()))
            .filter(|d| !d.is_zero())
    }

    /// The reader waits up to `pause`, or until the links change.
    pub(super) fn rest(&self, pause: Duration) {
        let st = self.state();
        let _ = self.changed.wait_timeout(st, pause);
    }
}
