//! A lock renews each of its holds with the lease of the one before (the
//! watchdog's objects are reused, `Lock::lease_for`): a hold taken right
//! after a release is renewed under its own token, a released hold is never
//! renewed again, and a hold lost before does not make the next one lost.

use std::thread;
use std::time::Duration;

use crate::common::{client, lock_opts, raw};
use ferrolock::Lock;
use redis::Commands;

fn renewed_lock(test: &str) -> Lock {
    let mut opts = lock_opts(test);
    opts.ttl = Duration::from_millis(300);
    opts.auto_renew = true;
    Lock::new(&client(), b"x", opts).unwrap()
}

fn holder(l: &Lock) -> Option<String> {
    raw().get(l.key()).unwrap()
}

/// Writes `token` into the key again for 300 ms.
fn put_back(l: &Lock, token: &str) {
    let _: () = redis::cmd("SET")
        .arg(l.key())
        .arg(token)
        .arg("PX")
        .arg(300)
        .query(&mut raw())
        .unwrap();
}

#[test]
fn a_hold_taken_right_after_a_release_is_renewed_with_its_own_token() {
    let l = renewed_lock("reuse-again");
    let mut tokens = Vec::new();
    for _ in 0..50 {
        assert!(l.try_acquire().unwrap());
        tokens.push(l.token().unwrap());
        l.release().unwrap();
    }
    assert!(l.try_acquire().unwrap());
    let token = l.token().unwrap();
    assert!(!tokens.contains(&token), "a fresh token per hold");
    thread::sleep(Duration::from_millis(1000)); // > 3 x ttl
    assert_eq!(holder(&l), Some(token.clone()), "renewed past 3x its TTL");
    assert!(!l.lost());
    let pttl: i64 = redis::cmd("PTTL").arg(l.key()).query(&mut raw()).unwrap();
    assert!((1..=300).contains(&pttl), "renewed to its TTL: {pttl}");
    l.release().unwrap();
    assert_eq!(holder(&l), None);
}

#[test]
fn a_released_hold_is_not_renewed_once_its_lease_is_reused() {
    let l = renewed_lock("reuse-released");
    assert!(l.try_acquire().unwrap());
    let first = l.token().unwrap();
    l.release().unwrap();
    // The released token back in Redis (as a late write would leave it):
    // nothing of ours renews it, it expires by its TTL.
    put_back(&l, &first);
    thread::sleep(Duration::from_millis(700));
    assert_eq!(holder(&l), None, "the released hold was renewed");
    // The next hold (the same lease, a new token) is renewed, the old token
    // never again.
    assert!(l.try_acquire().unwrap());
    let second = l.token().unwrap();
    assert_ne!(first, second);
    thread::sleep(Duration::from_millis(700));
    assert_eq!(holder(&l), Some(second));
    l.release().unwrap();
    put_back(&l, &first);
    thread::sleep(Duration::from_millis(700));
    assert_eq!(holder(&l), None, "a released hold was renewed after reuse");
}

#[test]
fn a_hold_after_a_lost_one_is_neither_lost_nor_left_unrenewed() {
    let l = renewed_lock("reuse-lost");
    assert!(l.try_acquire().unwrap());
    let _: () = raw().del(l.key()).unwrap();
    thread::sleep(Duration::from_millis(400));
    assert!(l.lost(), "the watchdog found it gone");
    assert!(l.release().unwrap_err().is_not_owned());
    assert!(l.try_acquire().unwrap());
    assert!(!l.lost(), "the next hold starts afresh");
    let token = l.token().unwrap();
    thread::sleep(Duration::from_millis(1000));
    assert!(!l.lost());
    assert_eq!(holder(&l), Some(token));
    l.release().unwrap();
}

#[test]
fn a_hold_handed_over_after_a_wait_longer_than_its_ttl_is_not_lost() {
    // The holder's TTL is long: the waiter re-checks once a second, not
    // when the holder's TTL would run out, so its last attempt is up to a
    // second old when the hold is handed over: more than its own TTL.
    let mut opts = lock_opts("handed-over-late");
    opts.ttl = Duration::from_secs(30);
    let first = Lock::new(&client(), b"x", opts.clone()).unwrap();
    opts.ttl = Duration::from_millis(300);
    opts.auto_renew = true;
    let mut second = Lock::new(&client(), b"x", opts).unwrap();
    for round in 0..4 {
        assert!(first.try_acquire().unwrap());
        let waiting = thread::spawn(move || {
            let wait = ferrolock::Wait::For(Duration::from_secs(10));
            let got = second.acquire(wait, None).unwrap();
            (got, second.lost(), second)
        });
        // The hand-over at some point of the waiter's re-check interval.
        thread::sleep(Duration::from_millis(1100 + 230 * round));
        first.release().unwrap();
        let (got, lost, back) = waiting.join().unwrap();
        assert!(got);
        // Its TTL ran from the hand-over, not from the wait's last attempt.
        assert!(
            !lost,
            "a hold just handed over is reported lost (round {round})"
        );
        thread::sleep(Duration::from_millis(500));
        assert!(!back.lost(), "renewed");
        back.release().unwrap();
        second = back;
    }
}
