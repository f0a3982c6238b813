//! What a failed round trip or connect is reported as: errors that name the
//! server, the timeout that struck, and whether the command may have run.

use std::time::Duration;

use super::Client;
use super::conn::{Conn, is_failover, may_have_run};
use crate::error::{Error, ErrorKind};

impl Client {
    /// The error of a call whose budget is spent before a round trip could
    /// start (nothing was sent).
    pub(super) fn spent(&self, context: &str) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{context}: timed out: no time left for a round trip to {} (the call's \
                 timeout, plus one command timeout of {:?}, has passed)",
                self.redacted_url(),
                self.inner.config.command_timeout
            ),
        )
    }

    /// The error of a round trip on `conn` (taken from the pool when
    /// `reused`) that failed with `e`.
    pub(super) fn failed(
        &self,
        conn: Conn,
        epoch: u64,
        e: redis::RedisError,
        context: &str,
        reused: bool,
    ) -> Error {
        if !reused && e.kind() == redis::ErrorKind::Parse {
            // The first reply of a new connection is not RESP: the peer is
            // not a Redis server (an HTTP server, a proxy's error page, a
            // TLS port spoken to in plain text), so nothing ran. Its place
            // in the pool is freed.
            drop(conn);
            self.inner.pool.discard();
            return self.not_redis(&e).context(context);
        }
        // A server error reply leaves the connection usable; anything else
        // (I/O, timeout, protocol) leaves it in an unknown state.
        let unknown = may_have_run(&e);
        let waited = conn.timeout();
        if e.is_io_error() || e.is_timeout() || e.is_unrecoverable_error() || is_failover(&e) {
            drop(conn);
            self.inner.pool.discard();
            self.forget_topology(&e);
        } else {
            self.inner.pool.put(conn, epoch);
        }
        let url = self.redacted_url();
        let err = if e.is_timeout() {
            // Which server, and which timeout struck.
            Error::with_source(
                ErrorKind::Timeout,
                format!(
                    "{context}: timed out: no reply from {url} within {}",
                    which_timeout(waited, self.inner.config.command_timeout, "command")
                ),
                e,
            )
        } else if crate::error::is_transient_redis(&e) {
            Error::from_redis(&format!("{context}: {url}"), e)
        } else {
            Error::from_redis(context, e)
        };
        if unknown {
            err.with_outcome_unknown()
        } else {
            err
        }
    }

    /// The error of a new connection whose first reply (`e`) is not RESP.
    pub(super) fn not_redis(&self, e: &redis::RedisError) -> Error {
        Error::new(
            ErrorKind::Connection,
            format!(
                "connection error: the server at {} does not speak the Redis protocol (its \
                 reply could not be read as one: {}); is the URL's host and port those of a \
                 Redis server, and its scheme (redis:// or rediss://) right?",
                self.redacted_url(),
                e.to_string().lines().next().unwrap_or_default()
            ),
        )
    }
}

/// `waited` and the `kind` timeout (`limit`) it came from, for messages:
/// `0.500 s (the command timeout)`, or, when the call's time left cut it
/// short, `0.120 s (the command timeout of 0.500 s, cut to the time the call
/// had left)`.
pub(super) fn which_timeout(waited: Duration, limit: Duration, kind: &str) -> String {
    if waited + Duration::from_millis(5) < limit {
        format!(
            "{:.3} s (the {kind} timeout of {:.3} s, cut to the time the call had left)",
            waited.as_secs_f64(),
            limit.as_secs_f64()
        )
    } else {
        format!("{:.3} s (the {kind} timeout)", limit.as_secs_f64())
    }
}
