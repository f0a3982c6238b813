//! A plain connection to one server (TCP or a Unix socket, RESP2), spoken
//! to by ferrolock itself: commands are written with the redis crate's
//! encoder on a socket of our own, replies read by `resp.rs`.
//!
//! Why not the redis crate's `Connection`: a signal whose handler was
//! installed without `SA_RESTART` interrupts a blocked read (`EINTR`), and
//! on a socket with a read timeout Linux never restarts the read, whatever
//! the flag. CPython installs every Python-level handler that way, and so
//! does PHP's `pcntl_signal` with `$restart_syscalls = false`. The redis
//! crate reports the interrupted read as an I/O error and skips the late
//! reply, yet Redis has run the command: a popped task would be gone without
//! being returned, an acquired lock held by a token nobody knows. Blocking
//! the signals around every round trip (`signals.rs`) avoids that at the
//! price of two `rt_sigprocmask` calls per round trip, beyond the wire.
//!
//! Here the read itself takes `EINTR` in its stride: the handler has run
//! (CPython's and PHP's only note the signal, for the interpreter to act on
//! once the call returns) and the read goes on, for the rest of the round
//! trip's time. A signal costs nothing unless one arrives, and the call
//! returns with the reply it was waiting for. `write_all` retries `EINTR`
//! by itself.
//!
//! TLS connections and RESP3 stay with the redis crate (their round trips
//! still defer signals).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, RedisResult, Value};

/// The socket of a [`Wire`].
enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Stream {
    fn set_timeouts(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
            #[cfg(unix)]
            Stream::Unix(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes),
            #[cfg(unix)]
            Stream::Unix(s) => s.write_all(bytes),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

/// One plain connection (see the module's documentation).
pub(crate) struct Wire {
    stream: Stream,
    replies: super::resp::Replies,
    db: i64,
    /// The socket's read/write timeout.
    timeout: Duration,
    /// False after a failed write or read: the connection's state is unknown
    /// (a reply may still come), it is not used again.
    open: bool,
}

/// The reader the parser pulls from: retries reads a signal interrupted
/// while the round trip has time left (one socket timeout from the first
/// interruption: the kernel restarts the socket's timeout on each read).
struct Interruptible<'a> {
    stream: &'a mut Stream,
    timeout: Duration,
    deadline: Option<Instant>,
}

impl Read for Interruptible<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.stream.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    let now = Instant::now();
                    let deadline = *self.deadline.get_or_insert(now + self.timeout);
                    if now >= deadline {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no reply within the read timeout (reads interrupted by signals)",
                        ));
                    }
                }
                other => return other,
            }
        }
    }
}

impl Wire {
    /// Connects to the server of `info` within `connect_timeout` (each reply
    /// of the handshake, `AUTH` and `SELECT`, within its share of it), then
    /// sets `command_timeout` for reads and writes. `None` when `info` is
    /// not for a plain connection (TLS, RESP3): the redis crate connects.
    pub(crate) fn open(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Option<RedisResult<Self>> {
        let settings = info.redis_settings();
        if settings.protocol().supports_resp3() {
            return None;
        }
        let started = Instant::now();
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) => connect_tcp(host, *port, connect_timeout),
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => UnixStream::connect(path)
                .map(Stream::Unix)
                .map_err(RedisError::from),
            _ => return None,
        };
        Some(stream.and_then(|stream| {
            let replies = u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
            let left = connect_timeout.saturating_sub(started.elapsed());
            let share = (left / replies.max(1)).max(Duration::from_millis(1));
            let mut wire = Wire {
                stream,
                replies: super::resp::Replies::default(),
                db: settings.db(),
                timeout: share,
                open: true,
            };
            wire.stream.set_timeouts(share)?;
            wire.handshake(settings)?;
            wire.set_timeout(command_timeout)?;
            Ok(wire)
        }))
    }

    /// `AUTH` (as the redis crate does: with the username, or without it
    /// for a server older than ACLs) and `SELECT`.
    fn handshake(&mut self, settings: &redis::RedisConnectionInfo) -> RedisResult<()> {
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            let mut reply = self.req_command(&auth)?;
            if settings.username().is_some()
                && let Value::ServerError(e) = &reply
                && e.details()
                    .is_some_and(|d| d.contains("wrong number of arguments for 'auth'"))
            {
                reply = self.req_command(redis::cmd("AUTH").arg(password))?;
            }
            if let Value::ServerError(e) = reply {
                return Err(RedisError::from((
                    redis::ErrorKind::AuthenticationFailed,
                    "Password authentication failed",
                    e.details().unwrap_or_default().to_owned(),
                )));
            }
        }
        if settings.db() != 0
            && let Value::ServerError(e) =
                self.req_command(redis::cmd("SELECT").arg(settings.db()))?
        {
            return Err(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "Redis server refused to switch database",
                e.details().unwrap_or_default().to_owned(),
            )));
        }
        Ok(())
    }

    /// Sets the socket's read and write timeouts.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        self.stream.set_timeouts(timeout)?;
        self.timeout = timeout;
        Ok(())
    }

    /// Writes `bytes` (one or more packed commands).
    pub(crate) fn send_packed(&mut self, bytes: &[u8]) -> RedisResult<()> {
        if !self.open {
            return Err(closed());
        }
        self.stream.write_all(bytes).map_err(|e| {
            self.open = false;
            RedisError::from(e)
        })
    }

    /// Reads one reply.
    pub(crate) fn recv(&mut self) -> RedisResult<Value> {
        if !self.open {
            return Err(closed());
        }
        let mut reader = Interruptible {
            stream: &mut self.stream,
            timeout: self.timeout,
            deadline: None,
        };
        let reply = self.replies.read_value(&mut reader);
        if reply.is_err() {
            self.open = false;
        }
        reply
    }
}

fn closed() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::NotConnected,
        "the connection failed before (a reply may still be on its way)",
    ))
}

/// A TCP connection to `host:port` within `timeout` (each address the name
/// resolves to, in turn, within the time left), with the socket options of
/// `conn::tcp_settings`: `TCP_NODELAY`, and `SO_LINGER` 0.
fn connect_tcp(host: &str, port: u16, timeout: Duration) -> RedisResult<Stream> {
    let started = Instant::now();
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                s.set_nodelay(true)?;
                linger_zero(&s)?;
                return Ok(Stream::Tcp(s));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(RedisError::from(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("could not connect to {host}:{port} in time"),
        )
    })))
}

/// `SO_LINGER` 0: closing resets the connection (see `conn::tcp_settings`).
fn linger_zero(s: &TcpStream) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: sets an option of a socket we own from a value we own,
        // of the size we pass.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                std::ptr::from_ref(&linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(unix))]
    let _ = s;
    Ok(())
}

impl ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send_packed(cmd)?;
        self.recv()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send_packed(cmd)?;
        let mut replies = Vec::with_capacity(count);
        let mut first_err = None;
        for i in 0..offset + count {
            // Every reply is read, so that none is left for the next command.
            match self.recv() {
                Ok(Value::ServerError(e)) if i < offset => {
                    first_err.get_or_insert_with(|| RedisError::from(e));
                }
                Ok(v) if i >= offset => replies.push(v),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        first_err.map_or(Ok(replies), Err)
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}
