//! Connection settings parsed from a URL.
//!
//! Accepted forms (the query parameters below work with every form):
//!
//! | URL | deployment |
//! |---|---|
//! | `redis://[user[:password]@]host[:port][/db]` | one server |
//! | `rediss://…` | one server over TLS |
//! | `unix:///path/redis.sock[?db=N]` | one server over a unix socket |
//! | `redis+sentinel://[user[:password]@]host:port[,host:port…]/master[/db]` | Sentinel |
//! | `redis+cluster://[user[:password]@]host:port[,host:port…]` | Redis Cluster |
//!
//! `rediss+sentinel://` and `rediss+cluster://` use TLS to the data nodes.
//! Query parameters understood by ferrolock (all optional):
//! `connect_timeout` and `timeout` (seconds, float; defaults 3 and 3),
//! `tls_ca` (path of a PEM CA certificate to trust), `tls_insecure=1` (skip
//! certificate verification, tests only; TLS URLs only), `sentinel_username`
//! and `sentinel_password` (credentials of the sentinels themselves). On
//! single-server URLs other parameters are passed to the `redis` crate; on
//! Sentinel and Cluster URLs they are an error.
//!
//! The rooms: this file (the [`Config`] and the deployment it names),
//! `url.rs` (reading a URL), `parts.rs` ([`UrlParts`]: a connection given
//! piece by piece, as legacy PHP arrays give it).
//!
//! [`UrlParts`]: parts::UrlParts

pub(crate) mod parts;
mod url;

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, TlsMode};

/// The URL used when neither the caller nor `$REDIS_URL` names one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";

/// Default time allowed to establish a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Default time allowed for Redis to answer one command.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);

/// `$REDIS_URL` if set and not empty, else [`DEFAULT_URL`].
pub fn default_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => DEFAULT_URL.to_owned(),
    }
}

/// Where Redis is and how to talk to it.
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) target: Target,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) tls_certs: Option<redis::TlsCertificates>,
    redacted: String,
}

/// The deployment behind a [`Config`].
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// One server (TCP, TLS or unix socket).
    Single(ConnectionInfo),
    /// A master found through Sentinel.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        node: RedisConnectionInfo,
        tls: Option<TlsMode>,
    },
    /// A Redis Cluster, reached through any of the seed nodes.
    Cluster {
        nodes: Vec<ConnectionInfo>,
        node: RedisConnectionInfo,
        tls: Option<TlsMode>,
    },
}

impl Config {
    /// Replaces the time allowed to establish a connection.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Replaces the time allowed for Redis to answer one command.
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Time allowed to establish a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Time allowed for Redis to answer one command.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// True for `redis+cluster://` URLs.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster { .. })
    }

    /// The URL with any password replaced by `***`, safe to log.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }
}

/// The connection info of the node at `host:port` of a Sentinel or Cluster
/// deployment: its node settings (db, user, password) and TLS mode.
pub(crate) fn node_info(
    host: &str,
    port: u16,
    settings: &redis::RedisConnectionInfo,
    tls: Option<TlsMode>,
) -> redis::RedisResult<ConnectionInfo> {
    let addr = match tls {
        Some(mode) => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: mode == TlsMode::Insecure,
            tls_params: None,
        },
        None => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    Ok(addr
        .into_connection_info()?
        .set_redis_settings(settings.clone()))
}
