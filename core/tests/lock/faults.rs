//! What a lock leaves behind when Redis stops answering mid-call: nothing.
//! The server is paused (SIGSTOP) past the client's command timeout.

use std::time::Duration;

use ferrolock::testing::RedisServer;
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
    assert!(ferrolock::wait_settled(Duration::from_secs(10)));
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
    assert!(ferrolock::wait_settled(Duration::from_secs(10)));
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
