//! One Redlock acquire call: attempts on every master, the quorum and its
//! validity confirmed, the fencing token spread over the quorum (see the
//! module docs of `redlock`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::masters::Asked;
use super::waiter::{RETRY_MAX, Waiter};
use super::{Held, Inner, NOTIFIED_RECHECK, jitter};
use crate::budget::Budget;
use crate::error::{Error, ErrorKind, Result};
use crate::lock::{FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE, Tried, acquire_call, time_left};
use crate::scripts::LOCK_FENCE;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt, Wait};

impl Inner {
    pub(super) fn acquire_as(
        &self,
        call: AcquireCall<'_>,
        wait: Wait,
        deadline: Option<Instant>,
        interrupt: Option<Interrupt<'_>>,
        waiter: &mut Option<Waiter>,
    ) -> Result<bool> {
        let AcquireCall {
            token,
            budget,
            lingering,
        } = call;
        let ttl_ms = validate::millis(self.ttl);
        let lease_ms = validate::millis(wait::lease_for(NOTIFIED_RECHECK));
        let started = Instant::now();
        let mut trouble_pause = FIRST_RETRY_PAUSE;
        let mut troubles = 0;
        loop {
            let start = Instant::now();
            let listening: Vec<bool> = match waiter {
                Some(w) => w.listening(),
                None => vec![false; self.masters.clients().len()],
            };
            // Each master's hub names the waiter there.
            let members = waiter.as_ref().map(Waiter::members).unwrap_or_default();
            let (k, label, owner) = (self.keys.clone(), self.label.clone(), token.to_string());
            let asked = self.masters.ask_checked(budget, move |i, c, within| {
                let waiter = if listening[i] {
                    members[i].as_str()
                } else {
                    ""
                };
                let call = acquire_call(&k, &owner, ttl_ms, waiter, false, lease_ms, false);
                c.run_within(within, &label, |con| call.query::<Tried>(con))
            });
            let replies = &asked.replies;
            if let Some(w) = waiter.as_mut() {
                w.update(replies);
            }
            if let Some(e) = self.masters.unreachable(replies) {
                // Undo wherever it may have been taken.
                self.undo(token, replies, budget, lingering);
                if wait == Wait::Try || !e.is_transient() || !time_left(deadline) {
                    return Err(if troubles == 0 {
                        e
                    } else {
                        let tried = started.elapsed().as_secs_f64();
                        e.context_after(&format!("tried for {tried:.1} s"))
                    });
                }
                // A wait rides out masters that do not answer (restarting,
                // failing over, a loaded machine) until its deadline, as a
                // `Lock`'s wait does: backing off, then asking them all again.
                let left = deadline.map_or(trouble_pause, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                wait::pause(trouble_pause.min(left), interrupt)
                    .map_err(|_| wait::interrupted(&self.label))?;
                trouble_pause = (trouble_pause * 2).min(MAX_RETRY_PAUSE);
                troubles += 1;
                if waiter.as_ref().is_some_and(Waiter::is_broken) {
                    *waiter = None;
                }
                continue;
            }
            let closing = waiter.is_some();
            if let Some((fence, valid_until)) = self.confirm(&asked, start, closing, budget) {
                *self.state.lock_unpoisoned() = Some(Held {
                    token: token.to_string(),
                    fence,
                    pid: crate::fork::current_pid(),
                    since: Instant::now(),
                    valid_until,
                    ttl: self.ttl,
                });
                self.lost.store(false, Ordering::Release);
                return Ok(true);
            }
            // Not enough: undo everywhere (a master that timed out may have
            // taken it all the same).
            self.undo(token, replies, budget, lingering);
            let kept_out = self.masters.kept_out(&asked);
            if wait == Wait::Try {
                return match kept_out {
                    Some((_, why)) => Err(Error::new(ErrorKind::Quorum, why)),
                    None => Ok(false),
                };
            }
            // Pause no longer than the shortest holder TTL, nor past the deadline.
            let mut limit = replies
                .iter()
                .filter_map(|r| match r {
                    Ok(Tried::Busy(pttl)) => *pttl,
                    _ => None,
                })
                .min()
                .unwrap_or(Duration::MAX);
            if let Some((when, why)) = kept_out {
                // Too few masters may vote until `when`: wait for it, or
                // say why now if the wait ends first.
                if deadline.is_some_and(|d| when > d) {
                    return Err(Error::new(ErrorKind::Quorum, why));
                }
                limit = limit.min(when.saturating_duration_since(Instant::now()));
            }
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                limit = limit.min(left);
            }
            if waiter.as_ref().is_some_and(Waiter::is_broken) {
                *waiter = None; // every subscription broke: start over
            }
            if waiter.is_none() {
                *waiter = Waiter::subscribe(&self.masters, &self.keys, &self.label, replies);
                if waiter.is_some() {
                    continue; // the next attempt registers where we listen
                }
            }
            let pause = match waiter.as_mut() {
                Some(w) => w.listen(NOTIFIED_RECHECK.min(limit), interrupt),
                None => wait::pause(jitter(RETRY_MAX).min(limit), interrupt),
            };
            pause.map_err(|_| wait::interrupted(&self.label))?;
        }
    }

    /// Decides an attempt that started at `start` and got `asked`: the hold's
    /// fencing token and when its validity ends, or `None` (not acquired).
    ///
    /// Needs a quorum of voting masters that granted it and know its fencing
    /// token: the largest they issued, to which the others are raised now
    /// (each within the master budget; one that cannot be raised does not
    /// count). Then the validity left must be positive — and longer than one
    /// master budget if the wait is still to be closed (`closing`), so that
    /// the call returns before the validity ends.
    pub(super) fn confirm(
        &self,
        asked: &Asked<Tried>,
        start: Instant,
        closing: bool,
        budget: Budget,
    ) -> Option<(i64, Instant)> {
        let granted: Vec<Option<i64>> = asked
            .replies
            .iter()
            .map(|r| match r {
                Ok(Tried::Acquired(fence)) => Some(*fence),
                _ => None,
            })
            .collect();
        let voting = self
            .masters
            .voters(asked, |r| matches!(r, Ok(Tried::Acquired(_))));
        if voting.iter().filter(|&&v| v).count() < self.quorum() {
            return None;
        }
        let fence = granted.iter().flatten().copied().max()?;
        let counted = self.spread_fence(&granted, &voting, fence, budget);
        if counted < self.quorum() {
            return None;
        }
        let margin = if closing {
            self.masters.budget()
        } else {
            Duration::ZERO
        };
        let validity = self
            .ttl
            .checked_sub(start.elapsed() + Self::drift(self.ttl))
            .filter(|v| *v > margin)?;
        Some((fence, start + validity))
    }

    /// Raises the fencing counter of the masters that granted this hold
    /// (`granted`) to its fence, the largest the quorum issued: any later
    /// quorum overlaps this one in at least one master, so it issues a
    /// larger token even if the masters' clocks disagree. Returns how many
    /// `voting` masters know the fence now (they issued it, or were raised
    /// to it within the master budget, and may still vote).
    pub(super) fn spread_fence(
        &self,
        granted: &[Option<i64>],
        voting: &[bool],
        fence: i64,
        budget: Budget,
    ) -> usize {
        let behind: Vec<bool> = granted
            .iter()
            .map(|g| g.is_some_and(|f| f < fence))
            .collect();
        if !behind.iter().any(|&b| b) {
            return voting.iter().filter(|&&v| v).count();
        }
        let (k, label) = (self.keys.clone(), self.label.clone());
        let ttl_ms = validate::millis(self.ttl);
        let raise = behind.clone();
        let spread = self.masters.ask_checked(budget, move |i, c, within| {
            if !raise[i] {
                return Ok(());
            }
            let call = LOCK_FENCE.call(&[&k.fence]).arg(fence).arg(ttl_ms);
            c.run_within(within, &label, |con| call.query::<i64>(con))
                .map(drop)
        });
        let knows = self.masters.voters(&spread, Result::is_ok);
        (0..voting.len()).filter(|&i| voting[i] && knows[i]).count()
    }
}

/// One acquire call: its token, its budget, and per master whether the
/// token may linger there (see [`Inner::undo`]).
pub(super) struct AcquireCall<'a> {
    pub(super) token: &'a str,
    pub(super) budget: Budget,
    pub(super) lingering: &'a mut Vec<bool>,
}
