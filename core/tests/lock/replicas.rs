//! `min_replicas`: fail fast when the master has too few replicas, never
//! hold the key longer than the caller waits, recover when a replica
//! reattaches (issue 27.2).

use std::time::{Duration, Instant};

use ferrolock::testing::RedisServer;
use ferrolock::{Client, Config, ErrorKind, Lock, LockOptions, Wait};

use crate::common::lock_opts;

/// Runs `args` on `server`.
fn cmd(server: &RedisServer, args: &[&str]) -> redis::Value {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(&mut server.conn()).unwrap()
}

/// A master and a replica in sync.
fn pair() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate(&master);
    (master, replica)
}

/// Acquires `lock` once its replica confirms in time (on a loaded machine a
/// freshly synced replica can miss the first `WAIT`); panics after 10 s.
fn acquire_confirmed(lock: &Lock) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match lock.try_acquire() {
            Ok(true) => return,
            Ok(false) => panic!("busy"),
            Err(e) if e.kind() == ErrorKind::Quorum && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn locked(server: &RedisServer, lock: &Lock) -> bool {
    redis::cmd("EXISTS")
        .arg(lock.key())
        .query::<i64>(&mut server.conn())
        .unwrap()
        == 1
}

#[test]
fn too_few_replicas_fail_fast_and_a_reattached_one_is_seen_within_a_second() {
    let (master, replica) = pair();
    let client = Client::new(Config::from_url(&master.url_with("?timeout=1")).unwrap()).unwrap();
    let mut opts: LockOptions = lock_opts("replicas");
    opts.min_replicas = 1;
    let lock = Lock::new(&client, b"r", opts.clone()).unwrap();
    acquire_confirmed(&lock);
    lock.release().unwrap();

    // Asking for more than there are: fails at once, nothing written.
    let mut two = opts.clone();
    two.min_replicas = 2;
    let greedy = Lock::new(&client, b"r", two).unwrap();
    let start = Instant::now();
    let err = greedy
        .acquire(Wait::For(Duration::from_secs(5)), None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Quorum, "{err}");
    assert!(err.to_string().contains("1 replica(s)"), "{err}");
    assert!(start.elapsed() < Duration::from_millis(500), "fast");
    assert!(!locked(&master, &greedy));

    // The replica detaches: the next acquires fail fast (the count is read
    // again at most every second), and never hold the key.
    cmd(&replica, &["REPLICAOF", "NO", "ONE"]);
    let until = Instant::now() + Duration::from_secs(5);
    let err = loop {
        match lock.try_acquire() {
            Ok(true) => lock.release().unwrap(),
            Ok(false) => panic!("nobody else holds it"),
            Err(e) => break e,
        }
        assert!(Instant::now() < until, "the detached replica is noticed");
    };
    assert_eq!(err.kind(), ErrorKind::Quorum, "{err}");
    assert!(!locked(&master, &lock));
    let start = Instant::now();
    for _ in 0..20 {
        let err = lock.try_acquire().unwrap_err();
        assert!(err.to_string().contains("0 replica(s)"), "{err}");
    }
    assert!(start.elapsed() < Duration::from_secs(1), "fast failures");
    assert!(!locked(&master, &lock));

    // It comes back: acquires succeed again as soon as it is online.
    replica.replicate(&master);
    let back = Instant::now();
    while lock.try_acquire().is_err() {
        assert!(back.elapsed() < Duration::from_secs(3), "recovered");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        back.elapsed() < Duration::from_millis(1500),
        "{:?}",
        back.elapsed()
    );
    lock.release().unwrap();
}

#[test]
fn a_replica_that_does_not_confirm_never_holds_the_key_past_the_callers_time() {
    let (master, replica) = pair();
    let client = Client::new(Config::from_url(&master.url_with("?timeout=0.5")).unwrap()).unwrap();
    let mut opts: LockOptions = lock_opts("wait");
    opts.min_replicas = 1;
    let lock = Lock::new(&client, b"w", opts).unwrap();
    acquire_confirmed(&lock);
    lock.release().unwrap();
    // Connected but stopped: WAIT cannot be confirmed.
    replica.pause();
    let start = Instant::now();
    let err = lock.try_acquire().unwrap_err();
    let took = start.elapsed();
    replica.resume();
    assert_eq!(err.kind(), ErrorKind::Quorum, "{err}");
    assert!(took < Duration::from_millis(500 + 200), "{took:?}");
    assert!(!locked(&master, &lock), "undone at once");
}
