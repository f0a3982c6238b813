//! The legacy queue: enqueue, pop, top, dequeue, waiting for work, the
//! legacy queue lock; and the plain reserve → ack / nack.

use std::collections::HashSet;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ferrolock::{ErrorKind, Queue, Wait};
use redis::Commands;

use crate::common::{client, queue_opts, raw};
use crate::ids;

#[test]
fn enqueue_dedups_and_keeps_the_first_score() {
    let q = Queue::new(&client(), b"q", queue_opts("dedup")).unwrap();
    assert_eq!(q.enqueue(&["a", "b"], 0.0, None, None).unwrap(), 2);
    let first = q.top(10).unwrap();
    thread::sleep(Duration::from_millis(20));
    assert_eq!(
        q.enqueue(&["a", "c"], 0.0, None, None).unwrap(),
        1,
        "only c is new"
    );
    let again = q.top(10).unwrap();
    let score_of =
        |ts: &[ferrolock::Task], id: &str| ts.iter().find(|t| t.id == id.as_bytes()).unwrap().score;
    assert_eq!(score_of(&first, "a"), score_of(&again, "a"));
    assert_eq!(q.len().unwrap(), 3);
    // Batches, including duplicates inside one call.
    let many: Vec<String> = (0..5000).map(|i| format!("id{}", i % 4000)).collect();
    assert_eq!(q.enqueue(&many, 0.0, None, None).unwrap(), 4000);
    assert_eq!(q.len().unwrap(), 4003);
}

#[test]
fn pop_order_is_lowest_score_first_then_id() {
    let q = Queue::new(&client(), b"q", queue_opts("order")).unwrap();
    q.enqueue(&["m", "k"], -3.0, None, None).unwrap();
    q.enqueue(&["z", "a", "b"], -2.0, None, None).unwrap();
    q.enqueue(&["late"], -1.0, None, None).unwrap();
    assert_eq!(ids(&q.top(10).unwrap()), ["k", "m", "a", "b", "z", "late"]);
    assert_eq!(
        ids(&q.pop(3, Wait::Try, None, None).unwrap()),
        ["k", "m", "a"]
    );
    assert_eq!(ids(&q.pop(1, Wait::Try, None, None).unwrap()), ["b"]);
    assert_eq!(
        ids(&q.pop(10, Wait::Try, None, None).unwrap()),
        ["z", "late"]
    );
    assert!(q.pop(1, Wait::Try, None, None).unwrap().is_empty());
}

#[test]
fn delayed_tasks_are_invisible_until_due() {
    let q = Queue::new(&client(), b"q", queue_opts("delay")).unwrap();
    q.enqueue(&["later"], 0.4, None, None).unwrap();
    assert!(q.top(1).unwrap().is_empty());
    assert!(q.pop(1, Wait::Try, None, None).unwrap().is_empty());
    assert_eq!(q.len().unwrap(), 1, "len counts delayed tasks");
    let start = Instant::now();
    let got = q
        .pop(1, Wait::For(Duration::from_secs(5)), None, None)
        .unwrap();
    assert_eq!(ids(&got), ["later"]);
    let waited = start.elapsed();
    assert!(
        waited > Duration::from_millis(250) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
}

#[test]
fn dequeue_needs_the_exact_score() {
    let q = Queue::new(&client(), b"q", queue_opts("dequeue")).unwrap();
    q.enqueue(&["t"], 0.0, None, None).unwrap();
    let t = q.top(1).unwrap().remove(0);
    assert!(
        !q.dequeue(b"t", t.score + 1e-6, None, None).unwrap(),
        "stale score keeps the task"
    );
    assert!(
        !q.dequeue(b"t", f64::from_bits(t.score.to_bits() + 1), None, None)
            .unwrap(),
        "one ulp off"
    );
    assert_eq!(q.len().unwrap(), 1);
    assert!(q.dequeue(b"t", t.score, None, None).unwrap());
    assert_eq!(q.len().unwrap(), 0);
    assert!(!q.dequeue(b"t", t.score, None, None).unwrap());
}

#[test]
fn scores_round_trip_exactly() {
    let q = Queue::new(&client(), b"q", queue_opts("scores")).unwrap();
    let key = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    let mut r = raw();
    let samples = [
        1700000000.123456_f64,
        0.1,
        1.0 / 3.0,
        1e-300,
        123456789.98765432,
        5e15 + 0.5,
    ];
    for (i, s) in samples.iter().enumerate() {
        let _: () = r.zadd(&key, format!("id{i}"), *s).unwrap();
    }
    let top = q.top(100).unwrap();
    for (i, s) in samples.iter().enumerate() {
        let t = top.iter().find(|t| t.id == format!("id{i}").as_bytes());
        if *s <= 1.8e9 {
            assert_eq!(t.unwrap().score.to_bits(), s.to_bits(), "id{i}");
            assert!(
                q.dequeue(format!("id{i}").as_bytes(), *s, None, None)
                    .unwrap()
            );
        }
    }
    // Enqueued scores too: what pop returns is what dequeue accepts.
    q.enqueue(&["x"], 0.0, None, None).unwrap();
    let x = q.top(1).unwrap().remove(0);
    let stored: f64 = r.zscore(&key, "x").unwrap();
    assert_eq!(stored.to_bits(), x.score.to_bits());
}

#[test]
fn four_threads_popping_10000_tasks_get_each_exactly_once() {
    let c = client();
    let opts = queue_opts("drain");
    let q = Queue::new(&c, b"q", opts.clone()).unwrap();
    let all: Vec<String> = (0..10_000).map(|i| format!("task-{i}")).collect();
    assert_eq!(q.enqueue(&all, 0.0, None, None).unwrap(), 10_000);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let (c, opts, seen, barrier) = (c.clone(), opts.clone(), seen.clone(), barrier.clone());
            thread::spawn(move || {
                let q = Queue::new(&c, b"q", opts).unwrap();
                barrier.wait();
                loop {
                    let n = 1 + w * 3; // mixed batch sizes
                    let got = q.pop(n, Wait::Try, None, None).unwrap();
                    if got.is_empty() {
                        break;
                    }
                    seen.lock().unwrap().extend(ids(&got));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 10_000, "no task handed out twice");
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 10_000, "every task handed out");
}

#[test]
fn enqueue_wakes_a_blocked_pop_by_notification() {
    let c = client();
    let mut opts = queue_opts("wakepop");
    opts.recheck = Duration::from_secs(30); // only a notification can wake it in time
    let q = Queue::new(&c, b"q", opts.clone()).unwrap();
    let consumer = thread::spawn(move || {
        let q = Queue::new(&c, b"q", opts).unwrap();
        let got = q
            .pop(1, Wait::For(Duration::from_secs(20)), None, None)
            .unwrap();
        (ids(&got), Instant::now())
    });
    thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    q.enqueue(&["hello"], 0.0, None, None).unwrap();
    let (got, at) = consumer.join().unwrap();
    assert_eq!(got, ["hello"]);
    assert!(
        at.duration_since(sent) < Duration::from_millis(900),
        "woken, not re-checked"
    );
}

#[test]
fn reserve_ack_nack_and_visibility_timeout() {
    let mut opts = queue_opts("reserve");
    opts.backoff = Duration::ZERO; // a timed-out task is due again at once
    let q = Queue::new(&client(), b"q", opts).unwrap();
    q.enqueue(&["a", "b"], 0.0, None, None).unwrap();
    let a = q
        .reserve(Some(Duration::from_millis(300)), Wait::Try, None)
        .unwrap()
        .unwrap();
    assert_eq!((a.id.as_slice(), a.attempts), (&b"a"[..], 1));
    assert_eq!(q.len().unwrap(), 1, "reserved task left the queue");
    assert_eq!(q.in_flight().unwrap(), 1);
    assert_eq!(
        ids(&q.top(10).unwrap()),
        ["b"],
        "top never sees in-flight tasks"
    );
    let b = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert!(q.ack(&b.id, b.receipt.as_deref().unwrap()).unwrap());
    assert!(
        !q.ack(&b.id, b.receipt.as_deref().unwrap()).unwrap(),
        "ack once"
    );
    // a's consumer "dies": after the visibility timeout it comes back.
    thread::sleep(Duration::from_millis(400));
    let again = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!((again.id.as_slice(), again.attempts), (&b"a"[..], 2));
    assert!(again.score > a.score, "due again when it timed out");
    // The late ack of the first consumer fails and leaves the new claim alone.
    assert!(!q.ack(&a.id, a.receipt.as_deref().unwrap()).unwrap());
    assert_eq!(q.in_flight().unwrap(), 1);
    assert!(
        q.nack(
            &again.id,
            again.receipt.as_deref().unwrap(),
            Some(0.0),
            None
        )
        .unwrap()
    );
    assert_eq!(q.in_flight().unwrap(), 0);
    let popped = q.pop(5, Wait::Try, None, None).unwrap();
    assert_eq!(ids(&popped), ["a"]);
    assert_eq!(
        popped[0].attempts, 2,
        "a popped task tells its past attempts"
    );
}

#[test]
fn a_reservation_of_an_older_ferrolock_returns_with_its_exact_score() {
    // Before attempts, a reservation was "<receipt>|<score>" and a timed-out
    // task went back with its score: kept for reservations made then.
    let q = Queue::new(&client(), b"q", queue_opts("reclaim-score")).unwrap();
    let key = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    let score: f64 = 1.0 / 3.0; // no short decimal form
    let _: () = raw().zadd(&key, "t", score).unwrap();
    let first = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!(first.score.to_bits(), score.to_bits());
    let mut r = raw();
    let receipts: Vec<String> = r.keys(format!("{{*}}{key}:receipts")).unwrap();
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    let inflight = receipts[0].replace(":receipts", ":inflight");
    let old = ferrolock::new_token();
    let _: () = r
        .hset(&receipts[0], "t", format!("{old}|{score:?}"))
        .unwrap();
    let _: () = r.zadd(&inflight, "t", 1.0).unwrap(); // its deadline passed
    let again = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!(again.id, b"t");
    assert_eq!(again.score.to_bits(), score.to_bits());

    // An older consumer acks with its bare receipt.
    let _: () = r
        .hset(&receipts[0], "t", format!("{old}|{score:?}"))
        .unwrap();
    assert!(q.ack(b"t", &old).unwrap());
    assert_eq!(q.in_flight().unwrap(), 0);

    // A receipt edited by hand into text Redis would not take as a score
    // (leading space) is read as a number: the task comes back, pops go on.
    let _: () = r.hset(&receipts[0], "t", format!("{old}| 0.5")).unwrap();
    let _: () = r.zadd(&inflight, "t", 1.0).unwrap();
    let popped = q.pop(1, Wait::Try, None, None).unwrap();
    assert_eq!(ids(&popped), ["t"]);
    assert_eq!(popped[0].score, 0.5);
}

#[test]
fn queue_ops_wait_for_a_legacy_queue_lock() {
    let q = Queue::new(&client(), b"jobs", queue_opts("legacy")).unwrap();
    let o = q.options();
    // Legacy code locks "Queue:<name>" with its RedisLock: Lock:Queue:<name> by default.
    let legacy_key = format!(
        "{}{}jobs",
        String::from_utf8_lossy(&o.lock_prefix),
        String::from_utf8_lossy(&o.prefix)
    );
    let mut r = raw();
    let _: () = redis::cmd("SET")
        .arg(&legacy_key)
        .arg("123")
        .arg("PX")
        .arg(300)
        .query(&mut r)
        .unwrap();
    let start = Instant::now();
    assert_eq!(
        q.enqueue(&["a"], 0.0, Some(Duration::from_secs(5)), None)
            .unwrap(),
        1
    );
    assert!(
        start.elapsed() >= Duration::from_millis(250),
        "waited for the legacy lock"
    );
    let _: () = redis::cmd("SET")
        .arg(&legacy_key)
        .arg("123")
        .arg("PX")
        .arg(5000)
        .query(&mut r)
        .unwrap();
    let err = q
        .enqueue(&["b"], 0.0, Some(Duration::from_millis(200)), None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QueueLocked, "{err}");
    assert_eq!(q.len().unwrap(), 1, "nothing written while locked");
    let _: () = r.del(&legacy_key).unwrap();
    assert_eq!(q.len().unwrap(), 1);
}

#[test]
fn back_to_back_enqueues_wake_different_consumers() {
    let c = client();
    let mut opts = queue_opts("twowake");
    opts.recheck = Duration::from_secs(30); // only wake-ups can deliver in time
    let q = Queue::new(&c, b"q", opts.clone()).unwrap();
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (c, opts) = (c.clone(), opts.clone());
            thread::spawn(move || {
                let q = Queue::new(&c, b"q", opts).unwrap();
                let got = q
                    .pop(1, Wait::For(Duration::from_secs(20)), None, None)
                    .unwrap();
                (ids(&got), Instant::now())
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(400));
    let sent = Instant::now();
    q.enqueue(&["a"], 0.0, None, None).unwrap();
    q.enqueue(&["b"], 0.0, None, None).unwrap();
    let mut got: Vec<String> = Vec::new();
    for h in consumers {
        let (ids, at) = h.join().unwrap();
        assert!(
            at.duration_since(sent) < Duration::from_secs(5),
            "woken, not re-checked"
        );
        got.extend(ids);
    }
    got.sort();
    assert_eq!(got, ["a", "b"]);
}
