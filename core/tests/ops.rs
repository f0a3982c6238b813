//! The operator's views and actions (`ferrolock::ops`) against a real
//! redis-server: one lock in detail, listings under a prefix, the forced
//! release, a queue's reservations, events and metrics. A test binary of its
//! own: events are process-wide, and only `events_and_metrics` reads them.
#![allow(clippy::unwrap_used)]

#[path = "common/mod.rs"]
mod common;

use std::thread;
use std::time::{Duration, Instant};

use ferrolock::ops::{events, metrics};
use ferrolock::testing::unique_prefix;
use ferrolock::{Inspector, Lock, LockOptions, Queue, QueueOptions, Wait};

use common::{client, raw};

/// An inspector, lock options and queue options under a prefix of this test.
fn setup(test: &str) -> (Inspector, LockOptions, QueueOptions) {
    let p = unique_prefix(test);
    let mut lo = LockOptions::default();
    lo.prefix = format!("{p}Lock:").into_bytes();
    let mut qo = QueueOptions::default();
    qo.prefix = format!("{p}Queue:").into_bytes();
    qo.lock_prefix = lo.prefix.clone();
    let inspector = Inspector::with_prefixes(&client(), &lo.prefix, &qo.prefix);
    (inspector, lo, qo)
}

/// Waits up to 10 s until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_lock_in_detail_holder_ttl_fence_and_waiters_in_order() {
    let (ins, mut lo, _) = setup("detail");
    lo.fair = true;
    let c = client();
    let info = ins.lock(b"orders", 10).unwrap();
    assert_eq!(info.holder, None);
    assert_eq!((info.waiting, info.waiters.len()), (0, 0));

    lo.ttl = Duration::from_secs(20);
    let holder = Lock::new(&c, b"orders", lo.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let fence = holder.fencing_token().unwrap().unwrap();
    let token = holder.token().unwrap();

    // Two waiters, the second asking for a different TTL.
    let mut waiters = Vec::new();
    for ttl in [7, 9] {
        let (c, mut o) = (c.clone(), lo.clone());
        o.ttl = Duration::from_secs(ttl);
        waiters.push(thread::spawn(move || {
            let l = Lock::new(&c, b"orders", o).unwrap();
            assert!(l.acquire(Wait::For(Duration::from_secs(20)), None).unwrap());
            l.release().unwrap();
        }));
        eventually("the waiter registers", || {
            ins.lock(b"orders", 10).unwrap().waiting as usize == waiters.len()
        });
    }

    let info = ins.lock(b"orders", 10).unwrap();
    assert_eq!(info.name, b"orders");
    assert!(info.key.ends_with(b"Lock:orders"));
    assert_eq!(
        info.holder.as_deref(),
        Some(&format!("{}…", &token[..8])[..])
    );
    assert!(info.expires);
    let ttl = info.ttl.unwrap();
    assert!(ttl > Duration::from_secs(15) && ttl <= Duration::from_secs(20));
    assert_eq!(info.fence, Some(fence));
    assert_eq!(info.waiting, 2);
    let asked: Vec<_> = info.waiters.iter().map(|w| w.ttl).collect();
    assert_eq!(
        asked,
        [Some(Duration::from_secs(7)), Some(Duration::from_secs(9))],
        "in the order they are served"
    );
    for w in &info.waiters {
        assert!(w.lease.is_some_and(|l| l > Duration::ZERO), "{w:?}");
        assert!(w.waited < Duration::from_secs(20));
        assert!(w.id.ends_with('…') && w.token.ends_with('…'));
    }
    // Asking for fewer waiters lists fewer, and still counts them all.
    let one = ins.lock(b"orders", 1).unwrap();
    assert_eq!((one.waiting, one.waiters.len()), (2, 1));
    assert!(ins.lock(b"orders", 100_000).is_err(), "pages are bounded");

    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(ins.lock(b"orders", 10).unwrap().holder, None);
}

#[test]
fn a_legacy_orphan_is_shown_without_expiry() {
    let (ins, lo, _) = setup("orphan");
    let mut key = lo.prefix.clone();
    key.extend_from_slice(b"cron");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("legacy-token")
        .query(&mut raw())
        .unwrap();
    let info = ins.lock(b"cron", 0).unwrap();
    assert_eq!(info.holder.as_deref(), Some("legacy-token"));
    assert!(!info.expires);
    assert_eq!(info.ttl, None);
}

#[test]
fn locks_under_a_prefix_are_listed_by_scan_with_a_limit() {
    let (ins, lo, _) = setup("list");
    let c = client();
    let mut held = Vec::new();
    for name in ["orders:1", "orders:2", "orders:3", "mails", "a*b?[c]"] {
        let l = Lock::new(&c, name.as_bytes(), lo.clone()).unwrap();
        assert!(l.try_acquire().unwrap());
        held.push(l);
    }
    let all = ins.locks(b"", 100).unwrap();
    assert!(all.complete);
    let names: Vec<_> = all.items.iter().map(|i| i.name.clone()).collect();
    assert_eq!(
        names,
        [
            &b"a*b?[c]"[..],
            b"mails",
            b"orders:1",
            b"orders:2",
            b"orders:3"
        ]
    );
    assert!(
        all.items
            .iter()
            .all(|i| i.holder.is_some() && i.ttl.is_some())
    );

    let orders = ins.locks(b"orders:", 100).unwrap();
    assert_eq!(orders.items.len(), 3);
    // Glob characters in a name are matched literally.
    let odd = ins.locks(b"a*", 100).unwrap();
    assert_eq!(odd.items.len(), 1);
    assert_eq!(odd.items[0].name, b"a*b?[c]");

    let two = ins.locks(b"orders:", 2).unwrap();
    assert_eq!(two.items.len(), 2);
    assert!(!two.complete, "the limit cut the listing short");

    held[0].release().unwrap();
    assert_eq!(ins.locks(b"orders:", 100).unwrap().items.len(), 2);
    assert!(ins.locks(b"", 0).is_err());
}

#[test]
fn a_forced_release_hands_the_lock_to_the_next_waiter() {
    let (ins, lo, _) = setup("force");
    let c = client();
    let stuck = Lock::new(&c, b"job", lo.clone()).unwrap();
    assert!(stuck.try_acquire().unwrap());
    let token = stuck.token().unwrap();
    let waiter = {
        let (c, lo) = (c.clone(), lo.clone());
        thread::spawn(move || {
            let l = Lock::new(&c, b"job", lo).unwrap();
            let got = l.acquire(Wait::For(Duration::from_secs(20)), None).unwrap();
            (l, got)
        })
    };
    eventually("the waiter registers", || {
        ins.lock(b"job", 0).unwrap().waiting == 1
    });
    let ended = ins.force_release(b"job").unwrap();
    assert_eq!(ended, Some(format!("{}…", &token[..8])));
    let (next, got) = waiter.join().unwrap();
    assert!(got, "the waiter got the lock at once");
    assert!(next.owned().unwrap());
    // The stuck holder finds out at its next call.
    assert!(stuck.release().unwrap_err().is_not_owned());
    next.release().unwrap();
    assert_eq!(ins.force_release(b"job").unwrap(), None, "nothing held");
}

#[test]
fn queues_are_listed_with_their_counts_and_reservations_paged() {
    let (ins, _, mut qo) = setup("queues");
    qo.max_attempts = Some(1);
    let c = client();
    let mails = Queue::new(&c, b"mails", qo.clone()).unwrap();
    mails
        .enqueue(&[b"due1", b"due2"], -5.0, None, None)
        .unwrap();
    mails.enqueue(&[b"later"], 600.0, None, None).unwrap();
    let flying = mails
        .reserve(Some(Duration::from_secs(30)), Wait::Try, None)
        .unwrap()
        .unwrap();
    assert_eq!(flying.id, b"due1");
    // A queue whose only task is dead: found by its dead set.
    let graveyard = Queue::new(&c, b"graves", qo.clone()).unwrap();
    graveyard.enqueue(&[b"x"], 0.0, None, None).unwrap();
    let t = graveyard.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert!(
        graveyard
            .nack(&t.id, t.receipt.as_deref().unwrap(), None, None)
            .unwrap()
    );
    assert_eq!(graveyard.len().unwrap(), 0);

    let listing = ins.queues(b"", 100).unwrap();
    assert!(listing.complete);
    let names: Vec<_> = listing.items.iter().map(|q| q.name.clone()).collect();
    assert_eq!(names, [&b"graves"[..], b"mails"]);
    let m = &listing.items[1].stats;
    assert_eq!((m.due, m.delayed, m.in_flight, m.dead), (1, 1, 1, 0));
    assert!(m.oldest_due_age >= 4.0, "{m:?}");
    let g = &listing.items[0].stats;
    assert_eq!((g.due, g.in_flight, g.dead), (0, 0, 1));
    assert_eq!(ins.queues(b"ma", 100).unwrap().items.len(), 1);
    let one = ins.queue(b"mails").unwrap().stats;
    assert_eq!((one.due, one.delayed, one.in_flight), (1, 1, 1));
    assert!(one.oldest_due_age >= m.oldest_due_age);

    let page = ins.in_flight(b"mails", 0, 10).unwrap();
    assert_eq!(page.total, 1);
    let r = &page.items[0];
    assert_eq!(r.id, b"due1");
    assert_eq!((r.attempt, r.max_attempts), (Some(1), Some(1)));
    assert_eq!(r.visibility, Some(Duration::from_secs(30)));
    assert!(r.left > 25.0 && r.left <= 30.0, "{r:?}");
    assert!(ins.in_flight(b"mails", 1, 10).unwrap().items.is_empty());
    assert!(
        mails
            .ack(&flying.id, flying.receipt.as_deref().unwrap())
            .unwrap()
    );
    assert_eq!(ins.in_flight(b"mails", 0, 10).unwrap().total, 0);
}

#[test]
fn events_and_metrics() {
    events::enable(true);
    events::set_slow_acquire(Some(Duration::from_millis(100)));
    let (ins, mut lo, mut qo) = setup("events");
    let c = client();
    let before = metrics::snapshot();

    // A slow acquire: held for 300 ms while another waits.
    let holder = Lock::new(&c, b"slow", lo.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = {
        let (c, lo) = (c.clone(), lo.clone());
        thread::spawn(move || {
            let l = Lock::new(&c, b"slow", lo).unwrap();
            assert!(l.acquire(Wait::For(Duration::from_secs(20)), None).unwrap());
            l.release().unwrap();
        })
    };
    thread::sleep(Duration::from_millis(300));
    holder.release().unwrap();
    waiter.join().unwrap();
    // A missed try-once.
    let busy = Lock::new(&c, b"busy", lo.clone()).unwrap();
    assert!(busy.try_acquire().unwrap());
    assert!(
        !Lock::new(&c, b"busy", lo.clone())
            .unwrap()
            .try_acquire()
            .unwrap()
    );

    // A lock lost under its watchdog: the key is deleted behind its back.
    lo.auto_renew = true;
    lo.ttl = Duration::from_millis(600);
    let lost = Lock::new(&c, b"lost", lo.clone()).unwrap();
    assert!(lost.try_acquire().unwrap());
    let mut key = lo.prefix.clone();
    key.extend_from_slice(b"lost");
    let _: () = redis::cmd("DEL").arg(&key).query(&mut raw()).unwrap();
    eventually("the watchdog finds it lost", || lost.lost());
    // Forced releases, by the inspector and by a lock object, and a dead letter.
    let busy_token = busy.token().unwrap();
    assert!(ins.force_release(b"busy").unwrap().is_some());
    let stuck = Lock::new(&c, b"stuck", lo.clone()).unwrap();
    assert!(stuck.try_acquire().unwrap());
    let stuck_token = stuck.token().unwrap();
    assert!(
        Lock::new(&c, b"stuck", lo.clone())
            .unwrap()
            .force_release()
            .unwrap()
    );
    qo.max_attempts = Some(1);
    let q = Queue::new(&c, b"q", qo).unwrap();
    q.enqueue(&[b"t"], 0.0, None, None).unwrap();
    let t = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert!(
        q.nack(&t.id, t.receipt.as_deref().unwrap(), None, None)
            .unwrap()
    );

    // Other tests of this binary run meanwhile: only this test's names count.
    let ours =
        |e: &events::Event| [&b"slow"[..], b"busy", b"lost", b"q", b"stuck"].contains(&&e.name[..]);
    let mut seen = Vec::new();
    eventually("every event arrives", || {
        seen.extend(
            events::wait(Duration::from_millis(100), None)
                .unwrap()
                .into_iter()
                .filter(ours),
        );
        [
            events::EventKind::SlowAcquire,
            events::EventKind::LockLost,
            events::EventKind::ForcedRelease,
            events::EventKind::DeadLettered,
        ]
        .iter()
        .all(|k| seen.iter().any(|e| e.kind == *k))
            && seen.iter().any(|e| e.name == b"stuck")
    });
    let of = |k| seen.iter().filter(move |e: &&events::Event| e.kind == k);
    let slow: Vec<_> = of(events::EventKind::SlowAcquire).collect();
    assert_eq!(slow.len(), 1, "{seen:?}");
    assert!(slow[0].seconds >= 0.2 && slow[0].message.contains("\"slow\""));
    let lost_events: Vec<_> = of(events::EventKind::LockLost).collect();
    assert_eq!(lost_events.len(), 1, "reported once: {seen:?}");
    assert_eq!(lost_events[0].lock_id, lost.id(), "names the lock object");
    assert!(lost_events[0].message.contains("lost"));
    assert!(of(events::EventKind::DeadLettered).any(|e| e.message.contains("\"t\"")));
    let forced: Vec<_> = of(events::EventKind::ForcedRelease).collect();
    assert_eq!(forced.len(), 2, "{seen:?}");
    for (e, name, token, origin) in [
        (forced[0], &b"busy"[..], &busy_token, "inspector"),
        (forced[1], &b"stuck"[..], &stuck_token, "lock"),
    ] {
        assert_eq!(e.name, name);
        assert_eq!(e.holder, format!("{}…", &token[..8]), "the hold it ended");
        assert_eq!(e.origin, origin);
        assert!(e.message.contains(&e.holder) && e.message.contains(origin));
        assert_eq!(e.kind.level(), events::Level::Warning);
    }
    // The release of the lost lock finds it gone: not reported twice.
    assert!(lost.release().unwrap_err().is_not_owned());
    thread::sleep(Duration::from_millis(100));
    assert!(
        !events::drain()
            .iter()
            .any(|e| ours(e) && e.kind == events::EventKind::LockLost)
    );

    let after = metrics::snapshot();
    assert!(after.lock_wait.count >= before.lock_wait.count + 4);
    assert!(after.lock_hold.count >= before.lock_hold.count + 2);
    assert!(after.acquires_missed > before.acquires_missed);
    assert!(after.locks_lost > before.locks_lost);
    assert!(after.forced_releases >= before.forced_releases + 2);
    assert!(after.dead_lettered > before.dead_lettered);
    let waits = &after.lock_wait;
    assert_eq!(waits.cumulative.len(), metrics::BUCKETS.len() + 1);
    assert_eq!(*waits.cumulative.last().unwrap(), waits.count);
    assert!(waits.cumulative.windows(2).all(|w| w[0] <= w[1]));
    // The slow acquire landed in a bucket above 0.25 s.
    let at_250ms = metrics::BUCKETS.iter().position(|&b| b == 0.25).unwrap();
    assert!(waits.count - waits.cumulative[at_250ms - 1] >= 1);
    events::enable(false);
}
