//! A waiting Redlock's subscriptions, one per master (see the module
//! documentation of `redlock`).

use std::cell::Cell;
use std::time::Duration;

use super::masters::Masters;
use crate::client::subscriber::Subscriber;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{LockKeys, new_token};
use crate::lock::{Tried, leave_call};
use crate::wait::{self, Interrupt};

/// Longest pause between two attempts of a waiter that could not subscribe.
pub(super) const RETRY_MAX: Duration = Duration::from_millis(50);

/// A waiting Redlock's subscriptions, one per master (see the module docs).
pub(super) struct Waiter {
    id: String,
    channel: Vec<u8>,
    /// Per master: its subscription, if one could be made and still works.
    subs: Vec<Option<Sub>>,
}

struct Sub {
    sub: Subscriber,
    /// The last attempt registered us there (the key was busy); a key that
    /// attempt took, it took with our registration.
    registered: bool,
}

impl Waiter {
    /// Subscribes on every master that answered in `replies`, in parallel
    /// (`None` when no subscription could be made). `label` names the lock
    /// in messages.
    pub(super) fn subscribe(
        masters: &Masters,
        keys: &LockKeys,
        label: &str,
        replies: &[Result<Tried>],
    ) -> Option<Waiter> {
        let id = new_token();
        let mut channel = keys.channel.clone();
        channel.extend_from_slice(id.as_bytes());
        let answered: Vec<bool> = replies.iter().map(Result::is_ok).collect();
        let (label, key, chan) = (label.to_owned(), keys.lock.clone(), channel.clone());
        let subs: Vec<Option<Sub>> = masters
            .on_each(move |i, c| {
                if !answered[i] {
                    return Err(Error::new(ErrorKind::Connection, "did not answer"));
                }
                let context = format!("{label}: waiting on {}", c.redacted_url());
                wait::subscribed(c, &key, &chan, &context)
            })
            .into_iter()
            .map(|r| {
                r.ok().map(|sub| Sub {
                    sub,
                    registered: false,
                })
            })
            .collect();
        subs.iter()
            .any(Option::is_some)
            .then_some(Waiter { id, channel, subs })
    }

    /// Its id as a waiter.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Per master: whether it listens there.
    pub(super) fn listening(&self) -> Vec<bool> {
        self.subs.iter().map(Option::is_some).collect()
    }

    /// True when every subscription broke.
    pub(super) fn is_broken(&self) -> bool {
        self.subs.iter().all(Option::is_none)
    }

    /// Notes where the last attempt left us registered; a master that failed
    /// probably broke its subscription too: it is dropped.
    pub(super) fn update(&mut self, replies: &[Result<Tried>]) {
        for (slot, reply) in self.subs.iter_mut().zip(replies) {
            match (slot.as_mut(), reply) {
                (Some(s), Ok(tried)) => s.registered = matches!(tried, Tried::Busy(_)),
                (Some(_), Err(_)) => *slot = None,
                (None, _) => {}
            }
        }
    }

    /// Waits up to `pause` for a hand-over message on the first master where
    /// we are registered (or just pauses if there is none). Only the
    /// interrupt hook is an error; a broken subscription is dropped.
    pub(super) fn listen(
        &mut self,
        pause: Duration,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<()> {
        let slot = self
            .subs
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|s| s.registered));
        let Some(slot) = slot else {
            return wait::pause(pause.min(RETRY_MAX), interrupt);
        };
        // Tell the hook's verdict apart from a broken connection.
        let stopped = &Cell::new(false);
        let watched = interrupt.map(|check| move || check().inspect_err(|_| stopped.set(true)));
        let hook: Option<Interrupt<'_>> = watched.as_ref().map(|h| h as _);
        let heard = match slot.as_mut() {
            Some(s) => wait::listen(&mut s.sub.conn, &self.channel, pause, hook, "waiting"),
            None => Ok(None),
        };
        match heard {
            Ok(_) => Ok(()),
            Err(e) if stopped.get() => Err(e),
            Err(_) => {
                *slot = None;
                Ok(())
            }
        }
    }

    /// Deregisters where registered (on all those masters at once, each
    /// within the master budget); a key handed over meanwhile is kept when
    /// the Redlock is `held` (it is part of the hold), else passed on. Each
    /// subscription is left for the next user of its connection to drop (as
    /// after a `Lock` wait), or dropped now if deregistering failed.
    pub(super) fn close(
        self,
        masters: &Masters,
        keys: &LockKeys,
        label: &str,
        token: &str,
        ttl_ms: u64,
        held: bool,
    ) {
        let registered: Vec<bool> = self
            .subs
            .iter()
            .map(|s| s.as_ref().is_some_and(|s| s.registered))
            .collect();
        let call = leave_call(keys, &self.id, token, ttl_ms, !held);
        let label = label.to_owned();
        let left = masters.on_each(move |i, client| {
            if !registered[i] {
                return Ok(());
            }
            call.run::<Vec<i64>>(client, &label).map(drop)
        });
        for ((client, slot), left) in masters.clients().iter().zip(self.subs).zip(left) {
            let Some(Sub { mut sub, .. }) = slot else {
                continue;
            };
            if left.is_ok() {
                sub.leftover = Some(self.channel.clone());
                client.checkin_subscriber(sub);
            } else if sub.conn.unsubscribe_resp3(&self.channel).is_ok() {
                client.checkin_subscriber(sub);
            }
        }
    }
}
