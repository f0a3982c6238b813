//! What a lock leaves behind when Redis stops answering mid-call: nothing.
//! The server is paused (SIGSTOP) past the client's command timeout.

use std::time::Duration;

use ferrolock::testing::{Proxy, RedisServer};
use ferrolock::{Client, Config, Lock, LockOptions, Wait};

use crate::common::lock_opts;

/// A server of its own, a client whose command timeout is `timeout`, and a
/// plain connection for assertions.
fn paused_setup(timeout: &str) -> (RedisServer, Client, redis::Connection) {
    let server = RedisServer::start();
    let client = Client::new(Config::from_url(&server.url_with(timeout)).unwrap()).unwrap();
    let conn = server.conn();
    (server, client, conn)
}

fn exists(conn: &mut redis::Connection, key: &[u8]) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(conn).unwrap() == 1
}

#[test]
fn a_release_lost_in_a_pause_stops_renewal_and_is_settled_when_the_server_answers() {
    let (server, client, mut conn) = paused_setup("?timeout=0.3");
    let mut opts: LockOptions = lock_opts("release");
    opts.auto_renew = true;
    opts.ttl = Duration::from_secs(30);
    let lock = Lock::new(&client, b"held", opts.clone()).unwrap();
    assert!(lock.try_acquire().unwrap());
    server.pause();
    let err = lock.release().unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(
        err.to_string().contains("completed in the background"),
        "{err}"
    );
    // The object no longer holds it: no renewal goes on.
    assert_eq!(lock.token(), None);
    server.resume();
    assert!(client.wait_settled(Duration::from_secs(10)));
    assert!(
        !exists(&mut conn, lock.key()),
        "the keeper released the token"
    );
    let other = Lock::new(&client, b"held", opts).unwrap();
    assert!(
        other
            .acquire(Wait::For(Duration::from_secs(2)), None)
            .unwrap()
    );
}

/// The acceptance test of issue 18.1 in its shortest form: a try-once whose
/// reply is lost in a pause. Redis runs the `SET` once it resumes; the
/// caller has given up by then, so the token must not end up holding the
/// lock.
#[test]
fn a_try_lost_in_a_pause_leaves_no_hold_behind() {
    let (server, client, mut conn) = paused_setup("?timeout=0.3");
    let opts: LockOptions = lock_opts("try");
    let lock = Lock::new(&client, b"ghost", opts.clone()).unwrap();
    assert!(!lock.locked().unwrap(), "warms the pool");
    server.pause();
    let err = lock.acquire(Wait::Try, None).unwrap_err();
    assert!(err.outcome_unknown(), "{err}");
    assert_eq!(lock.token(), None);
    server.resume();
    assert!(client.wait_settled(Duration::from_secs(10)));
    assert!(
        !exists(&mut conn, lock.key()),
        "no key is held under the abandoned token"
    );
    let fresh = Lock::new(&client, b"ghost", opts).unwrap();
    assert!(
        fresh.try_acquire().unwrap(),
        "a fresh lock acquires at once"
    );
}

/// The token of `key` as a string, if any.
fn holder(conn: &mut redis::Connection, key: &[u8]) -> Option<String> {
    redis::cmd("GET").arg(key).query(conn).unwrap()
}

/// A connection that dies after delivering the acquire, before its reply
/// (the proxy drops the reply): the hold it took is the caller's, found by
/// a retry with the same token within the same call's time.
#[test]
fn an_acquire_whose_reply_is_cut_gets_the_hold_it_took() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = Client::new(Config::from_url(&proxy.url_with("?timeout=1")).unwrap()).unwrap();
    let mut conn = server.conn();
    let opts: LockOptions = lock_opts("cut-acquire");
    for warm in [false, true] {
        let lock = Lock::new(&client, b"cut", opts.clone()).unwrap();
        if warm {
            assert!(!lock.locked().unwrap()); // the try reuses a pooled connection
        }
        proxy.cut_replies(1);
        assert!(lock.try_acquire().unwrap(), "warm pool: {warm}");
        assert_eq!(holder(&mut conn, lock.key()), lock.token());
        lock.release().unwrap();
    }
    // A waiting acquire the same way.
    let lock = Lock::new(&client, b"cut", opts).unwrap();
    proxy.cut_replies(1);
    assert!(
        lock.acquire(Wait::For(Duration::from_secs(3)), None)
            .unwrap()
    );
    assert_eq!(holder(&mut conn, lock.key()), lock.token());
    lock.release().unwrap();
    assert_eq!(client.pending_settlements(), 0);
}

/// A release whose reply is lost after it ran: the retry finds the key no
/// longer ours while the hold was valid when the first was sent, so the
/// first one worked: success, not "not owned".
#[test]
fn a_release_whose_reply_is_cut_reports_success() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = Client::new(Config::from_url(&proxy.url_with("?timeout=1")).unwrap()).unwrap();
    let mut conn = server.conn();
    let mut opts: LockOptions = lock_opts("cut-release");
    opts.auto_renew = true;
    for warm in [false, true] {
        let lock = Lock::new(&client, b"cut", opts.clone()).unwrap();
        assert!(lock.try_acquire().unwrap());
        if !warm {
            // A pool without idle connections: the release opens its own.
            let _hold: Vec<_> = (0..2)
                .map(|_| Lock::new(&client, b"other", opts.clone()).unwrap())
                .collect();
        }
        proxy.cut_replies(1);
        lock.release().unwrap();
        assert!(!exists(&mut conn, lock.key()));
        assert!(!lock.lost());
    }
}

/// A network stall: the acquire's `SET` is held back by the network past
/// the caller's timeout, and delivered after the caller gave up and the
/// abandonment was settled. The late write holds the key under a token
/// nobody has (a ghost): the next contender clears it at once.
#[test]
fn a_late_acquire_delivered_after_its_abandonment_is_cleared_by_the_next_contender() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = Client::new(Config::from_url(&proxy.url_with("?timeout=0.3")).unwrap()).unwrap();
    let direct = Client::new(Config::from_url(&server.url()).unwrap()).unwrap();
    let mut conn = server.conn();
    let opts: LockOptions = lock_opts("ghost");
    let lock = Lock::new(&client, b"late", opts.clone()).unwrap();
    assert!(!lock.locked().unwrap(), "warms the pool");
    proxy.stall();
    let err = lock.try_acquire().unwrap_err();
    assert!(err.outcome_unknown(), "{err}");
    assert!(client.wait_settled(Duration::from_secs(10)));
    proxy.resume();
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let ghost = loop {
        if let Some(token) = holder(&mut conn, lock.key()) {
            break token;
        }
        assert!(std::time::Instant::now() < until, "the late SET arrived");
        std::thread::sleep(Duration::from_millis(5));
    };
    // A try-once of any client clears it and takes the lock ...
    let fresh = Lock::new(&direct, b"late", opts.clone()).unwrap();
    assert!(fresh.try_acquire().unwrap());
    assert_ne!(fresh.token().as_deref(), Some(ghost.as_str()));
    fresh.release().unwrap();
    // ... and so does a waiter, at its first attempt.
    let _: () = redis::cmd("SET")
        .arg(lock.key())
        .arg(&ghost)
        .arg("PX")
        .arg(30_000)
        .query(&mut conn)
        .unwrap();
    let start = std::time::Instant::now();
    assert!(
        fresh
            .acquire(Wait::For(Duration::from_secs(5)), None)
            .unwrap()
    );
    assert!(start.elapsed() < Duration::from_secs(1));
    fresh.release().unwrap();
}

/// A pause in the middle of a wait: the waiter gives up within its timeout
/// plus one command timeout, and leaves nothing behind once the server
/// answers again, however the pause fell.
#[test]
fn a_wait_through_a_pause_ends_in_time_and_leaves_nothing_behind() {
    let (server, client, mut conn) = paused_setup("?timeout=0.3&connect_timeout=0.3");
    let direct = Client::new(Config::from_url(&server.url()).unwrap()).unwrap();
    let opts: LockOptions = lock_opts("mid-wait");
    let holder_lock = Lock::new(&direct, b"w", opts.clone()).unwrap();
    assert!(holder_lock.try_acquire().unwrap());
    let waiter = std::sync::Arc::new(Lock::new(&client, b"w", opts.clone()).unwrap());
    let w = waiter.clone();
    let started = std::time::Instant::now();
    let waiting = std::thread::spawn(move || {
        let got = w.acquire(Wait::For(Duration::from_millis(1500)), None);
        (got.map_err(|e| e.to_string()), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(400));
    server.pause();
    std::thread::sleep(Duration::from_millis(2500));
    let (got, took) = waiting.join().unwrap();
    assert!(
        took < Duration::from_millis(1500 + 300 + 700),
        "within its budget: {took:?} ({got:?})"
    );
    assert!(!matches!(got, Ok(true)), "{got:?}");
    server.resume();
    assert!(client.wait_settled(Duration::from_secs(10)));
    holder_lock.release().unwrap();
    assert!(
        !exists(&mut conn, waiter.key()),
        "no hold under the waiter's token"
    );
    let fresh = Lock::new(&direct, b"w", opts).unwrap();
    assert!(
        fresh.try_acquire().unwrap(),
        "a fresh lock acquires at once"
    );
}

/// Every call ends within its budget while the server is paused: a
/// try-once within one command timeout, a wait within its timeout plus one.
#[test]
fn calls_on_a_paused_server_end_within_their_budget() {
    let (server, client, mut conn) = paused_setup("?timeout=0.5&connect_timeout=0.5");
    let opts: LockOptions = lock_opts("budget");
    let lock = Lock::new(&client, b"b", opts.clone()).unwrap();
    assert!(!lock.locked().unwrap());
    server.pause();
    for (wait, limit) in [
        (Wait::Try, Duration::from_millis(500)),
        (
            Wait::For(Duration::from_secs(1)),
            Duration::from_millis(1500),
        ),
        (Wait::Try, Duration::from_millis(500)),
    ] {
        let start = std::time::Instant::now();
        let err = lock.acquire(wait, None).unwrap_err();
        let took = start.elapsed();
        assert!(err.is_transient(), "{err}");
        assert!(
            took < limit + Duration::from_millis(300),
            "{wait:?}: {took:?} ({err})"
        );
    }
    server.resume();
    assert!(client.wait_settled(Duration::from_secs(10)));
    assert!(!exists(&mut conn, lock.key()));
    assert!(lock.try_acquire().unwrap());
    lock.release().unwrap();
}
