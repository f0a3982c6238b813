//! The Redis key layout (DESIGN §3).
//!
//! Main keys are the legacy ones: `Lock:<name>` (string) and `Queue:<name>`
//! (sorted set), with configurable prefixes. Every auxiliary key of a lock or a
//! queue starts with a hash tag `{t}` chosen so that it lands in the same Redis
//! Cluster slot as the main key, whatever the name contains (braces included):
//! multi-key scripts then always run in one slot.
//!
//! ```text
//! Lock:<name>                   string  owner token, PX ttl           (legacy layout)
//! {t}Lock:<name>:fence          string  last fencing token issued
//! {t}Lock:<name>:waiters        zset    waiter id -> arrival (µs)      FIFO order
//! {t}Lock:<name>:leases         zset    waiter id -> lease deadline    dead-waiter pruning
//! {t}Lock:<name>:legacy         string  exists while legacy pollers have their turn
//! {t}Lock:<name>:legacy_next    string  server time (ms) of the next such turn
//! Queue:<name>                  zset    task id -> due time (unix s)   (legacy layout)
//! Lock:Queue:<name>             string  legacy queue lock, never taken (legacy layout)
//! {t}Queue:<name>:inflight      zset    task id -> visibility deadline
//! {t}Queue:<name>:receipts      hash    task id -> its reservation (see queue_take)
//! {t}Queue:<name>:attempts      hash    task id -> attempts used (queued or dead tasks)
//! {t}Queue:<name>:payloads      hash    task id -> payload
//! {t}Queue:<name>:dead          zset    task id -> when it used its last attempt
//! {t}Queue:<name>:pending       hash    task id -> "<score>[|<payload>]": enqueued
//!                                       while in flight, queued when that ends
//! {t}Queue:<name>:r:<rid>       string  what the take <rid> took (5 min), or 'x'
//! {t}Queue:<name>:waiters       zset    consumers waiting for work
//! {t}Queue:<name>:leases        zset    their lease deadlines
//! fl:w:<hub>                    channel wake-ups of one process's waiters (pub/sub)
//! {t}fl:w:<hub>                 channel the same, per slot (Cluster, sharded pub/sub)
//! ```
//!
//! A waiter is `<hub>:<waiter>` in a waiter list (a lock waiter adds
//! `|<ttl ms>|<token>`): `<hub>` names the channel of its process, where
//! the scripts publish its grant or wake-up (see `wait/hub.rs`).
//!
//! Also the other names ferrolock makes up: owner tokens and waiter ids
//! ([`new_token`]), and how a lock or queue is named in messages.

/// Default key prefix of locks (the legacy one).
pub const DEFAULT_LOCK_PREFIX: &str = "Lock:";

/// Default key prefix of queues (the legacy one).
pub const DEFAULT_QUEUE_PREFIX: &str = "Queue:";

/// A fresh random token: UUID v4 (122 random bits), 32 hex digits. Owner
/// tokens, waiter ids and reservation receipts are all of this kind.
///
/// The bits come from a ChaCha12 generator of the calling thread
/// (`rand`'s `StdRng`, a CSPRNG), seeded once from the OS: asking the OS
/// for 16 bytes per token (`getrandom`) was a system call on every acquire,
/// beyond the wire. The generator is seeded again in a forked child (the
/// cached pid differs): a child never draws the tokens its parent will.
pub fn new_token() -> String {
    let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
    let uuid = uuid::Builder::from_random_bytes(random_bytes()).into_uuid();
    // Hex digits into a buffer, then one allocation of the exact size
    // (`to_string` went through the formatting machinery).
    String::from(&*uuid.simple().encode_lower(&mut hex))
}

/// 16 bytes from this thread's generator (see [`new_token`]).
fn random_bytes() -> [u8; 16] {
    use rand::{Rng, SeedableRng, rngs::StdRng, rngs::SysRng};
    use std::cell::RefCell;

    thread_local! {
        /// The generator and the pid it was seeded in.
        static RNG: RefCell<Option<(u32, StdRng)>> = const { RefCell::new(None) };
    }
    let pid = crate::fork::current_pid();
    let fill = |slot: &mut Option<(u32, StdRng)>, out: &mut [u8; 16]| {
        if slot.as_ref().is_none_or(|(seeded_in, _)| *seeded_in != pid) {
            let rng = StdRng::try_from_rng(&mut SysRng)
                .unwrap_or_else(|e| panic!("the OS random source failed: {e}"));
            *slot = Some((pid, rng));
        }
        if let Some((_, rng)) = slot {
            rng.fill_bytes(out);
        }
    };
    let mut out = [0u8; 16];
    let drawn = RNG.try_with(|cell| fill(&mut cell.borrow_mut(), &mut out));
    if drawn.is_err() {
        // This thread is being torn down (its locals are gone): draw from
        // a generator of this call's own.
        fill(&mut None, &mut out);
    }
    out
}

/// A random number from this thread's generator (see [`new_token`]), for
/// what needs spreading rather than secrecy (the re-check instants of waits).
pub(crate) fn random_u64() -> u64 {
    let b = random_bytes();
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// `lock "name"` (or `queue "name"`), shortened for messages.
pub(crate) fn label(kind: &str, name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let mut shown: String = text.chars().take(64).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    format!("{kind} {shown:?}")
}

/// Number of hash slots in Redis Cluster.
const SLOTS: usize = 16384;

/// The Redis Cluster slot of `key`, honouring `{hash tags}`.
pub fn slot_of(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS as u16
}

include!(concat!(env!("OUT_DIR"), "/slot_tags.rs"));

/// A short string (1 to 3 characters) whose slot is `slot`, from the table
/// `build.rs` generates.
fn tag_for_slot(slot: u16) -> &'static str {
    SLOT_TAGS[usize::from(slot) % SLOTS]
}

/// `{t}` + `main` + `:` : the prefix of every auxiliary key of `main`.
fn aux_prefix(main: &[u8]) -> Vec<u8> {
    let tag = tag_for_slot(slot_of(main));
    let mut out = Vec::with_capacity(main.len() + tag.len() + 3);
    out.push(b'{');
    out.extend_from_slice(tag.as_bytes());
    out.push(b'}');
    out.extend_from_slice(main);
    out.push(b':');
    out
}

/// The name of every wake-up channel after its hash tag.
const WAKE: &str = "fl:w:";

/// `{t}fl:w:`: the prefix of the wake-up channels of the waiters on `main`,
/// tagged with the slot of `main` (what scripts on `main` may `SPUBLISH` to).
fn wake_prefix(main: &[u8]) -> Vec<u8> {
    format!("{{{}}}{WAKE}", tag_for_slot(slot_of(main))).into_bytes()
}

/// The wake-up channel of hub `hub`: sharded for `slot` (`{t}fl:w:<hub>`),
/// or plain (`fl:w:<hub>`). The scripts name the same channels (see
/// `waiter_channel` in `prelude.lua`).
pub(crate) fn hub_channel(slot: Option<u16>, hub: &str) -> Vec<u8> {
    match slot {
        Some(slot) => format!("{{{}}}{WAKE}{hub}", tag_for_slot(slot)),
        None => format!("{WAKE}{hub}"),
    }
    .into_bytes()
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out
}

/// The keys of one lock.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    /// `Lock:<name>`: the owner token.
    pub lock: Vec<u8>,
    /// Last fencing token issued.
    pub fence: Vec<u8>,
    /// Waiters in arrival order.
    pub waiters: Vec<u8>,
    /// Waiter lease deadlines.
    pub leases: Vec<u8>,
    /// Exists while legacy pollers have their turn (legacy interop).
    pub legacy_turn: Vec<u8>,
    /// When the next legacy pollers' turn may start.
    pub legacy_next: Vec<u8>,
    /// Tokens whose acquire was abandoned (a set): a late write of one of
    /// them holds nothing (see `lock_abandon-5.lua`).
    pub ghosts: Vec<u8>,
    /// Prefix of the wake-up channels of its waiters' processes (`{t}fl:w:`;
    /// the scripts drop the `{t}` unless the channel is sharded).
    pub channel: Vec<u8>,
}

impl LockKeys {
    pub fn new(prefix: &[u8], name: &[u8]) -> Self {
        let lock = join(prefix, name);
        let aux = aux_prefix(&lock);
        Self {
            fence: join(&aux, b"fence"),
            waiters: join(&aux, b"waiters"),
            leases: join(&aux, b"leases"),
            legacy_turn: join(&aux, b"legacy"),
            legacy_next: join(&aux, b"legacy_next"),
            ghosts: join(&aux, b"ghosts"),
            channel: wake_prefix(&lock),
            lock,
        }
    }
}

/// The keys of one queue.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys {
    /// `Queue:<name>`: waiting tasks, score = due time.
    pub queue: Vec<u8>,
    /// `Lock:Queue:<name>`: the lock legacy PHP takes around queue operations.
    pub legacy_lock: Vec<u8>,
    /// Reserved tasks, score = visibility deadline.
    pub inflight: Vec<u8>,
    /// Each reservation: receipt, attempt, settings and the task's score.
    pub receipts: Vec<u8>,
    /// Attempts used by tasks that are queued again or dead.
    pub attempts: Vec<u8>,
    /// Task payloads.
    pub payloads: Vec<u8>,
    /// Tasks that used their last attempt, score = when.
    pub dead: Vec<u8>,
    /// Enqueues of ids that were in flight, applied when the reservation ends.
    pub pending: Vec<u8>,
    /// Prefix of the takes' records (`+ <rid>`): what a take took, kept so
    /// that a take whose reply was lost can be answered again or given up.
    pub records: Vec<u8>,
    /// Consumers waiting for work.
    pub waiters: Vec<u8>,
    /// Their lease deadlines.
    pub leases: Vec<u8>,
    /// Prefix of the wake-up channels of its consumers' processes (as
    /// [`LockKeys::channel`]).
    pub channel: Vec<u8>,
}

impl QueueKeys {
    pub fn new(prefix: &[u8], lock_prefix: &[u8], name: &[u8]) -> Self {
        let queue = join(prefix, name);
        let aux = aux_prefix(&queue);
        let mut legacy_lock = join(lock_prefix, prefix);
        legacy_lock.extend_from_slice(name);
        Self {
            legacy_lock,
            inflight: join(&aux, b"inflight"),
            receipts: join(&aux, b"receipts"),
            attempts: join(&aux, b"attempts"),
            payloads: join(&aux, b"payloads"),
            dead: join(&aux, b"dead"),
            pending: join(&aux, b"pending"),
            records: join(&aux, b"r:"),
            waiters: join(&aux, b"waiters"),
            leases: join(&aux, b"leases"),
            channel: wake_prefix(&queue),
            queue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_uuid_v4_and_differ() {
        let tokens: std::collections::HashSet<String> = (0..1000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 1000);
        for t in &tokens {
            let u = uuid::Uuid::parse_str(t).expect("a UUID");
            assert_eq!(u.get_version_num(), 4, "{t}");
            assert_eq!(t.len(), 32);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_forked_child_draws_tokens_its_parent_does_not() {
        // Seed this thread's generator, then fork: the child inherits its
        // state, and must seed afresh instead of repeating the parent's next
        // tokens.
        let _ = new_token();
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array we own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only draws tokens, writes them and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let drawn: String = (0..4).map(|_| new_token()).collect();
            // SAFETY: writes our buffer to the pipe, then ends the child
            // without running the parent's destructors or test harness.
            unsafe {
                libc::write(fds[1], drawn.as_ptr().cast(), drawn.len());
                libc::_exit(0);
            }
        }
        let mine: Vec<String> = (0..4).map(|_| new_token()).collect();
        let mut buf = [0u8; 128];
        // SAFETY: reads into our buffer; closes the pipe, reaps the child.
        let n = unsafe {
            libc::close(fds[1]);
            let mut got = 0usize;
            while got < buf.len() {
                let r = libc::read(fds[0], buf[got..].as_mut_ptr().cast(), buf.len() - got);
                if r <= 0 {
                    break;
                }
                got += r as usize;
            }
            libc::close(fds[0]);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            got
        };
        assert_eq!(n, 128, "the child wrote its four tokens");
        let theirs = std::str::from_utf8(&buf).expect("hex");
        for (i, t) in mine.iter().enumerate() {
            assert!(
                !theirs.contains(t.as_str()),
                "the child drew the parent's token {i}: {t}"
            );
        }
    }

    #[test]
    fn slot_matches_redis_reference_values() {
        // Values from the Redis Cluster specification / CLUSTER KEYSLOT.
        assert_eq!(slot_of(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
    }

    #[test]
    fn every_slot_has_a_tag() {
        for slot in 0..SLOTS as u16 {
            let tag = tag_for_slot(slot);
            assert!(!tag.is_empty() && tag.len() <= 3);
            assert_eq!(slot_of(tag.as_bytes()), slot);
        }
    }

    #[test]
    fn tags_are_stable() {
        // Tags are part of the key layout: a change would rename every
        // auxiliary key and strand the waiters of running processes.
        for (slot, tag) in [
            (0, "06S"),
            (1, "Qi"),
            (42, "5kK"),
            (8000, "42"),
            (12182, "9Le"),
            (16383, "6ZJ"),
        ] {
            assert_eq!(tag_for_slot(slot), tag);
        }
    }

    #[test]
    fn aux_keys_share_the_slot_of_the_main_key() {
        for name in [
            &b"orders"[..],
            b"a{b}c",
            b"{",
            b"}",
            b"{}",
            b"}{x}",
            b"\xff\x00",
            b"0",
        ] {
            let k = LockKeys::new(b"Lock:", name);
            let s = slot_of(&k.lock);
            for aux in [
                &k.fence,
                &k.waiters,
                &k.leases,
                &k.legacy_turn,
                &k.legacy_next,
                &k.ghosts,
            ] {
                assert_eq!(slot_of(aux), s, "{:?}", String::from_utf8_lossy(aux));
            }
            let q = QueueKeys::new(b"Queue:", b"Lock:", name);
            let s = slot_of(&q.queue);
            for aux in [
                &q.inflight,
                &q.receipts,
                &q.attempts,
                &q.payloads,
                &q.dead,
                &q.pending,
                &q.waiters,
                &q.leases,
            ] {
                assert_eq!(slot_of(aux), s);
            }
        }
        let q = QueueKeys::new(b"Queue:", b"Lock:", b"jobs");
        assert_eq!(q.queue, b"Queue:jobs");
        // A sharded hub channel is in the slot of the keys whose scripts
        // publish to it; the plain one drops the tag.
        let k = LockKeys::new(b"Lock:", b"orders");
        let slot = slot_of(&k.lock);
        assert_eq!(slot_of(&hub_channel(Some(slot), "s0123")), slot);
        assert!(hub_channel(Some(slot), "s0123").starts_with(&k.channel));
        assert_eq!(hub_channel(None, "p0123"), b"fl:w:p0123");
        assert_eq!(q.legacy_lock, b"Lock:Queue:jobs");
    }
}
