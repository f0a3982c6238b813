//! A take run step by step ([`TakeSteps`]), as an event loop drives it: each
//! step one short round trip, waiting between steps on the ticket's callback.

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ferrolock::wait::Step;
use ferrolock::{Finish, Queue, TakeSteps, Wait};

use crate::common::{client, queue_opts};
use crate::ids;

/// Runs `steps` to the end as an event loop would: between steps it waits
/// for the ticket's callback (or the instant the step named).
fn drive(steps: &mut TakeSteps) -> (Option<ferrolock::Step>, usize) {
    let mut count = 0;
    loop {
        count += 1;
        match steps.step().unwrap() {
            Step::Done(v) => return (v, count),
            Step::Wait(until) => {
                let (tx, rx) = mpsc::channel();
                if let Some(ticket) = steps.ticket() {
                    ticket.on_event(Box::new(move |_| {
                        let _ = tx.send(());
                    }));
                }
                let _ = rx.recv_timeout(until.saturating_duration_since(Instant::now()));
                if let Some(ticket) = steps.ticket() {
                    ticket.clear_callback();
                }
            }
        }
    }
}

#[test]
fn a_stepped_reserve_is_woken_by_an_enqueue_through_its_callback() {
    let mut opts = queue_opts("take-steps");
    opts.recheck = Duration::from_secs(30); // only the callback can wake it in time
    let q = Arc::new(Queue::new(&client(), b"q", opts).unwrap());
    let mut steps = Queue::reserve_steps(&q, 2, None, Wait::For(Duration::from_secs(20))).unwrap();
    let producer = {
        let q = q.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            q.enqueue(&["a", "b", "c"], 0.0, None, None).unwrap();
            Instant::now()
        })
    };
    let (got, count) = drive(&mut steps);
    let woke = Instant::now();
    let enqueued = producer.join().unwrap();
    let got = got.unwrap();
    assert_eq!(ids(&got.tasks), ["a", "b"]);
    assert!(got.tasks.iter().all(|t| t.receipt.is_some()));
    assert!(woke.duration_since(enqueued) < Duration::from_secs(5));
    assert!(count <= 6, "a few steps, not a poll: {count}");
    assert!(matches!(steps.step().unwrap(), Step::Done(None)));
    assert_eq!(q.in_flight().unwrap(), 2);

    // The finish rides on the first step: ack one, nack the other, take the third.
    let mut next =
        Queue::finish_and_reserve_steps(&q, Finish::Ack(&got.tasks[0]), 1, None, Wait::Try)
            .unwrap();
    let (step, count) = drive(&mut next);
    let step = step.unwrap();
    assert!(step.finished && count == 1);
    assert_eq!(ids(&step.tasks), ["c"]);
    assert!(
        q.ack(&step.tasks[0].id, step.tasks[0].receipt.as_deref().unwrap())
            .unwrap()
    );
    assert!(
        q.nack(
            &got.tasks[1].id,
            got.tasks[1].receipt.as_deref().unwrap(),
            Some(0.0),
            None
        )
        .unwrap()
    );
    // A stepped pop takes it for good.
    let mut pop = Queue::pop_steps(&q, 5, Wait::Try).unwrap();
    let (popped, _) = drive(&mut pop);
    assert_eq!(ids(&popped.unwrap().tasks), ["b"]);
    assert_eq!(q.len().unwrap() + q.in_flight().unwrap(), 0);
}

#[test]
fn a_cancelled_stepped_reserve_leaves_no_waiter() {
    let opts = queue_opts("take-steps-cancel");
    let q = Arc::new(Queue::new(&client(), b"q", opts).unwrap());
    let mut steps = Queue::reserve_steps(&q, 1, None, Wait::Forever).unwrap();
    // The first step tries, the second registers as a waiter.
    for _ in 0..2 {
        assert!(matches!(steps.step().unwrap(), Step::Wait(_)));
    }
    steps.cancel().unwrap();
    assert!(matches!(steps.step().unwrap(), Step::Done(None)));
    q.enqueue(&["x"], 0.0, None, None).unwrap();
    assert_eq!(q.len().unwrap(), 1, "nobody took it");
    assert_eq!(q.in_flight().unwrap(), 0);
}
