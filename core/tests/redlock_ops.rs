//! Redlock in the operator's figures and events, on three real, independent
//! redis-servers: acquire waits, missed acquires and hold times counted; a
//! renewed hold kept alive past its TTL; a hold whose keys are deleted while
//! held found lost by its renewal and reported once, naming the object. A
//! test binary of its own: events are process-wide, and only
//! `a_hold_whose_keys_are_deleted_is_reported_lost` reads them.
#![allow(clippy::unwrap_used)]

use std::thread;
use std::time::{Duration, Instant};

use ferrolock::ops::{events, metrics};
use ferrolock::testing::{RedisServer, unique_prefix};
use ferrolock::{Client, Config, Redlock, Wait};

struct Masters {
    servers: Vec<RedisServer>,
}

impl Masters {
    /// Three servers, up long enough to vote for holds of `ttl` (a master
    /// that started less than one TTL ago has no vote).
    fn start(ttl: Duration) -> Self {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        for s in &servers {
            s.wait_up_for(ttl);
        }
        Self { servers }
    }

    fn redlock(&self, prefix: &str, name: &[u8], ttl: Duration) -> Redlock {
        let clients = self
            .servers
            .iter()
            .map(|s| Client::new(Config::from_url(&s.url()).unwrap()).unwrap())
            .collect();
        Redlock::new(clients, name, ttl, prefix.as_bytes()).unwrap()
    }

    /// The remaining TTL of `key` on every master (ms; negative: no key).
    fn pttls(&self, key: &str) -> Vec<i64> {
        self.servers
            .iter()
            .map(|s| redis::cmd("PTTL").arg(key).query(&mut s.conn()).unwrap())
            .collect()
    }

    fn delete(&self, key: &str) {
        for s in &self.servers {
            let _: i64 = redis::cmd("DEL").arg(key).query(&mut s.conn()).unwrap();
        }
    }
}

/// Waits up to 15 s until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(15);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn acquires_misses_and_holds_are_counted() {
    let ttl = Duration::from_secs(5);
    let masters = Masters::start(ttl);
    let p = unique_prefix("rl-metrics");
    let before = metrics::snapshot();
    let a = masters.redlock(&p, b"m", ttl);
    let b = masters.redlock(&p, b"m", ttl);
    assert!(a.acquire(Wait::Try, None).unwrap());
    assert!(!b.acquire(Wait::Try, None).unwrap(), "held: a miss");
    assert!(
        !b.acquire(Wait::For(Duration::from_millis(200)), None)
            .unwrap(),
        "the wait ran out: a miss"
    );
    let holder = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        a.release().unwrap();
    });
    assert!(b.acquire(Wait::For(Duration::from_secs(10)), None).unwrap());
    holder.join().unwrap();
    b.release().unwrap();
    let after = metrics::snapshot();
    // Other tests of this binary count too: at least ours moved.
    assert!(after.lock_wait.count >= before.lock_wait.count + 2);
    assert!(after.acquires_missed >= before.acquires_missed + 2);
    assert!(after.lock_hold.count >= before.lock_hold.count + 2);
    // The hold of `a` lasted 300 ms at least, the wait of `b` too.
    assert!(after.lock_hold.sum - before.lock_hold.sum >= 0.3);
    assert!(after.lock_wait.sum - before.lock_wait.sum >= 0.25);
}

#[test]
fn a_renewed_hold_outlives_its_ttl() {
    let ttl = Duration::from_millis(1500);
    let masters = Masters::start(ttl);
    let p = unique_prefix("rl-renew");
    let lock = masters.redlock(&p, b"r", ttl).auto_renew(true);
    assert!(lock.acquire(Wait::Try, None).unwrap());
    thread::sleep(ttl * 3);
    assert!(!lock.lost());
    assert!(lock.owned().unwrap(), "renewed on a quorum");
    let key = format!("{p}r");
    assert!(masters.pttls(&key).iter().all(|&t| t > 0));
    lock.release().unwrap();
    assert!(masters.pttls(&key).iter().all(|&t| t < 0), "released");
    // Without renewal, the same hold expires.
    let plain = masters.redlock(&p, b"r", ttl);
    assert!(plain.acquire(Wait::Try, None).unwrap());
    eventually("the hold expires", || {
        plain.lost() && masters.pttls(&key).iter().all(|&t| t < 0)
    });
    assert!(plain.release().unwrap_err().is_not_owned());
}

#[test]
fn a_hold_whose_keys_are_deleted_is_reported_lost() {
    events::enable(true);
    let ttl = Duration::from_millis(1200);
    let masters = Masters::start(ttl);
    let p = unique_prefix("rl-lost");
    let before = metrics::snapshot();
    let lock = masters.redlock(&p, b"gone", ttl).auto_renew(true);
    assert!(lock.acquire(Wait::Try, None).unwrap());
    masters.delete(&format!("{p}gone"));
    let mut seen = Vec::new();
    eventually("the renewal finds it lost", || {
        seen.extend(
            events::wait(Duration::from_millis(100), None)
                .unwrap()
                .into_iter()
                .filter(|e| e.name == b"gone" && e.kind == events::EventKind::LockLost),
        );
        !seen.is_empty()
    });
    assert!(lock.lost());
    assert_eq!(seen[0].lock_id, lock.id(), "names the lock object");
    assert!(
        seen[0].message.starts_with("redlock \"gone\": lost"),
        "{seen:?}"
    );
    assert!(!lock.owned().unwrap());
    // Its release finds it gone: not reported twice.
    assert!(lock.release().unwrap_err().is_not_owned());
    thread::sleep(Duration::from_millis(200));
    assert!(
        !events::drain()
            .iter()
            .any(|e| e.name == b"gone" && e.kind == events::EventKind::LockLost)
    );
    assert!(metrics::snapshot().locks_lost > before.locks_lost);
    // The name is free again for others.
    let next = masters.redlock(&p, b"gone", ttl);
    assert!(next.acquire(Wait::Try, None).unwrap());
    next.release().unwrap();
    events::enable(false);
}
