//! Fencing tokens drawn on first read.
//!
//! An uncontended acquire of a non-fair lock is a plain `SET NX PX` and draws
//! no fencing token: the first read of the hold's token does, in one round
//! trip that checks the lock is still ours and draws the token inside the
//! hold, so it orders with the other holders' exactly as if the acquire had
//! drawn it ([`draw`]).
//!
//! Lock keys whose fencing token this process has read ([`note`],
//! [`is_read`]): their acquires draw the token in the acquire script, so a
//! reader does not pay a second round trip on every hold. A hint only, kept
//! in a fixed table of key hashes: no mutex (nothing for `fork()` to wait
//! for), bounded memory, and a collision merely makes one name's next
//! acquire a plain `SET NX PX` again.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::Client;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::scripts::LOCK_DRAW_FENCE;

/// The fencing token of a hold: `None` until drawn.
pub(crate) type Fence = Option<i64>;

/// Draws the fencing token of `token`'s hold (keeping the hold's TTL at
/// `ttl_ms`); `None` when the hold is gone. Notes that this process reads the
/// tokens of this lock.
pub(crate) fn draw(
    client: &Client,
    keys: &LockKeys,
    label: &str,
    token: &str,
    ttl_ms: u64,
) -> Result<Option<i64>> {
    note(&keys.lock);
    LOCK_DRAW_FENCE
        .call(&[&keys.lock, &keys.fence])
        .arg(token)
        .arg(ttl_ms)
        .run(client, label)
}

const SLOTS: usize = 1024;
static TABLE: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// A nonzero hash of `key` (0 marks an empty slot): what [`is_read`] is
/// asked with (a lock computes it once).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish() | 1
}

/// The slot of `hash`.
fn slot(hash: u64) -> &'static AtomicU64 {
    &TABLE[(hash >> 1) as usize % SLOTS]
}

/// Remembers that this process reads `key`'s fencing tokens.
pub(crate) fn note(key: &[u8]) {
    let hash = key_hash(key);
    slot(hash).store(hash, Ordering::Relaxed);
}

/// True when this process has read the fencing token of the key whose
/// [`key_hash`] is `hash` (probably: a hash match).
pub(crate) fn is_read(hash: u64) -> bool {
    slot(hash).load(Ordering::Relaxed) == hash
}
