//! Sentinel: finding the master ([`Resolver`]), and what a pool knows of it
//! ([`MasterView`]: which master, trusted until when, who is asking).
//!
//! # Finding the master, within the configured timeouts
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
//! for good. It also kept the order of the list, so a dead first sentinel cost
//! every lookup (one a second, see [`MASTER_RECHECK`]) its timeout, and it connected
//! to the master for `ROLE` on every lookup. Here each sentinel gets
//! `connect_timeout` to connect and `timeout` per reply, the last one that
//! answered is asked first, and `ROLE` is checked once per address (again
//! when the caller asks for it, after an error). Host names are resolved by
//! the system resolver, which has timeouts of its own.
//!
//! What is not carried over: the crate skipped masters the sentinel flags as
//! down (`s_down`); the guidelines do not ask for it, and `ROLE` (or the
//! first command) finds a dead master anyway.
//!
//! # Tracking the master
//!
//! A pool trusts the master it knows for [`MASTER_RECHECK`], then asks the
//! sentinels again; an error that suggests a failover makes it ask before
//! the next command ([`MasterView::suspect`]). One thread asks at a time,
//! holding no lock meanwhile (see `Client::master_client`): the others go on
//! with the master known so far, unless it is suspect or there is none;
//! those wait for the answer and share its error if it fails. When no
//! sentinel answers at all, the known master is kept, trusted for longer
//! after each such failure (up to [`MASTER_TRUST_MAX`]), so that a process
//! does not pay the sentinels' timeouts again every second; with none
//! known, that is an error.

use std::time::{Duration, Instant};

use redis::{ConnectionInfo, RedisError, RedisResult, Value};

use super::conn::{Node, open, single_client, tcp_addr};
use crate::config::{Config, Target, node_info};
use crate::error::{Error, ErrorKind, Result};

/// How long the Sentinel master address is trusted before the sentinels are
/// asked again. After a failover the old master keeps accepting writes until
/// the sentinels demote it (seconds); re-asking bounds how long we could
/// keep writing there.
pub(super) const MASTER_RECHECK: Duration = Duration::from_secs(1);

/// The longest the known Sentinel master is trusted without confirmation
/// while no sentinel answers (a lookup costs their timeouts).
const MASTER_TRUST_MAX: Duration = Duration::from_secs(30);

/// The sentinels of one deployment, and what was learnt from them.
pub(super) struct Resolver {
    /// Sentinel addresses, the one that answered last first.
    sentinels: Vec<ConnectionInfo>,
    /// An open connection to `sentinels[0]`, kept between lookups.
    conn: Option<redis::Connection>,
    /// The master address `ROLE` last confirmed.
    confirmed: Option<(String, u16)>,
}

/// Time limits of one lookup.
pub(super) struct Timeouts {
    /// To open a connection (to a sentinel, or to the master for `ROLE`).
    pub connect: Duration,
    /// For each reply.
    pub command: Duration,
}

/// A lookup that found no master.
pub(super) struct LookupError {
    /// An error met on a master a sentinel named, if any (it is what the
    /// operator can act on), else the last one.
    pub error: RedisError,
    /// True when no sentinel named any address: they could not be reached,
    /// did not answer, or do not know the master. The caller may then go on
    /// with the master it knows; not when a sentinel named a server that
    /// failed the check, which may be a new master after a failover.
    pub no_answer: bool,
    /// No sentinel answered, but the known master passed the `ROLE` check
    /// the caller asked for.
    pub known_confirmed: bool,
}

impl Resolver {
    /// A resolver asking `sentinels`, in this order at first.
    pub(super) fn new(sentinels: Vec<ConnectionInfo>) -> Self {
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
        }
    }

    /// The address of master `name`, from the first sentinel that knows it.
    ///
    /// `open_master` opens a connection to an address a sentinel gave, for
    /// the `ROLE` check; it is called for an address `ROLE` has not
    /// confirmed yet, and for any address when `recheck` is set (the caller
    /// saw an error that suggests the master changed). An address that fails
    /// the check is not checked again in the same lookup, whichever sentinel
    /// names it.
    ///
    /// A sentinel that cannot be reached, does not answer in time, does not
    /// know the master or names a server that is not a master is skipped.
    /// Sentinels that could not be asked go to the end of the list.
    ///
    /// When no sentinel names any address, `recheck` is set and the caller
    /// knows a master (`known`), that one gets the `ROLE` check instead.
    fn master_address(
        &mut self,
        name: &str,
        known: Option<&(String, u16)>,
        recheck: bool,
        limits: &Timeouts,
        open_master: impl Fn(&str, u16) -> RedisResult<redis::Connection>,
    ) -> Result<(String, u16), LookupError> {
        let mut master_err = None;
        let mut last_err = None;
        let mut failed: Vec<(String, u16)> = Vec::new();
        let mut unreachable = Vec::new();
        for i in 0..self.sentinels.len() {
            let (addr, conn) = match self.ask(i, name, limits) {
                Ok((Some(addr), conn)) => (addr, conn),
                Ok((None, _)) => {
                    last_err = Some(RedisError::from((
                        redis::ErrorKind::MasterNameNotFoundBySentinel,
                        "a sentinel does not know the master",
                        name.to_owned(),
                    )));
                    continue;
                }
                Err(e) => {
                    unreachable.push(i);
                    last_err = Some(e);
                    continue;
                }
            };
            if failed.contains(&addr) {
                continue;
            }
            if (recheck || self.confirmed.as_ref() != Some(&addr))
                && let Err(e) = self.confirm(&open_master, &addr)
            {
                failed.push(addr);
                master_err = Some(e);
                continue;
            }
            // The guidelines: the sentinel that answered goes first, and we
            // keep its connection for next time.
            self.reorder(Some(i), &unreachable);
            self.conn = Some(conn);
            return Ok(addr);
        }
        self.reorder(None, &unreachable);
        let no_answer = master_err.is_none() && failed.is_empty();
        let mut known_confirmed = false;
        if let Some(addr) = known.filter(|_| no_answer && recheck) {
            if let Err(error) = self.confirm(&open_master, addr) {
                return Err(LookupError {
                    error,
                    no_answer: false,
                    known_confirmed: false,
                });
            }
            known_confirmed = true;
        }
        let error = master_err.or(last_err).unwrap_or_else(|| {
            RedisError::from((redis::ErrorKind::EmptySentinelList, "no sentinel given"))
        });
        Err(LookupError {
            error,
            no_answer,
            known_confirmed,
        })
    }

    /// Puts sentinel `answered` first and the `unreachable` ones last,
    /// keeping the order of the others.
    fn reorder(&mut self, answered: Option<usize>, unreachable: &[usize]) {
        if answered.unwrap_or(0) == 0 && unreachable.is_empty() {
            return;
        }
        let rank = |i: usize| match i {
            _ if Some(i) == answered => 0,
            _ if unreachable.contains(&i) => 2,
            _ => 1,
        };
        let mut ranked: Vec<(usize, ConnectionInfo)> =
            self.sentinels.drain(..).enumerate().collect();
        ranked.sort_by_key(|(i, _)| rank(*i)); // stable: the order within a rank stays
        self.sentinels = ranked.into_iter().map(|(_, info)| info).collect();
    }

    /// [`check_role`], remembering whether `addr` passed it.
    fn confirm(
        &mut self,
        open_master: &impl Fn(&str, u16) -> RedisResult<redis::Connection>,
        addr: &(String, u16),
    ) -> RedisResult<()> {
        let checked = check_role(open_master, addr);
        self.confirmed = checked.is_ok().then(|| addr.clone());
        checked
    }

    /// Asks sentinel `i` for the master's address (`None`: it does not know
    /// the master), with the connection used. Sentinel 0 is asked on the
    /// kept connection, if there is one.
    fn ask(
        &mut self,
        i: usize,
        name: &str,
        limits: &Timeouts,
    ) -> RedisResult<(Option<(String, u16)>, redis::Connection)> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(name);
        let kept = if i == 0 { self.conn.take() } else { None };
        let reused = kept.is_some();
        let mut conn = match kept {
            Some(conn) => conn,
            None => open_sentinel(&self.sentinels[i], limits)?,
        };
        let reply = match cmd.query(&mut conn) {
            Ok(reply) => reply,
            // A kept connection the sentinel closed meanwhile: one new try.
            Err(e)
                if reused && (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout() =>
            {
                conn = open_sentinel(&self.sentinels[0], limits)?;
                cmd.query(&mut conn)?
            }
            Err(e) => return Err(e),
        };
        Ok((reply, conn))
    }
}

impl Resolver {
    /// The client of the master, found with the deployment's settings: the
    /// Sentinel lookup of a [`Config`] with a Sentinel target.
    pub(super) fn master_client(
        &mut self,
        config: &Config,
        known: Option<&Node>,
        recheck: bool,
    ) -> std::result::Result<redis::Client, LookupError> {
        let Target::Sentinel {
            master, node, tls, ..
        } = &config.target
        else {
            unreachable!("a Sentinel lookup has a Sentinel target")
        };
        let limits = Timeouts {
            connect: config.connect_timeout,
            command: config.command_timeout,
        };
        let (host, port) = self.master_address(master, known, recheck, &limits, |host, port| {
            // The ROLE check's connection: without CLIENT SETINFO, whose
            // replies the redis crate would each wait for up to the connect
            // timeout on a master that hangs.
            let settings = node.clone().set_skip_set_lib_name();
            let info = node_info(host, port, &settings, *tls)?;
            open(
                &single_client(&info, config)?,
                config,
                config.connect_timeout,
            )
        })?;
        node_info(&host, port, node, *tls)
            .and_then(|info| single_client(&info, config))
            .map_err(|error| LookupError {
                error,
                no_answer: false,
                known_confirmed: false,
            })
    }
}

/// What a pool knows of its Sentinel master.
pub(super) struct MasterView {
    /// The sentinels as configured (a fresh resolver starts from them).
    sentinels: Vec<ConnectionInfo>,
    /// The resolver; `None` while a thread is asking the sentinels with it.
    resolver: Option<Resolver>,
    /// The master believed right, and until when it is trusted without
    /// asking the sentinels again.
    master: Option<(redis::Client, Instant)>,
    /// Lookups in a row that no sentinel answered (the known master is then
    /// trusted for longer each time, up to [`MASTER_TRUST_MAX`]).
    failures: u32,
    /// Errors seen that suggest the master changed; the value as of the
    /// last lookup that checked `ROLE`.
    suspicions: u64,
    checked: u64,
    /// Lookups finished, and the error of the last one if it failed (for the
    /// threads that waited for it).
    lookups: u64,
    last_error: Option<(ErrorKind, String)>,
}

/// What a thread that needs the master does next ([`MasterView::next`]).
pub(super) enum Next {
    /// Use this master.
    Use(redis::Client),
    /// Ask the sentinels, with this resolver (handed back to
    /// [`MasterView::settle`]).
    Ask(Resolver, Asking),
    /// Wait until the lookup under way finishes (the count of lookups is
    /// this one then).
    Wait(u64),
}

/// The circumstances of one lookup.
pub(super) struct Asking {
    /// The suspicions it answers.
    suspicions: u64,
    /// Check `ROLE` even of an address confirmed before.
    pub recheck: bool,
    /// The master known so far.
    pub known: Option<Node>,
}

impl MasterView {
    /// A view of the master the `sentinels` know; none known yet.
    pub(super) fn new(sentinels: Vec<ConnectionInfo>) -> Self {
        Self {
            resolver: Some(Resolver::new(sentinels.clone())),
            sentinels,
            master: None,
            failures: 0,
            suspicions: 0,
            checked: 0,
            lookups: 0,
            last_error: None,
        }
    }

    /// The master if it is trusted still, or else whether to ask the
    /// sentinels or to wait for the thread asking them.
    pub(super) fn next(&mut self, now: Instant) -> Next {
        let suspect = self.suspicions != self.checked;
        match &self.master {
            Some((client, until)) if now < *until => return Next::Use(client.clone()),
            Some((client, _)) if self.resolver.is_none() && !suspect => {
                return Next::Use(client.clone()); // somebody is asking: go on meanwhile
            }
            _ => {}
        }
        match self.resolver.take() {
            Some(resolver) => Next::Ask(
                resolver,
                Asking {
                    suspicions: self.suspicions,
                    recheck: suspect || self.master.is_none(),
                    known: self
                        .master
                        .as_ref()
                        .and_then(|(c, _)| tcp_addr(c.get_connection_info())),
                },
            ),
            None => Next::Wait(self.lookups),
        }
    }

    /// Lookups finished so far.
    pub(super) fn lookups(&self) -> u64 {
        self.lookups
    }

    /// The error of the last lookup, if it failed.
    pub(super) fn failure(&self) -> Option<Error> {
        let (kind, message) = self.last_error.clone()?;
        Some(Error::new(kind, message))
    }

    /// Takes in the outcome of a lookup (`context` prefixes its error) and
    /// the resolver it used. Returns the master to use, and whether it moved
    /// (a failover: every pooled connection points at the old master).
    pub(super) fn settle(
        &mut self,
        resolver: Option<Resolver>,
        asked: &Asking,
        found: std::result::Result<redis::Client, LookupError>,
        context: &str,
    ) -> (Result<redis::Client>, bool) {
        self.resolver = resolver;
        self.lookups += 1;
        let now = Instant::now();
        let suspicions = asked.suspicions;
        match found {
            Ok(client) => {
                let moved = self.master.as_ref().is_some_and(|(old, _)| {
                    old.get_connection_info().addr() != client.get_connection_info().addr()
                });
                if asked.recheck {
                    self.checked = suspicions;
                }
                // An error seen meanwhile: this answer may predate it.
                let until = if self.suspicions == suspicions {
                    now + MASTER_RECHECK
                } else {
                    now
                };
                self.master = Some((client.clone(), until));
                self.failures = 0;
                self.last_error = None;
                (Ok(client), moved)
            }
            Err(LookupError {
                error,
                no_answer,
                known_confirmed,
            }) => match self.master.as_mut() {
                // No sentinel answered: keep the master we know rather than
                // fail (it passed ROLE if it was suspect).
                Some((client, until)) if no_answer => {
                    if known_confirmed {
                        self.checked = suspicions;
                    }
                    self.failures = self.failures.saturating_add(1);
                    let backoff = MASTER_RECHECK.saturating_mul(1 << self.failures.min(5));
                    *until = if self.suspicions == suspicions {
                        now + backoff.min(MASTER_TRUST_MAX)
                    } else {
                        now
                    };
                    self.last_error = None;
                    (Ok(client.clone()), false)
                }
                _ => {
                    let e = Error::from_redis(context, error);
                    self.last_error = Some((e.kind(), e.to_string()));
                    (Err(e), false)
                }
            },
        }
    }

    /// A lookup ended without handing its resolver back (a panic): a fresh
    /// resolver takes its place, and the threads waiting for it get an error.
    pub(super) fn abandoned(&mut self) {
        self.resolver = Some(Resolver::new(self.sentinels.clone()));
        self.lookups += 1;
        self.last_error = Some((ErrorKind::Connection, "a Sentinel lookup failed".into()));
    }

    /// An error suggests that the master changed: ask the sentinels (and
    /// check `ROLE`) before the next command, keeping the master we know
    /// only as a fallback.
    pub(super) fn suspect(&mut self) {
        self.suspicions += 1;
        if let Some((_, until)) = self.master.as_mut() {
            *until = Instant::now();
        }
    }

    /// In a forked child: starts afresh, without closing the parent's
    /// connection to a sentinel.
    pub(super) fn forget_after_fork(&mut self) {
        std::mem::forget(self.resolver.take());
        *self = Self::new(std::mem::take(&mut self.sentinels));
    }
}

/// A connection to a sentinel, with the timeouts set. It sends nothing on
/// connect unless the sentinels need a password (`CLIENT SETINFO` is
/// skipped, see [`Resolver::new`]): the redis crate waits for each reply of
/// its connection handshake up to the whole connect timeout.
fn open_sentinel(info: &ConnectionInfo, limits: &Timeouts) -> RedisResult<redis::Connection> {
    let conn = redis::Client::open(info.clone())?.get_connection_with_timeout(limits.connect)?;
    conn.set_read_timeout(Some(limits.command))?;
    conn.set_write_timeout(Some(limits.command))?;
    Ok(conn)
}

/// Errors unless the server at `addr` says `ROLE` master. A server that
/// refuses the command itself (an ACL without `@dangerous`: NOPERM; a proxy
/// without it: ERR unknown command) is taken at the sentinel's word.
fn check_role(
    open_master: &impl Fn(&str, u16) -> RedisResult<redis::Connection>,
    addr: &(String, u16),
) -> RedisResult<()> {
    let mut conn = open_master(&addr.0, addr.1)?;
    let role: Vec<Value> = match redis::cmd("ROLE").query(&mut conn) {
        Ok(role) => role,
        Err(e) if e.code() == Some("NOPERM") => return Ok(()),
        Err(e) if e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains("command")) => {
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    match role.first() {
        Some(Value::BulkString(r)) if r.as_slice() == b"master" => Ok(()),
        Some(Value::SimpleString(r)) if r == "master" => Ok(()),
        _ => Err(RedisError::from((
            redis::ErrorKind::MasterNameNotFoundBySentinel,
            "the server a sentinel named is not a master",
            format!("{}:{}", addr.0, addr.1),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    fn ports(r: &Resolver) -> Vec<u16> {
        r.sentinels
            .iter()
            .map(|i| match i.addr() {
                redis::ConnectionAddr::Tcp(_, port) => *port,
                other => panic!("not TCP: {other:?}"),
            })
            .collect()
    }

    fn resolver(ports: &[u16]) -> Resolver {
        let infos = ports
            .iter()
            .map(|p| ("127.0.0.1", *p).into_connection_info().unwrap())
            .collect();
        Resolver::new(infos)
    }

    #[test]
    fn the_sentinel_that_answered_goes_first_and_unreachable_ones_last() {
        let mut r = resolver(&[1, 2, 3, 4]);
        r.reorder(Some(2), &[0]);
        assert_eq!(ports(&r), [3, 2, 4, 1]);
        r.reorder(None, &[0, 1]);
        assert_eq!(ports(&r), [4, 1, 3, 2]);
        r.reorder(Some(0), &[]);
        assert_eq!(ports(&r), [4, 1, 3, 2], "nothing to move");
    }
}
