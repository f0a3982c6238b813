//! The Lua scripts (one file each under `scripts/`, the KEYS count in the file
//! name) and how they are invoked: EVALSHA, with a SCRIPT LOAD and one retry
//! when the server answers NOSCRIPT (after a restart, a failover, a flush).
//!
//! Shared helpers (waiter bookkeeping, server time, reclaiming expired
//! reservations) exist once, in `prelude.lua`; `build.rs` puts in each
//! script the helpers it uses, those only its slow path uses after a
//! `-- slow path` line (so its common case creates no closure it skips).

use std::sync::LazyLock;

use redis::{Cmd, ConnectionLike, FromRedisValue, RedisResult, ToRedisArgs};

use crate::client::Client;
use crate::client::conn::{Conn, Link, Packed};
use crate::client::encode::Template;
use crate::error::Result;

/// One Lua script, hashed once.
pub(crate) struct LuaScript {
    script: redis::Script,
}

macro_rules! lua {
    ($file:literal) => {
        LazyLock::new(|| {
            let code = include_str!(concat!(env!("OUT_DIR"), "/scripts/", $file));
            LuaScript {
                script: redis::Script::new(code),
            }
        })
    };
}

pub(crate) static LOCK_ACQUIRE: LazyLock<LuaScript> = lua!("lock_acquire-5.lua");
pub(crate) static LOCK_ABANDON: LazyLock<LuaScript> = lua!("lock_abandon-5.lua");
pub(crate) static LOCK_RELEASE: LazyLock<LuaScript> = lua!("lock_release-4.lua");
pub(crate) static LOCK_EXTEND: LazyLock<LuaScript> = lua!("lock_extend-2.lua");
pub(crate) static LOCK_FENCE: LazyLock<LuaScript> = lua!("lock_fence-1.lua");
pub(crate) static LOCK_DRAW_FENCE: LazyLock<LuaScript> = lua!("lock_draw_fence-2.lua");
pub(crate) static LOCK_LEAVE: LazyLock<LuaScript> = lua!("lock_leave-4.lua");
pub(crate) static QUEUE_ENQUEUE: LazyLock<LuaScript> = lua!("queue_enqueue-10.lua");
pub(crate) static QUEUE_TAKE: LazyLock<LuaScript> = lua!("queue_take-11.lua");
pub(crate) static QUEUE_SETTLE: LazyLock<LuaScript> = lua!("queue_settle-11.lua");
pub(crate) static QUEUE_TOP: LazyLock<LuaScript> = lua!("queue_top-10.lua");
pub(crate) static QUEUE_DEQUEUE: LazyLock<LuaScript> = lua!("queue_dequeue-4.lua");
pub(crate) static QUEUE_ACK: LazyLock<LuaScript> = lua!("queue_ack-10.lua");
pub(crate) static QUEUE_NACK: LazyLock<LuaScript> = lua!("queue_nack-10.lua");
pub(crate) static QUEUE_TOUCH: LazyLock<LuaScript> = lua!("queue_touch-2.lua");
pub(crate) static QUEUE_DEAD: LazyLock<LuaScript> = lua!("queue_dead-10.lua");
pub(crate) static QUEUE_STATS: LazyLock<LuaScript> = lua!("queue_stats-3.lua");
pub(crate) static QUEUE_LEAVE: LazyLock<LuaScript> = lua!("queue_leave-4.lua");
pub(crate) static OPS_LOCK: LazyLock<LuaScript> = lua!("ops_lock-4.lua");
pub(crate) static OPS_INFLIGHT: LazyLock<LuaScript> = lua!("ops_inflight-2.lua");

impl LuaScript {
    /// Starts an EVALSHA call with `keys`; add arguments with [`Call::arg`].
    pub(crate) fn call(&'static self, keys: &[&[u8]]) -> Call {
        // Room for the keys and up to eight arguments of ~24 bytes, so that
        // building the command does not grow its buffers step by step.
        let key_bytes: usize = keys.iter().map(|k| k.len()).sum();
        let mut cmd = Cmd::with_capacity(keys.len() + 3 + 8, key_bytes + 64 + 8 * 24);
        cmd.arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        Call {
            script: Some(self),
            cmd,
        }
    }

    /// An invocation with `keys` whose first argument (ARGV[1], the owner
    /// token) is left open and the others are `rest`: packed once, sent
    /// many times (see [`Prepared`]).
    pub(crate) fn prepare(&'static self, keys: &[&[u8]], rest: &[&[u8]]) -> Prepared {
        let count = keys.len().to_string();
        let mut before: Vec<&[u8]> = Vec::with_capacity(keys.len() + 3);
        before.extend([
            &b"EVALSHA"[..],
            self.script.get_hash().as_bytes(),
            count.as_bytes(),
        ]);
        before.extend_from_slice(keys);
        Prepared {
            script: self,
            template: Template::new(&before, rest),
        }
    }
}

/// A script invocation packed once, but for its first argument (the owner
/// token): the hot calls of a lock (its uncontended release, the short
/// acquire), which then cost a copy of their bytes into the connection's
/// buffer (see `client/encode.rs`).
pub(crate) struct Prepared {
    script: &'static LuaScript,
    template: Template,
}

impl Prepared {
    /// Runs it with `token` as ARGV[1] on `conn` (behind a `PING` when
    /// `behind_ping`: see [`Conn::request_behind_ping`]), loading the script
    /// if the server does not know it. The reply, a server error as `Err`.
    pub(crate) fn query(
        &self,
        conn: &mut Conn,
        token: &[u8],
        behind_ping: bool,
    ) -> RedisResult<redis::Value> {
        let run = |conn: &mut Conn| {
            if behind_ping {
                conn.request_behind_ping(&self.template, token)
            } else {
                conn.request(&self.template, token)
            }
            .and_then(redis::Value::extract_error)
        };
        match run(conn) {
            Err(e) if is_noscript(&e) => {
                self.script.script.load(conn)?;
                run(conn)
            }
            other => other,
        }
    }

    /// The bytes sent for `token`.
    #[cfg(test)]
    pub(crate) fn packed(&self, token: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.template.write(&mut out, token);
        out
    }
}

/// One prepared script invocation, or a native command that stands in for
/// one where the server has it (see `Call::native`).
pub(crate) struct Call {
    /// `None` for a native command.
    script: Option<&'static LuaScript>,
    cmd: Cmd,
}

impl Call {
    /// A plain command in place of a script (e.g. `SET … IFEQ` for the
    /// extend script, on servers that have it): it runs the same way, in
    /// batches too, and is never loaded.
    pub(crate) fn native(cmd: Cmd) -> Self {
        Self { script: None, cmd }
    }

    /// True for a script invocation, false for a native command.
    pub(crate) fn is_script(&self) -> bool {
        self.script.is_some()
    }

    /// The bytes sent.
    #[cfg(test)]
    pub(crate) fn packed(&self) -> Vec<u8> {
        self.cmd.get_packed_command()
    }

    /// Appends an argument (ARGV).
    pub(crate) fn arg(mut self, a: impl ToRedisArgs) -> Self {
        self.cmd.arg(a);
        self
    }

    /// Runs the call on a pooled connection of `client` (see [`Client::run`];
    /// `context` prefixes errors, e.g. `lock "orders"`).
    pub(crate) fn run<T: FromRedisValue>(&self, client: &Client, context: &str) -> Result<T> {
        client.run(context, |c| self.query(c))
    }

    /// Runs the call, loading the script if the server does not know it.
    pub(crate) fn query<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        match (self.cmd.query(con), self.script) {
            (Err(e), Some(lua)) if is_noscript(&e) => {
                lua.script.load(con)?;
                self.cmd.query(con)
            }
            (other, _) => other,
        }
    }
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Sends `cmds` in one write and reads their replies, in order; the first
/// server error among them is the result.
///
/// Not the redis crate's pipeline: after a reply that cannot be read (a
/// read timeout) it goes on reading the next, each read waiting up to the
/// socket timeout again, so a pipeline of n commands to a server that stopped
/// answering took n times the call's time. Here the first failed read ends
/// it (the connection is then dropped by the client).
fn pipelined<'a>(
    con: &mut dyn Packed,
    cmds: impl IntoIterator<Item = &'a Cmd>,
) -> RedisResult<Vec<redis::Value>> {
    let mut packed = Vec::new();
    let mut count = 0;
    for cmd in cmds {
        cmd.write_packed_command(&mut packed);
        count += 1;
    }
    con.send_packed(&packed)?;
    let mut replies = Vec::with_capacity(count);
    for _ in 0..count {
        replies.push(con.recv()?);
    }
    replies
        .into_iter()
        .map(redis::Value::extract_error)
        .collect()
}

/// Runs many calls in one round trip (a pipeline; on a cluster, one pipeline
/// per node), returning one reply per call, in order. A NOSCRIPT anywhere
/// loads the scripts and runs the batch once more (the scripts are idempotent
/// for the same arguments: the batch is of token-checked extends).
pub(crate) fn query_batch(conn: &mut Conn, calls: &[Call]) -> RedisResult<Vec<redis::Value>> {
    let run = |conn: &mut Conn| -> RedisResult<Vec<redis::Value>> {
        match conn.link() {
            Link::Plain(w) => pipelined(w, calls.iter().map(|call| &call.cmd)),
            Link::Single(c) => pipelined(c, calls.iter().map(|call| &call.cmd)),
            Link::Cluster(c) => {
                let mut pipe = redis::cluster::cluster_pipe();
                for call in calls {
                    pipe.add_command(call.cmd.clone());
                }
                pipe.query(c.as_mut())
            }
        }
    };
    match run(conn) {
        Err(e) if is_noscript(&e) => {
            for lua in calls.iter().filter_map(|call| call.script) {
                lua.script.load(conn)?;
            }
            run(conn)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Names of the `local function`s defined in `code`.
    fn defined(code: &str) -> BTreeSet<String> {
        code.lines()
            .filter_map(|l| l.strip_prefix("local function "))
            .filter_map(|rest| rest.split('(').next())
            .map(str::to_string)
            .collect()
    }

    /// Where `name` occurs as a whole word in `code`, comments excluded
    /// (byte offsets, in order).
    fn mentions_at(code: &str, name: &str) -> Vec<usize> {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let mut found = Vec::new();
        let mut offset = 0;
        for line in code.split_inclusive('\n') {
            let l = line.split("--").next().unwrap_or_default();
            found.extend(
                l.match_indices(name)
                    .filter(|(i, _)| {
                        !l[..*i].chars().next_back().is_some_and(word)
                            && !l[i + name.len()..].chars().next().is_some_and(word)
                    })
                    .map(|(i, _)| offset + i),
            );
            offset += line.len();
        }
        found
    }

    /// How often `name` occurs as a whole word in `code`, comments excluded.
    fn mentions(code: &str, name: &str) -> usize {
        mentions_at(code, name).len()
    }

    /// `build.rs` puts in each script exactly the prelude helpers it uses,
    /// each defined before its first use.
    #[test]
    fn scripts_carry_the_helpers_they_use_and_no_others() {
        let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scripts");
        let helpers = defined(&std::fs::read_to_string(sources.join("prelude.lua")).unwrap());
        assert!(helpers.contains("grant_next") && helpers.contains("digits"));
        let mut scripts: Vec<_> = std::fs::read_dir(&sources)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".lua") && n != "prelude.lua")
            .collect();
        scripts.sort();
        assert!(scripts.len() >= 12);
        let assembled = Path::new(env!("OUT_DIR")).join("scripts");
        for name in scripts {
            let code = std::fs::read_to_string(assembled.join(&name)).unwrap();
            let here = defined(&code);
            for h in &helpers {
                // A defined helper's own `local function` line is one mention.
                let used = mentions(&code, h) > usize::from(here.contains(h));
                assert_eq!(used, here.contains(h), "{name}: helper {h} used {used}");
                if used {
                    // Defined before its first use: Lua would look up a
                    // global of that name, which Redis refuses.
                    let definition = code.find(&format!("local function {h}(")).unwrap();
                    assert_eq!(
                        mentions_at(&code, h)[0],
                        definition + "local function ".len(),
                        "{name}: {h} used before it is defined"
                    );
                }
            }
        }
    }

    /// The common case of the hottest scripts (a scripted acquire of a free
    /// lock, an uncontended release, a pop with tasks due) creates no closure
    /// it does not call:
    /// the helpers of their slow paths are defined after the marker.
    #[test]
    fn common_cases_leave_the_slow_path_helpers_undefined() {
        let assembled = Path::new(env!("OUT_DIR")).join("scripts");
        for (name, slow_only) in [
            (
                "lock_acquire-5.lua",
                &["grant_next", "register_waiter", "heal_orphan"][..],
            ),
            (
                "lock_release-4.lua",
                &["grant_next", "next_fence", "now_us"][..],
            ),
            (
                "queue_take-11.lua",
                &[
                    "register_waiter",
                    "wake_waiters",
                    "next_work_at",
                    "ack_reservation",
                    "reclaim_expired",
                    "task_data",
                ][..],
            ),
        ] {
            let code = std::fs::read_to_string(assembled.join(name)).unwrap();
            let marker = code
                .find("\n-- slow path")
                .unwrap_or_else(|| panic!("{name}: no marker"));
            for h in slow_only {
                let at = code.find(&format!("local function {h}(")).unwrap();
                assert!(at > marker, "{name}: {h} is defined before the slow path");
            }
        }
    }
}
