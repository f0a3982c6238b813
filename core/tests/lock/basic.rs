//! Lock basics against a real redis-server: mutual exclusion, ownership, TTL,
//! extend, reentrancy, a legacy lock without a TTL.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use crate::common::{client, lock_opts, raw};
use ferrolock::{ErrorKind, Lock, Wait};
use redis::Commands;

#[test]
fn mutual_exclusion_8_threads_x_500_increments() {
    let c = client();
    let opts = lock_opts("mutex");
    let counter = format!("{}value", String::from_utf8_lossy(&opts.prefix));
    let threads = 8;
    let rounds = 500;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (c, opts, counter, barrier) =
                (c.clone(), opts.clone(), counter.clone(), barrier.clone());
            thread::spawn(move || {
                let lock = Lock::new(&c, b"counter", opts).unwrap();
                let mut r = raw();
                barrier.wait();
                for _ in 0..rounds {
                    assert!(
                        lock.acquire(Wait::For(Duration::from_secs(30)), None)
                            .unwrap()
                    );
                    // Deliberately non-atomic read-modify-write.
                    let v: i64 = r.get::<_, Option<i64>>(&counter).unwrap().unwrap_or(0);
                    let _: () = r.set(&counter, v + 1).unwrap();
                    lock.release().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let total: i64 = raw().get(&counter).unwrap();
    assert_eq!(
        total,
        (threads * rounds) as i64,
        "lost updates under the lock"
    );
}

#[test]
fn a_second_owner_cannot_take_release_or_extend() {
    let c = client();
    let opts = lock_opts("owner");
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    let b = Lock::new(&c, b"x", opts).unwrap();
    assert!(a.try_acquire().unwrap());
    assert!(!b.try_acquire().unwrap());
    let before: String = raw().get(a.key()).unwrap();
    let err = b.release().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotOwned);
    assert!(err.to_string().contains("lock \"x\""), "{err}");
    assert!(b.extend(None).unwrap_err().is_not_owned());
    let after: String = raw().get(a.key()).unwrap();
    assert_eq!(before, after, "key untouched");
    assert_eq!(Some(after), a.token());
    assert!(a.owned().unwrap() && !b.owned().unwrap());
    assert!(a.locked().unwrap() && b.locked().unwrap());
    a.release().unwrap();
    assert!(!a.locked().unwrap());
    assert!(
        a.release().unwrap_err().is_not_owned(),
        "double release refused"
    );
}

#[test]
fn ttl_expiry_frees_the_lock_and_the_old_owner_cannot_release() {
    let c = client();
    let mut opts = lock_opts("expiry");
    opts.ttl = Duration::from_millis(200);
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    let b = Lock::new(&c, b"x", opts).unwrap();
    assert!(a.try_acquire().unwrap());
    let ttl = a.remaining().unwrap().unwrap();
    assert!(
        ttl <= Duration::from_millis(200) && ttl > Duration::from_millis(100),
        "{ttl:?}"
    );
    thread::sleep(Duration::from_millis(300));
    assert!(!a.locked().unwrap());
    assert!(b.try_acquire().unwrap());
    assert!(a.release().unwrap_err().is_not_owned());
    assert!(
        a.lost(),
        "a release that found the lock taken reports it lost"
    );
    assert!(
        b.owned().unwrap(),
        "b's hold untouched by a's failed release"
    );
}

#[test]
fn extend_replaces_the_ttl() {
    let c = client();
    let mut opts = lock_opts("extend");
    opts.ttl = Duration::from_secs(10);
    let a = Lock::new(&c, b"x", opts).unwrap();
    assert!(a.try_acquire().unwrap());
    a.extend(Some(Duration::from_secs(100))).unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(a.key()).query(&mut raw()).unwrap();
    assert!(pttl > 99_000 && pttl <= 100_000, "{pttl}");
    // Replace, not add: a shorter TTL shortens it.
    a.extend(Some(Duration::from_secs(2))).unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(a.key()).query(&mut raw()).unwrap();
    assert!(pttl > 1_000 && pttl <= 2_000, "{pttl}");
    a.extend(None).unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(a.key()).query(&mut raw()).unwrap();
    assert!(pttl > 9_000, "{pttl}");
}

#[test]
fn reentrant_locks_touch_redis_on_first_acquire_and_last_release_only() {
    let c = client();
    let mut opts = lock_opts("reentrant");
    opts.reentrant = true;
    let l = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(l.try_acquire().unwrap());
    let token = l.token();
    assert!(l.try_acquire().unwrap());
    assert!(l.acquire(Wait::Forever, None).unwrap());
    assert_eq!(l.depth(), 3);
    assert_eq!(l.token(), token);
    l.release().unwrap();
    l.release().unwrap();
    assert!(l.locked().unwrap(), "still held after 2 of 3 releases");
    l.release().unwrap();
    assert!(!l.locked().unwrap());
    // A non-reentrant lock does not nest.
    let n = Lock::new(&c, b"y", lock_opts("nonreentrant")).unwrap();
    assert!(n.try_acquire().unwrap());
    assert!(!n.try_acquire().unwrap());
}

#[test]
fn orphaned_legacy_lock_without_ttl_is_healed_not_stolen() {
    let c = client();
    let mut opts = lock_opts("orphan");
    opts.ttl = Duration::from_millis(300);
    let l = Lock::new(&c, b"x", opts).unwrap();
    // A legacy client did SETNX and crashed before EXPIRE.
    let _: () = raw().set(l.key(), "1700000000").unwrap();
    assert!(!l.try_acquire().unwrap(), "never steals");
    let pttl: i64 = redis::cmd("PTTL").arg(l.key()).query(&mut raw()).unwrap();
    assert!(pttl > 0, "given an expiry: {pttl}");
    assert!(l.acquire(Wait::For(Duration::from_secs(5)), None).unwrap());
}
