//! Shared helpers of the integration tests: one redis-server per test binary
//! (killed at exit), and a unique key prefix per test so tests run in parallel.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use ferrolock::testing::{RedisServer, unique_prefix};
use ferrolock::{Client, Config, Lock, LockOptions, QueueOptions, Wait};

static SERVER: OnceLock<Mutex<Option<RedisServer>>> = OnceLock::new();

extern "C" fn stop_shared_server() {
    if let Some(m) = SERVER.get()
        && let Ok(mut s) = m.lock()
    {
        s.take();
    }
}

/// URL of the redis-server shared by the tests of this binary.
pub fn url() -> String {
    let m = SERVER.get_or_init(|| {
        // SAFETY: registering a plain extern "C" function with atexit.
        unsafe { libc::atexit(stop_shared_server) };
        Mutex::new(Some(RedisServer::start()))
    });
    m.lock().unwrap().as_ref().unwrap().url()
}

/// A plain redis connection to the shared server, for assertions.
pub fn raw() -> redis::Connection {
    redis::Client::open(url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// A fresh (unshared) client of the shared server.
pub fn client() -> Client {
    Client::new(Config::from_url(&url()).unwrap()).unwrap()
}

/// Lock options whose keys are unique to this test.
pub fn lock_opts(test: &str) -> LockOptions {
    let mut o = LockOptions::default();
    o.prefix = format!("{}Lock:", unique_prefix(test)).into_bytes();
    o
}

/// Queue options whose keys are unique to this test.
pub fn queue_opts(test: &str) -> QueueOptions {
    let p = unique_prefix(test);
    let mut o = QueueOptions::default();
    o.prefix = format!("{p}Queue:").into_bytes();
    o.lock_prefix = format!("{p}Lock:").into_bytes();
    o
}

/// Number of keys in the shared server's database whose name starts with `prefix`.
pub fn keys_with(prefix: &[u8]) -> usize {
    let mut c = raw();
    let mut pattern = prefix.to_vec();
    pattern.push(b'*');
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg(pattern).query(&mut c).unwrap();
    keys.len()
}

/// A server of its own (for tests that reconfigure or flush it), a client of
/// it, and a plain connection for assertions. Keep the server alive.
pub fn own_server() -> (RedisServer, Client, redis::Connection) {
    let server = RedisServer::start();
    let client = Client::new(Config::from_url(&server.url()).unwrap()).unwrap();
    let conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    (server, client, conn)
}

/// A thread that waits up to 20 s for lock "x"; it returns the lock, whether
/// it got it, and when the wait ended.
pub fn wait_in_thread(c: &Client, opts: LockOptions) -> thread::JoinHandle<(Lock, bool, Instant)> {
    let c = c.clone();
    thread::spawn(move || {
        let l = Lock::new(&c, b"x", opts).unwrap();
        let ok = l.acquire(Wait::For(Duration::from_secs(20)), None).unwrap();
        (l, ok, Instant::now())
    })
}
