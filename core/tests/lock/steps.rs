//! The acquire run step by step, as an event loop drives it: each step one
//! short round trip, waiting between steps on the ticket's callback.

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{client, lock_opts};
use ferrolock::wait::Step;
use ferrolock::{AcquireSteps, Lock, Wait};

/// Runs `steps` to the end as an event loop would: between steps it waits
/// for the ticket's callback (or the instant the step named).
fn drive(steps: &mut AcquireSteps) -> (Option<bool>, usize) {
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
fn a_stepped_acquire_is_woken_by_the_release_through_its_callback() {
    let c = client();
    let mut opts = lock_opts("steps");
    opts.recheck = Duration::from_secs(30); // only the callback can wake it in time
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let lock = Arc::new(Lock::new(&c, b"x", opts).unwrap());
    let mut steps = Lock::acquire_steps(&lock, Wait::For(Duration::from_secs(20)));
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        holder.release().unwrap();
        Instant::now()
    });
    let (got, count) = drive(&mut steps);
    let woke = Instant::now();
    let released = release.join().unwrap();
    assert_eq!(got, Some(true));
    assert!(lock.token().is_some() && lock.owned().unwrap());
    assert!(woke.duration_since(released) < Duration::from_secs(5));
    assert!(count <= 6, "a few steps, not a poll: {count}");
    lock.release().unwrap();
    // A try-once is one step.
    let mut once = Lock::acquire_steps(&lock, Wait::Try);
    assert_eq!(drive(&mut once), (Some(true), 1));
    lock.release().unwrap();
}

#[test]
fn a_cancelled_stepped_acquire_leaves_nothing_behind() {
    let c = client();
    let opts = lock_opts("steps-cancel");
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let lock = Arc::new(Lock::new(&c, b"x", opts.clone()).unwrap());
    let mut steps = Lock::acquire_steps(&lock, Wait::Forever);
    // Step until it waits registered (the first step tries, the second registers).
    for _ in 0..2 {
        assert!(matches!(steps.step().unwrap(), Step::Wait(_)));
    }
    steps.cancel().unwrap();
    assert!(matches!(steps.step().unwrap(), Step::Done(None)));
    holder.release().unwrap();
    // Nobody was handed the lock: a third party takes it at once.
    let other = Lock::new(&c, b"x", opts).unwrap();
    assert!(other.try_acquire().unwrap());
    assert_eq!(lock.token(), None);
    other.release().unwrap();
}
