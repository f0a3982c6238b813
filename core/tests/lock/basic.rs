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
}

/// A non-reentrant lock does not nest: the thread that holds it gets an
/// error instead of waiting for itself (forever, with a watchdog renewing
/// the hold), while another thread sharing the object waits as usual.
#[test]
fn a_non_reentrant_lock_acquired_again_by_its_holder_fails_at_once() {
    let c = client();
    let mut opts = lock_opts("nonreentrant");
    opts.auto_renew = true;
    let n = Arc::new(Lock::new(&c, b"y", opts).unwrap());
    assert!(n.try_acquire().unwrap());
    assert!(!n.try_acquire().unwrap(), "a try-once finds it busy");
    for wait in [Wait::For(Duration::from_secs(60)), Wait::Forever] {
        let err = n.acquire(wait, None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
        assert!(err.to_string().contains("reentrant"), "{err}");
    }
    let other = Arc::clone(&n);
    let waited = thread::spawn(move || {
        other
            .acquire(Wait::For(Duration::from_millis(300)), None)
            .unwrap()
    });
    assert!(
        !waited.join().unwrap(),
        "another thread waits, and times out"
    );
    // Another caller identity (a greenlet, say) on this thread waits too.
    let as_other = n
        .acquire_as(Wait::For(Duration::from_millis(100)), None, Some(u64::MAX))
        .unwrap();
    assert!(!as_other);
    assert!(n.owned().unwrap());
    n.release().unwrap();
    assert!(n.try_acquire().unwrap(), "free again for its holder");
    n.release().unwrap();
}

/// A key without TTL is healed only when it is provably a legacy orphan: its
/// value is the legacy class's own expiry time (`(string)$expireAt`). It
/// gets the time left to that expiry, or is freed when that has passed.
#[test]
fn orphaned_legacy_lock_without_ttl_is_healed_not_stolen() {
    let c = client();
    let mut opts = lock_opts("orphan");
    opts.ttl = Duration::from_millis(300);
    let l = Lock::new(&c, b"x", opts).unwrap();
    let mut r = raw();
    let (now, _): (i64, i64) = redis::cmd("TIME").query(&mut r).unwrap();
    // A legacy client did SETNX with expire = 2 s and crashed before EXPIRE.
    let _: () = r.set(l.key(), format!("{}.4375", now + 2)).unwrap();
    assert!(!l.try_acquire().unwrap(), "never steals");
    let pttl: i64 = redis::cmd("PTTL").arg(l.key()).query(&mut r).unwrap();
    assert!(
        pttl > 0 && pttl <= 3_000,
        "given the expiry it named: {pttl}"
    );
    assert!(l.acquire(Wait::For(Duration::from_secs(5)), None).unwrap());
    l.release().unwrap();
    // One whose expiry has passed (it crashed long ago) is freed and taken.
    let _: () = r.set(l.key(), "1700000000").unwrap();
    assert!(l.try_acquire().unwrap());
    l.release().unwrap();
}

/// Another library's lock on the same key (redis-py's and
/// python-redis-lock's have no TTL by default) is waited for, never given a
/// TTL, never taken.
#[test]
fn another_librarys_lock_without_ttl_is_waited_for() {
    let c = client();
    let mut opts = lock_opts("foreign");
    opts.ttl = Duration::from_millis(300);
    let l = Lock::new(&c, b"x", opts).unwrap();
    let mut r = raw();
    for value in [
        "b9a1f0c2d3e44f5a8b7c6d5e4f3a2b1c",
        "1",
        "12345678901234567890",
        "1.5e9",
    ] {
        let _: () = r.set(l.key(), value).unwrap();
        assert!(!l.try_acquire().unwrap(), "{value}");
        assert!(
            !l.acquire(Wait::For(Duration::from_millis(200)), None)
                .unwrap()
        );
        let pttl: i64 = redis::cmd("PTTL").arg(l.key()).query(&mut r).unwrap();
        assert_eq!(pttl, -1, "{value}: no TTL given");
        let kept: String = r.get(l.key()).unwrap();
        assert_eq!(kept, value);
    }
    let _: () = r.del(l.key()).unwrap();
    assert!(l.try_acquire().unwrap());
    l.release().unwrap();
}
