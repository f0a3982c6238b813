//! Releasing a [`Lock`]: the token-checked release, handing over to the next
//! waiter, what a lost reply leaves to the settlement keeper, and an
//! operator's forced release.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::{FIRST_RETRY_PAUSE, Held, Lock, MAX_RETRY_PAUSE};
use crate::budget::Budget;
#[cfg(doc)]
use crate::error::ErrorKind;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::{ReleaseHold, legacy};
use crate::ops::ForcedBy;
use crate::settle;
use crate::sync::LockUnpoisoned;
use crate::watchdog;

impl Lock {
    /// Runs the release script within `budget`; `Ok(false)` when the lock
    /// was not ours.
    /// `hand_over`: waiters are likely, so the script probably wakes one:
    /// send it behind a PING, which makes Redis write the waiter's grant
    /// before our reply ([`Conn::request_behind_ping`]; a free lock's
    /// release skips the extra command). The command is the lock's, packed
    /// once (`packets.rs`).
    ///
    /// [`Conn::request_behind_ping`]: crate::client::conn::Conn::request_behind_ping
    /// `maybe_ran` is set when a try before the one that answered may have
    /// run (see [`Client::run_noting`]).
    pub(super) fn release_token(
        &self,
        token: &str,
        hand_over: bool,
        budget: Budget,
        maybe_ran: &Cell<bool>,
    ) -> Result<bool> {
        let (release, turns) = (&self.packets.release, self.packets.turns);
        let released: i64 = self
            .client
            .run_noting(budget, &self.label, maybe_ran, |c| {
                let reply = release.query(c, token.as_bytes(), hand_over)?;
                Ok(redis::from_redis_value(reply)?)
            })?;
        if let (2, Some(turns)) = (released, turns) {
            // Legacy pollers' turn: our own next acquire must respect it.
            legacy::opened(&self.keys.lock, turns);
        }
        Ok(released >= 1)
    }

    /// Releases the lock. Fails with [`ErrorKind::NotOwned`] when this object
    /// does not hold it (never acquired, expired, taken over, lost in a
    /// failover, or acquired by the parent of this forked process). A
    /// reentrant lock is released in Redis by the last of its nested
    /// releases.
    ///
    /// Renewal stops first, whatever happens next. A release whose reply is
    /// lost is sent again within the call's time (one command timeout); a
    /// retry that finds the key no longer ours reports success when the hold
    /// was still valid when an earlier try, which may have run, was sent
    /// (that try released it) and the master did not change. Out of time,
    /// the object forgets the hold (a new acquire works at once), the release
    /// is completed in the background once the server answers, and the
    /// caller gets a connection error saying so.
    pub fn release(&self) -> Result<()> {
        let held = {
            let mut st = self.state.lock_unpoisoned();
            match st.held_here() {
                None => return Err(self.not_held(&st)),
                Some(h) if h.depth > 1 => {
                    h.depth -= 1;
                    return Ok(());
                }
                Some(_) => st.held.take(),
            }
        };
        let Some(held) = held else {
            return Err(self.not_owned("it is not held"));
        };
        // Renewal stops now, whatever the release's outcome: a hold that is
        // being released must never be kept alive (a failed release in a
        // failover would otherwise wedge the name for the life of the process).
        if let Some(lease) = &held.lease {
            watchdog::unregister(lease);
        }
        let budget = self.client.one_call();
        let moves = self.client.master_moves();
        // Whether a try that may have run was sent while the hold was valid.
        let mut ran_while_valid = false;
        let mut pause = FIRST_RETRY_PAUSE;
        let mut hand_over = held.waited;
        loop {
            let valid = held.valid(Instant::now());
            let maybe_ran = Cell::new(false);
            let last = match self.release_token(&held.token, hand_over, budget, &maybe_ran) {
                Ok(true) => {
                    self.released(&held, moves);
                    return Ok(());
                }
                Ok(false)
                    if (ran_while_valid || (maybe_ran.get() && valid))
                        && !self.master_moved(&held) =>
                {
                    self.released(&held, moves);
                    return Ok(());
                }
                Ok(false) => {
                    self.state.lock_unpoisoned().lost = true;
                    self.report_lost(&held, "a release found it expired or taken");
                    return Err(self.refused(&held, "the release"));
                }
                Err(e) if e.is_transient() => e,
                Err(e) => return Err(e),
            };
            ran_while_valid |= last.outcome_unknown() && valid;
            hand_over = false;
            let left = budget.left().unwrap_or(Duration::ZERO);
            if left <= pause {
                return Err(self.release_later(&held, last));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
    }

    /// `held` was released: under Sentinel the release is kept a moment, to
    /// run again on a new master should the master turn out to have changed
    /// (see [`Client::note_release`]; `moves`: the count of master changes
    /// before it was sent).
    pub(super) fn released(&self, held: &Held, moves: u64) {
        crate::ops::released(held.since);
        self.client.note_release(moves, || {
            Box::new(ReleaseHold {
                client: self.client.clone(),
                keys: LockKeys::clone(&self.keys),
                token: held.token.clone(),
                horizon: Instant::now() + held.ttl,
                label: self.label.clone(),
            })
        });
    }

    /// Hands the release of `held` to the keeper after the call ran out of
    /// time with `e`; the error the caller gets.
    pub(super) fn release_later(&self, held: &Held, e: Error) -> Error {
        crate::ops::released(held.since);
        // The key expires by its TTL at the latest: the last renewal or
        // extend was sent before now.
        let settlement = Box::new(ReleaseHold {
            client: self.client.clone(),
            keys: LockKeys::clone(&self.keys),
            token: held.token.clone(),
            horizon: Instant::now() + held.ttl,
            label: self.label.clone(),
        });
        settle::defer(settlement);
        e.context_after(
            "the release is completed in the background once the server answers \
             (the key expires by its TTL at the latest); this object no longer holds the lock",
        )
    }

    /// Reports `held` lost (`why`) when a release or extend found it so:
    /// once per hold, whether the watchdog or a call finds it first.
    pub(super) fn report_lost(&self, held: &Held, why: &str) {
        match &held.lease {
            Some(lease) => lease.report_lost(why, false),
            None => crate::ops::lock_lost(&self.me, why, false),
        }
    }

    /// True when the client's master changed since `held` was taken (a
    /// Sentinel failover).
    pub(super) fn master_moved(&self, held: &Held) -> bool {
        self.client.master_moves() != held.moves
    }

    /// The error of a release or extend (`what`) that found the key not ours.
    pub(super) fn refused(&self, held: &Held, what: &str) -> Error {
        if self.master_moved(held) {
            self.not_owned(&format!(
                "the master changed (a failover) since the lock was acquired, and the new \
                 master does not have this hold at {what} (the replica promoted had not \
                 received it, or it expired meanwhile)"
            ))
        } else {
            self.not_owned(&format!(
                "it expired or another owner took it before {what}"
            ))
        }
    }

    /// Frees the lock whoever holds it: a tool for operators, for a hold whose
    /// owner is stuck or gone. Runs the release script with the holder's
    /// token, so the lock goes to the oldest waiter as on any release, and
    /// the holder's next release or extend fails with
    /// [`ErrorKind::NotOwned`]. True when this call ended a hold; false when
    /// the lock was free (or changed hands three times while this looked).
    /// Reported as a forced release event (`ops::events`) naming the token
    /// it ended and `lock` as its origin.
    pub fn force_release(&self) -> Result<bool> {
        for _ in 0..3 {
            let holder: Option<Vec<u8>> = self
                .client
                .query(&self.label, redis::cmd("GET").arg(&self.keys.lock))?;
            let Some(holder) = holder else {
                return Ok(false);
            };
            let k = &self.keys;
            let released: i64 = crate::scripts::LOCK_RELEASE
                .call(&[&k.lock, &k.fence, &k.waiters, &k.leases])
                .arg(&holder[..])
                .arg(&k.channel)
                .run(&self.client, &self.label)?;
            if released == 1 {
                crate::ops::forced_release(&self.name, &self.label, &holder, ForcedBy::Lock);
                // This object's own hold: forgotten (it is not lost: it let go).
                let mut st = self.state.lock_unpoisoned();
                let ours = st
                    .held
                    .as_ref()
                    .is_some_and(|h| h.token.as_bytes() == holder);
                if let Some(lease) = st.held.take_if(|_| ours).and_then(|h| h.lease) {
                    watchdog::unregister(&lease);
                }
                return Ok(true);
            }
        }
        Ok(false)
    }
}
