//! The worker loop's steps: one round trip per job, heartbeats, trouble
//! ridden out.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use ferrolock::testing::RedisServer;
use ferrolock::{Client, Config, Error, Outcome, Queue, Wait, Worker, WorkerOptions};

use crate::common::{client, queue_opts, raw};

fn commands_run(name: &str) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut raw())
        .unwrap();
    info.lines()
        .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_drain_takes_one_round_trip_per_job() {
    let q = Arc::new(Queue::new(&client(), b"q", queue_opts("drain")).unwrap());
    let all: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    q.enqueue(&all, 0.0, None, None).unwrap();
    let mut opts = WorkerOptions::default();
    opts.wait = Wait::Try;
    let mut w = Worker::new(q.clone(), opts).unwrap();
    let log = |e: &Error| panic!("{e}");
    let before = commands_run("evalsha");
    let mut seen = Vec::new();
    let mut next = w.next(Outcome::Done, None, &log).unwrap();
    while let Some(t) = next {
        seen.push(t.id.clone());
        let outcome = if seen.len() % 10 == 0 {
            Outcome::Retry(60.0)
        } else {
            Outcome::Done
        };
        next = w.next(outcome, None, &log).unwrap();
    }
    let calls = commands_run("evalsha") - before;
    assert_eq!(seen.len(), 200);
    // One script per job, plus the last (empty) take; the heartbeats touch
    // nothing in so short a run. Other tests share the server: allow them a few.
    assert!(
        (201..=201 + 40).contains(&calls),
        "{calls} EVALSHA for 200 jobs"
    );
    let s = q.stats().unwrap();
    assert_eq!((s.due, s.delayed, s.in_flight), (0, 20, 0), "{s:?}");
}

#[test]
fn the_worker_keeps_a_slow_task_alive_and_finishes_on_stop() {
    let q = Arc::new(Queue::new(&client(), b"q", queue_opts("slow")).unwrap());
    q.enqueue(&["slow"], 0.0, None, None).unwrap();
    let mut opts = WorkerOptions::default();
    opts.visibility = Some(Duration::from_millis(300));
    opts.wait = Wait::Try;
    let mut w = Worker::new(q.clone(), opts).unwrap();
    let log = |e: &Error| panic!("{e}");
    let t = w.next(Outcome::Done, None, &log).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(1000)); // 3× its visibility
    assert!(
        q.reserve(None, Wait::Try, None).unwrap().is_none(),
        "not handed out twice"
    );
    assert_eq!(w.current().map(|c| c.id.clone()), Some(t.id.clone()));
    w.finish(Outcome::Done, None).unwrap();
    assert!(w.current().is_none());
    let s = q.stats().unwrap();
    assert_eq!((s.due, s.delayed, s.in_flight), (0, 0, 0));
}

#[test]
fn the_worker_rides_out_a_server_that_goes_away() {
    let mut server = RedisServer::start();
    let url = format!("{}?timeout=0.5", server.url());
    let c = Client::new(Config::from_url(&url).unwrap()).unwrap();
    let q = Arc::new(Queue::new(&c, b"q", queue_opts("trouble")).unwrap());
    let mut opts = WorkerOptions::default();
    opts.wait = Wait::For(Duration::from_secs(20));
    let mut w = Worker::new(q.clone(), opts).unwrap();
    q.enqueue(&["a"], 0.0, None, None).unwrap();
    let troubles = RefCell::new(0);
    let log = |_: &Error| *troubles.borrow_mut() += 1;
    let a = w.next(Outcome::Done, None, &log).unwrap().unwrap();
    assert_eq!(a.id, b"a");
    // The server restarts (empty: persistence is off) while `a` is handled.
    let port = server.port();
    server.stop();
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        let mut s = server;
        s.restart();
        let mut conn = s.conn();
        let _: () = redis::cmd("ZADD")
            .arg(format!(
                "{}q",
                String::from_utf8_lossy(&queue_opts("x").prefix)
            ))
            .arg(1)
            .arg("ignored")
            .query(&mut conn)
            .unwrap();
        s
    });
    let q2 = q.clone();
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        q2.enqueue(&["b"], 0.0, None, None).unwrap();
    });
    let b = w
        .next(Outcome::Done, None, &log)
        .unwrap()
        .expect("went on after the restart");
    assert_eq!(b.id, b"b");
    assert!(*troubles.borrow() > 0, "the trouble was logged");
    producer.join().unwrap();
    let _server = restarter.join().unwrap();
    let _ = port;
}
