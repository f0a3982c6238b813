//! Waits under faults: a paused server ends a wait within its timeout plus
//! one command timeout (issue 18.3), and nothing is left behind.

use std::thread;
use std::time::{Duration, Instant};

use ferrolock::testing::RedisServer;
use ferrolock::{Client, Config, Lock, Wait};

use crate::common::lock_opts;

#[test]
fn a_wait_ends_within_its_timeout_plus_one_command_timeout_while_the_server_is_paused() {
    let server = RedisServer::start();
    let client = Client::new(Config::from_url(&server.url_with("?timeout=0.5")).unwrap()).unwrap();
    let opts = lock_opts("paused-wait");
    let holder = Lock::new(&client, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = Lock::new(&client, b"x", opts.clone()).unwrap();
    let (timeout, command) = (Duration::from_millis(1500), Duration::from_millis(500));
    let t = thread::spawn(move || {
        let start = Instant::now();
        let result = waiter.acquire(Wait::For(timeout), None);
        (result.map_err(|e| e.to_string()), start.elapsed(), waiter)
    });
    thread::sleep(Duration::from_millis(300)); // waiting, registered
    server.pause();
    let (result, took, waiter) = t.join().unwrap();
    server.resume();
    let bound = timeout + command + Duration::from_millis(300);
    assert!(took <= bound, "ended after {took:?}, bound {bound:?}");
    let err = result.unwrap_err();
    assert!(err.contains("gave up after"), "{err}");
    // Nothing left behind once the server answers: the holder's release
    // hands the lock to nobody (the waiter's registration was settled) and
    // a newcomer takes it at once.
    assert!(ferrolock::wait_settled(Duration::from_secs(10)));
    holder.release().unwrap();
    assert_eq!(waiter.token(), None);
    let other = Lock::new(&client, b"x", opts).unwrap();
    assert!(other.try_acquire().unwrap());
    other.release().unwrap();
}

/// Members of the one sorted set of `server` whose key ends with `suffix`,
/// with their scores.
fn zset_ending(server: &RedisServer, suffix: &str) -> (String, Vec<(String, f64)>) {
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{suffix}"))
        .query(&mut conn)
        .unwrap();
    let key = keys.first().cloned().unwrap_or_default();
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut conn)
        .unwrap();
    (key, members)
}

#[test]
fn a_stale_registration_served_again_over_a_new_connection_is_given_back() {
    // A promoted replica (or a server restarted from an AOF) may still hold
    // the registration of a wait that ended with the lock, and hand it the
    // lock again for a token whose hold is over: the hub gives that grant
    // back instead of leaving the lock taken for its TTL (hub/dispatch.rs).
    let server = RedisServer::start();
    let client = Client::new(Config::from_url(&server.url()).unwrap()).unwrap();
    let mut opts = lock_opts("stale-grant");
    opts.ttl = Duration::from_secs(60);
    let holder = Lock::new(&client, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = Lock::new(&client, b"x", opts.clone()).unwrap();
    let t = thread::spawn(move || {
        let ok = waiter.acquire(Wait::For(Duration::from_secs(20)), None);
        waiter.release().unwrap();
        ok
    });
    let until = Instant::now() + Duration::from_secs(10);
    let (waiters, registered) = loop {
        let (key, members) = zset_ending(&server, ":waiters");
        if !members.is_empty() {
            break (key, members);
        }
        assert!(Instant::now() < until, "the waiter registered");
        thread::sleep(Duration::from_millis(20));
    };
    let (leases, leased) = zset_ending(&server, ":leases");
    holder.release().unwrap();
    assert!(
        t.join().unwrap().unwrap(),
        "the waiter got the lock and released it"
    );

    // The hub's connection is made anew, and the server "forgets" that the
    // wait ended: its registration is back, and a release hands it the lock.
    let mut conn = server.conn();
    let hub_channel = format!("fl:w:{}", registered[0].0.split(':').next().unwrap());
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut conn)
        .unwrap();
    let holder2 = Lock::new(&client, b"x", opts.clone()).unwrap();
    assert!(holder2.try_acquire().unwrap());
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let subs: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&hub_channel)
            .query(&mut conn)
            .unwrap();
        if subs.first().is_some_and(|(_, n)| *n == 1) {
            break;
        }
        assert!(Instant::now() < until, "the hub subscribed again");
        thread::sleep(Duration::from_millis(20));
    }
    for (key, members) in [(&waiters, &registered), (&leases, &leased)] {
        let (member, score) = &members[0];
        let _: i64 = redis::cmd("ZADD")
            .arg(key)
            .arg(*score)
            .arg(member)
            .query(&mut conn)
            .unwrap();
    }
    let lock_key = format!("{}x", String::from_utf8_lossy(&opts.prefix));
    let held: Option<String> = redis::cmd("GET").arg(&lock_key).query(&mut conn).unwrap();
    assert_eq!(held, holder2.token());
    holder2.release().unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let value: Option<String> = redis::cmd("GET").arg(&lock_key).query(&mut conn).unwrap();
        if value.is_none() {
            break;
        }
        assert!(
            Instant::now() < until,
            "the stale grant was given back (the lock still holds {value:?})"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let newcomer = Lock::new(&client, b"x", opts).unwrap();
    assert!(newcomer.try_acquire().unwrap());
    newcomer.release().unwrap();
}
