//! Lock behaviour against a real redis-server.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{client, lock_opts, own_server, raw};
use ferrolock::{Client, ErrorKind, Lock, LockOptions, Wait};
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
fn fencing_tokens_strictly_increase_across_holders() {
    let c = client();
    let opts = lock_opts("fence");
    let locks: Vec<_> = (0..3)
        .map(|_| Lock::new(&c, b"x", opts.clone()).unwrap())
        .collect();
    let mut last = 0;
    for round in 0..50 {
        let l = &locks[round % 3];
        assert!(l.try_acquire().unwrap());
        let f = l.fencing_token().unwrap().unwrap();
        assert!(f > last, "{f} after {last}");
        last = f;
        l.release().unwrap();
        assert_eq!(l.fencing_token().unwrap(), None);
    }
    // Still increasing after the fence key itself was deleted (server clock).
    // (Only this test's keys: the tests share one server.)
    let pattern = format!("*{}x:fence", String::from_utf8_lossy(&opts.prefix));
    let mut r = raw();
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut r).unwrap();
    for k in keys {
        let _: () = r.del(k).unwrap();
    }
    assert!(locks[0].try_acquire().unwrap());
    let after_loss = locks[0].fencing_token().unwrap().unwrap();
    assert!(after_loss > last);
    locks[0].release().unwrap();
    // A counter ahead of the server clock (the clock stepped back): one more
    // than the last token, each time.
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut r).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ahead = after_loss + 3_600_000_000; // an hour of µs
    let _: () = r.set(&keys[0], ahead).unwrap();
    for expected in [ahead + 1, ahead + 2] {
        assert!(locks[1].try_acquire().unwrap());
        assert_eq!(locks[1].fencing_token().unwrap(), Some(expected));
        locks[1].release().unwrap();
    }
}

/// An uncontended acquire is a plain SET NX PX: its fencing token is drawn
/// on first read, inside the hold, and only while the lock is still ours.
#[test]
fn fencing_token_is_drawn_on_first_read_while_held() {
    let c = client();
    let opts = lock_opts("lazy-fence");
    let mut r = raw();
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    let b = Lock::new(&c, b"x", opts.clone()).unwrap();
    let fence_keys = |r: &mut redis::Connection| -> Vec<String> {
        let pattern = format!("*{}x:fence", String::from_utf8_lossy(&opts.prefix));
        redis::cmd("KEYS").arg(pattern).query(r).unwrap()
    };
    assert!(a.try_acquire().unwrap());
    assert_eq!(
        fence_keys(&mut r),
        Vec::<String>::new(),
        "no token drawn yet"
    );
    // a's hold ends (deleted here, as if it expired) and b takes the lock
    // and reads its token.
    let _: () = r.del(a.key()).unwrap();
    assert!(b.try_acquire().unwrap());
    let fb = b.fencing_token().unwrap().unwrap();
    let fence = fence_keys(&mut r).pop().unwrap();
    assert_eq!(r.get::<_, i64>(&fence).unwrap(), fb);
    // Too late for a: no token, and a now knows it lost the lock.
    assert!(!a.lost());
    assert_eq!(a.fencing_token().unwrap_err().kind(), ErrorKind::Lost);
    assert!(a.lost());
    assert_eq!(a.release().unwrap_err().kind(), ErrorKind::NotOwned);
    // A hold keeps the token it drew, without asking Redis again.
    let _: () = r.set(&fence, fb + 1_000).unwrap();
    assert_eq!(b.fencing_token().unwrap(), Some(fb));
    b.release().unwrap();
    // This process has read tokens of "x": its acquires draw one at once.
    assert!(a.try_acquire().unwrap());
    assert!(!a.lost());
    let drawn: i64 = r.get(&fence).unwrap();
    assert!(drawn > fb + 1_000, "{drawn}");
    let _: () = r.del(&fence).unwrap();
    assert_eq!(a.fencing_token().unwrap(), Some(drawn));
    a.release().unwrap();
}

/// An acquire that finds the lock already its own (a retry whose first reply
/// was lost, a waiter that missed its hand-over message) draws a new token:
/// the counter may hold the previous holder's, since a hold taken by a plain
/// SET NX draws none.
#[test]
fn an_acquire_that_finds_the_lock_its_own_draws_a_new_token() {
    let script = redis::Script::new(include_str!(concat!(
        env!("OUT_DIR"),
        "/scripts/lock_acquire-4.lua"
    )));
    let prefix = String::from_utf8_lossy(&lock_opts("own-again").prefix).into_owned();
    let (key, fence) = (format!("{{t}}{prefix}x"), format!("{{t}}{prefix}x:fence"));
    let mut r = raw();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut r).unwrap();
    let previous = secs * 1_000_000 + micros + 3_600_000_000; // ahead of the clock, too
    let _: () = r.set(&fence, previous).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("mine")
        .arg("PX")
        .arg(1_000)
        .query(&mut r)
        .unwrap();
    let token: String = script
        .key(&key)
        .key(&fence)
        .arg("mine")
        .arg(30_000)
        .invoke(&mut r)
        .unwrap();
    assert_eq!(token.parse::<i64>().unwrap(), previous + 1);
    assert!(
        r.pttl::<_, i64>(&key).unwrap() > 1_000,
        "the TTL starts again"
    );
}

/// Redis 6.0 and 6.1 refuse SET's GET option. The acquire script, run here
/// as built but with a `redis` whose `call` and `pcall` refuse `SET … GET`
/// as they do, takes the lock and issues its token with GET and SET instead.
#[test]
fn fencing_works_where_set_has_no_get_option() {
    let built = include_str!(concat!(env!("OUT_DIR"), "/scripts/lock_acquire-4.lua"));
    let as_redis_6_0 = r#"
local function refused(args) return args[1] == 'SET' and args[#args] == 'GET' end
local redis = setmetatable({
  call = function(...)
    if refused({...}) then error({err = 'ERR syntax error'}) end
    return redis.call(...)
  end,
  pcall = function(...)
    if refused({...}) then return {err = 'ERR syntax error'} end
    return redis.pcall(...)
  end,
}, {__index = redis})
"#;
    let script = redis::Script::new(&format!("{as_redis_6_0}{built}"));
    let opts = lock_opts("no-set-get");
    let prefix = String::from_utf8_lossy(&opts.prefix).into_owned();
    let (lock, fence) = (format!("{prefix}x"), format!("{prefix}x:fence"));
    let mut r = raw();
    let acquire = |r: &mut redis::Connection, token: &str| -> redis::Value {
        script
            .key(&lock)
            .key(&fence)
            .arg(token)
            .arg(30_000)
            .invoke(r)
            .unwrap()
    };
    let redis::Value::BulkString(first) = acquire(&mut r, "a") else {
        panic!("not taken")
    };
    let first: i64 = String::from_utf8(first).unwrap().parse().unwrap();
    let stored: i64 = r.get(&fence).unwrap();
    assert_eq!(stored, first);
    assert!(r.pttl::<_, i64>(&fence).unwrap() > 30_000);
    // Busy: the holder's PTTL.
    assert!(matches!(
        acquire(&mut r, "b"),
        redis::Value::Int(29_000..=30_000)
    ));
    // Ahead of the clock: one more than the last.
    let _: () = r.del(&lock).unwrap();
    let ahead = first + 3_600_000_000;
    let _: () = r.set(&fence, ahead).unwrap();
    let next = (ahead + 1).to_string().into_bytes();
    assert_eq!(acquire(&mut r, "c"), redis::Value::BulkString(next));
    assert_eq!(r.get::<_, i64>(&fence).unwrap(), ahead + 1);
}

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

/// A thread that waits up to 20 s for lock "x"; it returns the lock, whether
/// it got it, and when the wait ended.
fn wait_in_thread(c: &Client, opts: LockOptions) -> thread::JoinHandle<(Lock, bool, Instant)> {
    let c = c.clone();
    thread::spawn(move || {
        let l = Lock::new(&c, b"x", opts).unwrap();
        let ok = l.acquire(Wait::For(Duration::from_secs(20)), None).unwrap();
        (l, ok, Instant::now())
    })
}

/// Channels of this test's waiters that some connection listens to.
fn waiter_channels(prefix: &[u8]) -> Vec<String> {
    let pattern = format!("*{}*:wake:*", String::from_utf8_lossy(prefix));
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(pattern)
        .query(&mut raw())
        .unwrap()
}

#[test]
fn a_finished_wait_leaves_one_subscription_that_the_next_wait_drops() {
    // A waiter handed the lock returns without unsubscribing (that write
    // would delay it); the next wait on the pooled connection drops the old
    // channel in the same write as its own SUBSCRIBE.
    let c = client();
    let opts = lock_opts("leftover");
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    let waiter = Arc::new(Lock::new(&c, b"x", opts.clone()).unwrap());
    let mut seen = Vec::new();
    for _ in 0..3 {
        assert!(holder.try_acquire().unwrap());
        let w = thread::spawn({
            let waiter = waiter.clone();
            move || {
                waiter
                    .acquire(Wait::For(Duration::from_secs(20)), None)
                    .unwrap()
            }
        });
        thread::sleep(Duration::from_millis(200));
        holder.release().unwrap();
        assert!(w.join().unwrap());
        // Only the last wait's channel is still subscribed.
        let channels = waiter_channels(&opts.prefix);
        assert_eq!(channels.len(), 1, "{channels:?}");
        assert!(!seen.contains(&channels[0]), "a new channel per wait");
        seen.push(channels[0].clone());
        // The leftover is in no waiter list: the release goes nowhere, and
        // the next acquire by anyone succeeds at once.
        waiter.release().unwrap();
        assert!(holder.try_acquire().unwrap());
        holder.release().unwrap();
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

/// A restart, a failover or SCRIPT FLUSH empties the server's script cache:
/// every call loads its script again and goes on, including a release sent
/// behind a PING (the one after a wait).
#[test]
fn scripts_are_loaded_again_after_the_script_cache_is_flushed() {
    let (_server, c, mut r) = own_server();
    let mut flush = || {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut r).unwrap();
    };
    let opts = lock_opts("flush");
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = wait_in_thread(&c, opts);
    thread::sleep(Duration::from_millis(300));
    flush();
    holder.release().unwrap();
    let (waiter, ok, _) = waiter.join().unwrap();
    assert!(ok);
    flush();
    waiter.release().unwrap();
    assert!(!waiter.locked().unwrap());
    flush();
    assert!(holder.try_acquire().unwrap());
    holder.release().unwrap();
}

/// A server that refuses writes (here: too few replicas for
/// `min-replicas-to-write`; OOM under `noeviction` is the same) answers an
/// acquire with that error, busy lock or not, instead of a plain "no".
#[test]
fn a_server_refusing_writes_fails_the_acquire_with_its_error() {
    let (_server, c, mut r) = own_server();
    let opts = lock_opts("refused");
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(1)
        .query(&mut r)
        .unwrap();
    let other = Lock::new(&c, b"x", opts.clone()).unwrap();
    let busy = other.try_acquire().unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Redis, "{busy}");
    assert!(busy.to_string().contains("NOREPLICAS"), "{busy}");
    let fresh = Lock::new(&c, b"y", opts).unwrap();
    let free = fresh.try_acquire().unwrap_err();
    assert!(free.to_string().contains("NOREPLICAS"), "{free}");
    // Reads still work, and the holder keeps its lock.
    assert!(holder.locked().unwrap());
}
