//! Legacy pollers' turns (issue 26.6).
//!
//! A legacy `RedisLock` (SETNX, then sleep its poll interval, 100 ms by
//! default) starves beside busy ferrolock waiters: every release hands the
//! lock straight to the next waiter, so the key is never free when the
//! poller looks. While legacy interop is on (by default for the legacy
//! prefix `Lock:`, see [`LockOptions::legacy_interop`]), a release under
//! sustained contention leaves the key free instead for one and a half poll
//! intervals, at most once every twenty (`legacy_turn` in `prelude.lua`;
//! `docs/migration.md` has the measured cost). ferrolock's scripted attempts
//! treat the key as busy during such a turn; the process whose release
//! opened it remembers the turn here, so that its own next acquire, which
//! would otherwise be a plain `SET NX` that knows nothing of turns, goes
//! through the script as well. Other processes' waiters are scripted
//! anyway; a newcomer elsewhere may take one turn, which only delays the
//! poller to the next.
//!
//! The turns this process opened are kept in a fixed table of key hashes,
//! as `fence.rs` keeps its hints: no mutex, bounded memory; a collision
//! only sends one acquire through the script.
//!
//! [`LockOptions::legacy_interop`]: super::LockOptions::legacy_interop

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A turn lasts this many poll intervals (a poller that polls every
/// interval looks at least once, whatever its phase).
const TURN_POLLS: u32 = 3;

/// Consecutive contention between two turns, in poll intervals.
const POLLS_BETWEEN_TURNS: u32 = 20;

/// How legacy pollers get their turns on one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turns {
    /// How long a turn leaves the key free (ms).
    pub turn_ms: u64,
    /// The least time between two turns (ms).
    pub every_ms: u64,
}

impl Turns {
    /// The turns for legacy clients that poll every `poll`.
    pub(crate) fn for_poll(poll: Duration) -> Self {
        let poll_ms = crate::validate::millis(poll).max(1);
        Self {
            turn_ms: poll_ms * u64::from(TURN_POLLS) / 2,
            every_ms: poll_ms * u64::from(POLLS_BETWEEN_TURNS),
        }
    }
}

const SLOTS: usize = 256;
static HASHES: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static UNTIL: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// The end of the latest turn this process opened (ms since [`origin`]):
/// one load answers "none open" in the common case.
static LATEST: AtomicU64 = AtomicU64::new(0);

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(origin().elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn slot(key: &[u8]) -> (u64, usize) {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    let hash = h.finish() | 1;
    (hash, (hash >> 1) as usize % SLOTS)
}

/// A release of `key` by this process opened a turn lasting `turns.turn_ms`.
pub(crate) fn opened(key: &[u8], turns: Turns) {
    let until = now_ms() + turns.turn_ms;
    let (hash, i) = slot(key);
    HASHES[i].store(hash, Ordering::Relaxed);
    UNTIL[i].store(until, Ordering::Relaxed);
    LATEST.fetch_max(until, Ordering::Relaxed);
}

/// True while a turn this process opened on `key` lasts (probably: a hash
/// match).
pub(crate) fn is_open(key: &[u8]) -> bool {
    // No turn opened yet (the common case): not even the clock is read.
    let latest = LATEST.load(Ordering::Relaxed);
    if latest == 0 {
        return false;
    }
    let now = now_ms();
    if latest <= now {
        return false;
    }
    let (hash, i) = slot(key);
    HASHES[i].load(Ordering::Relaxed) == hash && UNTIL[i].load(Ordering::Relaxed) > now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_open_for_its_key_until_it_ends() {
        let turns = Turns {
            turn_ms: 60,
            every_ms: 1000,
        };
        assert!(!is_open(b"legacy-test-a"));
        opened(b"legacy-test-a", turns);
        assert!(is_open(b"legacy-test-a"));
        assert!(!is_open(b"legacy-test-b"));
        std::thread::sleep(Duration::from_millis(80));
        assert!(!is_open(b"legacy-test-a"));
        assert_eq!(
            Turns::for_poll(Duration::from_millis(100)),
            Turns {
                turn_ms: 150,
                every_ms: 2000
            }
        );
    }
}
