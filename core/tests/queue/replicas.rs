//! `min_replicas` for enqueue and ack (issue 27.5): a replica confirms
//! them (`WAIT`); a master without enough replicas refuses at once, writing
//! nothing; work resumes as soon as a replica attaches.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ferrolock::testing::RedisServer;
use ferrolock::{Client, Config, Error, ErrorKind, Outcome, Queue, Wait, Worker, WorkerOptions};

use crate::common::queue_opts;

fn replica_of(master: &RedisServer) -> RedisServer {
    let replica = RedisServer::start();
    replica.replicate(master);
    replica
}

fn zcard(server: &RedisServer, key: &[u8]) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

#[test]
fn min_replicas_fails_fast_confirms_with_a_replica_and_recovers() {
    let master = RedisServer::start();
    let c = Client::new(Config::from_url(&master.url_with("?timeout=1")).unwrap()).unwrap();
    let mut opts = queue_opts("replicas");
    opts.min_replicas = 1;
    let key = [opts.prefix.clone(), b"q".to_vec()].concat();
    let q = Arc::new(Queue::new(&c, b"q", opts).unwrap());

    // No replica: refused at once, nothing written.
    let started = Instant::now();
    let e = q.enqueue(&["a"], 0.0, None, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Quorum, "{e}");
    assert!(
        e.message().contains("0 connected replicas")
            && e.message().contains("nothing was enqueued"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_millis(500), "fast");
    assert_eq!(zcard(&master, &key), 0);

    // A replica attaches: within about a second, enqueues go through, and
    // the replica has them when the call returns.
    let replica = replica_of(&master);
    let until = Instant::now() + Duration::from_secs(5);
    while let Err(e) = q.enqueue(&["a", "b"], 0.0, None, None) {
        assert_eq!(e.kind(), ErrorKind::Quorum, "{e}");
        assert!(Instant::now() < until, "never recovered: {e}");
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(zcard(&replica, &key), 2, "confirmed by the replica");
    let a = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    assert!(q.ack(&a.id, a.receipt.as_deref().unwrap()).unwrap());

    // The worker loop acks through WAIT too.
    let mut wopts = WorkerOptions::default();
    wopts.wait = Wait::Try;
    let mut w = Worker::new(q.clone(), wopts).unwrap();
    let log = |e: &Error| panic!("{e}");
    let b = w.next(Outcome::Done, None, &log).unwrap().unwrap();
    assert_eq!(b.id, b"b");
    assert!(w.next(Outcome::Done, None, &log).unwrap().is_none());
    assert_eq!(q.stats().unwrap().in_flight, 0);

    // The replica goes: an ack is done on the master but reported
    // unconfirmed; the next call refuses at once.
    q.enqueue(&["c"], 0.0, None, None).unwrap();
    let task = q.reserve(None, Wait::Try, None).unwrap().unwrap();
    drop(replica);
    let e = q
        .ack(&task.id, task.receipt.as_deref().unwrap())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Quorum, "{e}");
    assert!(e.message().contains("only 0 of the 1"), "{e}");
    let e = q.enqueue(&["d"], 0.0, None, None).unwrap_err();
    assert!(e.message().contains("nothing was enqueued"), "{e}");
}
