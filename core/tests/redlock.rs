//! Redlock against three real, independent redis-servers: waiting, hung
//! and paused masters, restarted masters kept out of quorums.
#![allow(clippy::unwrap_used)]

use std::thread;
use std::time::{Duration, Instant};

use ferrolock::testing::RedisServer;
use ferrolock::{Client, Config, ErrorKind, Redlock, Wait};

/// The TTL of these tests' locks.
const TTL: Duration = Duration::from_secs(4);

struct Masters {
    servers: Vec<RedisServer>,
}

impl Masters {
    /// `n` servers, up for at least [`TTL`]: a master that started less than
    /// one TTL ago has no vote (it may have restarted and lost locks).
    fn start(n: usize) -> Self {
        let masters = Self {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        };
        for i in 0..n {
            masters.wait_up_for(i, TTL);
        }
        masters
    }

    /// Waits until server `i` has been up for `time` (as it counts: whole
    /// seconds).
    fn wait_up_for(&self, i: usize, time: Duration) {
        self.servers[i].wait_up_for(time);
    }

    fn redlock(&self, name: &[u8]) -> Redlock {
        self.redlock_with(name, "")
    }

    /// A Redlock with its own clients, their URLs ending in `query`.
    fn redlock_with(&self, name: &[u8], query: &str) -> Redlock {
        let clients = self
            .servers
            .iter()
            .map(|s| Client::new(Config::from_url(&s.url_with(query)).unwrap()).unwrap())
            .collect();
        Redlock::new(clients, name, TTL, b"Lock:").unwrap()
    }

    /// Whether server `i` has `key`.
    fn has(&self, i: usize, key: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query(&mut self.conn(i))
            .unwrap()
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
    assert!(!holder.lost(), "still held (TTL {TTL:?})");
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

/// Waits up to `within` for `done`; true if it came true.
fn eventually(within: Duration, done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A stopped master (SIGSTOP: it keeps its connections, answers nothing)
/// holds nobody up: the acquire counts it as a no after the master budget
/// and returns a hold that is still valid; the release leaves that master to
/// the settlement keeper, which releases the key there once it goes on.
#[test]
fn a_paused_master_is_a_no_and_its_release_is_settled_later() {
    let masters = Masters::start(3);
    let lock = masters.redlock(b"paused");
    // Connections pooled and identities checked on all three.
    assert!(lock.acquire(Wait::Try, None).unwrap());
    lock.release().unwrap();
    masters.servers[2].pause();
    let started = Instant::now();
    let ok = lock
        .acquire(Wait::For(Duration::from_secs(1)), None)
        .unwrap();
    let took = started.elapsed();
    assert!(ok, "the two live masters are a quorum");
    // Within the wait plus one command timeout (3 s), whatever the hung
    // master does; in practice about one master budget.
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(!lock.lost(), "a hold returned is valid ({took:?})");
    assert!(lock.owned().unwrap());
    assert!(masters.has(0, "Lock:paused") && masters.has(1, "Lock:paused"));
    let other = masters.redlock(b"paused");
    assert!(!other.acquire(Wait::Try, None).unwrap(), "held on a quorum");
    lock.release().unwrap(); // two of three answered: a quorum released it
    assert!(
        ferrolock::pending_settlements() >= 1,
        "the stopped one is left to the keeper"
    );
    masters.servers[2].resume();
    assert!(ferrolock::wait_settled(Duration::from_secs(10)));
    // The stopped master ran what it had received (the acquires) and then
    // the releases, in an order nobody controls: at worst a key expires by
    // its TTL.
    assert!(
        eventually(TTL + Duration::from_secs(1), || !masters
            .has(2, "Lock:paused")),
        "nothing left on the master that was stopped"
    );
    assert!(lock.acquire(Wait::Try, None).unwrap());
    lock.release().unwrap();
}

/// The delayed restart, done by the client: a master that restarted empty
/// (it lost the key of a hold that counted on it) has no vote for one TTL,
/// so a second client cannot make a quorum with it while the first holds.
#[test]
fn a_restarted_empty_master_is_kept_out_of_quorum_for_one_ttl() {
    let mut masters = Masters::start(3);
    let key = "Lock:restarted";
    // Master 2 is busy with someone else's short hold: the first client
    // holds on masters 0 and 1 only, a bare quorum.
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("someone-else")
        .arg("PX")
        .arg(800)
        .query(&mut masters.conn(2))
        .unwrap();
    let first = masters.redlock(b"restarted");
    assert!(first.acquire(Wait::Try, None).unwrap());
    let first_fence = first.fencing_token().unwrap();
    assert!(eventually(Duration::from_secs(2), || !masters.has(2, key)));
    // Master 1 restarts without its data and rejoins at once.
    masters.servers[1].restart();
    assert!(!masters.has(1, key) && !masters.has(2, key));
    // Masters 1 and 2 are free: counted, they would make a quorum.
    let second = masters.redlock(b"restarted");
    assert!(
        !second.acquire(Wait::Try, None).unwrap(),
        "busy on master 0"
    );
    assert!(
        !second
            .acquire(Wait::For(Duration::from_millis(500)), None)
            .unwrap()
    );
    // Master 2 restarts too: only master 0 may vote, so no attempt can
    // succeed until one of the others may vote again; a try-once, or a wait
    // that ends before then, says so at once.
    masters.servers[2].restart();
    let err = second.acquire(Wait::Try, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Quorum, "{err}");
    assert!(
        err.to_string().contains("only 1 of 3 masters may vote"),
        "{err}"
    );
    let started = Instant::now();
    let err = second
        .acquire(Wait::For(Duration::from_millis(500)), None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Quorum, "{err}");
    assert!(started.elapsed() < Duration::from_millis(500));
    // The first hold is still valid (its keys on the restarted masters are
    // gone: it is no longer on a quorum, which `owned` reports).
    assert!(!first.lost(), "the first still holds");
    assert!(!first.owned().unwrap());
    // A longer wait gets it, once the first hold has expired: never while
    // the first still held it.
    assert!(
        second
            .acquire(Wait::For(TTL + Duration::from_secs(3)), None)
            .unwrap()
    );
    assert!(
        first.lost(),
        "the second got in only after the first's validity"
    );
    assert!(second.fencing_token().unwrap() > first_fence);
    assert!(first.extend(None).unwrap_err().is_not_owned());
    second.release().unwrap();
}

/// An extend after the hold's validity ran out is refused (and the keys
/// released), even when every master still has the key.
#[test]
fn an_extend_after_the_validity_ran_out_is_refused() {
    let masters = Masters::start(3);
    let clients = masters
        .servers
        .iter()
        .map(|s| Client::new(Config::from_url(&s.url()).unwrap()).unwrap())
        .collect();
    let lock = Redlock::new(clients, b"short", Duration::from_millis(600), b"Lock:").unwrap();
    assert!(lock.acquire(Wait::Try, None).unwrap());
    lock.extend(Some(Duration::from_secs(3))).unwrap();
    assert!(!lock.lost());
    // The keys are made to outlive the hold's validity, behind its back.
    for i in 0..3 {
        let _: i64 = redis::cmd("PEXPIRE")
            .arg("Lock:short")
            .arg(10_000)
            .query(&mut masters.conn(i))
            .unwrap();
    }
    // Its validity is now the extend's: past the lock's own ttl.
    thread::sleep(Duration::from_millis(800));
    assert!(!lock.lost());
    thread::sleep(Duration::from_millis(2300));
    assert!(lock.lost(), "past the extend's validity");
    assert!((0..3).all(|i| masters.has(i, "Lock:short")));
    let err = lock.extend(None).unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    assert!(err.to_string().contains("validity"), "{err}");
    assert!((0..3).all(|i| !masters.has(i, "Lock:short")));
}
