//! Queues seen from outside: which exist, what they hold, what is in flight.
//! (Dead tasks are listed, retried and purged by the [`Queue`] itself:
//! [`Queue::dead`], [`Queue::retry_dead`], [`Queue::purge_dead`].)
//!
//! [`Queue`]: crate::Queue
//! [`Queue::dead`]: crate::Queue::dead
//! [`Queue::retry_dead`]: crate::Queue::retry_dead
//! [`Queue::purge_dead`]: crate::Queue::purge_dead

use std::time::Duration;

use redis::Value;

use super::inspect::{Inspector, Listing};
use super::{glob_escape, page};
use crate::error::{Error, Result};
use crate::keys::{QueueKeys, label};
use crate::queue::QueueStats;
use crate::queue::dead::{parse_stats, stats_call};
use crate::scripts::OPS_INFLIGHT;
use crate::validate;

/// A queue's name and what it holds.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueInfo {
    /// The queue's name.
    pub name: Vec<u8>,
    /// Its key (`Queue:<name>`).
    pub key: Vec<u8>,
    /// Due, delayed, in flight, dead, and the age of the oldest due task.
    pub stats: QueueStats,
}

/// One reservation of a queue.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InFlight {
    /// The task's id.
    pub id: Vec<u8>,
    /// Its visibility deadline (unix seconds): past it, the next take
    /// ends the reservation (the task comes back, or goes to the dead set
    /// if that was its last attempt).
    pub deadline: f64,
    /// Seconds until the deadline (negative: overdue, its consumer is
    /// probably gone).
    pub left: f64,
    /// Which attempt this reservation is (1 for the first); `None` for a
    /// reservation an older ferrolock made.
    pub attempt: Option<u32>,
    /// The attempts the task gets (`None`: unlimited, or not recorded).
    pub max_attempts: Option<u32>,
    /// The visibility it was reserved with.
    pub visibility: Option<Duration>,
}

/// A page of a queue's reservations.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InFlightPage {
    /// Reservations in all.
    pub total: u64,
    /// This page, earliest deadline first.
    pub items: Vec<InFlight>,
}

/// The suffixes of a queue's auxiliary keys that make a queue worth listing
/// when its main key is gone (everything in flight, dead, or consumers
/// waiting on an empty queue).
const AUX_SUFFIXES: [&[u8]; 3] = [b":inflight", b":dead", b":waiters"];

impl Inspector {
    /// The queue `name`: its counts in one round trip.
    pub fn queue(&self, name: &[u8]) -> Result<QueueInfo> {
        validate::name(name, "queue name")?;
        let keys = self.queue_keys(name);
        let reply: Vec<Value> = stats_call(&keys).run(&self.client, &label("queue", name))?;
        let stats = parse_stats(&reply).map_err(|e| e.context(&label("queue", name)))?;
        Ok(QueueInfo {
            name: name.to_vec(),
            key: keys.queue,
            stats,
        })
    }

    /// The queues whose names start with `starting_with` (empty: all), at
    /// most `limit` (1 to [`MAX_PAGE`](super::MAX_PAGE)), by name, with their
    /// counts: a `SCAN` of every master for sorted sets under the queue
    /// prefix (a queue whose tasks are all in flight or dead, or whose
    /// consumers wait on it empty, is found by those keys), then one
    /// pipelined read per master.
    pub fn queues(&self, starting_with: &[u8], limit: usize) -> Result<Listing<QueueInfo>> {
        page(limit, "limit")?;
        let mut wanted = self.queue_prefix.clone();
        wanted.extend_from_slice(starting_with);
        let mut pattern = b"*".to_vec();
        pattern.extend(glob_escape(&wanted));
        pattern.push(b'*');
        let (names, complete) = self.scan(&pattern, "zset", limit, |key| {
            self.queue_named_by(key, &wanted)
        })?;
        let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
        let items = self.queues_named(&names)?;
        Ok(Listing { items, complete })
    }

    /// The queues `names` with their counts, in that order: one pipelined
    /// round trip (one per master on a cluster), for a view that refreshes
    /// what a scan found.
    pub fn queues_named(&self, names: &[&[u8]]) -> Result<Vec<QueueInfo>> {
        page(names.len().max(1), "names")?;
        for name in names {
            validate::name(name, "queue name")?;
        }
        let keys: Vec<QueueKeys> = names.iter().map(|n| self.queue_keys(n)).collect();
        let calls: Vec<_> = keys.iter().map(stats_call).collect();
        let replies = self.batch("queues", &calls)?;
        let mut items = Vec::with_capacity(names.len());
        for ((name, keys), reply) in names.iter().zip(keys).zip(replies) {
            let reply: Vec<Value> = redis::from_redis_value(reply)
                .map_err(|e| Error::from_redis("queues", redis::RedisError::from(e)))?;
            let stats = parse_stats(&reply).map_err(|e| e.context("queues"))?;
            items.push(QueueInfo {
                name: name.to_vec(),
                key: keys.queue,
                stats,
            });
        }
        Ok(items)
    }

    /// Up to `count` (1 to [`MAX_PAGE`](super::MAX_PAGE)) reservations of
    /// the queue `name` from `offset` on, earliest deadline first, with the
    /// attempt each is: one round trip.
    pub fn in_flight(&self, name: &[u8], offset: usize, count: usize) -> Result<InFlightPage> {
        validate::name(name, "queue name")?;
        page(count, "count")?;
        let keys = self.queue_keys(name);
        let context = label("queue", name);
        let reply: Value = OPS_INFLIGHT
            .call(&[&keys.inflight, &keys.receipts])
            .arg(offset)
            .arg(count)
            .run(&self.client, &context)?;
        type Reply = (u64, Vec<Vec<u8>>, Vec<Option<String>>, String);
        let (total, items, records, now): Reply = redis::from_redis_value(reply)
            .map_err(|e| Error::from_redis(&context, redis::RedisError::from(e)))?;
        let now: f64 = now.parse().unwrap_or(0.0);
        let items = items
            .chunks(2)
            .zip(records.iter().chain(std::iter::repeat(&None)))
            .map(|(pair, record)| in_flight(pair, record.as_deref(), now))
            .collect();
        Ok(InFlightPage { total, items })
    }

    fn queue_keys(&self, name: &[u8]) -> QueueKeys {
        QueueKeys::new(&self.queue_prefix, &self.lock_prefix, name)
    }

    /// The name of the queue `key` belongs to, if it is one of ours whose
    /// key starts with `wanted` (the queue prefix and the name's start):
    /// its main key, or an auxiliary key listed in [`AUX_SUFFIXES`] (checked
    /// against the layout, so a look-alike key is not taken for one).
    fn queue_named_by(&self, key: &[u8], wanted: &[u8]) -> Option<Vec<u8>> {
        let prefix = &self.queue_prefix[..];
        if key.starts_with(wanted) {
            return Some(key[prefix.len()..].to_vec()).filter(|n| !n.is_empty());
        }
        if key.first() != Some(&b'{') {
            return None;
        }
        let close = key.iter().position(|&b| b == b'}')?;
        let rest = &key[close + 1..];
        if !rest.starts_with(wanted) {
            return None;
        }
        AUX_SUFFIXES.iter().find_map(|suffix| {
            let name = rest.strip_suffix(*suffix)?.get(prefix.len()..)?;
            if name.is_empty() {
                return None;
            }
            let k = self.queue_keys(name);
            let ours = [&k.inflight, &k.dead, &k.waiters]
                .iter()
                .any(|aux| aux.as_slice() == key);
            ours.then(|| name.to_vec())
        })
    }
}

/// One reservation from its pair (id, deadline) and its record in
/// `receipts` (`<rid>/<attempt>/<max>/<backoff>/<cap>/<jitter>/<visibility
/// ms>/<flags>|<score>`, or `<rid>|<score>` from an older ferrolock).
fn in_flight(pair: &[Vec<u8>], record: Option<&str>, now: f64) -> InFlight {
    let id = pair.first().cloned().unwrap_or_default();
    let deadline: f64 = pair
        .get(1)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    let head = record.and_then(|r| r.split('|').next()).unwrap_or_default();
    let fields: Vec<&str> = head.split('/').collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (attempt, max, visibility) = if fields.len() >= 8 {
        (field(1), field(2), field(6))
    } else {
        (None, None, None)
    };
    InFlight {
        id,
        deadline,
        left: deadline - now,
        attempt: attempt.and_then(|a| u32::try_from(a).ok()),
        max_attempts: max.filter(|m| *m > 0).and_then(|m| u32::try_from(m).ok()),
        visibility: visibility.map(Duration::from_millis),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_records_are_read() {
        let pair = [b"42".to_vec(), b"1700000030.5".to_vec()];
        let r = in_flight(
            &pair,
            Some("abc/2/10/1000/300000/0.25/30000/p|1700000000"),
            1_700_000_000.5,
        );
        assert_eq!(r.id, b"42");
        assert_eq!(r.attempt, Some(2));
        assert_eq!(r.max_attempts, Some(10));
        assert_eq!(r.visibility, Some(Duration::from_secs(30)));
        assert!((r.left - 30.0).abs() < 1e-9);
        let unlimited = in_flight(&pair, Some("abc/1/0/1000/300000/0/30000/|1"), 0.0);
        assert_eq!(unlimited.max_attempts, None);
        let old = in_flight(&pair, Some("abc|1700000000"), 0.0);
        assert_eq!((old.attempt, old.max_attempts), (None, None));
        let gone = in_flight(&pair, None, 0.0);
        assert_eq!(gone.attempt, None);
    }
}
