//! Redlock waiting against three real, independent redis-servers.
#![allow(clippy::unwrap_used)]

use std::thread;
use std::time::Duration;

use ferrolock::testing::RedisServer;
use ferrolock::{Client, Config, Redlock, Wait};

struct Masters {
    servers: Vec<RedisServer>,
}

impl Masters {
    fn start(n: usize) -> Self {
        Self {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    fn redlock(&self, name: &[u8]) -> Redlock {
        let clients = self
            .servers
            .iter()
            .map(|s| Client::new(Config::from_url(&s.url()).unwrap()).unwrap())
            .collect();
        Redlock::new(clients, name, Duration::from_secs(30), b"Lock:").unwrap()
    }

    fn conn(&self, i: usize) -> redis::Connection {
        redis::Client::open(self.servers[i].url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// EVALSHA calls each master has run so far.
    fn evalshas(&self) -> Vec<u64> {
        (0..self.servers.len())
            .map(|i| {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query(&mut self.conn(i))
                    .unwrap();
                info.lines()
                    .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
                    .and_then(|rest| rest.split(',').next())
                    .map_or(0, |n| n.parse().unwrap())
            })
            .collect()
    }

    /// Waiters registered on each master (each test has its own servers).
    fn waiters(&self) -> Vec<usize> {
        (0..self.servers.len())
            .map(|i| {
                let mut c = self.conn(i);
                let keys: Vec<String> = redis::cmd("KEYS").arg("*waiters").query(&mut c).unwrap();
                keys.iter()
                    .map(|k| redis::cmd("ZCARD").arg(k).query::<usize>(&mut c).unwrap())
                    .sum()
            })
            .collect()
    }
}

/// Acquires `lock` in a thread, waiting up to 30 s: (acquired, the lock).
fn wait_in_thread(lock: Redlock) -> thread::JoinHandle<(bool, Redlock)> {
    thread::spawn(move || {
        let ok = lock
            .acquire(Wait::For(Duration::from_secs(30)), None)
            .unwrap();
        (ok, lock)
    })
}

/// A waiting Redlock registers on every master and is handed the lock by the
/// release, re-checking a few times a second, not every few milliseconds.
#[test]
fn a_redlock_waiter_is_handed_the_lock_instead_of_polling() {
    let masters = Masters::start(3);
    let holder = masters.redlock(b"rl");
    assert!(holder.acquire(Wait::Try, None).unwrap());
    let waiter = wait_in_thread(masters.redlock(b"rl"));
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        masters.waiters(),
        vec![1, 1, 1],
        "registered on every master"
    );
    let before = masters.evalshas();
    thread::sleep(Duration::from_secs(2));
    let during: Vec<u64> = masters
        .evalshas()
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    // Re-checks every 250 ms: 8 attempts (acquire + undo) per master in 2 s;
    // a 50 ms poll would have made ~80.
    assert!(
        during.iter().all(|&n| n <= 30),
        "EVALSHA per master in a 2 s wait: {during:?}"
    );
    holder.release().unwrap();
    // Handed over: the holder cannot take it back at once.
    assert!(!holder.acquire(Wait::Try, None).unwrap());
    let (ok, waiter) = waiter.join().unwrap();
    assert!(ok);
    assert!(waiter.owned().unwrap());
    assert!(waiter.fencing_token().unwrap() > 0);
    assert_eq!(masters.waiters(), vec![0, 0, 0], "no registration left");
    waiter.release().unwrap();
}

/// The master a waiter listens on goes away: it keeps waiting (on another
/// master, or by pausing) and takes the lock once the holder releases it on
/// the two that remain.
#[test]
fn a_redlock_waiter_survives_the_master_it_listens_on() {
    let mut masters = Masters::start(3);
    let holder = masters.redlock(b"rl2");
    assert!(holder.acquire(Wait::Try, None).unwrap());
    let waiter = wait_in_thread(masters.redlock(b"rl2"));
    thread::sleep(Duration::from_millis(300));
    assert_eq!(masters.waiters(), vec![1, 1, 1]);
    drop(masters.servers.remove(0));
    thread::sleep(Duration::from_millis(600));
    holder.release().unwrap();
    let (ok, waiter) = waiter.join().unwrap();
    assert!(ok, "2 of 3 masters are a quorum");
    waiter.release().unwrap();
}

/// The interrupt hook aborts a Redlock wait, which leaves no registration
/// behind and hands nothing over to itself.
#[test]
fn an_interrupted_redlock_wait_leaves_nothing_behind() {
    let masters = Masters::start(3);
    let holder = masters.redlock(b"rl3");
    assert!(holder.acquire(Wait::Try, None).unwrap());
    let waiter = masters.redlock(b"rl3");
    let until = std::time::Instant::now() + Duration::from_millis(400);
    let hook = || {
        if std::time::Instant::now() >= until {
            Err(ferrolock::wait::interrupted("test"))
        } else {
            Ok(())
        }
    };
    let err = waiter.acquire(Wait::Forever, Some(&hook)).unwrap_err();
    assert!(err.is_interrupted(), "{err}");
    assert_eq!(masters.waiters(), vec![0, 0, 0]);
    holder.release().unwrap();
    assert!(
        !holder.locked().unwrap(),
        "released, not handed to the gone waiter"
    );
}
