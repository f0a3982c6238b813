//! The commands of an uncontended acquire and release of a [`Lock`], packed
//! once per lock but for the owner token (see `client/encode.rs`): the
//! same bytes as the calls `lock/mod.rs` builds ([`acquire_call`],
//! [`release_call`], [`release_call_with_turns`]), which the other paths
//! (waits, settlements, Redlock) still use.
//!
//! [`Lock`]: super::Lock
//! [`acquire_call`]: crate::lock::acquire_call
//! [`release_call`]: crate::lock::release_call
//! [`release_call_with_turns`]: crate::lock::release_call_with_turns

use crate::client::encode::Template;
use crate::keys::LockKeys;
use crate::lock::legacy::Turns;
use crate::scripts::{LOCK_ACQUIRE, LOCK_RELEASE, Prepared};

/// The packed commands of one lock.
pub(super) struct Packets {
    /// `SET <lock> <token> NX PX <ttl>`: the first attempt of a non-fair
    /// lock whose fencing tokens this process does not read.
    pub set_nx: Template,
    /// The acquire script's short form (it draws the fencing token).
    pub acquire: Prepared,
    /// The release script, with the legacy pollers' turns when `turns`.
    pub release: Prepared,
    /// The lock's legacy pollers' turns, if on.
    pub turns: Option<Turns>,
}

impl Packets {
    /// The commands of the lock of `keys`, whose holds live `ttl_ms`.
    pub(super) fn new(keys: &LockKeys, ttl_ms: u64, turns: Option<Turns>) -> Self {
        let ttl = ttl_ms.to_string();
        let k = keys;
        let release = match turns {
            Some(t) => LOCK_RELEASE.prepare(
                &[
                    &k.lock,
                    &k.fence,
                    &k.waiters,
                    &k.leases,
                    &k.legacy_turn,
                    &k.legacy_next,
                ],
                &[
                    &k.channel,
                    t.turn_ms.to_string().as_bytes(),
                    t.every_ms.to_string().as_bytes(),
                ],
            ),
            None => {
                LOCK_RELEASE.prepare(&[&k.lock, &k.fence, &k.waiters, &k.leases], &[&k.channel])
            }
        };
        Self {
            set_nx: Template::new(&[b"SET", &k.lock], &[b"NX", b"PX", ttl.as_bytes()]),
            acquire: LOCK_ACQUIRE.prepare(&[&k.lock, &k.fence], &[ttl.as_bytes()]),
            release,
            turns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{acquire_call, release_call, release_call_with_turns};

    #[test]
    fn packed_as_the_calls_of_lock_mod_are() {
        let token = "4c3f0e6f2b1a4d6e9f8a7b6c5d4e3f2a";
        for name in [&b"orders"[..], b"a{b}c", b"\xff\x00 \r\n"] {
            let k = LockKeys::new(b"Lock:", name);
            let turns = Turns {
                turn_ms: 150,
                every_ms: 2000,
            };
            for (turns, call) in [
                (None, release_call(&k, token)),
                (Some(turns), release_call_with_turns(&k, token, turns)),
            ] {
                let p = Packets::new(&k, 30_000, turns);
                assert_eq!(p.release.packed(token.as_bytes()), call.packed());
                assert_eq!(
                    p.acquire.packed(token.as_bytes()),
                    acquire_call(&k, token, 30_000, "", false, 0, false).packed()
                );
                let mut set = Vec::new();
                p.set_nx.write(&mut set, token.as_bytes());
                let mut cmd = redis::cmd("SET");
                cmd.arg(&k.lock)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000u64);
                assert_eq!(set, cmd.get_packed_command());
            }
        }
    }
}
