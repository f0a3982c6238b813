//! Payloads: stored beside the ids in the queue's slot, handed out with the
//! task, gone when the task is done; ids without payloads as before.

use ferrolock::{Queue, Wait};
use redis::Commands;

use crate::common::{client, keys_with, queue_opts, raw};
use crate::ids;

fn payload_key(q: &Queue) -> String {
    let mut r = raw();
    let queue = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    let keys: Vec<String> = r.keys(format!("{{*}}{queue}:payloads")).unwrap();
    keys.into_iter().next().unwrap_or_default()
}

#[test]
fn payloads_travel_with_their_tasks_and_go_when_they_are_done() {
    let q = Queue::new(&client(), b"q", queue_opts("payloads")).unwrap();
    let binary: &[u8] = b"\x00\xff{json}\n";
    assert_eq!(
        q.enqueue_with_payloads(
            &[("a", &b"A"[..]), ("b", binary), ("c", b"")],
            0.0,
            None,
            None
        )
        .unwrap(),
        3
    );
    q.enqueue(&["plain"], 0.0, None, None).unwrap();
    let key = payload_key(&q);
    assert!(!key.is_empty());
    let top = q.top(10).unwrap();
    assert_eq!(ids(&top), ["a", "b", "c", "plain"]);
    let payloads: Vec<Option<&[u8]>> = top.iter().map(|t| t.payload.as_deref()).collect();
    assert_eq!(
        payloads,
        [Some(&b"A"[..]), Some(binary), Some(&b""[..]), None]
    );
    // Reserve and ack: the payload goes with the ack.
    let a = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!(a.payload.as_deref(), Some(&b"A"[..]));
    assert!(q.ack(&a.id, a.receipt.as_deref().unwrap()).unwrap());
    // Pop: handed out and gone.
    let popped = q.pop(2, Wait::Try, None, None).unwrap();
    assert_eq!(popped[0].payload.as_deref(), Some(binary));
    assert_eq!(popped[1].payload.as_deref(), Some(&b""[..]));
    // Dequeue (the legacy top-then-dequeue): gone too.
    let plain = q.top(1).unwrap().remove(0);
    assert!(q.dequeue(&plain.id, plain.score, None, None).unwrap());
    assert_eq!(keys_with(key.as_bytes()), 0, "no payload left behind");
}

#[test]
fn the_newest_payload_wins_and_the_first_score_stays() {
    let q = Queue::new(&client(), b"q", queue_opts("newest")).unwrap();
    q.enqueue_with_payloads(&[("t", "v1")], 0.0, None, None)
        .unwrap();
    let first = q.top(1).unwrap().remove(0);
    assert_eq!(
        q.enqueue_with_payloads(&[("t", "v2")], 5.0, None, None)
            .unwrap(),
        0
    );
    q.enqueue(&["t"], 0.0, None, None).unwrap(); // no payload: keeps v2
    let now = q.top(1).unwrap().remove(0);
    assert_eq!(
        (now.score, now.payload.as_deref()),
        (first.score, Some(&b"v2"[..]))
    );
    // While in flight: the update waits for the reservation, then wins.
    let t = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!(
        q.enqueue_with_payloads(&[("t", "v3")], 0.0, None, None)
            .unwrap(),
        1
    );
    assert_eq!(t.payload.as_deref(), Some(&b"v2"[..]));
    assert!(q.ack(&t.id, t.receipt.as_deref().unwrap()).unwrap());
    let again = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!(again.payload.as_deref(), Some(&b"v3"[..]));
    // Enqueued again in flight without a payload: the second run keeps v3.
    q.enqueue(&["t"], 0.0, None, None).unwrap();
    assert!(q.ack(&again.id, again.receipt.as_deref().unwrap()).unwrap());
    let third = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert_eq!(third.payload.as_deref(), Some(&b"v3"[..]));
}

#[test]
fn an_id_a_legacy_pop_took_starts_clean_when_it_comes_back() {
    // Legacy consumers pop with ZREM and leave payloads behind: an id
    // enqueued anew without a payload does not inherit one.
    let q = Queue::new(&client(), b"q", queue_opts("stale")).unwrap();
    q.enqueue_with_payloads(&[("t", "old")], 0.0, None, None)
        .unwrap();
    let key = format!("{}q", String::from_utf8_lossy(&q.options().prefix));
    let _: () = raw().zrem(&key, "t").unwrap(); // a legacy pop
    q.enqueue(&["t"], 0.0, None, None).unwrap();
    let t = q.pop(1, Wait::Try, None, None).unwrap().remove(0);
    assert_eq!(t.payload, None);
}
