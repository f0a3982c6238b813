//! One connection, of either kind, and how connections are opened.
//!
//! [`Conn`] implements the redis crate's `ConnectionLike`, so commands and
//! scripts run on it directly, whatever the deployment. Everything here is
//! a leaf: it knows the configuration, not the pools built from it.

use std::sync::OnceLock;
use std::time::Duration;

use redis::{Cmd, ConnectionInfo, ConnectionLike, RedisResult, Value};

use super::encode::Template;
use super::wire::Wire;
use crate::config::Config;

/// How much longer than asked a socket timeout may stay (see
/// [`Conn::fit_timeout`]): a call's time may be overrun by this much.
const TIMEOUT_SLACK: Duration = Duration::from_millis(10);

/// A server's host and port (a cluster node, the Sentinel master).
pub(crate) type Node = (String, u16);

/// A pooled connection: its link, the read/write timeout its socket has
/// now (set again only when a call's budget needs a shorter one: a
/// `setsockopt` per round trip would be a system call beyond the wire), and
/// the buffer its [`Template`] commands are packed into, kept for its life.
/// The link is boxed: a connection moves in and out of the pool on every
/// round trip, and the redis crate's connections are several hundred bytes.
pub(crate) struct Conn {
    link: Box<Link>,
    timeout: Duration,
    out: Vec<u8>,
}

/// `PING`, packed.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// The connection of either kind inside a [`Conn`].
pub(crate) enum Link {
    /// One server (standalone or the Sentinel master) over plain TCP or a
    /// Unix socket, RESP2: ferrolock's own connection, whose reads ride out
    /// signals (see `wire.rs`).
    Plain(Wire),
    /// One server over TLS, or speaking RESP3: the redis crate's connection
    /// (its round trips run with signals deferred, see `signals.rs`).
    Single(redis::Connection),
    /// A cluster connection (routes by key, follows MOVED/ASK).
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Conn {
    /// Wraps `link`, whose socket timeouts are `timeout`.
    pub(super) fn new(link: Link, timeout: Duration) -> Self {
        Self {
            link: Box::new(link),
            timeout,
            out: Vec::new(),
        }
    }

    /// Sends the command `t` with `hole` in its place and reads its reply
    /// (a server error comes back as [`Value::ServerError`]). Packed into
    /// this connection's buffer: no allocation once it has grown to size.
    pub(crate) fn request(&mut self, t: &Template, hole: &[u8]) -> RedisResult<Value> {
        self.out.clear();
        t.write(&mut self.out, hole);
        match &mut *self.link {
            Link::Plain(w) => w.req_packed_command(&self.out),
            Link::Single(c) => c.req_packed_command(&self.out),
            // Routed by the key it finds in the packed command.
            Link::Cluster(c) => c.req_packed_command(&self.out),
        }
    }

    /// [`Conn::request`] behind a `PING` sent in the same write, so that
    /// the clients the command publishes to (a release handing the lock to
    /// a waiter) get their messages before we get our reply: the command's
    /// reply, or the `PING`'s if that is an error.
    ///
    /// Redis writes the replies of one event-loop pass at its end, most
    /// recently queued client first. A script that PUBLISHes queues the
    /// subscriber, then its own reply queues us in front of it: the caller
    /// would be woken (and take a CPU) before the waiter the script just
    /// handed a lock to. The PING's reply queues us before the script runs,
    /// so the waiter is written first. On a 2-core machine this took about
    /// 25 µs off each hand-over (see `release_token` in
    /// `lock/single/release.rs`). On a cluster, the command alone (a PING
    /// would go to any node).
    pub(crate) fn request_behind_ping(&mut self, t: &Template, hole: &[u8]) -> RedisResult<Value> {
        let con: &mut dyn Packed = match &mut *self.link {
            Link::Plain(w) => w,
            Link::Single(c) => c,
            Link::Cluster(_) => return self.request(t, hole),
        };
        self.out.clear();
        self.out.extend_from_slice(PING);
        t.write(&mut self.out, hole);
        con.send_packed(&self.out)?;
        let ping = con.recv()?;
        let reply = con.recv()?;
        match ping {
            Value::ServerError(_) => Ok(ping),
            _ => Ok(reply),
        }
    }

    /// The read/write timeout its socket has now (the last round trip's).
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The connection inside, for what differs by kind (pipelines).
    pub(crate) fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    /// Whether a signal arriving during a round trip would cut it short:
    /// the redis crate's connections, whose round trips must then run with
    /// signals deferred (see `signals.rs`). Ours reads on (`wire.rs`).
    pub(super) fn defers_signals(&self) -> bool {
        !matches!(*self.link, Link::Plain(_))
    }

    /// Sets the socket read and write timeouts to `timeout` unless they are
    /// that already, or longer by less than [`TIMEOUT_SLACK`]: a call's
    /// budget, made just before its round trip, leaves a hair less than the
    /// command timeout, and setting it exactly would cost two `setsockopt`
    /// calls on every round trip.
    pub(super) fn fit_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        if timeout <= self.timeout && self.timeout - timeout < TIMEOUT_SLACK {
            return Ok(());
        }
        match &mut *self.link {
            Link::Plain(w) => w.set_timeout(timeout)?,
            Link::Single(c) => {
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))?;
            }
            Link::Cluster(c) => {
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))?;
            }
        }
        self.timeout = timeout;
        Ok(())
    }

    fn inner(&mut self) -> &mut dyn ConnectionLike {
        match &mut *self.link {
            Link::Plain(w) => w,
            Link::Single(c) => c,
            Link::Cluster(c) => c.as_mut(),
        }
    }

    fn inner_ref(&self) -> &dyn ConnectionLike {
        match &*self.link {
            Link::Plain(w) => w,
            Link::Single(c) => c,
            Link::Cluster(c) => c.as_ref(),
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

/// A connection to one server that takes commands packed by the caller and
/// hands back their replies one by one (for commands sent in one write).
pub(crate) trait Packed {
    /// Writes `bytes` (one or more packed commands).
    fn send_packed(&mut self, bytes: &[u8]) -> RedisResult<()>;
    /// Reads the next reply.
    fn recv(&mut self) -> RedisResult<Value>;
}

impl Packed for Wire {
    fn send_packed(&mut self, bytes: &[u8]) -> RedisResult<()> {
        Wire::send_packed(self, bytes)
    }
    fn recv(&mut self) -> RedisResult<Value> {
        Wire::recv(self)
    }
}

impl Packed for redis::Connection {
    fn send_packed(&mut self, bytes: &[u8]) -> RedisResult<()> {
        self.send_packed_command(bytes)
    }
    fn recv(&mut self) -> RedisResult<Value> {
        self.recv_response()
    }
}

/// A client for one server, with our socket options and TLS certificates.
///
/// Its connections skip `CLIENT SETINFO` (two more replies in the
/// connection handshake, each of which the redis crate waits for up to the
/// whole connect timeout when the server does not answer: see [`open`]).
pub(super) fn single_client(info: &ConnectionInfo, config: &Config) -> RedisResult<redis::Client> {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info
        .clone()
        .set_redis_settings(settings)
        .set_tcp_settings(tcp_settings());
    match &config.tls_certs {
        Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
        None => redis::Client::open(info),
    }
}

/// Socket options of every connection to a data node:
///
/// - `TCP_NODELAY`, as in redis-py and hiredis. Our commands are one write
///   each, but Nagle's algorithm would hold back a second small write (a
///   pipelined command, an UNSUBSCRIBE followed by the next SUBSCRIBE) until
///   the first is acknowledged.
/// - `SO_LINGER` 0: closing the socket resets the connection and discards
///   what the kernel has not sent yet. A connection is closed after a round
///   trip failed; without this, the rest of a command whose write timed out
///   would still go out after the caller was told it failed. (A command the
///   server has already received still runs: Linux keeps received data
///   readable after a reset, tested with a paused redis-server. Lost replies
///   are settled instead: see `settle.rs`.) It also spares closed
///   connections the TIME-WAIT state.
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_linger_time(Duration::ZERO)
}

/// A data connection to the server of `client` (see [`open`]): our own
/// ([`Wire`]) when it is plain (TCP or a Unix socket, RESP2), else the
/// redis crate's.
pub(super) fn open_link(
    client: &redis::Client,
    config: &Config,
    connect_timeout: Duration,
) -> RedisResult<Link> {
    match Wire::open(
        client.get_connection_info(),
        connect_timeout,
        config.command_timeout,
    ) {
        Some(wire) => wire.map(Link::Plain),
        None => open(client, config, connect_timeout).map(Link::Single),
    }
}

/// Connects `client` within `connect_timeout`, with the command timeout set
/// for reads and writes.
///
/// The redis crate sends its handshake (`HELLO` or `AUTH`, `SELECT`) as one
/// pipeline and reads each reply with the time left after connecting, even
/// after one timed out: with two replies, a server that accepts connections
/// but does not answer (paused, hung) held a connect for twice its timeout.
/// Each read gets its share of the timeout instead.
pub(super) fn open(
    client: &redis::Client,
    config: &Config,
    connect_timeout: Duration,
) -> RedisResult<redis::Connection> {
    let s = client.get_connection_info().redis_settings();
    let replies =
        u32::from(s.protocol().supports_resp3() || s.password().is_some()) + u32::from(s.db() != 0);
    let connect_timeout = (connect_timeout / replies.max(1)).max(Duration::from_millis(1));
    let conn = client.get_connection_with_timeout(connect_timeout)?;
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

/// True when a round trip that failed like this may have run on the server:
/// the command was sent and no reply was read (a timeout, a dropped
/// connection, a signal cutting the read short), or the reply could not be
/// read. False for the server's own error replies.
pub(crate) fn may_have_run(e: &redis::RedisError) -> bool {
    use redis::ErrorKind as K;
    matches!(e.kind(), K::Io | K::Parse | K::UnexpectedReturnType)
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
