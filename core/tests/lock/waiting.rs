//! Waiting for a lock against a real redis-server: woken by notification, by the
//! TTL of a crashed holder, timeouts, the interrupt hook, fair mode.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{client, lock_opts, raw, wait_in_thread};
use ferrolock::{Lock, Wait};

#[test]
fn release_wakes_a_waiter_by_notification() {
    let c = client();
    let mut opts = lock_opts("wake");
    opts.recheck = Duration::from_secs(30); // only a notification can wake it in time
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = wait_in_thread(&c, opts);
    thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    holder.release().unwrap();
    let (_, ok, woke) = waiter.join().unwrap();
    assert!(ok);
    assert!(woke.duration_since(released) < Duration::from_secs(5));
}

#[test]
fn the_waits_of_a_process_share_one_subscription() {
    // Waiters on three names in three threads: one channel (the client's
    // hub), which every release hands its lock over on.
    let c = client();
    let opts = lock_opts("shared");
    let names: [&[u8]; 3] = [b"a", b"b", b"c"];
    let holders: Vec<Lock> = names
        .iter()
        .map(|n| Lock::new(&c, n, opts.clone()).unwrap())
        .collect();
    for h in &holders {
        assert!(h.try_acquire().unwrap());
    }
    let waiters: Vec<_> = names
        .iter()
        .map(|n| {
            let (c, opts, n) = (c.clone(), opts.clone(), n.to_vec());
            thread::spawn(move || {
                let l = Lock::new(&c, &n, opts).unwrap();
                let ok = l.acquire(Wait::For(Duration::from_secs(20)), None).unwrap();
                l.release().unwrap();
                ok
            })
        })
        .collect();
    // Wait until all three are registered.
    let pattern = format!("*{}*:waiters", String::from_utf8_lossy(&opts.prefix));
    let until = Instant::now() + Duration::from_secs(10);
    let members = loop {
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg(&pattern).query(&mut raw()).unwrap();
        let mut members = Vec::new();
        for k in keys {
            let m: Vec<String> = redis::cmd("ZRANGE")
                .arg(k)
                .arg(0)
                .arg(-1)
                .query(&mut raw())
                .unwrap();
            members.extend(m);
        }
        if members.len() == 3 {
            break members;
        }
        assert!(Instant::now() < until, "the waiters did not register");
        thread::sleep(Duration::from_millis(10));
    };
    // `<hub>:<waiter>|<ttl>|<token>`: one hub, three waiters.
    let hubs: std::collections::BTreeSet<&str> = members
        .iter()
        .map(|m| m.split(':').next().unwrap())
        .collect();
    assert_eq!(hubs.len(), 1, "{members:?}");
    let hub = hubs.into_iter().next().unwrap();
    let listeners: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("fl:w:{hub}"))
        .query(&mut raw())
        .unwrap();
    assert_eq!(listeners[0].1, 1, "one subscription connection");
    for h in &holders {
        h.release().unwrap();
    }
    for w in waiters {
        assert!(w.join().unwrap());
    }
}

#[test]
fn a_crashed_holders_lock_is_taken_when_its_ttl_ends() {
    let c = client();
    let mut opts = lock_opts("crash");
    opts.ttl = Duration::from_millis(400);
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    holder.forget(); // the holder "crashes": no release
    let start = Instant::now();
    opts.recheck = Duration::from_secs(30); // only the TTL hint can wake it
    let l = Lock::new(&c, b"x", opts).unwrap();
    assert!(l.acquire(Wait::For(Duration::from_secs(10)), None).unwrap());
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn try_once_and_timeouts() {
    let c = client();
    let opts = lock_opts("timeouts");
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    let b = Lock::new(&c, b"x", opts).unwrap();
    assert!(a.try_acquire().unwrap());
    let start = Instant::now();
    assert!(
        !b.acquire(Wait::For(Duration::from_millis(300)), None)
            .unwrap()
    );
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(!b.acquire(Wait::Try, None).unwrap());
    // The timed-out waiter deregistered itself.
    let pattern = format!("*{}x:waiters", String::from_utf8_lossy(&a.options().prefix));
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut raw()).unwrap();
    for k in keys {
        let n: i64 = redis::cmd("ZCARD").arg(&k).query(&mut raw()).unwrap();
        assert_eq!(n, 0, "{k}");
    }
}

#[test]
fn interrupt_hook_aborts_a_wait_and_leaves_state_clean() {
    let c = client();
    let opts = lock_opts("interrupt");
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    let b = Lock::new(&c, b"x", opts).unwrap();
    assert!(a.try_acquire().unwrap());
    let start = Instant::now();
    let hook = || -> ferrolock::Result<()> {
        if start.elapsed() > Duration::from_millis(200) {
            Err(ferrolock::wait::interrupted("test"))
        } else {
            Ok(())
        }
    };
    let err = b.acquire(Wait::Forever, Some(&hook)).unwrap_err();
    assert!(err.is_interrupted(), "{err}");
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(b.token(), None);
    a.release().unwrap();
    assert!(b.try_acquire().unwrap());
}

#[test]
fn fair_mode_grants_in_arrival_order() {
    let c = client();
    let mut opts = lock_opts("fair");
    opts.fair = true;
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..5 {
        let (c, opts, order) = (c.clone(), opts.clone(), order.clone());
        handles.push(thread::spawn(move || {
            let l = Lock::new(&c, b"x", opts).unwrap();
            assert!(l.acquire(Wait::For(Duration::from_secs(30)), None).unwrap());
            order.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(20));
            l.release().unwrap();
        }));
        // Let waiter i register before waiter i+1 arrives.
        thread::sleep(Duration::from_millis(150));
    }
    // A newcomer cannot barge in ahead of the queue in fair mode.
    let newcomer = Lock::new(&c, b"x", opts).unwrap();
    holder.release().unwrap();
    assert!(!newcomer.try_acquire().unwrap());
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}
