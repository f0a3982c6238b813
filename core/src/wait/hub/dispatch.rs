//! Handing each message to the waiter it names, and what a grant for a
//! waiter no longer waiting does (see also the module docs' "Waiters that
//! left").
//!
//! # Waits that ended with the lock
//!
//! When a wait ends with the lock (handed over, or found handed over, or
//! taken), the server drops its registration in the same script, so no
//! later grant names it. A server that lost that script's writes may still
//! have it: a replica promoted by a Sentinel failover (or a Cluster
//! failover) that the old master's last writes did not reach, or a server
//! restarted from an AOF without its last second. A release there (a
//! failover's replayed release, say) hands the lock to the registration,
//! for the token of a hold that may be over already: nobody takes the
//! grant, and the lock stays taken until its TTL (issue 26.4's failover
//! stall, seen in `test_a_graceful_failover_stalls_no_longer_than_the_switch`).
//!
//! So the hub keeps a *held* entry for such a waiter until its registration's
//! lease has run out, with the connection of its link the wait ended over
//! (the link's generation) and what gives the token's hold back (an
//! `Abandon` settlement). A grant for it that arrives over a later
//! connection, or on another link, was published after the wait ended (a
//! server sends a message only to the connections subscribed when it is
//! published), by a server that still had the registration: it is given
//! back. One over the same connection is the ordinary race of a grant with
//! its waiter's own successful attempt (the hold is the same): ignored.
//!
//! The hold a stale grant names may still be its owner's (taken on the old
//! master after the promotion, so the new one never had it): giving it back
//! leaves that owner no worse off than the failover did (its release reports
//! that the master changed), and frees the lock for the waiters at once.

use std::time::Instant;

use super::{Entry, Hub};
use crate::client::conn::Node;
use crate::settle::Settlement;
use crate::wait::ticket::{Event, Ticket};

/// At most this many held entries per hub: beyond, a wait that ends with
/// the lock is forgotten at once (as before held entries existed).
pub(super) const MAX_HELD: usize = 4096;

impl Hub {
    /// The wait of `ticket` ended with the lock: remembered until `until`
    /// (its registration's lease), with `settlement` to give a stale grant
    /// back (see the module docs).
    pub(crate) fn retire_held(
        &self,
        ticket: &Ticket,
        until: Instant,
        settlement: Box<dyn Settlement>,
    ) {
        let mut st = self.state();
        let node = match st.entries.get(ticket.id()) {
            Some(Entry::Waiting {
                place: Some((node, _)),
                ..
            }) => node.clone(),
            _ => None,
        };
        let generation = st.links.get(&node).map(|l| l.generation);
        st.unplace(ticket.id());
        if st.held >= MAX_HELD {
            st.purged = None;
            st.purge();
        }
        match generation {
            Some(generation) if st.held < MAX_HELD => {
                st.held += 1;
                st.entries.insert(
                    ticket.id().to_owned(),
                    Entry::Held {
                        until,
                        node,
                        generation,
                        settlement: Some(settlement),
                    },
                );
            }
            _ => {
                st.entries.remove(ticket.id());
            }
        }
    }

    /// Hands a message's payload, read on the link to `node`, to the
    /// waiter it names.
    pub(super) fn dispatch(&self, node: &Option<Node>, payload: &[u8]) {
        let Some((event, id)) = parse(payload) else {
            return;
        };
        let mut st = self.state();
        let generation = st.links.get(node).map_or(0, |l| l.generation);
        let target = match st.entries.get_mut(id) {
            Some(Entry::Waiting { ticket, .. }) => Some(ticket.clone()),
            Some(Entry::Departed { settlement, .. }) => {
                if matches!(event, Event::Granted(_))
                    && let Some(s) = settlement.take()
                {
                    crate::settle::defer(s);
                }
                None
            }
            Some(Entry::Held {
                node: n,
                generation: g,
                settlement,
                ..
            }) => {
                if matches!(event, Event::Granted(_))
                    && (n != node || generation > *g)
                    && let Some(s) = settlement.take()
                {
                    crate::settle::defer(s);
                }
                None
            }
            None => None,
        };
        drop(st);
        if let Some(ticket) = target {
            ticket.deliver(event);
        }
    }
}

/// `g:<id>:<fence>` → a grant; `w:<id>` → a wake-up; anything else (a
/// poke) → nothing.
fn parse(payload: &[u8]) -> Option<(Event, &str)> {
    let text = std::str::from_utf8(payload).ok()?;
    if let Some(rest) = text.strip_prefix("g:") {
        let (id, fence) = rest.split_once(':')?;
        return Some((Event::Granted(fence.parse().ok()?), id));
    }
    text.strip_prefix("w:").map(|id| (Event::Woken, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_waiter_and_what_happened() {
        assert_eq!(
            parse(b"g:abc:1763700000123456"),
            Some((Event::Granted(1_763_700_000_123_456), "abc"))
        );
        assert_eq!(parse(b"w:abc"), Some((Event::Woken, "abc")));
        assert_eq!(parse(b"n"), None);
        assert_eq!(parse(b"g:abc"), None);
        assert_eq!(parse(b"g:abc:x"), None);
        assert_eq!(parse(b"\xff"), None);
    }
}
