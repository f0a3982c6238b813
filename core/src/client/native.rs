//! Native commands a server may have: `SET … IFEQ` (Valkey 8.1+, Redis
//! 8.4+), found with `INFO server` on a client's first connection, which
//! makes a token-checked extend one command instead of a script.

use std::sync::atomic::Ordering;

use super::conn::Conn;
use super::conn::may_have_run;
use super::{Backend, Client};
use crate::budget::Budget;

/// Not known yet: asked on the next new connection.
pub(super) const IFEQ_UNKNOWN: u8 = 0;
/// The server has `SET … IFEQ`.
const IFEQ_YES: u8 = 1;
/// It has not (or it is a cluster, whose nodes are not asked).
const IFEQ_NO: u8 = 2;

impl Client {
    /// True when the server has `SET key value IFEQ value PX ms` (Valkey
    /// 8.1 and later, Redis 8.4 and later), as the first connection found
    /// (`INFO server`; asked again after a Sentinel failover). A token-checked
    /// extend is then one native command instead of a script. False until a
    /// connection was made, and on a cluster.
    pub(crate) fn has_set_ifeq(&self) -> bool {
        self.inner.set_ifeq.load(Ordering::Acquire) == IFEQ_YES
    }

    /// On a new connection, while it is not known: asks the server whether
    /// it has `SET … IFEQ` (see [`Client::has_set_ifeq`]). A server that
    /// refuses `INFO` (an ACL) is taken not to. The reply is awaited within
    /// `budget`, the connect's.
    pub(super) fn probe_set_ifeq(&self, conn: &mut Conn, budget: Budget) -> redis::RedisResult<()> {
        if self.inner.set_ifeq.load(Ordering::Acquire) != IFEQ_UNKNOWN {
            return Ok(());
        }
        conn.fit_timeout(budget.cap(self.inner.config.command_timeout))?;
        if matches!(self.inner.backend, Backend::Cluster(_)) {
            self.inner.set_ifeq.store(IFEQ_NO, Ordering::Release);
            return Ok(());
        }
        let found = match redis::cmd("INFO").arg("server").query::<String>(conn) {
            Ok(info) if has_set_ifeq(&info) => IFEQ_YES,
            Ok(_) => IFEQ_NO,
            Err(e) if !may_have_run(&e) => IFEQ_NO,
            Err(e) => return Err(e),
        };
        self.inner.set_ifeq.store(found, Ordering::Release);
        Ok(())
    }
}

/// Whether the server whose `INFO server` reads `info` has `SET … IFEQ`:
/// Valkey 8.1 or later (`valkey_version`; Valkey reports a `redis_version`
/// of 7.2.4 for compatibility), Redis 8.4 or later.
fn has_set_ifeq(info: &str) -> bool {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| {
                let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
            })
    };
    match field("valkey_version") {
        Some(v) => v >= (8, 1),
        None => field("redis_version").is_some_and(|v| v >= (8, 4)),
    }
}

#[cfg(test)]
mod tests {
    use super::has_set_ifeq;

    #[test]
    fn set_ifeq_is_found_on_valkey_8_1_and_redis_8_4() {
        let valkey = |v: &str| {
            format!(
                "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:{v}\r\n"
            )
        };
        assert!(has_set_ifeq(&valkey("8.1.8")));
        assert!(has_set_ifeq(&valkey("9.0.0")));
        assert!(!has_set_ifeq(&valkey("8.0.2")));
        assert!(has_set_ifeq("# Server\r\nredis_version:8.4.0\r\n"));
        assert!(!has_set_ifeq("# Server\r\nredis_version:8.2.1\r\n"));
        assert!(!has_set_ifeq("# Server\r\nredis_version:7.0.15\r\n"));
        assert!(!has_set_ifeq(""));
    }
}
