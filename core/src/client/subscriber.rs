//! Subscriber connections: where a waiter listens for its wake-up.
//!
//! A subscription must live on the node that runs the scripts which publish
//! to it: nowhere in particular for one server, the current master for
//! Sentinel, the master serving the key's slot for Cluster. Subscriber
//! connections speak RESP3, where subscription traffic arrives as push
//! frames; they have a pool of their own and never carry ordinary commands.

use super::conn::{Node, open, single_client, tcp_addr};
use super::topology::SlotMap;
use redis::ConnectionLike;

use super::{Backend, Client};
use crate::config::{Target, node_info};
use crate::error::{Error, ErrorKind, Result};

/// A connection checked out for a subscription.
pub(crate) struct Subscriber {
    /// The RESP3 connection.
    pub conn: redis::Connection,
    node: Option<Node>,
    /// The channel of a wait that ended successfully and that this connection
    /// still listens to. Unsubscribing costs a write, which a waiter that was
    /// just handed a lock should not pay before returning: the next wait on
    /// this connection sends it together with its own SUBSCRIBE. Harmless
    /// meanwhile: a finished waiter is in no waiter list, so nothing is ever
    /// published to its channel again.
    pub leftover: Option<Vec<u8>>,
    /// Taken from the pool (the server may have closed it since).
    pub reused: bool,
}

/// What [`Client::checkout_subscriber`] does with idle subscriber connections.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooled {
    /// Reuse one if there is one.
    Reuse,
    /// Drop them all and open a new one: one of them was found closed.
    Discard,
}

impl Client {
    /// A connection for a subscription, to the node that serves `key` (the
    /// server itself, the Sentinel master, or the cluster node owning the
    /// key's slot). A returned subscriber can unsubscribe without waiting
    /// for the confirmation (the next user skips it), or leave that to the
    /// next user altogether ([`Subscriber::leftover`]).
    /// Return it with [`Client::checkin_subscriber`].
    pub(crate) fn checkout_subscriber(&self, key: &[u8], pooled: Pooled) -> Result<Subscriber> {
        let ctx = self.inner.config.redacted_url();
        let node = self.subscription_node(key)?;
        let pool = &self.inner.pool;
        if pooled == Pooled::Discard {
            // Closed with the one that just failed, most likely.
            pool.drop_subscribers(&node);
        } else if let Some((conn, leftover)) = pool.take_subscriber(&node) {
            return Ok(Subscriber {
                conn,
                node,
                leftover,
                reused: true,
            });
        }
        let client = match (&self.inner.backend, &node) {
            (Backend::Single(_) | Backend::Sentinel, _) => {
                let client = match &self.inner.backend {
                    Backend::Single(c) => c.clone(),
                    _ => self.master_client()?,
                };
                let info = client.get_connection_info().clone();
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                single_client(&info.set_redis_settings(settings), &self.inner.config)
                    .map_err(|e| Error::from_redis(ctx, e))?
            }
            (Backend::Cluster(_), Some((host, port))) => {
                let Target::Cluster {
                    node: settings,
                    tls,
                    ..
                } = &self.inner.config.target
                else {
                    unreachable!("cluster backend has a cluster target")
                };
                let settings = settings.clone().set_protocol(redis::ProtocolVersion::RESP3);
                let info = node_info(host, *port, &settings, *tls)
                    .map_err(|e| Error::from_redis(ctx, e))?;
                single_client(&info, &self.inner.config).map_err(|e| Error::from_redis(ctx, e))?
            }
            (Backend::Cluster(_), None) => unreachable!("cluster subscribers have a node"),
        };
        let conn = open(
            &client,
            &self.inner.config,
            self.inner.config.connect_timeout,
        )
        .map_err(|e| Error::from_redis(ctx, e))?;
        Ok(Subscriber {
            conn,
            node,
            leftover: None,
            reused: false,
        })
    }

    /// Where subscriptions for `key` must live: nowhere in particular for one
    /// server, the current master for Sentinel, the slot's master for Cluster.
    /// A grant is only published to a waiter listening on the node that runs
    /// the script, so a subscription elsewhere would never hear it.
    fn subscription_node(&self, key: &[u8]) -> Result<Option<Node>> {
        Ok(match &self.inner.backend {
            Backend::Single(_) => None,
            Backend::Sentinel => tcp_addr(self.master_client()?.get_connection_info()),
            Backend::Cluster(_) => Some(self.node_for(key)?),
        })
    }

    /// False when `sub` no longer listens where grants for `key` are
    /// published (a failover or a slot migration happened): the waiter should
    /// subscribe again. Errors while finding out count as "still current".
    pub(crate) fn subscriber_is_current(&self, sub: &Subscriber, key: &[u8]) -> bool {
        match self.subscription_node(key) {
            Ok(node) => node == sub.node,
            Err(_) => true,
        }
    }

    /// Returns a connection taken with [`Client::checkout_subscriber`].
    pub(crate) fn checkin_subscriber(&self, sub: Subscriber) {
        if sub.conn.is_open() {
            self.inner
                .pool
                .put_subscriber(sub.node, (sub.conn, sub.leftover));
        }
    }

    /// Cluster: the master serving the slot of `key`, from `CLUSTER SLOTS`.
    fn node_for(&self, key: &[u8]) -> Result<Node> {
        let slot = crate::keys::slot_of(key);
        if let Some(node) = self.inner.pool.state().slots.node(slot) {
            return Ok(node);
        }
        let raw: Vec<redis::Value> =
            self.query("cluster slots", redis::cmd("CLUSTER").arg("SLOTS"))?;
        let map = SlotMap::parse(&raw);
        let node = map.node(slot).ok_or_else(|| {
            Error::new(
                ErrorKind::Connection,
                format!("no cluster node serves slot {slot}"),
            )
        })?;
        self.inner.pool.state().slots.store(map);
        Ok(node)
    }
}
