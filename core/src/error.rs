//! The one error type of the crate.
//!
//! Callers branch on behaviour through [`ErrorKind`] or the `is_*` predicates; the
//! message always names the object (lock or queue) and the cause, so a log line is
//! enough to understand what failed.

use std::fmt;

/// What went wrong, as a category callers can branch on.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An argument was rejected before anything was sent to Redis
    /// (empty name, negative ttl, count 0, …). No key was touched.
    InvalidArgument,
    /// The connection URL or options could not be understood.
    Config,
    /// Redis could not be reached, or the connection broke.
    Connection,
    /// Redis rejected the credentials (AUTH / ACL).
    Auth,
    /// Redis did not answer within the configured command timeout.
    Timeout,
    /// A release or extend was refused: this owner does not hold the lock
    /// (never acquired, expired, or taken over by another owner).
    NotOwned,
    /// A lock this owner believed it held turned out to be gone (expired or
    /// taken over) when it asked for the hold's fencing token.
    Lost,
    /// A queue operation could not run because a legacy client held the queue's
    /// lock (`Lock:Queue:<name>`) for longer than the operation's timeout.
    QueueLocked,
    /// Too few replicas confirmed an acquire (`min_replicas`, `WAIT`).
    Quorum,
    /// The wait was interrupted by the caller (a signal, a cancelled task).
    Interrupted,
    /// The caller already holds this non-reentrant lock: acquiring it again
    /// would wait for itself.
    WouldDeadlock,
    /// Redis answered with an error (script error, wrong type, OOM, …).
    Redis,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid argument",
            Self::Config => "invalid configuration",
            Self::Connection => "connection error",
            Self::Auth => "authentication failed",
            Self::Timeout => "timed out",
            Self::NotOwned => "not owned",
            Self::Lost => "lock lost",
            Self::QueueLocked => "queue locked",
            Self::Quorum => "no quorum",
            Self::Interrupted => "interrupted",
            Self::WouldDeadlock => "would deadlock",
            Self::Redis => "redis error",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The error of every fallible operation in this crate.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The command may have run on the server although its reply was lost
    /// (see [`Error::outcome_unknown`]).
    outcome_unknown: bool,
    #[source]
    source: Option<redis::RedisError>,
}

/// Shorthand for `Result<T, ferrolock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with a complete, human-readable message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            outcome_unknown: false,
            source: None,
        }
    }

    /// An [`ErrorKind::InvalidArgument`] error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// Classifies a `redis` error and prefixes the message with `context`
    /// (for example `lock "orders"`).
    pub(crate) fn from_redis(context: &str, err: redis::RedisError) -> Self {
        let kind = classify(&err);
        let hint = version_hint(&err.to_string())
            .or_else(|| {
                (err.kind() == redis::ErrorKind::Parse).then_some(
                    " (the reply is not in the Redis protocol: does this address serve Redis?)",
                )
            })
            .unwrap_or_default();
        let message = format!("{context}: {}: {err}{hint}", kind.describe());
        Self {
            kind,
            message,
            outcome_unknown: false,
            source: Some(err),
        }
    }

    /// An error of `kind` with a complete message, caused by `source`.
    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: redis::RedisError,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            outcome_unknown: false,
            source: Some(source),
        }
    }

    /// Marks the error as one after which the command may have run on the
    /// server (its reply was lost).
    pub(crate) fn with_outcome_unknown(mut self) -> Self {
        self.outcome_unknown = true;
        self
    }

    /// Returns the same error with `context` prepended to its message.
    pub(crate) fn context(mut self, context: &str) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// Returns the same error with `note` appended to its message (what
    /// happens next, say).
    pub(crate) fn context_after(mut self, note: &str) -> Self {
        self.message = format!("{}; {note}", self.message);
        self
    }

    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message without the kind (same as `to_string()`).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True for rejected arguments (nothing was sent to Redis).
    pub fn is_invalid_argument(&self) -> bool {
        self.kind == ErrorKind::InvalidArgument
    }

    /// True when Redis could not be reached, the connection broke, or the
    /// credentials were refused.
    pub fn is_connection(&self) -> bool {
        matches!(self.kind, ErrorKind::Connection | ErrorKind::Auth)
    }

    /// True when Redis did not answer in time.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// True when a release/extend was refused because the lock is not ours.
    pub fn is_not_owned(&self) -> bool {
        self.kind == ErrorKind::NotOwned
    }

    /// True when the caller interrupted a wait.
    pub fn is_interrupted(&self) -> bool {
        self.kind == ErrorKind::Interrupted
    }

    /// True when the command may have run on the server although no reply
    /// came: the round trip failed after the command was sent (a read timeout,
    /// the connection dropped, a broken reply). The caller cannot tell from
    /// the error whether the command took effect; ferrolock settles such
    /// outcomes itself where it can (see the `settle` module). False for
    /// errors before anything was sent and for the server's own error replies.
    pub fn outcome_unknown(&self) -> bool {
        self.outcome_unknown
    }

    /// True when the error says nothing about the state in Redis but only about
    /// reaching it (connection or timeout): the operation may be retried.
    /// Rejected credentials are not transient: retrying does not fix them.
    pub fn is_transient(&self) -> bool {
        matches!(self.kind, ErrorKind::Connection | ErrorKind::Timeout)
    }
}

/// What Redis before 6.0 answers to `HELLO 3`, which the subscriber
/// connections of waits send: a hint to append, since the server's own words
/// ("unknown command") do not say that its version is the cause.
fn version_hint(text: &str) -> Option<&'static str> {
    let old_server =
        text.contains("HELLO") && text.to_ascii_lowercase().contains("unknown command");
    old_server.then_some(" (an older Redis? ferrolock needs 6.0 or later)")
}

/// True for a `redis` error about reaching the server (not about the
/// command): a connection error, a timeout, or a server that cannot serve
/// now (loading, read-only after a failover, cluster down). Its message
/// should name the server.
pub(crate) fn is_transient_redis(err: &redis::RedisError) -> bool {
    matches!(classify(err), ErrorKind::Connection | ErrorKind::Timeout)
}

fn classify(err: &redis::RedisError) -> ErrorKind {
    use redis::ErrorKind as K;
    use redis::ServerErrorKind as S;
    if err.is_timeout() {
        return ErrorKind::Timeout;
    }
    match err.kind() {
        K::AuthenticationFailed => ErrorKind::Auth,
        K::InvalidClientConfig => ErrorKind::Config,
        K::Server(S::NoPerm) => ErrorKind::Auth,
        // The server cannot serve it now, or (MOVED, ASK, when the cluster
        // client's redirections ran out) the topology is changing: retried
        // like a connection error.
        K::Server(
            S::ReadOnly
            | S::MasterDown
            | S::TryAgain
            | S::ClusterDown
            | S::BusyLoading
            | S::Moved
            | S::Ask,
        ) => ErrorKind::Connection,
        // A reply that is not RESP: a peer that is not a Redis server.
        K::Parse => ErrorKind::Connection,
        K::MasterNameNotFoundBySentinel
        | K::NoValidReplicasFoundBySentinel
        | K::EmptySentinelList
        | K::ClusterConnectionNotFound => ErrorKind::Connection,
        _ if err.is_connection_dropped() || err.is_connection_refusal() || err.is_io_error() => {
            ErrorKind::Connection
        }
        _ => {
            let text = err.to_string();
            if text.contains("WRONGPASS") || text.contains("NOAUTH") || text.contains("NOPERM") {
                ErrorKind::Auth
            } else {
                ErrorKind::Redis
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_follow_kind() {
        let e = Error::invalid("lock name must not be empty");
        assert!(e.is_invalid_argument());
        assert!(!e.is_connection());
        assert_eq!(e.to_string(), "lock name must not be empty");
        let e = Error::new(ErrorKind::Auth, "x");
        assert!(e.is_connection() && !e.is_transient());
    }

    #[test]
    fn redis_errors_are_classified() {
        let io =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let e = Error::from_redis("lock \"a\"", io);
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert!(e.to_string().starts_with("lock \"a\": connection error"));
        let t = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(Error::from_redis("x", t).is_timeout());
    }

    #[test]
    fn an_old_server_is_named_as_the_cause() {
        // Redis 5 asked for RESP3, as it words it, and as Redis 7 words an
        // unknown command.
        for text in [
            "ERR unknown command `HELLO`, with args beginning with: `3`,",
            "ERR unknown command 'HELLO', with args beginning with: '3' ",
        ] {
            assert_eq!(
                version_hint(text),
                Some(" (an older Redis? ferrolock needs 6.0 or later)")
            );
        }
        assert_eq!(version_hint("ERR unknown command 'FOO'"), None);
        assert_eq!(version_hint("ERR syntax error"), None);
    }
}
