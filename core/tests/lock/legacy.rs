//! Legacy pollers (SETNX every 100 ms, as the hand-rolled PHP `RedisLock`
//! does) beside busy ferrolock waiters: with legacy interop on they get
//! their turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{client, lock_opts, raw};
use ferrolock::{Lock, Wait};

/// The legacy algorithm: SETNX the key with its expiry time as the value,
/// EXPIRE it, else sleep 100 ms and try again until `timeout`.
fn legacy_lock(key: &[u8], timeout: Duration) -> bool {
    let mut conn = raw();
    let until = Instant::now() + timeout;
    loop {
        let value = format!("{:.4}", 1.0e9 + 15.0);
        let set: i64 = redis::cmd("SETNX")
            .arg(key)
            .arg(&value)
            .query(&mut conn)
            .unwrap();
        if set == 1 {
            let _: i64 = redis::cmd("EXPIRE")
                .arg(key)
                .arg(15)
                .query(&mut conn)
                .unwrap();
            thread::sleep(Duration::from_millis(20)); // its critical section
            let _: i64 = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_legacy_poller_gets_its_turn_beside_busy_waiters() {
    let c = client();
    let mut opts = lock_opts("legacy-turns");
    opts.legacy_interop = Some(true);
    opts.recheck = Duration::from_millis(100); // as PHP's waitIntervalUs
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (c, opts, stop) = (c.clone(), opts.clone(), stop.clone());
            thread::spawn(move || {
                let l = Lock::new(&c, b"busy", opts).unwrap();
                let mut held = 0;
                while !stop.load(Ordering::Acquire) {
                    if l.acquire(Wait::For(Duration::from_secs(10)), None).unwrap() {
                        held += 1;
                        thread::sleep(Duration::from_millis(3));
                        l.release().unwrap();
                    }
                }
                held
            })
        })
        .collect();
    let key = Lock::new(&c, b"busy", opts).unwrap().key().to_vec();
    thread::sleep(Duration::from_millis(500)); // contention under way
    // Three tries, each after the turn of the one before has ended: each
    // needs a turn of its own.
    let mut got = 0;
    let start = Instant::now();
    for _ in 0..3 {
        if legacy_lock(&key, Duration::from_secs(5)) {
            got += 1;
        }
        thread::sleep(Duration::from_millis(300));
    }
    println!("legacy poller: {got} of 3 in {:?}", start.elapsed());
    stop.store(true, Ordering::Release);
    let held: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(got, 3, "the poller got the lock {got} times of 3");
    assert!(
        held > 100,
        "the ferrolock workers went on meanwhile: {held}"
    );
}
