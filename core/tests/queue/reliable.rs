//! Reservations: attempts, backoff instead of the head of the line,
//! heartbeats, batch reserve, one id never in flight twice, bad input.

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ferrolock::{Finish, Queue, QueueOptions, Wait};
use redis::Commands;

use crate::common::{client, queue_opts, raw};
use crate::ids;

/// Options with an exact backoff of `backoff` seconds and `max` attempts.
fn exact(test: &str, backoff: f64, max: Option<u32>) -> QueueOptions {
    let mut o = queue_opts(test);
    o.backoff = Duration::from_secs_f64(backoff);
    o.backoff_jitter = 0.0;
    o.max_attempts = max;
    o
}

fn receipt(t: &ferrolock::Task) -> &str {
    t.receipt.as_deref().unwrap()
}

#[test]
fn a_poison_task_backs_off_while_good_ones_are_served_then_dies() {
    // The case: visibility 0.2 s, `bad` first, a consumer that acks
    // everything but `bad`.
    let q = Queue::new(&client(), b"q", exact("poison", 0.3, Some(3))).unwrap();
    q.enqueue(&["bad"], -1.0, None, None).unwrap();
    q.enqueue(&["good1", "good2"], 0.0, None, None).unwrap();
    let vis = Some(Duration::from_millis(200));
    let mut served = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) && q.stats().unwrap().dead == 0 {
        let Some(t) = q
            .reserve(vis, Wait::For(Duration::from_millis(300)), None)
            .unwrap()
        else {
            continue;
        };
        served.push((String::from_utf8_lossy(&t.id).into_owned(), t.attempts));
        if t.id != b"bad" {
            assert!(q.ack(&t.id, receipt(&t)).unwrap());
        } // bad: never acked, its reservation times out
    }
    let names: Vec<&str> = served.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..3], ["bad", "good1", "good2"], "{served:?}");
    let bad: Vec<u32> = served
        .iter()
        .filter(|(n, _)| n == "bad")
        .map(|(_, a)| *a)
        .collect();
    assert_eq!(bad, [1, 2, 3], "bad served once per attempt: {served:?}");
    let dead = q.dead(0, 10).unwrap();
    assert_eq!(ids(&dead), ["bad"]);
    assert_eq!(dead[0].attempts, 3);
    let s = q.stats().unwrap();
    assert_eq!((s.due, s.delayed, s.in_flight, s.dead), (0, 0, 0, 1));
}

#[test]
fn backoff_doubles_up_to_its_cap_and_jitter_only_shortens_it() {
    let mut o = exact("backoff", 0.2, None);
    o.backoff_cap = Duration::from_millis(500);
    let q = Queue::new(&client(), b"q", o).unwrap();
    q.enqueue(&["t"], 0.0, None, None).unwrap();
    let mut delays = Vec::new();
    for attempt in 1..=4 {
        let t = q
            .reserve(None, Wait::For(Duration::from_secs(5)), None)
            .unwrap()
            .unwrap();
        assert_eq!(t.attempts, attempt);
        let before = q.stats().unwrap();
        assert_eq!(before.in_flight, 1);
        assert!(q.nack(&t.id, receipt(&t), None, None).unwrap());
        let back = q.top(1).unwrap(); // not due yet: the score tells when
        assert!(back.is_empty());
        let key = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
        let due: f64 = raw().zscore(&key, "t").unwrap();
        let now = server_now();
        delays.push(due - now);
    }
    // 0.2, 0.4, then capped at 0.5 (the clock read after the nack: a little less).
    for (got, want) in delays.iter().zip([0.2, 0.4, 0.5, 0.5]) {
        assert!(*got <= want + 0.01 && *got > want - 0.15, "{delays:?}");
    }

    // With jitter, a backoff is cut by up to that fraction, never lengthened.
    let mut o = queue_opts("jitter");
    o.backoff = Duration::from_secs(10);
    o.backoff_jitter = 0.5;
    let q = Queue::new(&client(), b"q", o).unwrap();
    let many: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    q.enqueue(&many, 0.0, None, None).unwrap();
    let got = q.reserve_many(40, None, Wait::Try, None).unwrap();
    assert_eq!(got.len(), 40);
    for t in &got {
        q.nack(&t.id, receipt(t), None, None).unwrap();
    }
    let key = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    let scores: Vec<(String, f64)> = raw().zrange_withscores(&key, 0, -1).unwrap();
    let now = server_now();
    let spread: HashSet<i64> = scores
        .iter()
        .map(|(_, s)| ((s - now) * 10.0) as i64)
        .collect();
    for (_, s) in &scores {
        assert!(s - now > 4.8 && s - now <= 10.0, "{}", s - now);
    }
    assert!(spread.len() > 10, "jittered apart: {spread:?}");
}

/// The in-flight key of `q`.
fn inflight_key(q: &Queue) -> String {
    let queue = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    let keys: Vec<String> = raw().keys(format!("{{*}}{queue}:inflight")).unwrap();
    keys.into_iter().next().unwrap()
}

/// The server's clock, unix seconds.
pub fn server_now() -> f64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut raw()).unwrap();
    s as f64 + us as f64 / 1e6
}

#[test]
fn an_explicit_nack_delay_wins_over_the_backoff_and_attempts_still_count() {
    let q = Queue::new(&client(), b"q", exact("explicit", 60.0, Some(2))).unwrap();
    q.enqueue(&["t"], 0.0, None, None).unwrap();
    let t = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert!(q.nack(&t.id, receipt(&t), Some(0.0), None).unwrap());
    let t = q
        .reserve(None, Wait::Try, None)
        .unwrap()
        .expect("due at once");
    assert_eq!(t.attempts, 2);
    assert!(
        q.nack(&t.id, receipt(&t), Some(0.0), None).unwrap(),
        "a nack of the last attempt works"
    );
    assert!(q.reserve(None, Wait::Try, None).unwrap().is_none());
    assert_eq!(
        ids(&q.dead(0, 5).unwrap()),
        ["t"],
        "the last attempt ends in the dead set"
    );
}

#[test]
fn unlimited_attempts_never_die() {
    let q = Queue::new(&client(), b"q", exact("unlimited", 0.0, None)).unwrap();
    q.enqueue(&["t"], 0.0, None, None).unwrap();
    for n in 1..=25 {
        let t = q
            .reserve(None, Wait::For(Duration::from_secs(2)), None)
            .unwrap()
            .unwrap();
        assert_eq!(t.attempts, n);
        q.nack(&t.id, receipt(&t), None, None).unwrap();
    }
    assert_eq!(q.stats().unwrap().dead, 0);
}

#[test]
fn what_decides_a_reservation_travels_with_it() {
    // Two consumers with different settings on one queue: each reservation
    // ends by the settings it was made with, whoever ends it.
    let c = client();
    let strict = Queue::new(&c, b"q", exact("travel", 30.0, Some(1))).unwrap();
    let mut lax_opts = exact("travel", 0.0, None);
    lax_opts.prefix = strict.options().prefix.clone();
    lax_opts.lock_prefix = strict.options().lock_prefix.clone();
    let lax = Queue::new(&c, b"q", lax_opts).unwrap();
    strict.enqueue(&["s"], -1.0, None, None).unwrap();
    strict.enqueue(&["l"], 0.0, None, None).unwrap();
    let s = strict
        .reserve(Some(Duration::from_millis(100)), Wait::Try, None)
        .unwrap()
        .unwrap();
    let l = lax
        .reserve(Some(Duration::from_millis(100)), Wait::Try, None)
        .unwrap()
        .unwrap();
    assert_eq!((s.id.as_slice(), l.id.as_slice()), (&b"s"[..], &b"l"[..]));
    thread::sleep(Duration::from_millis(200));
    // The strict consumer's take ends both: s by its own settings (dead at
    // its only attempt), l by the lax ones (back at once).
    let next = strict.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!(next.id, b"l");
    assert_eq!(ids(&lax.dead(0, 5).unwrap()), ["s"]);
}

#[test]
fn touch_extends_only_our_reservation() {
    let q = Arc::new(Queue::new(&client(), b"q", exact("touch", 0.0, None)).unwrap());
    q.enqueue(&["t"], 0.0, None, None).unwrap();
    let vis = Duration::from_millis(300);
    let t = q.reserve(Some(vis), Wait::Try, None).unwrap().unwrap();
    for _ in 0..4 {
        thread::sleep(Duration::from_millis(150));
        assert!(q.touch(&t.id, receipt(&t), None).unwrap());
    }
    assert!(
        q.reserve(None, Wait::Try, None).unwrap().is_none(),
        "still ours after 2× its visibility"
    );
    assert!(
        q.touch(&t.id, receipt(&t), Some(Duration::from_secs(5)))
            .unwrap()
    );
    let inflight: Vec<(String, f64)> = raw().zrange_withscores(inflight_key(&q), 0, -1).unwrap();
    assert!(inflight[0].1 > server_now() + 4.0, "{inflight:?}");
    assert!(q.ack(&t.id, receipt(&t)).unwrap());
    assert!(
        !q.touch(&t.id, receipt(&t), None).unwrap(),
        "gone: not ours"
    );
    // Bad input: a receipt of another task, a bad visibility.
    q.enqueue(&["a", "b"], 0.0, None, None).unwrap();
    let a = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    let b = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    let e = q.touch(&a.id, receipt(&b), None).unwrap_err();
    assert!(
        e.is_invalid_argument() && e.message().contains("receipt"),
        "{e}"
    );
    let e = q
        .touch(&a.id, receipt(&a), Some(Duration::ZERO))
        .unwrap_err();
    assert!(
        e.is_invalid_argument() && e.message().contains("visibility"),
        "{e}"
    );
}

#[test]
fn a_heartbeat_keeps_a_task_five_times_its_visibility_without_a_second_consumer() {
    let c = client();
    let q = Arc::new(Queue::new(&c, b"q", exact("heartbeat", 0.0, None)).unwrap());
    q.enqueue(&["long"], 0.0, None, None).unwrap();
    let vis = Duration::from_millis(300);
    let t = q.reserve(Some(vis), Wait::Try, None).unwrap().unwrap();
    let beat = q.keep_alive(&t).unwrap();
    // Another consumer keeps trying meanwhile.
    let other = {
        let (c, opts) = (c.clone(), q.options().clone());
        thread::spawn(move || {
            let q = Queue::new(&c, b"q", opts).unwrap();
            let until = Instant::now() + Duration::from_millis(1500);
            let mut got = Vec::new();
            while Instant::now() < until {
                if let Some(t) = q
                    .reserve(None, Wait::For(Duration::from_millis(100)), None)
                    .unwrap()
                {
                    got.push(t);
                }
            }
            got
        })
    };
    let stolen = other.join().unwrap();
    assert!(stolen.is_empty(), "handed out twice: {stolen:?}");
    assert!(!beat.is_lost());
    drop(beat);
    assert!(
        q.ack(&t.id, receipt(&t)).unwrap(),
        "still ours after 5× its visibility"
    );
}

#[test]
fn batch_reserve_takes_many_in_one_step() {
    let q = Queue::new(&client(), b"q", queue_opts("batch")).unwrap();
    let all: Vec<String> = (0..2500).map(|i| format!("t{i:04}")).collect();
    q.enqueue(&all, 0.0, None, None).unwrap();
    let first = q.reserve_many(2000, None, Wait::Try, None).unwrap();
    assert_eq!(first.len(), 2000);
    let rest = q.reserve_many(1000, None, Wait::Try, None).unwrap();
    assert_eq!(rest.len(), 500);
    let receipts: HashSet<&str> = first.iter().map(receipt).collect();
    assert_eq!(receipts.len(), 2000, "one receipt per task");
    assert_eq!(q.in_flight().unwrap(), 2500);
    // A receipt names its task: acking with another's is refused.
    let e = q.ack(&first[0].id, receipt(&first[1])).unwrap_err();
    assert!(
        e.is_invalid_argument() && e.message().contains("another task"),
        "{e}"
    );
    for t in first.iter().chain(&rest) {
        assert!(q.ack(&t.id, receipt(t)).unwrap());
    }
    assert_eq!(q.stats().unwrap().in_flight, 0);
    let e = q.reserve_many(0, None, Wait::Try, None).unwrap_err();
    assert!(
        e.is_invalid_argument() && e.message().starts_with("count"),
        "{e}"
    );
}

#[test]
fn an_id_enqueued_while_in_flight_runs_again_after_the_ack() {
    let c = client();
    let q = Queue::new(&c, b"q", exact("again", 0.0, None)).unwrap();
    q.enqueue(&["job"], 0.0, None, None).unwrap();
    let first = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    // Re-enqueued while a consumer works on it: counted, but nobody else gets it.
    assert_eq!(q.enqueue(&["job"], 0.0, None, None).unwrap(), 1);
    assert_eq!(
        q.enqueue(&["job"], 0.0, None, None).unwrap(),
        0,
        "remembered once"
    );
    assert!(
        q.reserve(None, Wait::Try, None).unwrap().is_none(),
        "never in flight twice"
    );
    assert_eq!(q.len().unwrap(), 0);
    // Acked: the second run is due at once, as a new task.
    assert!(q.ack(&first.id, receipt(&first)).unwrap());
    let second = q
        .reserve(None, Wait::Try, None)
        .unwrap()
        .expect("the second run");
    assert_eq!((second.id.as_slice(), second.attempts), (&b"job"[..], 1));
    assert!(q.ack(&second.id, receipt(&second)).unwrap());
    assert!(
        q.reserve(None, Wait::Try, None).unwrap().is_none(),
        "two runs, not three"
    );

    // Nacked (or timed out) instead: one task, due at the earlier time.
    q.enqueue(&["job"], 0.0, None, None).unwrap();
    let t = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    q.enqueue(&["job"], 5.0, None, None).unwrap();
    q.nack(&t.id, receipt(&t), Some(60.0), None).unwrap();
    let key = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    let due: f64 = raw().zscore(&key, "job").unwrap();
    let now = server_now();
    assert!(due - now > 4.0 && due - now <= 5.0, "{}", due - now);
    assert_eq!(q.len().unwrap(), 1);
}

#[test]
fn a_waiting_consumer_gets_the_second_run_when_the_first_is_acked() {
    let c = client();
    let mut o = exact("again-wait", 0.0, None);
    o.recheck = Duration::from_secs(30); // only a wake-up delivers in time
    let q = Queue::new(&c, b"q", o.clone()).unwrap();
    q.enqueue(&["job"], 0.0, None, None).unwrap();
    let first = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    q.enqueue(&["job"], 0.0, None, None).unwrap();
    let waiter = thread::spawn(move || {
        let q = Queue::new(&c, b"q", o).unwrap();
        q.reserve(None, Wait::For(Duration::from_secs(10)), None)
            .unwrap()
    });
    thread::sleep(Duration::from_millis(300));
    let acked = Instant::now();
    assert!(q.ack(&first.id, receipt(&first)).unwrap());
    let second = waiter.join().unwrap().expect("woken by the ack");
    assert_eq!(second.id, b"job");
    assert!(acked.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_legacy_enqueue_of_an_id_in_flight_waits_for_the_reservation() {
    // Legacy producers ZADD without knowing reservations: a take does not
    // hand that id to a second consumer, it remembers it for after the ack.
    let q = Queue::new(&client(), b"q", exact("legacy-again", 0.0, None)).unwrap();
    let key = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    q.enqueue(&["job"], 0.0, None, None).unwrap();
    let first = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    let _: () = raw().zadd(&key, "job", 1.0).unwrap();
    assert!(q.reserve(None, Wait::Try, None).unwrap().is_none());
    assert!(
        q.pop(5, Wait::Try, None, None).unwrap().is_empty(),
        "pop neither"
    );
    assert!(q.ack(&first.id, receipt(&first)).unwrap());
    let second = q
        .reserve(None, Wait::Try, None)
        .unwrap()
        .expect("runs after the ack");
    assert_eq!(second.id, b"job");
}

#[test]
fn finish_and_reserve_acks_and_takes_the_next_in_one_step() {
    let q = Queue::new(&client(), b"q", exact("finish", 0.0, Some(5))).unwrap();
    q.enqueue(&["a", "b", "c"], 0.0, None, None).unwrap();
    let a = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    let step = q
        .finish_and_reserve(Finish::Ack(&a), 1, None, Wait::Try, None)
        .unwrap();
    assert!(step.finished);
    assert_eq!(ids(&step.tasks), ["b"]);
    let b = &step.tasks[0];
    let step = q
        .finish_and_reserve(Finish::Nack(b, Some(0.0)), 1, None, Wait::Try, None)
        .unwrap();
    assert!(step.finished);
    // b (nacked, due now) comes after c: its score is now, c's is older.
    assert_eq!(ids(&step.tasks), ["c"]);
    let c = step.tasks[0].clone();
    // A finish of a lost reservation says so, and the take still happens.
    let step = q
        .finish_and_reserve(Finish::Ack(&a), 1, None, Wait::Try, None)
        .unwrap();
    assert!(!step.finished);
    assert_eq!(ids(&step.tasks), ["b"]);
    assert_eq!(step.tasks[0].attempts, 2);
    // Nothing due: the finish is done all the same.
    let step = q
        .finish_and_reserve(Finish::Ack(&c), 1, None, Wait::Try, None)
        .unwrap();
    assert!(step.finished && step.tasks.is_empty());
    assert_eq!(q.stats().unwrap().in_flight, 1);
    // A bad finish sends nothing: the next task stays queued.
    q.enqueue(&["d"], 0.0, None, None).unwrap();
    let e = q
        .finish_and_reserve(Finish::Ack(&step_task(b"zz")), 1, None, Wait::Try, None)
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
    assert_eq!(q.len().unwrap(), 1);
}

/// A task that was never reserved (no receipt).
fn step_task(id: &[u8]) -> ferrolock::Task {
    let q = Queue::new(&client(), b"x", queue_opts("step-task")).unwrap();
    q.enqueue(&[id], 0.0, None, None).unwrap();
    q.pop(1, Wait::Try, None, None).unwrap().remove(0)
}

#[test]
fn bad_input_names_the_argument_and_loses_nothing() {
    let q = Queue::new(&client(), b"q", queue_opts("bad")).unwrap();
    q.enqueue(&["a"], 0.0, None, None).unwrap();
    let a = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    for (e, word) in [
        (
            q.reserve(Some(Duration::ZERO), Wait::Try, None)
                .unwrap_err(),
            "visibility",
        ),
        (q.ack(&a.id, "nope").unwrap_err(), "receipt"),
        (
            q.nack(&a.id, receipt(&a), Some(f64::NAN), None)
                .unwrap_err(),
            "delay",
        ),
        (q.ack(b"", receipt(&a)).unwrap_err(), "task id"),
        (q.dead(0, 0).unwrap_err(), "count"),
    ] {
        assert!(
            e.is_invalid_argument() && e.message().starts_with(word),
            "{word}: {e}"
        );
    }
    type Setter = fn(&mut QueueOptions);
    let setters: [(Setter, &str); 3] = [
        (|o| o.max_attempts = Some(0), "max_attempts"),
        (|o| o.backoff_jitter = 1.5, "backoff_jitter"),
        (|o| o.visibility = Duration::ZERO, "visibility"),
    ];
    for (set, word) in setters {
        let mut opts = queue_opts("x");
        set(&mut opts);
        let e = Queue::new(&client(), b"q", opts).unwrap_err();
        assert!(e.message().starts_with(word), "{e}");
    }
    assert_eq!(q.in_flight().unwrap(), 1, "nothing lost");
    assert!(q.ack(&a.id, receipt(&a)).unwrap());
}
