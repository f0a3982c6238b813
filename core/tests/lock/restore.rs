//! Adopting a hold by its token (`Lock::restore`) and freeing a lock whoever
//! holds it (`Lock::force_release`).

use std::time::{Duration, Instant};

use crate::common::{client, lock_opts, raw, wait_in_thread};
use ferrolock::{ErrorKind, Lock};
use redis::Commands;

#[test]
fn a_restored_lock_holds_what_its_token_holds() {
    let c = client();
    let mut opts = lock_opts("restore");
    opts.ttl = Duration::from_secs(20);
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(a.try_acquire().unwrap());
    let token = a.token().unwrap();
    let b = Lock::restore(&c, b"x", opts.clone(), &token).unwrap();
    assert_eq!(b.token().as_deref(), Some(token.as_str()));
    assert!(b.owned().unwrap());
    // The TTL is left as it was, and an extend or a fencing token works.
    let pttl: i64 = raw().pttl(b.key()).unwrap();
    assert!(pttl > 15_000 && pttl <= 20_000, "{pttl}");
    b.extend(Some(Duration::from_secs(50))).unwrap();
    assert!(b.fencing_token().unwrap().is_some());
    b.release().unwrap();
    assert!(!b.locked().unwrap());
    // The original object's hold is gone with it.
    let e = a.release().unwrap_err();
    assert!(e.is_not_owned() && a.lost());
    // A token that holds nothing (anymore) is refused, as are bad tokens.
    let e = Lock::restore(&c, b"x", opts.clone(), &token).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotOwned, "{e}");
    let e = Lock::restore(&c, b"x", opts, "").unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
}

#[test]
fn a_restored_lock_renews_when_asked() {
    let c = client();
    let mut opts = lock_opts("restore-renew");
    opts.ttl = Duration::from_millis(300);
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(a.try_acquire().unwrap());
    opts.auto_renew = true;
    let b = Lock::restore(&c, b"x", opts, &a.token().unwrap()).unwrap();
    a.forget();
    std::thread::sleep(Duration::from_millis(900));
    assert!(b.owned().unwrap(), "renewed past three TTLs");
    assert!(!b.lost());
    b.release().unwrap();
}

/// A hold restored with little of its TTL left is renewed before that runs
/// out, not a third of the TTL after the restore.
#[test]
fn a_restored_lock_with_little_ttl_left_is_renewed_in_time() {
    let c = client();
    let mut opts = lock_opts("restore-late");
    opts.ttl = Duration::from_secs(6);
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(a.try_acquire().unwrap());
    // 1.5 s left: a first renewal a third of the TTL (2 s) after the
    // restore would come after the key expired.
    let _: () = raw().pexpire(a.key(), 1500).unwrap();
    opts.auto_renew = true;
    let b = Lock::restore(&c, b"x", opts.clone(), &a.token().unwrap()).unwrap();
    a.forget();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(b.owned().unwrap(), "renewed before its 1.5 s ran out");
    assert!(!b.lost());
    let pttl: i64 = raw().pttl(b.key()).unwrap();
    assert!(pttl > 1500, "renewed to the lock's TTL: {pttl}");
    b.release().unwrap();

    // A key without a TTL (a legacy SETNX never followed by EXPIRE) does
    // not run out: the restored hold is not lost, and is renewed as usual.
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(a.try_acquire().unwrap());
    let _: () = raw().persist(a.key()).unwrap();
    let b = Lock::restore(&c, b"x", opts, &a.token().unwrap()).unwrap();
    a.forget();
    assert!(!b.lost(), "a key without a TTL is not lost");
    b.release().unwrap();
}

#[test]
fn force_release_frees_any_hold_and_wakes_a_waiter() {
    let c = client();
    let mut opts = lock_opts("force");
    opts.ttl = Duration::from_secs(30);
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    let operator = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(!operator.force_release().unwrap(), "a free lock");
    assert!(holder.try_acquire().unwrap());
    let waiter = wait_in_thread(&c, opts.clone());
    std::thread::sleep(Duration::from_millis(200));
    let forced = Instant::now();
    assert!(operator.force_release().unwrap());
    let (w, got, at) = waiter.join().unwrap();
    assert!(got, "the waiter got the lock");
    assert!(at.duration_since(forced) < Duration::from_secs(5));
    assert!(w.owned().unwrap());
    assert!(holder.release().unwrap_err().is_not_owned());
    w.release().unwrap();
    // A legacy holder (SETNX + EXPIRE, any value) is freed too.
    let _: () = raw().set_ex(holder.key(), "1763700000.5", 30).unwrap();
    assert!(operator.force_release().unwrap());
    assert!(!operator.locked().unwrap());
    // Its own hold: released, and forgotten.
    assert!(operator.try_acquire().unwrap());
    assert!(operator.force_release().unwrap());
    assert!(operator.token().is_none());
}
