//! The watchdog against a real redis-server: auto-renewal, loss, a shorter TTL.

use std::thread;
use std::time::Duration;

use crate::common::{client, lock_opts, raw};
use ferrolock::Lock;
use redis::Commands;

#[test]
fn watchdog_keeps_a_lock_alive_and_reports_it_lost() {
    let c = client();
    let mut opts = lock_opts("watchdog");
    opts.ttl = Duration::from_millis(300);
    opts.auto_renew = true;
    let l = Lock::new(&c, b"x", opts).unwrap();
    assert!(l.try_acquire().unwrap());
    thread::sleep(Duration::from_millis(1000)); // > 3 x ttl
    assert!(l.owned().unwrap(), "renewed past 3x its TTL");
    assert!(!l.lost());
    let _: () = raw().del(l.key()).unwrap();
    thread::sleep(Duration::from_millis(400));
    assert!(
        l.lost(),
        "renewal that finds the key gone marks the lock lost"
    );
    assert!(l.release().unwrap_err().is_not_owned());
}

#[test]
fn extend_to_a_shorter_ttl_reschedules_the_watchdog() {
    let c = client();
    let mut opts = lock_opts("shorter");
    opts.ttl = Duration::from_secs(30);
    opts.auto_renew = true;
    let l = Lock::new(&c, b"x", opts).unwrap();
    assert!(l.try_acquire().unwrap());
    l.extend(Some(Duration::from_millis(300))).unwrap();
    thread::sleep(Duration::from_millis(1000)); // > 3 x the new ttl
    assert!(l.owned().unwrap(), "renewed on the new, shorter schedule");
    assert!(!l.lost());
    let pttl: i64 = redis::cmd("PTTL").arg(l.key()).query(&mut raw()).unwrap();
    assert!(pttl <= 300, "renewals use the extended ttl: {pttl}");
    l.release().unwrap();
}
