//! Dead letters and stats.

use std::time::Duration;

use ferrolock::{Queue, QueueOptions, Wait};

use crate::common::{client, queue_opts};
use crate::ids;

fn one_attempt(test: &str) -> QueueOptions {
    let mut o = queue_opts(test);
    o.max_attempts = Some(1);
    o
}

/// Reserves and nacks every due task: each dies at its only attempt.
fn kill_all(q: &Queue) -> usize {
    let got = q.reserve_many(5000, None, Wait::Try, None).unwrap();
    for t in &got {
        assert!(
            q.nack(&t.id, t.receipt.as_deref().unwrap(), None, None)
                .unwrap()
        );
    }
    got.len()
}

#[test]
fn dead_tasks_are_listed_retried_and_purged() {
    let q = Queue::new(&client(), b"q", one_attempt("dead")).unwrap();
    q.enqueue_with_payloads(&[("a", "A")], -2.0, None, None)
        .unwrap();
    q.enqueue(&["b", "c"], -1.0, None, None).unwrap();
    assert_eq!(kill_all(&q), 3);
    let dead = q.dead(0, 10).unwrap();
    assert_eq!(ids(&dead), ["a", "b", "c"], "oldest death first");
    assert!(dead.iter().all(|t| t.attempts == 1 && t.score > 0.0));
    assert_eq!(dead[0].payload.as_deref(), Some(&b"A"[..]), "payload kept");
    assert_eq!(ids(&q.dead(1, 1).unwrap()), ["b"], "paginated");
    assert!(q.dead(5, 10).unwrap().is_empty());
    // Retry some: back in the queue, due now, attempts reset, payload kept.
    assert_eq!(q.retry_dead(Some(&["a", "zz"])).unwrap(), 1);
    let a = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!((a.attempts, a.payload.as_deref()), (1, Some(&b"A"[..])));
    assert!(q.ack(&a.id, a.receipt.as_deref().unwrap()).unwrap());
    // Purge some, then all.
    assert_eq!(q.purge_dead(Some(&["b"])).unwrap(), 1);
    assert_eq!(ids(&q.dead(0, 10).unwrap()), ["c"]);
    assert_eq!(q.purge_dead::<&str>(None).unwrap(), 1);
    let s = q.stats().unwrap();
    assert_eq!((s.due, s.delayed, s.in_flight, s.dead), (0, 0, 0, 0));
}

#[test]
fn retry_all_works_in_batches() {
    let q = Queue::new(&client(), b"q", one_attempt("retry-all")).unwrap();
    let all: Vec<String> = (0..2300).map(|i| format!("t{i}")).collect();
    q.enqueue(&all, 0.0, None, None).unwrap();
    assert_eq!(kill_all(&q), 2300);
    assert_eq!(q.stats().unwrap().dead, 2300);
    assert_eq!(q.retry_dead::<&str>(None).unwrap(), 2300);
    let s = q.stats().unwrap();
    assert_eq!((s.due, s.dead), (2300, 0));
    // An enqueue revives a dead id as well.
    assert_eq!(kill_all(&q), 2300);
    assert_eq!(q.enqueue(&["t7"], 0.0, None, None).unwrap(), 1);
    assert_eq!(q.stats().unwrap().dead, 2299);
    let t7 = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!((t7.id.as_slice(), t7.attempts), (&b"t7"[..], 1));
}

#[test]
fn stats_count_without_scanning() {
    let q = Queue::new(&client(), b"q", queue_opts("stats")).unwrap();
    let s = q.stats().unwrap();
    assert_eq!(
        (s.due, s.delayed, s.in_flight, s.dead, s.oldest_due_age),
        (0, 0, 0, 0, 0.0)
    );
    q.enqueue(&["old"], -3.0, None, None).unwrap();
    q.enqueue(&["now1", "now2"], 0.0, None, None).unwrap();
    q.enqueue(&["later"], 60.0, None, None).unwrap();
    q.reserve(Some(Duration::from_secs(30)), Wait::Try, None)
        .unwrap()
        .unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.due, s.delayed, s.in_flight, s.dead), (2, 1, 1, 0));
    assert!(s.oldest_due_age >= 0.0 && s.oldest_due_age < 2.0, "{s:?}");
    q.enqueue(&["older"], -10.0, None, None).unwrap();
    let s = q.stats().unwrap();
    assert!(s.oldest_due_age >= 10.0 && s.oldest_due_age < 12.0, "{s:?}");
}
