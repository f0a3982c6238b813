//! The hub's reader: one thread per subscription link, owning its
//! connection: it (re)connects with backoff, (re)subscribes, reads pushes and
//! dispatches them, and tells the waiters of a link what happened to it
//! (confirmed, refused, moved, failed).

use std::sync::Arc;
use std::time::Instant;

use redis::{PushKind, Value};

use super::{FIRST_BACKOFF, Hub, LINGER, MAX_BACKOFF, MAX_SKIPS, READ_SLICE, Status, Task};
use crate::budget::Budget;
use crate::client::Client;
use crate::client::conn::Node;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{hub_channel, slot_of};
use crate::wait::ticket::Event;

impl Hub {
    /// The reader of the link to `node` (see the module docs).
    pub(super) fn read_link(self: Arc<Self>, client: &Client, node: &Option<Node>) {
        crate::signals::block_in_this_thread();
        let pid = crate::fork::current_pid();
        let mut conn: Option<redis::Connection> = None;
        // Reads of `conn` that ended without a frame (see `send_subscribe`).
        let mut skips: u64 = 0;
        let mut backoff = FIRST_BACKOFF;
        let mut trimmed = Instant::now();
        loop {
            if crate::fork::current_pid() != pid {
                std::mem::forget(conn);
                return;
            }
            if trimmed.elapsed() >= READ_SLICE * 10 {
                client.trim_idle();
                trimmed = Instant::now();
            }
            let epoch = client.epoch();
            match self.next_task(node, &mut conn, epoch) {
                Task::Exit => return,
                Task::Connect(channels) => {
                    drop(conn.take());
                    match self.connect(client, node, &channels) {
                        Ok(c) => {
                            conn = Some(c);
                            skips = 0;
                            backoff = FIRST_BACKOFF;
                        }
                        Err(e) => {
                            self.failed(node, &e);
                            std::thread::sleep(backoff);
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                        }
                    }
                }
                Task::Subscribe(channels) => {
                    let Some(c) = conn.as_mut() else { continue };
                    if skips > MAX_SKIPS {
                        // Cheaper to start afresh (the new connection
                        // subscribes to every channel of the link).
                        drop(conn.take());
                        self.broken(node, &Error::new(ErrorKind::Connection, "reconnecting"));
                        continue;
                    }
                    let pings = if skips > 0 { skips + 1 } else { 0 };
                    skips = 0;
                    if let Err(e) = self.send_subscribe(c, &channels, pings) {
                        drop(conn.take());
                        self.broken(node, &Error::from_redis(client.redacted_url(), e));
                    }
                }
                Task::Read => {
                    let Some(c) = conn.as_mut() else { continue };
                    match read_one(c) {
                        Ok(Some(value)) => self.handle(client, node, value),
                        Ok(None) => skips += 1,
                        Err(e) => {
                            drop(conn.take());
                            self.broken(node, &Error::from_redis(client.redacted_url(), e));
                        }
                    }
                }
            }
        }
    }

    /// What the reader of `node`'s link does next; `conn` is its
    /// connection (dropped here when the link must be made anew).
    pub(super) fn next_task(
        &self,
        node: &Option<Node>,
        conn: &mut Option<redis::Connection>,
        epoch: u64,
    ) -> Task {
        let mut st = self.state();
        st.purge();
        let Some(link) = st.links.get_mut(node) else {
            return Task::Exit;
        };
        if link.waiters == 0 && link.idle_since.is_some_and(|t| t.elapsed() >= LINGER) {
            link.reader = false;
            link.connected = false;
            link.channels.clear();
            link.confirmed_before.clear();
            drop(st);
            drop(conn.take());
            self.changed.notify_all();
            return Task::Exit;
        }
        let moved = !self.cluster && link.connected && link.epoch < epoch;
        if conn.is_none() || moved {
            link.connected = false;
            let wanted: Vec<Option<u16>> = link.channels.keys().copied().collect();
            return Task::Connect(wanted);
        }
        let unsent: Vec<Option<u16>> = link
            .channels
            .iter()
            .filter(|(_, s)| **s == Status::Unsent)
            .map(|(c, _)| *c)
            .collect();
        if !unsent.is_empty() {
            for c in &unsent {
                link.channels.insert(*c, Status::Sent);
            }
            return Task::Subscribe(unsent);
        }
        Task::Read
    }

    /// Opens the link to `node` and sends the subscriptions to `channels`
    /// (their confirmations are read as the reader goes on).
    pub(super) fn connect(
        &self,
        client: &Client,
        node: &Option<Node>,
        channels: &[Option<u16>],
    ) -> Result<redis::Connection> {
        let budget = Budget::one_call(client.config().connect_timeout() + client.command_timeout());
        let (mut conn, epoch) = client.open_pubsub(node, budget)?;
        conn.set_read_timeout(Some(READ_SLICE))
            .map_err(|e| Error::from_redis(client.redacted_url(), e))?;
        if !channels.is_empty() {
            self.send_subscribe(&mut conn, channels, 0)
                .map_err(|e| Error::from_redis(client.redacted_url(), e))?;
        }
        let mut st = self.state();
        if let Some(link) = st.links.get_mut(node) {
            link.connected = true;
            link.generation += 1;
            link.epoch = epoch;
            for c in link.channels.values_mut() {
                *c = Status::Unsent;
            }
            for c in channels {
                link.channels.insert(*c, Status::Sent);
            }
        }
        Ok(conn)
    }

    /// Sends one (S)SUBSCRIBE per channel, in one write, behind `pings`
    /// PINGs.
    ///
    /// Why the PINGs: the `redis` crate counts each read that timed out as
    /// a reply owed and skips that many of the next non-push replies, so an
    /// error answering a subscription (a refusal by an ACL, a MOVED) would
    /// be skipped after read slices ended without a frame. One PING more
    /// than the slices counted since the last subscription absorbs that
    /// debt (an extra PONG is read and ignored): the error is seen.
    pub(super) fn send_subscribe(
        &self,
        conn: &mut redis::Connection,
        channels: &[Option<u16>],
        pings: u64,
    ) -> redis::RedisResult<()> {
        let mut packed = Vec::new();
        for _ in 0..pings {
            redis::cmd("PING").write_packed_command(&mut packed);
        }
        for c in channels {
            let command = if c.is_some() {
                "SSUBSCRIBE"
            } else {
                "SUBSCRIBE"
            };
            redis::cmd(command)
                .arg(hub_channel(*c, &self.id))
                .write_packed_command(&mut packed);
        }
        let _signals = crate::signals::Deferred::new();
        conn.send_packed_command(&packed)
    }

    /// What the reader of `node` read.
    pub(super) fn handle(&self, client: &Client, node: &Option<Node>, value: Value) {
        let (kind, data) = match value {
            Value::Push { kind, data } => (kind, data),
            Value::ServerError(e) => {
                // A subscription refused: an ACL, or MOVED (the slot map
                // was stale).
                let moved = (e.kind() == Some(redis::ServerErrorKind::Moved))
                    .then(|| e.details()?.split_whitespace().next()?.parse().ok())
                    .flatten();
                let error = Error::from_redis(client.redacted_url(), e.into());
                // MOVED: the topology changed under us, which a wait rides
                // out (with a fresh slot map) like any other fault.
                let error = if moved.is_some() {
                    client.forget_slots();
                    Error::new(ErrorKind::Connection, error.message().to_owned())
                } else {
                    error
                };
                self.refused(node, moved, &error);
                return;
            }
            _ => return,
        };
        let channel = match data.first() {
            Some(Value::BulkString(c)) => c.as_slice(),
            _ => return,
        };
        let slot = (kind == PushKind::SMessage
            || kind == PushKind::SSubscribe
            || kind == PushKind::SUnsubscribe)
            .then(|| slot_of(channel));
        match kind {
            PushKind::Message | PushKind::SMessage => {
                if let Some(Value::BulkString(payload)) = data.get(1) {
                    self.dispatch(node, payload);
                }
            }
            PushKind::Subscribe | PushKind::SSubscribe => self.confirmed(node, slot),
            // We never unsubscribe: the server did, because the slot moved.
            PushKind::SUnsubscribe => {
                client.forget_slots();
                self.slot_moved(node, slot);
            }
            _ => {}
        }
    }

    /// The server confirmed the subscription to `channel` on `node`'s link.
    pub(super) fn confirmed(&self, node: &Option<Node>, channel: Option<u16>) {
        let mut st = self.state();
        let Some(link) = st.links.get_mut(node) else {
            return;
        };
        link.channels.insert(channel, Status::Confirmed);
        link.error = None;
        let again = !link.confirmed_before.insert(channel);
        let woken = if again {
            st.waiting_at(node, Some(channel))
        } else {
            Vec::new()
        };
        drop(st);
        self.changed.notify_all();
        for t in woken {
            t.deliver(Event::Recheck);
        }
    }

    /// The server refused a subscription on `node`'s link (`moved`: the
    /// slot it names is served elsewhere): that channel (or, not knowing
    /// which, every channel not confirmed yet) is dropped, its waiters are
    /// woken to look again, and those asking for it are told.
    pub(super) fn refused(&self, node: &Option<Node>, moved: Option<u16>, error: &Error) {
        let mut st = self.state();
        let mut woken = Vec::new();
        if let Some(link) = st.links.get_mut(node) {
            match moved {
                Some(slot) => {
                    link.channels.remove(&Some(slot));
                }
                None => link.channels.retain(|_, s| *s != Status::Sent),
            }
            link.failures += 1;
            link.error = Some((
                error.kind(),
                format!("the subscription for wake-ups was refused: {error}"),
            ));
        }
        if let Some(slot) = moved {
            woken = st.waiting_at(node, Some(Some(slot)));
            for t in &woken {
                st.unplace(&t.id);
            }
        }
        drop(st);
        self.changed.notify_all();
        for t in woken {
            t.deliver(Event::Recheck);
        }
    }

    /// The server dropped the sharded channel of `slot` on `node`'s link:
    /// the slot moved. Its waiters re-check (and re-subscribe where the slot
    /// went before they register again).
    pub(super) fn slot_moved(&self, node: &Option<Node>, slot: Option<u16>) {
        let mut st = self.state();
        if let Some(link) = st.links.get_mut(node) {
            link.channels.remove(&slot);
            link.confirmed_before.remove(&slot);
        }
        let woken = st.waiting_at(node, Some(slot));
        for t in &woken {
            st.unplace(&t.id);
        }
        drop(st);
        self.changed.notify_all();
        for t in woken {
            t.deliver(Event::Recheck);
        }
    }

    /// The link to `node` could not be made.
    pub(super) fn failed(&self, node: &Option<Node>, e: &Error) {
        let mut st = self.state();
        if let Some(link) = st.links.get_mut(node) {
            link.failures += 1;
            link.error = Some((e.kind(), e.message().to_owned()));
            link.connected = false;
        }
        drop(st);
        self.changed.notify_all();
    }

    /// The link to `node` broke: its reader reconnects, and its waiters are
    /// woken once it is back (see the module docs).
    pub(super) fn broken(&self, node: &Option<Node>, e: &Error) {
        let mut st = self.state();
        if let Some(link) = st.links.get_mut(node) {
            link.connected = false;
            link.error = Some((e.kind(), e.message().to_owned()));
            for s in link.channels.values_mut() {
                *s = Status::Unsent;
            }
        }
        drop(st);
        self.changed.notify_all();
    }
}

/// Reads one frame within [`READ_SLICE`] (the connection's read timeout,
/// set when it was opened): `None` when the slice ended (or a signal cut the
/// read short) with nothing read.
fn read_one(conn: &mut redis::Connection) -> redis::RedisResult<Option<Value>> {
    match conn.recv_response() {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_timeout() => Ok(None),
        Err(e) if e.is_io_error() && e.to_string().contains("os error 4") => Ok(None),
        Err(e) => Err(e),
    }
}
