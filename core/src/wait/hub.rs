//! The hub: one subscription connection per server for every wait of a
//! process.
//!
//! # What it holds
//!
//! A [`Hub`] belongs to one [`Client`] in one process (a forked child makes
//! its own: the pool forgets the parent's). It has an id (`p` or `s`, then
//! 16 hex digits) and, per server it listens on, a *link*: one RESP3
//! connection subscribed to the process's channel(s):
//!
//! - one server, or a Sentinel master: the plain channel `fl:w:<hub-id>`;
//! - a Cluster whose servers have sharded pub/sub (Redis 7): one sharded
//!   channel `{tag}fl:w:<hub-id>` per slot waited on (`tag` hashes to that
//!   slot, so the scripts of that slot can `SPUBLISH` to it), on the master
//!   serving the slot; where sharded pub/sub is missing, the plain channel on
//!   each master waited on.
//!
//! A waiter registers in a lock's or queue's waiter list as
//! `<hub-id>:<waiter-id>` (locks add `|ttl|token`); the scripts publish
//! `g:<waiter-id>:<fence>` (the lock was handed over) or `w:<waiter-id>`
//! (try again) to the channel of `<hub-id>`, after checking with `PUBSUB
//! NUMSUB` / `SHARDNUMSUB` that the hub listens on that server (a dead
//! process has no subscription; see `prelude.lua`). So a wait sends no
//! SUBSCRIBE of its own, and 500 waiting threads share one connection per
//! server.
//!
//! # The reader
//!
//! Each link is read by a thread of its own ("ferrolock-hub"), started by the
//! first wait that needs the link and ending after [`LINGER`] without
//! waiters (the connection is then closed). It dispatches each message by
//! waiter id to that waiter's [`Ticket`]. It reads in slices of
//! [`READ_SLICE`], between which it sends the subscriptions waiters asked
//! for, follows a Sentinel master change (the pool's epoch), and trims the
//! client's idle command connections. A waiter that needs a new sharded
//! channel on a link being read pokes the reader with an `SPUBLISH` of `n`
//! on a channel the link already holds, so it does not wait for the slice.
//!
//! # Faults and topology changes
//!
//! When the connection breaks (a restart, a proxy's idle cut, `CLIENT
//! KILL`), the reader reconnects with backoff (50 ms doubling to 1 s) as long
//! as anyone waits, subscribes again and then wakes every waiter of the link
//! with [`Event::Recheck`]: a grant made while the hub was away was either
//! never made (the script found no subscriber and dropped the waiter, who
//! registers again) or is found by the waiter's next attempt (the key holds
//! its token). A Sentinel master change reconnects the link to the new
//! master the same way. In a Cluster, the server unsubscribes a sharded
//! channel when its slot moves to another master (`sunsubscribe` push): the
//! waiters of that slot are woken to re-check, and each re-subscribes on the
//! new owner before its next registering attempt.
//!
//! # Waiters that left
//!
//! A waiter whose wait ended without a confirmed deregistration (the server
//! did not answer at the end) may still be in a waiter list, and a later
//! release may hand it the lock: a *departed* entry keeps what it would take
//! to give such a grant back (an `Abandon` settlement) until its lease has
//! run out, and a grant arriving for it is handed to the settlement keeper.
//! A waiter whose wait ended with the lock leaves a *held* entry for as
//! long: a grant for it that was published after the wait ended (it comes
//! over a later connection) was sent by a server that lost the end of the
//! wait (a promoted replica, a restarted server) and is given back; one
//! that raced the waiter's own successful attempt is ignored
//! (`hub/dispatch.rs`). Grants for ids the hub does not know are ignored.

mod dispatch;
mod reader;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::Value;

use super::ticket::{Shared, Ticket};
use crate::budget::Budget;
use crate::client::Client;
use crate::client::conn::Node;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{hub_channel, slot_of};
use crate::settle::Settlement;
use crate::sync::LockUnpoisoned;

/// How long a link's reader blocks in one read before it looks at what else
/// there is to do (subscriptions asked for, a master change, idle
/// connections to trim, no waiters left).
pub(crate) const READ_SLICE: Duration = Duration::from_millis(100);

/// How long a link stays open and read without any waiter.
pub(crate) const LINGER: Duration = Duration::from_secs(10);

/// The longest [`Hub::ensure`] waits for a subscription to be confirmed.
const ENSURE_WAIT: Duration = Duration::from_millis(500);

/// First pause of a reader that cannot reconnect; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// Longest pause between two reconnection attempts of a reader.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Read slices without a frame after which a link subscribing to one more
/// channel reconnects rather than send that many PINGs (see
/// [`Hub::send_subscribe`]).
const MAX_SKIPS: u64 = 2000;

/// The payload of a poke: read and ignored.
const POKE: &str = "n";

/// One process's subscriptions to one deployment (see the module docs).
pub(crate) struct Hub {
    id: String,
    /// One sharded channel per slot (Cluster with Redis 7), else one plain
    /// channel per server.
    sharded: bool,
    cluster: bool,
    state: Mutex<State>,
    /// Signalled when a link's subscriptions or errors change.
    changed: Condvar,
}

/// Where a waiter listens: the link (`None`: the server, or the Sentinel
/// master) and the channel on it (`Some(slot)`: sharded, `None`: plain).
type Place = (Option<Node>, Option<u16>);

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    links: HashMap<Option<Node>, Link>,
    /// When departed entries were last purged.
    purged: Option<Instant>,
    /// How many entries are [`Entry::Held`] (at most `dispatch::MAX_HELD`).
    held: usize,
}

enum Entry {
    /// A waiter in its wait, listening at `place` once it knows where.
    Waiting {
        ticket: Arc<Shared>,
        place: Option<Place>,
    },
    /// A waiter that left without a confirmed deregistration (see the
    /// module docs): until `until`, a grant for it is given back.
    Departed {
        until: Instant,
        settlement: Option<Box<dyn Settlement>>,
    },
    /// A waiter whose wait ended with the lock, over connection
    /// `generation` of link `node`: until `until`, a grant for it that
    /// arrives over a later connection is stale and given back (`hub/dispatch.rs`).
    Held {
        until: Instant,
        node: Option<Node>,
        generation: u64,
        settlement: Option<Box<dyn Settlement>>,
    },
}

/// What a link's channel is up to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    /// Wanted, not sent on the current connection yet.
    Unsent,
    /// Sent, not confirmed yet.
    Sent,
    /// Confirmed by the server.
    Confirmed,
}

#[derive(Default)]
struct Link {
    /// A reader thread runs (it owns the connection).
    reader: bool,
    /// A connection is open.
    connected: bool,
    /// The pool epoch the connection was made in (Sentinel: a master change
    /// moves it).
    epoch: u64,
    /// Channels wanted here and what the current connection did with them.
    channels: HashMap<Option<u16>, Status>,
    /// Channels confirmed at least once: confirming them again (after a
    /// reconnect) wakes their waiters to re-check.
    confirmed_before: HashSet<Option<u16>>,
    /// Waiters placed on this link.
    waiters: usize,
    /// Since when it has had no waiter.
    idle_since: Option<Instant>,
    /// Connections made so far (see [`Entry::Held`]).
    generation: u64,
    /// Failures to connect or subscribe, and the last one (kind, message).
    failures: u64,
    error: Option<(ErrorKind, String)>,
}

impl Link {
    /// A link nobody has used yet.
    fn idle() -> Self {
        Self {
            idle_since: Some(Instant::now()),
            ..Self::default()
        }
    }

    fn last_error(&self) -> Error {
        match &self.error {
            Some((kind, message)) => Error::new(*kind, message.clone()),
            None => Error::new(ErrorKind::Connection, "the subscription connection broke"),
        }
    }
}

/// What a reader does next.
enum Task {
    Exit,
    Connect(Vec<Option<u16>>),
    Subscribe(Vec<Option<u16>>),
    Read,
}

impl Client {
    /// The wait hub of this client in this process, made on first use. On
    /// a Cluster this asks a node once whether it has sharded pub/sub
    /// (Redis 7): with it, each slot waited on gets a channel of its own.
    pub(crate) fn hub(&self) -> Result<Arc<Hub>> {
        self.shared_by_waits(|| {
            let sharded = self.is_cluster() && self.has_sharded_pubsub()?;
            Ok(Hub::new(self.is_cluster(), sharded))
        })
    }

    /// Whether the servers know `SPUBLISH` (`COMMAND INFO` answers nil for
    /// a command they do not know).
    fn has_sharded_pubsub(&self) -> Result<bool> {
        let info: Vec<Value> = self.query(
            "sharded pub/sub",
            redis::cmd("COMMAND").arg("INFO").arg("SPUBLISH"),
        )?;
        Ok(matches!(info.first(), Some(Value::Array(_))))
    }
}

impl Hub {
    /// A hub with a fresh id, for a deployment with (`sharded`) or without
    /// one sharded channel per slot.
    pub(crate) fn new(cluster: bool, sharded: bool) -> Self {
        let mode = if sharded { 's' } else { 'p' };
        Self {
            id: format!("{mode}{}", &crate::keys::new_token()[..16]),
            sharded,
            cluster,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    /// `<hub-id>:<waiter-id>` of `ticket`.
    pub(crate) fn member(&self, ticket: &Ticket) -> String {
        format!("{}:{}", self.id, ticket.id())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }

    /// Where a waiter on `key` must listen.
    fn place_of(&self, client: &Client, key: &[u8]) -> Result<Place> {
        if !self.cluster {
            return Ok((None, None));
        }
        let node = client.pubsub_node(key)?;
        Ok((node, self.sharded.then(|| slot_of(key))))
    }

    /// Makes sure this process listens where grants and wake-ups for `key`
    /// are published, with `ticket` registered there: connects and
    /// subscribes if need be (through the link's reader), waiting for the
    /// confirmation within `budget` and at most [`ENSURE_WAIT`] (a waiter
    /// whose wait is interruptible backs off and asks again meanwhile; the
    /// reader goes on connecting). Call before each registering attempt: it
    /// costs no round trip when nothing changed.
    pub(crate) fn ensure(
        self: &Arc<Self>,
        client: &Client,
        key: &[u8],
        ticket: &Ticket,
        budget: Budget,
    ) -> Result<()> {
        let place = self.place_of(client, key)?;
        let epoch = client.epoch();
        let limit = budget.cap(ENSURE_WAIT);
        let until = Instant::now() + limit;
        let mut st = self.state();
        st.place(ticket, place.clone());
        let link = st.links.entry(place.0.clone()).or_insert_with(Link::idle);
        let status = *link.channels.entry(place.1).or_insert(Status::Unsent);
        let moved = !self.cluster && link.connected && link.epoch < epoch;
        if status == Status::Confirmed && link.connected && !moved {
            return Ok(());
        }
        let mut poke = None;
        if !link.reader {
            link.reader = true;
            let (hub, client, node) = (self.clone(), client.clone(), place.0.clone());
            let spawned = std::thread::Builder::new()
                .name("ferrolock-hub".into())
                .spawn(move || hub.read_link(&client, &node));
            if let Err(e) = spawned {
                link.reader = false;
                return Err(Error::new(
                    ErrorKind::Connection,
                    format!("cannot start the thread that listens for wake-ups: {e}"),
                ));
            }
        } else if self.sharded && link.connected && status == Status::Unsent {
            // The reader is blocked in a read: poke it through a channel
            // this link already holds.
            poke = link
                .channels
                .iter()
                .find(|(_, s)| **s == Status::Confirmed)
                .and_then(|(slot, _)| *slot)
                .map(|slot| hub_channel(Some(slot), &self.id));
        }
        let failures = link.failures;
        drop(st);
        if let Some(channel) = poke {
            // Best effort: without it the reader looks within READ_SLICE.
            let _ = client.run_within(
                Budget::one_call(client.command_timeout()).min(budget),
                "poking the wake-up listener",
                |c| {
                    redis::cmd("SPUBLISH")
                        .arg(&channel)
                        .arg(POKE)
                        .query::<i64>(c)
                },
            );
        }
        let mut st = self.state();
        loop {
            let Some(link) = st.links.get(&place.0) else {
                return Err(Error::new(
                    ErrorKind::Connection,
                    "the subscription was dropped",
                ));
            };
            if link.connected
                && link.channels.get(&place.1) == Some(&Status::Confirmed)
                && (self.cluster || link.epoch >= epoch)
            {
                return Ok(());
            }
            if link.failures > failures {
                return Err(link.last_error());
            }
            let now = Instant::now();
            if now >= until {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{}: timed out: the subscription for wake-ups was not confirmed within {:.3} s",
                        client.redacted_url(),
                        limit.as_secs_f64()
                    ),
                ));
            }
            st = self
                .changed
                .wait_timeout(st, until - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Registers `ticket` (not yet placed on a link): messages for it are
    /// dispatched from now on.
    pub(crate) fn enroll(&self, ticket: &Ticket) {
        let mut st = self.state();
        st.entries
            .entry(ticket.id().to_owned())
            .or_insert_with(|| Entry::Waiting {
                ticket: ticket.inner.clone(),
                place: None,
            });
    }

    /// The wait of `ticket` is over. `departed`: it may still be in a
    /// waiter list until the instant given; a grant arriving meanwhile is
    /// settled with the settlement given (see the module docs).
    pub(crate) fn retire(
        &self,
        ticket: &Ticket,
        departed: Option<(Instant, Option<Box<dyn Settlement>>)>,
    ) {
        let mut st = self.state();
        st.unplace(ticket.id());
        match departed {
            Some((until, settlement)) => {
                st.entries.insert(
                    ticket.id().to_owned(),
                    Entry::Departed { until, settlement },
                );
            }
            None => {
                st.entries.remove(ticket.id());
            }
        }
    }
}

impl State {
    /// Places `ticket` (enrolling it if need be) at `place`.
    fn place(&mut self, ticket: &Ticket, place: Place) {
        let old = match self.entries.get_mut(ticket.id()) {
            Some(Entry::Waiting { place: p, .. }) => p.replace(place.clone()),
            _ => {
                self.entries.insert(
                    ticket.id().to_owned(),
                    Entry::Waiting {
                        ticket: ticket.inner.clone(),
                        place: Some(place.clone()),
                    },
                );
                None
            }
        };
        if old.as_ref().map(|p| &p.0) == Some(&place.0) {
            return;
        }
        if let Some((node, _)) = old {
            self.link_lost_waiter(&node);
        }
        let link = self.links.entry(place.0).or_insert_with(Link::idle);
        link.waiters += 1;
        link.idle_since = None;
    }

    /// Takes the waiter `id` off its link.
    fn unplace(&mut self, id: &str) {
        if let Some(Entry::Waiting { place, .. }) = self.entries.get_mut(id)
            && let Some((node, _)) = place.take()
        {
            self.link_lost_waiter(&node);
        }
    }

    fn link_lost_waiter(&mut self, node: &Option<Node>) {
        if let Some(link) = self.links.get_mut(node) {
            link.waiters = link.waiters.saturating_sub(1);
            if link.waiters == 0 {
                link.idle_since = Some(Instant::now());
            }
        }
    }

    /// The tickets of the waiters at `node` (and `channel`, if given).
    fn waiting_at(&self, node: &Option<Node>, channel: Option<Option<u16>>) -> Vec<Arc<Shared>> {
        self.entries
            .values()
            .filter_map(|e| match e {
                Entry::Waiting {
                    ticket,
                    place: Some((n, c)),
                } if n == node && channel.is_none_or(|ch| ch == *c) => Some(ticket.clone()),
                _ => None,
            })
            .collect()
    }

    /// Drops departed entries whose time has passed (at most once a second).
    fn purge(&mut self) {
        let now = Instant::now();
        if self
            .purged
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        self.purged = Some(now);
        self.entries.retain(|_, e| match e {
            Entry::Departed { until, .. } | Entry::Held { until, .. } => *until > now,
            Entry::Waiting { .. } => true,
        });
        self.held = self
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Held { .. }))
            .count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_say_whether_channels_are_sharded() {
        let plain = Hub::new(false, false);
        let sharded = Hub::new(true, true);
        assert!(plain.id.starts_with('p') && plain.id.len() == 17);
        assert!(sharded.id.starts_with('s'));
        assert_ne!(plain.id[1..], sharded.id[1..]);
        let t = Ticket::new();
        assert_eq!(plain.member(&t), format!("{}:{}", plain.id, t.id()));
    }
}
