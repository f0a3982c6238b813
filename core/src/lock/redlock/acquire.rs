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
use crate::keys::new_token;
use crate::lock::{FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE, Tried, acquire_call, time_left};
use crate::scripts::LOCK_FENCE;
use crate::sync::LockUnpoisoned;
use crate::validate;
use crate::wait::{self, Interrupt, Wait};

/// What one attempt of an acquire call leads to.
pub(super) enum Next {
    /// The call is over, with this answer.
    Done(bool),
    /// Attempt again at once (the waiter just subscribed: the next attempt
    /// registers it where it listens).
    Again,
    /// Pause this long (masters did not answer, or the waiter could listen
    /// nowhere), then attempt again.
    Pause(Duration),
    /// Listen this long for a master's hand-over or wake-up, then attempt
    /// again.
    Listen(Duration),
}

/// One acquire call across its attempts: its token, wait and budget, its
/// waiter, per master whether the token may linger there (see
/// [`Inner::undo`]), and the trouble ridden out so far.
pub(super) struct Attempts {
    pub(super) token: String,
    pub(super) wait: Wait,
    pub(super) deadline: Option<Instant>,
    pub(super) budget: Budget,
    pub(super) started: Instant,
    pub(super) waiter: Option<Waiter>,
    pub(super) lingering: Vec<bool>,
    trouble_pause: Duration,
    troubles: u32,
}

impl Inner {
    /// A new acquire call waiting as `wait` says, with one token for all its
    /// attempts: a master that hands its key to this waiter sets it to this
    /// token, which the next attempt then counts.
    pub(super) fn attempts(&self, wait: Wait) -> Attempts {
        let deadline = wait.deadline();
        let budget = match wait {
            Wait::Try => self.one_call(),
            _ => Budget::wait(deadline, self.masters.command_timeout()),
        };
        Attempts {
            token: new_token(),
            wait,
            deadline,
            budget,
            started: Instant::now(),
            waiter: None,
            lingering: vec![false; self.masters.clients().len()],
            trouble_pause: FIRST_RETRY_PAUSE,
            troubles: 0,
        }
    }

    /// Runs the attempts of `a` until the call is over, pausing and
    /// listening on this thread (see [`Inner::attempt`]).
    pub(super) fn acquire_as(
        &self,
        a: &mut Attempts,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<bool> {
        loop {
            let paused = match self.attempt(a)? {
                Next::Done(acquired) => return Ok(acquired),
                Next::Again => continue,
                Next::Pause(pause) => wait::pause(pause, interrupt),
                Next::Listen(pause) => match a.waiter.as_mut() {
                    Some(w) => w.listen(pause, interrupt),
                    None => wait::pause(pause, interrupt),
                },
            };
            paused.map_err(|_| wait::interrupted(&self.label))?;
        }
    }

    /// One attempt on every master: the hold when a quorum grants it in
    /// time; else what to do before the next attempt, if the wait has time
    /// left.
    pub(super) fn attempt(&self, a: &mut Attempts) -> Result<Next> {
        let ttl_ms = validate::millis(self.ttl);
        let lease_ms = validate::millis(wait::lease_for(NOTIFIED_RECHECK));
        let start = Instant::now();
        let listening: Vec<bool> = match &a.waiter {
            Some(w) => w.listening(),
            None => vec![false; self.masters.clients().len()],
        };
        // Each master's hub names the waiter there.
        let members = a.waiter.as_ref().map(Waiter::members).unwrap_or_default();
        let (k, label, owner) = (self.keys.clone(), self.label.clone(), a.token.clone());
        let asked = self.masters.ask_checked(a.budget, move |i, c, within| {
            let waiter = if listening[i] {
                members[i].as_str()
            } else {
                ""
            };
            let call = acquire_call(&k, &owner, ttl_ms, waiter, false, lease_ms, false);
            c.run_within(within, &label, |con| call.query::<Tried>(con))
        });
        let replies = &asked.replies;
        if let Some(w) = a.waiter.as_mut() {
            w.update(replies);
        }
        if let Some(e) = self.masters.unreachable(replies) {
            // Undo wherever it may have been taken.
            self.undo(&a.token, replies, a.budget, &mut a.lingering);
            if a.wait == Wait::Try || !e.is_transient() || !time_left(a.deadline) {
                return Err(if a.troubles == 0 {
                    e
                } else {
                    let tried = a.started.elapsed().as_secs_f64();
                    e.context_after(&format!("tried for {tried:.1} s"))
                });
            }
            // A wait rides out masters that do not answer (restarting,
            // failing over, a loaded machine) until its deadline, as a
            // `Lock`'s wait does: backing off, then asking them all again.
            let left = a.deadline.map_or(a.trouble_pause, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let pause = a.trouble_pause.min(left);
            a.trouble_pause = (a.trouble_pause * 2).min(MAX_RETRY_PAUSE);
            a.troubles += 1;
            if a.waiter.as_ref().is_some_and(Waiter::is_broken) {
                a.waiter = None;
            }
            return Ok(Next::Pause(pause));
        }
        let closing = a.waiter.is_some();
        if let Some((fence, valid_until)) = self.confirm(&asked, start, closing, a.budget) {
            *self.state.lock_unpoisoned() = Some(Held {
                token: a.token.clone(),
                fence,
                pid: crate::fork::current_pid(),
                since: Instant::now(),
                valid_until,
                ttl: self.ttl,
            });
            self.lost.store(false, Ordering::Release);
            return Ok(Next::Done(true));
        }
        // Not enough: undo everywhere (a master that timed out may have
        // taken it all the same).
        self.undo(&a.token, replies, a.budget, &mut a.lingering);
        let kept_out = self.masters.kept_out(&asked);
        if a.wait == Wait::Try {
            return match kept_out {
                Some((_, why)) => Err(Error::new(ErrorKind::Quorum, why)),
                None => Ok(Next::Done(false)),
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
            if a.deadline.is_some_and(|d| when > d) {
                return Err(Error::new(ErrorKind::Quorum, why));
            }
            limit = limit.min(when.saturating_duration_since(Instant::now()));
        }
        if let Some(d) = a.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Next::Done(false));
            }
            limit = limit.min(left);
        }
        if a.waiter.as_ref().is_some_and(Waiter::is_broken) {
            a.waiter = None; // every subscription broke: start over
        }
        if a.waiter.is_none() {
            a.waiter = Waiter::subscribe(&self.masters, &self.keys, &self.label, replies);
            if a.waiter.is_some() {
                return Ok(Next::Again); // the next attempt registers where we listen
            }
        }
        Ok(match &a.waiter {
            Some(w) => Next::Listen(w.pause_for(NOTIFIED_RECHECK.min(limit))),
            None => Next::Pause(jitter(RETRY_MAX).min(limit)),
        })
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
