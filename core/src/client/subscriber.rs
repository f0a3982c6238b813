//! The client's side of the wait hub (`wait/hub.rs`): where the hub of
//! this process is kept, where its subscription connections go, and how
//! they are opened.
//!
//! A subscription must live on the node that runs the scripts which publish
//! to it: the server itself, the current master for Sentinel, the master
//! serving the key's slot for Cluster. Subscription connections speak RESP3,
//! where subscription traffic arrives as push frames; they never carry
//! ordinary commands.

use std::any::Any;
use std::sync::Arc;

use super::conn::{Node, open, single_client, tcp_addr};
use super::topology::SlotMap;

use super::{Backend, Client};
use crate::budget::Budget;
use crate::config::{Target, node_info};
use crate::error::{Error, ErrorKind, Result};

impl Client {
    /// What the waits of this process share for this client (the wait hub,
    /// `wait/hub.rs`), made by `make` on first use, and forgotten in a
    /// forked child. The client keeps it without knowing its type: what
    /// waits need is theirs (see `Client::hub`).
    pub(crate) fn shared_by_waits<T: Any + Send + Sync>(
        &self,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let found = self.inner.pool.state().hub.clone();
        let shared = match found {
            Some(shared) => shared,
            None => {
                // Made without the pool's lock held (`make` may ask the server).
                let made: Arc<dyn Any + Send + Sync> = Arc::new(make()?);
                self.inner.pool.state().hub.get_or_insert(made).clone()
            }
        };
        shared.downcast::<T>().map_err(|_| {
            Error::new(
                ErrorKind::Config,
                "internal error: what the waits share was made with another type",
            )
        })
    }

    /// The pool's epoch: it moves when pooled connections may point at a
    /// server that is no longer the right one (a Sentinel master change).
    pub(crate) fn epoch(&self) -> u64 {
        self.inner.pool.state().epoch
    }

    /// Forgets the cached Cluster slot map (a slot moved).
    pub(crate) fn forget_slots(&self) {
        self.inner.pool.state().slots.clear();
    }

    /// Closes command connections that have been idle for a while (see
    /// `pool.rs`).
    pub(crate) fn trim_idle(&self) {
        self.inner.pool.trim();
    }

    /// Where subscriptions for `key` must live: nowhere in particular for one
    /// server (`None`), the current master for Sentinel (`None`: the hub
    /// follows the master itself), the slot's master for Cluster.
    pub(crate) fn pubsub_node(&self, key: &[u8]) -> Result<Option<Node>> {
        Ok(match &self.inner.backend {
            Backend::Single(_) | Backend::Sentinel => None,
            Backend::Cluster(_) => Some(self.node_for(key)?),
        })
    }

    /// A new RESP3 connection to `node` (`None`: the server, or the current
    /// Sentinel master), made within `budget`, and the pool's epoch when it
    /// was made.
    pub(crate) fn open_pubsub(
        &self,
        node: &Option<Node>,
        budget: Budget,
    ) -> Result<(redis::Connection, u64)> {
        let cfg = &self.inner.config;
        let ctx = cfg.redacted_url();
        let epoch = self.epoch();
        let client = match (&self.inner.backend, node) {
            (Backend::Single(c), _) => resp3(c, cfg).map_err(|e| Error::from_redis(ctx, e))?,
            (Backend::Sentinel, _) => {
                let master = self.master_client()?;
                resp3(&master, cfg).map_err(|e| Error::from_redis(ctx, e))?
            }
            (Backend::Cluster(_), Some((host, port))) => {
                let Target::Cluster {
                    node: settings,
                    tls,
                    ..
                } = &cfg.target
                else {
                    unreachable!("cluster backend has a cluster target")
                };
                let settings = settings.clone().set_protocol(redis::ProtocolVersion::RESP3);
                let ctx = format!("{ctx}: node {host}:{port}");
                node_info(host, *port, &settings, *tls)
                    .and_then(|info| single_client(&info, cfg))
                    .map_err(|e| Error::from_redis(&ctx, e))?
            }
            (Backend::Cluster(_), None) => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("{ctx}: a cluster subscription needs a node"),
                ));
            }
        };
        let at = match node {
            Some((host, port)) => format!("{ctx}: node {host}:{port}"),
            None => match tcp_addr(client.get_connection_info()) {
                Some((host, port)) if matches!(self.inner.backend, Backend::Sentinel) => {
                    format!("{ctx}: master {host}:{port}")
                }
                _ => ctx.to_owned(),
            },
        };
        let conn = open(&client, cfg, budget.cap(cfg.connect_timeout))
            .map_err(|e| Error::from_redis(&at, e))?;
        Ok((conn, epoch))
    }

    /// Cluster: the master serving the slot of `key`, from `CLUSTER SLOTS`
    /// (cached for a second, and forgotten when a slot moves).
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

/// The same server's client, speaking RESP3 (with our socket options).
fn resp3(client: &redis::Client, cfg: &crate::config::Config) -> redis::RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    single_client(&info.set_redis_settings(settings), cfg)
}
