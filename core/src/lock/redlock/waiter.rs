//! A waiting Redlock's registrations, one per master (see the module
//! documentation of `redlock`).
//!
//! The waiter has one [`Ticket`], registered with the wait hub of every
//! master's client: whichever master hands its key over (or wakes it) wakes
//! the waiter, whose next attempt counts the keys set to its token. On each
//! master it registers as `<that hub's id>:<ticket id>`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::masters::Masters;
use crate::budget::Budget;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::LockKeys;
use crate::lock::{Abandon, Tried, leave_call};
use crate::wait::hub::Hub;
use crate::wait::{self, Interrupt, Ticket, lease_for};

/// Longest pause between two attempts of a waiter that could not subscribe.
pub(super) const RETRY_MAX: Duration = Duration::from_millis(50);

/// A waiting Redlock's registrations, one per master (see the module docs).
pub(super) struct Waiter {
    ticket: Ticket,
    /// Per master: where it listens, if it could subscribe and the master
    /// keeps answering.
    subs: Vec<Option<Sub>>,
}

struct Sub {
    hub: Arc<Hub>,
    /// `<hub id>:<ticket id>`.
    member: String,
    /// The last attempt registered us there (the key was busy); a key that
    /// attempt took, it took with our registration.
    registered: bool,
}

impl Waiter {
    /// Listens on every master that answered in `replies`, in parallel
    /// (`None` when it could listen nowhere). `label` names the lock in
    /// messages.
    pub(super) fn subscribe(
        masters: &Masters,
        keys: &LockKeys,
        label: &str,
        replies: &[Result<Tried>],
    ) -> Option<Waiter> {
        let ticket = Ticket::new();
        let answered: Vec<bool> = replies.iter().map(Result::is_ok).collect();
        let (label, key, t) = (label.to_owned(), keys.lock.clone(), ticket.clone());
        let subs: Vec<Option<Sub>> = masters
            .on_each(move |i, c| {
                if !answered[i] {
                    return Err(Error::new(ErrorKind::Connection, "did not answer"));
                }
                let hub = c.hub().map_err(|e| e.context(&label))?;
                hub.enroll(&t);
                hub.ensure(c, &key, &t, Budget::one_call(c.command_timeout()))
                    .map_err(|e| e.context(&label))?;
                let member = hub.member(&t);
                Ok(Sub {
                    hub,
                    member,
                    registered: false,
                })
            })
            .into_iter()
            .map(Result::ok)
            .collect();
        let waiter = Waiter { ticket, subs };
        if waiter.is_broken() {
            waiter.retire_everywhere(masters);
            return None;
        }
        Some(waiter)
    }

    /// Per master: its name in the master's waiter list (`""` where it does
    /// not listen).
    pub(super) fn members(&self) -> Vec<String> {
        self.subs
            .iter()
            .map(|s| s.as_ref().map(|s| s.member.clone()).unwrap_or_default())
            .collect()
    }

    /// Per master: whether it listens there.
    pub(super) fn listening(&self) -> Vec<bool> {
        self.subs.iter().map(Option::is_some).collect()
    }

    /// True when it listens nowhere any more.
    pub(super) fn is_broken(&self) -> bool {
        self.subs.iter().all(Option::is_none)
    }

    /// Notes where the last attempt left us registered; a master that
    /// failed is not listened to any more (its registration lapses).
    pub(super) fn update(&mut self, replies: &[Result<Tried>]) {
        for (slot, reply) in self.subs.iter_mut().zip(replies) {
            match (slot.as_mut(), reply) {
                (Some(s), Ok(tried)) => s.registered = matches!(tried, Tried::Busy(_)),
                (Some(s), Err(_)) => {
                    s.hub.retire(&self.ticket, None);
                    *slot = None;
                }
                (None, _) => {}
            }
        }
    }

    /// True when the last attempt left it registered on some master, whose
    /// hand-over or wake-up it can hear.
    fn registered(&self) -> bool {
        self.subs.iter().flatten().any(|s| s.registered)
    }

    /// How long to listen before the next attempt, at most `pause`: briefly
    /// when it is registered nowhere (nothing would come).
    pub(super) fn pause_for(&self, pause: Duration) -> Duration {
        if self.registered() {
            pause
        } else {
            pause.min(RETRY_MAX)
        }
    }

    /// What a master's hand-over or wake-up for it sets, while it is
    /// registered somewhere; the next attempt looks at every master.
    pub(super) fn ticket(&self) -> Option<&Ticket> {
        self.registered().then_some(&self.ticket)
    }

    /// Waits up to `pause` for a message from any master where we are
    /// registered (or just pauses, briefly, if there is none). Only the
    /// interrupt hook is an error.
    pub(super) fn listen(
        &mut self,
        pause: Duration,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<()> {
        if !self.registered() {
            return wait::pause(self.pause_for(pause), interrupt);
        }
        // Whatever the event, the next attempt looks at every master.
        self.ticket.wait(Some(Instant::now() + pause), interrupt)?;
        self.ticket.take();
        Ok(())
    }

    /// Deregisters where registered (on all those masters at once, each
    /// within the master budget); a key handed over meanwhile is kept when
    /// the Redlock is `held` (it is part of the hold), else passed on. A
    /// master that does not confirm is settled in the background (and a
    /// grant it sends later given back).
    pub(super) fn close(
        self,
        masters: &Masters,
        keys: &LockKeys,
        label: &str,
        token: &str,
        ttl_ms: u64,
        held: bool,
    ) {
        let members: Vec<Option<String>> = self
            .subs
            .iter()
            .map(|s| {
                s.as_ref()
                    .filter(|s| s.registered)
                    .map(|s| s.member.clone())
            })
            .collect();
        let call_members = members.clone();
        let (k, l, t) = (keys.clone(), label.to_owned(), token.to_owned());
        let left = masters.on_each(move |i, client| match &call_members[i] {
            Some(member) => leave_call(&k, member, &t, ttl_ms, !held)
                .run::<Vec<i64>>(client, &l)
                .map(drop),
            None => Ok(()),
        });
        let lease = lease_for(super::NOTIFIED_RECHECK);
        for (i, (client, sub)) in masters.clients().iter().zip(&self.subs).enumerate() {
            let Some(sub) = sub else { continue };
            let departed = match (&members[i], &left[i]) {
                (Some(member), Err(_)) => {
                    let abandon = || {
                        Box::new(Abandon::new(
                            client,
                            keys,
                            token,
                            Some(format!("{member}|{ttl_ms}|{token}")),
                            Duration::from_millis(ttl_ms),
                            label,
                        ))
                    };
                    if !held {
                        crate::settle::defer(abandon());
                    }
                    let on_grant: Box<dyn crate::settle::Settlement> = abandon();
                    Some((
                        Instant::now() + lease + Duration::from_secs(1),
                        Some(on_grant),
                    ))
                }
                _ => None,
            };
            sub.hub.retire(&self.ticket, departed);
        }
        // Hubs where listening was given up (or never confirmed in time).
        for (client, sub) in masters.clients().iter().zip(&self.subs) {
            if sub.is_none()
                && let Ok(hub) = client.hub()
            {
                hub.retire(&self.ticket, None);
            }
        }
    }

    /// Takes the ticket off every master's hub (nothing was registered).
    fn retire_everywhere(&self, masters: &Masters) {
        for client in masters.clients() {
            if let Ok(hub) = client.hub() {
                hub.retire(&self.ticket, None);
            }
        }
    }
}
