//! `min_replicas`: the master's replicas counted before an acquire, and the
//! acquire confirmed on them (`WAIT`) after it.

use super::Lock;
use crate::budget::Budget;
use crate::error::{Error, ErrorKind, Result};
use crate::lock::extend_call;
use crate::validate;

impl Lock {
    /// Fails at once, before anything is written, when the master has
    /// fewer replicas connected than `min_replicas` (as far as known: see
    /// `client/replicas.rs`): its `WAIT` could not succeed, and the key
    /// would be held for nothing meanwhile.
    pub(super) fn check_replicas(&self, budget: Budget) -> Result<()> {
        let want = self.opts.min_replicas;
        match self.client.connected_replicas(want, budget, &self.label)? {
            Some(have) if have < want => Err(Error::new(
                ErrorKind::Quorum,
                format!(
                    "{}: not acquired: the master has {have} replica(s) connected, fewer than \
                     min_replicas ({want}); nothing was written (the count is read again at \
                     most every second while below)",
                    self.label
                ),
            )),
            _ => Ok(()),
        }
    }

    /// `WAIT min_replicas`: undo the acquire at once if too few replicas
    /// confirm it.
    ///
    /// `WAIT` covers the writes of the connection it runs on, and the hold may
    /// have been written by another client (a hand-over) or another pooled
    /// connection: so a token-checked extend runs first on the same
    /// connection, and the WAIT covers everything up to it. WAIT blocks on
    /// the server for up to its timeout, and the socket read gives up at the
    /// end of the call's budget: WAIT gets four fifths of the command
    /// timeout or of the time the call has left, whichever is shorter, so
    /// its answer ("too few replicas") arrives first, and the key is never
    /// held for longer than the caller waits.
    pub(super) fn confirm_replicas(&self, token: &str, budget: Budget) -> Result<()> {
        let want = self.opts.min_replicas;
        let limit = self.client.command_timeout();
        let left = budget.left().unwrap_or(limit).min(limit);
        let timeout_ms = validate::millis(left * 4 / 5).max(1);
        let extend = extend_call(&self.keys, token, validate::millis(self.opts.ttl));
        let confirmed = self.client.run_within(budget, &self.label, |c| {
            let still_ours: i64 = extend.query(c)?;
            let got: i64 = redis::cmd("WAIT").arg(want).arg(timeout_ms).query(c)?;
            Ok((still_ours, got))
        });
        let (still_ours, got) = match confirmed {
            Ok(reply) => reply,
            Err(e) => {
                // Unknown: undo (within one command timeout; else the
                // keeper), and report the error.
                let _ = self.abandon(token, self.client.one_call());
                return Err(e.context_after("the acquire was undone"));
            }
        };
        if still_ours == 1 && got >= i64::from(want) {
            return Ok(());
        }
        self.client.forget_replicas();
        let _ = self.abandon(token, self.client.one_call());
        Err(Error::new(
            ErrorKind::Quorum,
            format!(
                "{}: only {got} of the {want} required replicas confirmed the acquire within {timeout_ms} ms; released it",
                self.label
            ),
        ))
    }
}
