//! One connection, of either kind, and how connections are opened.
//!
//! [`Conn`] implements the redis crate's `ConnectionLike`, so commands and
//! scripts run on it directly, whatever the deployment. Everything here is
//! a leaf: it knows the configuration, not the pools built from it.

use std::sync::OnceLock;

use redis::{Cmd, ConnectionInfo, ConnectionLike, RedisResult, Value};

use crate::config::Config;

/// A server's host and port (a cluster node, the Sentinel master).
pub(crate) type Node = (String, u16);

/// A connection of either kind.
pub(crate) enum Conn {
    /// One server (standalone or the Sentinel master).
    Single(redis::Connection),
    /// A cluster connection (routes by key, follows MOVED/ASK).
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Conn {
    fn inner(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Single(c) => c,
            Conn::Cluster(c) => c.as_mut(),
        }
    }

    fn inner_ref(&self) -> &dyn ConnectionLike {
        match self {
            Conn::Single(c) => c,
            Conn::Cluster(c) => c.as_ref(),
        }
    }
}

/// Every method forwards to the connection inside, those the cluster
/// connection overrides (`req_command`, `supports_pipelining`) included.
impl ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.inner().req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.inner().req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.inner().req_command(cmd)
    }

    fn get_db(&self) -> i64 {
        self.inner_ref().get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.inner_ref().supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        self.inner().check_connection()
    }

    fn is_open(&self) -> bool {
        self.inner_ref().is_open()
    }
}

/// A client for one server, with our socket options and TLS certificates.
pub(super) fn single_client(info: &ConnectionInfo, config: &Config) -> RedisResult<redis::Client> {
    let info = info.clone().set_tcp_settings(tcp_settings());
    match &config.tls_certs {
        Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
        None => redis::Client::open(info),
    }
}

/// Socket options of every connection to a data node: `TCP_NODELAY`, as in
/// redis-py and hiredis. Our commands are one write each, but Nagle's
/// algorithm would hold back a second small write (a pipelined command, an
/// UNSUBSCRIBE followed by the next SUBSCRIBE) until the first is
/// acknowledged.
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// Connects `client` within the connect timeout, with the command timeout
/// set for reads and writes.
pub(super) fn open(client: &redis::Client, config: &Config) -> RedisResult<redis::Connection> {
    let conn = client.get_connection_with_timeout(config.connect_timeout)?;
    conn.set_read_timeout(Some(config.command_timeout))?;
    conn.set_write_timeout(Some(config.command_timeout))?;
    Ok(conn)
}

/// The host and port of a TCP or TLS connection's address.
pub(super) fn tcp_addr(info: &ConnectionInfo) -> Option<Node> {
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

/// A reused connection that fails like this was closed while idle.
pub(crate) fn is_stale(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal()
}

/// The node we talk to is no longer the master (Sentinel failover).
pub(super) fn is_failover(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
            | redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
    )
}

/// rustls needs one process-wide crypto provider; we ship `ring`.
pub(super) fn install_crypto_provider() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
