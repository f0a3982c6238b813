//! `min_replicas` for the queue: the master's replicas counted before a
//! write, and the write confirmed on them (`WAIT`) after it.

use super::Queue;
use crate::client::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::validate;

impl Queue {
    /// With `min_replicas`: fails (writing nothing) when the master is known
    /// to have fewer replicas than that.
    pub(super) fn replicas_present(&self, what: &str) -> Result<()> {
        let want = self.opts.min_replicas;
        if want == 0 {
            return Ok(());
        }
        match self
            .client
            .connected_replicas(want, self.client.one_call(), &self.label)?
        {
            Some(have) if have < want => Err(Error::new(
                ErrorKind::Quorum,
                format!(
                    "{}: the master has {have} connected replicas, fewer than min_replicas \
                     ({want}): nothing was {what}",
                    self.label
                ),
            )),
            _ => Ok(()),
        }
    }

    /// With `min_replicas`, after a write on `c` (when `wrote`): `WAIT` for
    /// that many replicas, up to four fifths of the command timeout (so that
    /// its answer comes before the read gives up). How many confirmed.
    pub(super) fn wait_replicas(
        &self,
        c: &mut Conn,
        wrote: bool,
    ) -> redis::RedisResult<Option<u32>> {
        let want = self.opts.min_replicas;
        if want == 0 || !wrote {
            return Ok(None);
        }
        let timeout_ms = validate::millis(self.client.command_timeout() * 4 / 5);
        let got: i64 = redis::cmd("WAIT").arg(want).arg(timeout_ms).query(c)?;
        Ok(Some(u32::try_from(got).unwrap_or(0)))
    }

    /// Fails when fewer replicas than `min_replicas` confirmed `what`.
    pub(super) fn replicas_confirmed(&self, what: &str, got: Option<u32>) -> Result<()> {
        let want = self.opts.min_replicas;
        match got {
            Some(n) if n < want => {
                self.client.forget_replicas();
                Err(Error::new(
                    ErrorKind::Quorum,
                    format!(
                        "{}: the {what} is done on the master, but only {n} of the {want} \
                         required replicas confirmed it in time: a failover may lose it \
                         (doing it again is safe)",
                        self.label
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}
