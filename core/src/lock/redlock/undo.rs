//! Undoing what a Redlock call took: releases on every master, and the
//! keeper's settlement for a master whose reply was lost.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Inner;
use super::masters::Asked;
use crate::budget::Budget;
use crate::error::Result;
use crate::lock::{ReleaseHold, Tried, release_call};
use crate::settle;
use crate::sync::LockUnpoisoned;

impl Inner {
    /// Releases `token` on every master within `budget`; one reply per
    /// master (1: released).
    pub(super) fn release_everywhere(&self, token: &str, budget: Budget) -> Asked<i64> {
        let (call, label) = (release_call(&self.keys, token), self.label.clone());
        self.masters.ask_checked(budget, move |_, c, within| {
            c.run_within(within, &label, |con| call.query::<i64>(con))
        })
    }

    /// Undoes an attempt that got `acquired`: releases the token on every
    /// master. Where it may have been taken (granted, no reply, or left
    /// there by an earlier attempt) and the release got no reply, the token
    /// is `lingering` there: released by the keeper when the call ends
    /// without the lock (a later attempt may take the key again meanwhile:
    /// same token).
    pub(super) fn undo(
        &self,
        token: &str,
        acquired: &[Result<Tried>],
        budget: Budget,
        lingering: &mut [bool],
    ) {
        let released = self.release_everywhere(token, budget);
        let replies = acquired.iter().zip(&released.replies);
        for ((acquire, release), lingers) in replies.zip(lingering.iter_mut()) {
            let may_hold = match acquire {
                Ok(Tried::Acquired(_)) => true,
                // Held by another: the token is not there.
                Ok(Tried::Busy(_)) => false,
                Err(e) => e.outcome_unknown() || *lingers,
            };
            *lingers = may_hold && release.is_err();
        }
    }

    /// Gives up a hold of `token` whose keys were last given `ttl`: it is
    /// forgotten and marked lost (reported by the caller, when it was a
    /// hold the caller had: [`Inner::report_lost`]), its renewal stopped,
    /// and released everywhere (by the keeper where a master does not
    /// answer). Returns the releases' replies.
    pub(super) fn give_up(&self, token: &str, ttl: Duration, budget: Budget) -> Asked<i64> {
        let ours = {
            let mut state = self.state.lock_unpoisoned();
            let ours = state.as_ref().is_some_and(|h| h.token == token);
            if ours {
                *state = None;
            }
            ours
        };
        if ours {
            self.stop_renewal();
        }
        self.lost.store(true, Ordering::Release);
        let released = self.release_everywhere(token, budget);
        for (i, release) in released.replies.iter().enumerate() {
            if release.is_err() {
                self.release_later(i, token, ttl);
            }
        }
        released
    }

    /// Hands the release of `token` on master `i` to the keeper: done once
    /// that master answers, or dropped once a key given `ttl` now would
    /// have expired.
    pub(super) fn release_later(&self, i: usize, token: &str, ttl: Duration) {
        settle::defer(Box::new(ReleaseHold {
            client: self.masters.clients()[i].clone(),
            keys: self.keys.clone(),
            token: token.to_owned(),
            horizon: Instant::now() + ttl,
            label: self.label.clone(),
        }));
    }
}
