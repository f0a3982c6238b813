//! Waits under faults: a paused server ends a wait within its timeout plus
//! one command timeout (issue 18.3), and nothing is left behind.

use std::thread;
use std::time::{Duration, Instant};

use ferrolock::testing::RedisServer;
use ferrolock::{Client, Config, Lock, Wait};

use crate::common::lock_opts;

#[test]
fn a_wait_ends_within_its_timeout_plus_one_command_timeout_while_the_server_is_paused() {
    let server = RedisServer::start();
    let client = Client::new(Config::from_url(&server.url_with("?timeout=0.5")).unwrap()).unwrap();
    let opts = lock_opts("paused-wait");
    let holder = Lock::new(&client, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = Lock::new(&client, b"x", opts.clone()).unwrap();
    let (timeout, command) = (Duration::from_millis(1500), Duration::from_millis(500));
    let t = thread::spawn(move || {
        let start = Instant::now();
        let result = waiter.acquire(Wait::For(timeout), None);
        (result.map_err(|e| e.to_string()), start.elapsed(), waiter)
    });
    thread::sleep(Duration::from_millis(300)); // waiting, registered
    server.pause();
    let (result, took, waiter) = t.join().unwrap();
    server.resume();
    let bound = timeout + command + Duration::from_millis(300);
    assert!(took <= bound, "ended after {took:?}, bound {bound:?}");
    let err = result.unwrap_err();
    assert!(err.contains("gave up after"), "{err}");
    // Nothing left behind once the server answers: the holder's release
    // hands the lock to nobody (the waiter's registration was settled) and
    // a newcomer takes it at once.
    assert!(ferrolock::wait_settled(Duration::from_secs(10)));
    holder.release().unwrap();
    assert_eq!(waiter.token(), None);
    let other = Lock::new(&client, b"x", opts).unwrap();
    assert!(other.try_acquire().unwrap());
    other.release().unwrap();
}
