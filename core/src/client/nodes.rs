//! Commands that must reach every master, not the one a key routes to: a
//! `SCAN` of the whole keyspace (the operator's views, `ops/`).

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{FromRedisValue, Value};

use super::conn::{Link, Node};
use super::topology::SlotMap;
use super::{Backend, Client};
use crate::error::{Error, Result};

impl Client {
    /// The masters that hold keys: `[None]` for one server or a Sentinel
    /// master (whichever it is now); each cluster master, from `CLUSTER
    /// SLOTS`, in slot order.
    pub(crate) fn masters(&self) -> Result<Vec<Option<Node>>> {
        if !matches!(self.inner.backend, Backend::Cluster(_)) {
            return Ok(vec![None]);
        }
        let raw: Vec<Value> = self.query("cluster slots", redis::cmd("CLUSTER").arg("SLOTS"))?;
        let map = SlotMap::parse(&raw);
        let masters = map.masters();
        self.inner.pool.state().slots.store(map);
        Ok(masters.into_iter().map(Some).collect())
    }

    /// Runs `cmd` on `node` (one of [`Client::masters`]): a cluster routes
    /// it there by address; otherwise it runs on the one master.
    pub(crate) fn query_on<T: FromRedisValue>(
        &self,
        node: &Option<Node>,
        context: &str,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        let value: Value = self.run(context, |c| match (c.link(), node) {
            (Link::Cluster(cluster), Some((host, port))) => cluster.route_command(
                cmd,
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                }),
            ),
            _ => cmd.query(c),
        })?;
        T::from_redis_value(value)
            .map_err(|e| Error::from_redis(context, redis::RedisError::from(e)))
    }
}
