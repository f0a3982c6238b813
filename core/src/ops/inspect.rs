//! The [`Inspector`]: locks seen from outside, and the forced release.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Value;

use super::{ForcedBy, SCAN_COUNT, glob_escape, page, short_token};
use crate::client::Client;
use crate::client::conn::Node;
use crate::error::{Error, Result};
use crate::keys::{DEFAULT_LOCK_PREFIX, DEFAULT_QUEUE_PREFIX, LockKeys, label};
use crate::scripts::{self, LOCK_RELEASE, OPS_LOCK};
use crate::validate;

/// What an operator sees of locks and queues on one deployment, and the
/// operator's actions on them. Reads are bounded (see the module); nothing
/// here takes a lock or a task.
#[derive(Debug, Clone)]
pub struct Inspector {
    pub(super) client: Client,
    pub(super) lock_prefix: Vec<u8>,
    pub(super) queue_prefix: Vec<u8>,
}

/// One lock as it is in Redis now, read in one step.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: Vec<u8>,
    /// Its key (`Lock:<name>`).
    pub key: Vec<u8>,
    /// The holder's owner token, shortened ([`short_token`](super::short_token));
    /// `None` when nobody holds it.
    pub holder: Option<String>,
    /// Remaining TTL of the hold; `None` when nobody holds it or the key
    /// has no expiry (a legacy client's orphan: see [`LockInfo::expires`]).
    pub ttl: Option<Duration>,
    /// False when held by a key without expiry (a legacy client that died
    /// between `SETNX` and `EXPIRE`; the next ferrolock acquire gives it one).
    pub expires: bool,
    /// The last fencing token issued for this name (a hold taken by a plain
    /// `SET NX` draws its own only when first asked, so it may be the
    /// previous hold's); `None` when none was issued within the counter's
    /// lifetime.
    pub fence: Option<i64>,
    /// Waiters registered.
    pub waiting: u64,
    /// The first of them, in the order they are served (as many as asked).
    pub waiters: Vec<Waiter>,
}

/// One waiter of a lock.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Waiter {
    /// Its waiter id, shortened.
    pub id: String,
    /// The owner token it asks to hold the lock with, shortened.
    pub token: String,
    /// The TTL it asks for.
    pub ttl: Option<Duration>,
    /// How long it has been waiting.
    pub waited: Duration,
    /// Time left on its lease (it renews it at every re-check); `None` when
    /// run out: a waiter that stopped, dropped at the next hand-over.
    pub lease: Option<Duration>,
}

/// Up to a limit of what a scan found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Listing<T> {
    /// What was found, by name.
    pub items: Vec<T>,
    /// False when the limit was reached before the scan of every master
    /// ended: there may be more.
    pub complete: bool,
}

impl Inspector {
    /// An inspector of `client`'s deployment, with the default key prefixes
    /// (`Lock:`, `Queue:`).
    pub fn new(client: &Client) -> Self {
        Self::with_prefixes(
            client,
            DEFAULT_LOCK_PREFIX.as_bytes(),
            DEFAULT_QUEUE_PREFIX.as_bytes(),
        )
    }

    /// An inspector of locks under `lock_prefix` and queues under
    /// `queue_prefix`.
    pub fn with_prefixes(client: &Client, lock_prefix: &[u8], queue_prefix: &[u8]) -> Self {
        Self {
            client: client.clone(),
            lock_prefix: lock_prefix.to_vec(),
            queue_prefix: queue_prefix.to_vec(),
        }
    }

    /// The lock `name` as it is now, with its first `waiters` waiters (0 to
    /// [`MAX_PAGE`](super::MAX_PAGE)): one round trip.
    pub fn lock(&self, name: &[u8], waiters: usize) -> Result<LockInfo> {
        validate::name(name, "lock name")?;
        if waiters > 0 {
            page(waiters, "waiters")?;
        }
        let keys = LockKeys::new(&self.lock_prefix, name);
        let reply: Value = lock_call(&keys, waiters).run(&self.client, &label("lock", name))?;
        parse_lock(name, &keys, reply).map_err(|e| e.context(&label("lock", name)))
    }

    /// The locks held now whose names start with `starting_with` (empty:
    /// all), at most `limit` (1 to [`MAX_PAGE`](super::MAX_PAGE)), by name,
    /// each with its waiter count but no waiter listed. A `SCAN` of every
    /// master for string keys under the lock prefix, then one pipelined
    /// read per master of what it found.
    pub fn locks(&self, starting_with: &[u8], limit: usize) -> Result<Listing<LockInfo>> {
        page(limit, "limit")?;
        let mut pattern = glob_escape(&self.lock_prefix);
        pattern.extend(glob_escape(starting_with));
        pattern.push(b'*');
        let prefix = self.lock_prefix.clone();
        let (names, complete) = self.scan(&pattern, "string", limit, |key| {
            key.strip_prefix(&prefix[..])
                .filter(|n| !n.is_empty())
                .map(<[u8]>::to_vec)
        })?;
        let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
        let mut items = self.locks_named(&names)?;
        // Released between the scan and the read: not held any more.
        items.retain(|i| i.holder.is_some());
        Ok(Listing { items, complete })
    }

    /// The locks `names` as they are now, held or not, in that order (no
    /// waiter listed): one pipelined round trip (one per master on a
    /// cluster), for a view that refreshes what a scan found.
    pub fn locks_named(&self, names: &[&[u8]]) -> Result<Vec<LockInfo>> {
        page(names.len().max(1), "names")?;
        for name in names {
            validate::name(name, "lock name")?;
        }
        let keys: Vec<LockKeys> = names
            .iter()
            .map(|n| LockKeys::new(&self.lock_prefix, n))
            .collect();
        let calls: Vec<_> = keys.iter().map(|k| lock_call(k, 0)).collect();
        let replies = self.batch("locks", &calls)?;
        names
            .iter()
            .zip(&keys)
            .zip(replies)
            .map(|((name, keys), reply)| {
                parse_lock(name, keys, reply).map_err(|e| e.context("locks"))
            })
            .collect()
    }

    /// Frees the lock `name` whoever holds it: an operator's action, for a
    /// hold whose owner is stuck or gone for good. The hold ends through the
    /// release script, run with the holder's token: the lock goes to the
    /// oldest live waiter as on any release, and the holder's next release
    /// or extend fails as not owned (its watchdog reports it lost).
    /// Returns the shortened token of the hold it ended, `None` when the
    /// lock was free (or changed hands three times while this looked).
    /// Reported as an [`EventKind::ForcedRelease`](super::events::EventKind::ForcedRelease)
    /// event (logged), naming the token and the `inspector` as its origin.
    pub fn force_release(&self, name: &[u8]) -> Result<Option<String>> {
        validate::name(name, "lock name")?;
        let keys = LockKeys::new(&self.lock_prefix, name);
        let label = label("lock", name);
        for _ in 0..3 {
            let holder: Option<Vec<u8>> = self
                .client
                .query(&label, redis::cmd("GET").arg(&keys.lock))?;
            let Some(holder) = holder else {
                return Ok(None);
            };
            let released: i64 = LOCK_RELEASE
                .call(&[&keys.lock, &keys.fence, &keys.waiters, &keys.leases])
                .arg(&holder[..])
                .arg(&keys.channel)
                .run(&self.client, &label)?;
            if released == 1 {
                let shown = super::forced_release(name, &label, &holder, ForcedBy::Inspector);
                return Ok(Some(shown));
            }
        }
        Ok(None)
    }

    /// Runs `calls` in one pipeline (one per master on a cluster).
    pub(super) fn batch(&self, what: &str, calls: &[scripts::Call]) -> Result<Vec<Value>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        self.client
            .run(what, |c| scripts::query_batch(c, calls))
            .and_then(|replies| {
                if replies.len() == calls.len() {
                    Ok(replies)
                } else {
                    Err(Error::new(
                        crate::ErrorKind::Redis,
                        format!("{what}: {} replies to {} calls", replies.len(), calls.len()),
                    ))
                }
            })
    }

    /// `SCAN`s every master for keys of `kind` (a `TYPE`) matching
    /// `pattern`, naming each with `name_of` (`None`: not one of ours),
    /// until `limit` names are found. The names, and whether every master
    /// was scanned to its end.
    pub(super) fn scan(
        &self,
        pattern: &[u8],
        kind: &str,
        limit: usize,
        mut name_of: impl FnMut(&[u8]) -> Option<Vec<u8>>,
    ) -> Result<(BTreeSet<Vec<u8>>, bool)> {
        let mut names = BTreeSet::new();
        for node in self.client.masters()? {
            let mut cursor = String::from("0");
            loop {
                let (next, keys) = self.scan_step(&node, &cursor, pattern, kind)?;
                for key in keys {
                    if let Some(name) = name_of(&key) {
                        names.insert(name);
                        if names.len() >= limit {
                            return Ok((names, false));
                        }
                    }
                }
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
        Ok((names, true))
    }

    fn scan_step(
        &self,
        node: &Option<Node>,
        cursor: &str,
        pattern: &[u8],
        kind: &str,
    ) -> Result<(String, Vec<Vec<u8>>)> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .arg("TYPE")
            .arg(kind);
        let context = match node {
            Some((host, port)) => format!("scan of {host}:{port}"),
            None => "scan".to_owned(),
        };
        self.client.query_on(node, &context, &cmd)
    }
}

/// The inspection script for the lock of `keys`, listing `waiters` waiters.
fn lock_call(keys: &LockKeys, waiters: usize) -> scripts::Call {
    OPS_LOCK
        .call(&[&keys.lock, &keys.fence, &keys.waiters, &keys.leases])
        .arg(waiters)
}

/// Reads the reply of `ops_lock-4.lua`.
fn parse_lock(name: &[u8], keys: &LockKeys, reply: Value) -> Result<LockInfo> {
    type Reply = (
        Option<Vec<u8>>,
        i64,
        Option<String>,
        u64,
        Vec<Vec<u8>>,
        Vec<Option<String>>,
        String,
    );
    let (holder, pttl, fence, waiting, items, leases, now): Reply = redis::from_redis_value(reply)
        .map_err(|e| Error::from_redis("inspect", redis::RedisError::from(e)))?;
    let now_us: i64 = now.parse().unwrap_or(0);
    let waiters = items
        .chunks(2)
        .zip(leases.iter().chain(std::iter::repeat(&None)))
        .map(|(pair, lease)| waiter(pair, lease.as_deref(), now_us))
        .collect();
    Ok(LockInfo {
        name: name.to_vec(),
        key: keys.lock.clone(),
        expires: holder.is_some() && pttl >= 0,
        ttl: (holder.is_some() && pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
        holder: holder.as_deref().map(short_token),
        fence: fence.and_then(|f| f.parse().ok()),
        waiting,
        waiters,
    })
}

/// One waiter from its member (`<id>|<ttl_ms>|<token>`), arrival (µs) and
/// lease deadline (ms).
fn waiter(pair: &[Vec<u8>], lease: Option<&str>, now_us: i64) -> Waiter {
    let member = pair.first().map(Vec::as_slice).unwrap_or_default();
    let arrival: f64 = pair
        .get(1)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    let mut parts = member.splitn(3, |&b| b == b'|');
    let id = parts.next().unwrap_or_default();
    let ttl = parts
        .next()
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_millis);
    let token = parts.next().unwrap_or_default();
    let waited_us = (now_us as f64 - arrival).max(0.0);
    let lease = lease
        .and_then(|l| l.parse::<f64>().ok())
        .map(|deadline_ms| deadline_ms * 1000.0 - now_us as f64)
        .filter(|left_us| *left_us > 0.0)
        .map(|left_us| Duration::from_micros(left_us as u64));
    Waiter {
        id: short_token(id),
        token: short_token(token),
        ttl,
        waited: Duration::from_micros(waited_us as u64),
        lease,
    }
}
