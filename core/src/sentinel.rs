//! Finding the master of a Sentinel deployment, within the configured timeouts.
//!
//! We follow the Sentinel client guidelines
//! (<https://redis.io/docs/latest/develop/reference/sentinel-clients/>): ask
//! the sentinels in turn for the master's address
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`), move the first one that answers to
//! the front of the list, and check with `ROLE` that the address given
//! really is a master before trusting it.
//!
//! Why not `redis::sentinel::SentinelClient`: its blocking API connects to
//! sentinels and to the master without a timeout and reads their replies
//! without one either. One sentinel that hangs, or whose host went down
//! without resetting connections, then stalled every operation of the process
//! for good (a lookup happens at most once a second, see `client.rs`). It also
//! kept the order of the list, so a dead first sentinel cost every lookup its
//! connect timeout, and it opened a connection to the master on every lookup.
//! Here each sentinel gets `connect_timeout` to connect and `timeout` per
//! reply, the last one that answered is asked first, and `ROLE` is checked
//! only for an address not already confirmed.

use std::time::Duration;

use redis::{ConnectionInfo, RedisError, RedisResult, Value};

use crate::fork::current_pid;

/// The sentinels of one deployment, and what was learnt from them.
pub(crate) struct Resolver {
    /// Sentinel addresses, the one that answered last first.
    sentinels: Vec<ConnectionInfo>,
    /// An open connection to `sentinels[0]`, kept between lookups.
    conn: Option<redis::Connection>,
    /// The master address `ROLE` last confirmed.
    confirmed: Option<(String, u16)>,
    /// The process `conn` belongs to (a forked child must not use it).
    pid: u32,
}

/// Time limits of one lookup.
pub(crate) struct Timeouts {
    /// To open a connection (to a sentinel, or to the master for `ROLE`).
    pub connect: Duration,
    /// For each reply.
    pub command: Duration,
}

impl Resolver {
    /// A resolver asking `sentinels`, in this order at first.
    pub(crate) fn new(sentinels: Vec<ConnectionInfo>) -> Self {
        // Without `CLIENT SETINFO` on connect: the redis crate waits for each
        // of its two replies up to the connect timeout, so a sentinel that
        // accepts connections but never answers would cost twice that.
        let sentinels = sentinels
            .into_iter()
            .map(|info| {
                let settings = info.redis_settings().clone().set_skip_set_lib_name();
                info.set_redis_settings(settings)
            })
            .collect();
        Self {
            sentinels,
            conn: None,
            confirmed: None,
            pid: current_pid(),
        }
    }

    /// The address of master `name`, from the first sentinel that knows it.
    ///
    /// `open_master` opens a connection to an address a sentinel gave, for
    /// the `ROLE` check; it is called only when the address is not the one
    /// confirmed last, or when `recheck` is set (the caller saw an error that
    /// suggests the master changed).
    ///
    /// A sentinel that cannot be reached, does not answer in time, does not
    /// know the master or names a server that is not a master is skipped.
    /// When none helps, the error returned is one met on a master a sentinel
    /// named, if any (it is what the operator can act on), else the last one.
    pub(crate) fn master_address(
        &mut self,
        name: &str,
        recheck: bool,
        limits: &Timeouts,
        open_master: impl Fn(&str, u16) -> RedisResult<redis::Connection>,
    ) -> RedisResult<(String, u16)> {
        if self.pid != current_pid() {
            // Forked: the socket belongs to the parent. Forget, never close.
            std::mem::forget(self.conn.take());
            self.pid = current_pid();
        }
        let mut master_err = None;
        let mut last_err = None;
        for i in 0..self.sentinels.len() {
            let addr = match self.ask(i, name, limits) {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    last_err = Some(RedisError::from((
                        redis::ErrorKind::MasterNameNotFoundBySentinel,
                        "a sentinel does not know the master",
                        name.to_owned(),
                    )));
                    continue;
                }
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            if recheck || self.confirmed.as_ref() != Some(&addr) {
                if let Err(e) = check_role(&open_master, &addr) {
                    master_err = Some(e);
                    continue;
                }
                self.confirmed = Some(addr.clone());
            }
            if i > 0 {
                // The guidelines: the sentinel that answered goes first.
                let answered = self.sentinels.remove(i);
                self.sentinels.insert(0, answered);
            }
            return Ok(addr);
        }
        Err(master_err.or(last_err).unwrap_or_else(|| {
            RedisError::from((redis::ErrorKind::EmptySentinelList, "no sentinel given"))
        }))
    }

    /// Asks sentinel `i` for the master's address (`None`: it does not know
    /// the master). Keeps the connection when `i` is 0, the sentinel asked
    /// first next time too if it answers.
    fn ask(
        &mut self,
        i: usize,
        name: &str,
        limits: &Timeouts,
    ) -> RedisResult<Option<(String, u16)>> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(name);
        let kept = if i == 0 { self.conn.take() } else { None };
        let reused = kept.is_some();
        let mut conn = match kept {
            Some(conn) => conn,
            None => open(&self.sentinels[i], limits)?,
        };
        let reply: Option<(String, u16)> = match cmd.query(&mut conn) {
            Ok(reply) => reply,
            // A kept connection the sentinel closed meanwhile: one new try.
            Err(e)
                if reused && (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout() =>
            {
                conn = open(&self.sentinels[0], limits)?;
                cmd.query(&mut conn)?
            }
            Err(e) => return Err(e),
        };
        // Kept for next time: this sentinel will be first in the list.
        self.conn = Some(conn);
        Ok(reply)
    }
}

/// A connection to a sentinel, with the timeouts set.
fn open(info: &ConnectionInfo, limits: &Timeouts) -> RedisResult<redis::Connection> {
    let conn = redis::Client::open(info.clone())?.get_connection_with_timeout(limits.connect)?;
    conn.set_read_timeout(Some(limits.command))?;
    conn.set_write_timeout(Some(limits.command))?;
    Ok(conn)
}

/// Errors unless the server at `addr` says `ROLE` master.
fn check_role(
    open_master: &impl Fn(&str, u16) -> RedisResult<redis::Connection>,
    addr: &(String, u16),
) -> RedisResult<()> {
    let mut conn = open_master(&addr.0, addr.1)?;
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut conn)?;
    match role.first() {
        Some(Value::BulkString(r)) if r.as_slice() == b"master" => Ok(()),
        _ => Err(RedisError::from((
            redis::ErrorKind::MasterNameNotFoundBySentinel,
            "the server a sentinel named is not a master",
            format!("{}:{}", addr.0, addr.1),
        ))),
    }
}
