//! Redis Cluster: the client that routes commands, and the slot map that says
//! which master serves a key (subscriptions must be made on that node, see
//! `subscriber.rs`).

use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::{ConnectionInfo, RedisConnectionInfo, RedisResult, TlsMode, Value};

use super::conn::{Node, tcp_settings};
use crate::config::Config;

/// How long a cached cluster slot map is trusted before it is fetched again.
const SLOT_MAP_TTL: Duration = Duration::from_secs(1);

/// The client of a cluster reached through the seed `nodes`, each node
/// connected with the `node` settings (db, user, password) and TLS mode.
pub(super) fn cluster_client(
    nodes: &[ConnectionInfo],
    node: &RedisConnectionInfo,
    tls: Option<TlsMode>,
    config: &Config,
) -> RedisResult<ClusterClient> {
    let mut b = redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
        .tcp_settings(tcp_settings())
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.command_timeout)
        .retries(3)
        // TRYAGAIN (a multi-key script while its slot migrates), CLUSTERDOWN
        // and the like: retry after 5-20, 5-40, 5-80 ms. The crate's default
        // waits at least 1.28 s, which stalled every busy lock of a moving
        // slot that long (issue 27.3); our callers ride out longer faults
        // themselves, within their budget.
        .min_retry_wait(5)
        .max_retry_wait(80)
        .retry_wait_formula(10, 2);
    if let Some(u) = node.username() {
        b = b.username(u);
    }
    if let Some(p) = node.password() {
        b = b.password(p);
    }
    if let Some(mode) = tls {
        b = b.tls(mode);
    }
    if let Some(certs) = &config.tls_certs {
        b = b.certs(certs.clone());
    }
    b.build()
}

/// Cluster slot ranges and the master serving each, from `CLUSTER SLOTS`.
pub(super) struct SlotMap(Vec<(u16, u16, Node)>);

impl SlotMap {
    /// Reads the reply of `CLUSTER SLOTS` (entries it cannot read are skipped).
    pub(super) fn parse(raw: &[Value]) -> Self {
        let mut out = Vec::new();
        for entry in raw {
            let Value::Array(items) = entry else { continue };
            let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(master))) =
                (items.first(), items.get(1), items.get(2))
            else {
                continue;
            };
            let host = match master.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                continue;
            };
            out.push((*lo as u16, *hi as u16, (host, *port as u16)));
        }
        Self(out)
    }

    /// Every master serving slots, once each, in slot order.
    pub(super) fn masters(&self) -> Vec<Node> {
        let mut out: Vec<Node> = Vec::new();
        for (_, _, node) in &self.0 {
            if !out.contains(node) {
                out.push(node.clone());
            }
        }
        out
    }

    /// The master serving `slot`.
    pub(super) fn node(&self, slot: u16) -> Option<Node> {
        self.0
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, node)| node.clone())
    }
}

/// The slot map last fetched, trusted for [`SLOT_MAP_TTL`].
#[derive(Default)]
pub(super) struct SlotCache(Option<(Instant, SlotMap)>);

impl SlotCache {
    /// The master serving `slot`, if the cached map is fresh and knows it.
    pub(super) fn node(&self, slot: u16) -> Option<Node> {
        let (at, map) = self.0.as_ref()?;
        (at.elapsed() < SLOT_MAP_TTL).then(|| map.node(slot))?
    }

    /// Caches `map`, fetched just now.
    pub(super) fn store(&mut self, map: SlotMap) {
        self.0 = Some((Instant::now(), map));
    }

    /// Forgets the map (the topology may have changed).
    pub(super) fn clear(&mut self) {
        self.0 = None;
    }
}
