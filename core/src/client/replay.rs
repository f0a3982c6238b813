//! Sentinel: the releases of the last moments, kept to be run again on a
//! new master after a failover.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Backend, Client, sentinel};
use crate::settle::{self, Settlement};

/// Sentinel: releases made up to this long ago are run again on a new
/// master (see [`Client::note_release`]): the client goes on with the master
/// it knows for up to [`sentinel::MASTER_RECHECK`] after the sentinels
/// switched (and a command timeout more while it asks them), while the old
/// master may still take writes that the new one never sees.
fn replay_window(command_timeout: Duration) -> Duration {
    sentinel::MASTER_RECHECK * 2 + command_timeout
}

/// At most this many releases are kept for replay (the oldest go first).
const MAX_REPLAYS: usize = 4096;

impl Client {
    /// Sentinel: a release of a lock just succeeded; keep it (as the
    /// settlement `make` builds, a token-checked release) for a while, so
    /// that if the master turns out to have changed meanwhile, it runs again
    /// on the new one. A release that reached the old master after the
    /// promotion is lost with the old master's writes, and would leave the
    /// hold on the new master until its TTL (a stall after every graceful
    /// switch-over, issue 27.4). Running it again is harmless: it only ever
    /// frees a key that still holds its token. Nothing is kept for other
    /// deployments.
    ///
    /// `since`: [`Client::master_moves`] before the release was sent. A
    /// master change seen while it was in flight has already handed the
    /// kept releases to the keeper, so this one goes to the keeper at once
    /// (it may have run on the old master after the promotion).
    pub(crate) fn note_release(&self, since: u64, make: impl FnOnce() -> Box<dyn Settlement>) {
        if !matches!(self.inner.backend, Backend::Sentinel) {
            return;
        }
        let now = Instant::now();
        let window = replay_window(self.inner.config.command_timeout);
        let settlement = make();
        let mut idle = self.inner.pool.state();
        // (`moves` changes, and the kept releases are taken, under this lock.)
        if self.master_moves() != since {
            drop(idle);
            settle::defer(settlement);
            return;
        }
        while idle.replays.front().is_some_and(|(at, _)| {
            now.duration_since(*at) > window || idle.replays.len() >= MAX_REPLAYS
        }) {
            idle.replays.pop_front();
        }
        idle.replays.push_back((now, settlement));
    }

    /// After a failover: hands the releases of the last moments to the
    /// keeper, which runs them on the new master, newest first: a hold the
    /// new master still has is most likely one released just before the
    /// client saw the switch, and its waiters wait for that one (a busy
    /// lock keeps hundreds of releases in the window).
    pub(super) fn replay(&self, replays: VecDeque<(Instant, Box<dyn Settlement>)>) {
        let window = replay_window(self.inner.config.command_timeout);
        let now = Instant::now();
        let recent: Vec<Box<dyn Settlement>> = replays
            .into_iter()
            .rev()
            .take_while(|(at, _)| now.duration_since(*at) <= window)
            .map(|(_, settlement)| settlement)
            .collect();
        let why = format!(
            "the Sentinel master of {} changed: the {} lock release(s) of the last {:.1} s \
             run again on the new master (the old one may have taken them after the promotion)",
            self.inner.config.redacted_url(),
            recent.len(),
            window.as_secs_f64()
        );
        settle::defer_batch(recent, why);
    }
}
