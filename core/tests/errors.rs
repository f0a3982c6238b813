//! Bad input, and a Redis that is unreachable, stalled, refusing credentials or
//! writes, or has forgotten its scripts.
#![allow(clippy::unwrap_used)]

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{client, lock_opts, own_server, queue_opts, raw, wait_in_thread};
use ferrolock::testing::{RedisServer, free_port};
use ferrolock::{Client, Config, ErrorKind, Lock, LockOptions, Queue, Wait};

fn db_size() -> i64 {
    redis::cmd("DBSIZE").query(&mut raw()).unwrap()
}

#[test]
fn bad_arguments_are_rejected_before_touching_redis() {
    let c = client();
    let q = Queue::new(&c, b"q", queue_opts("bad")).unwrap();
    let l = Lock::new(&c, b"x", lock_opts("bad")).unwrap();
    assert!(l.try_acquire().unwrap());
    let before = db_size();
    assert!(
        l.extend(Some(Duration::ZERO))
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(
        Lock::new(&c, b"", LockOptions::default())
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(
        Lock::new(&c, &vec![b'x'; 1 << 20], LockOptions::default())
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(
        Queue::new(&c, b"", queue_opts("bad"))
            .unwrap_err()
            .is_invalid_argument()
    );
    for ttl in [Duration::ZERO, Duration::from_micros(10)] {
        let mut o = lock_opts("bad");
        o.ttl = ttl;
        assert!(Lock::new(&c, b"x", o).unwrap_err().is_invalid_argument());
    }
    for bad in [-1.0, f64::NAN, f64::INFINITY, 1e300] {
        assert!(
            Wait::from_secs(Some(bad), "timeout")
                .unwrap_err()
                .is_invalid_argument()
        );
    }
    assert_eq!(Wait::from_secs(Some(0.0), "timeout").unwrap(), Wait::Try);
    assert_eq!(Wait::from_secs(None, "timeout").unwrap(), Wait::Forever);
    assert!(
        q.pop(0, Wait::Try, None, None)
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(q.top(0).unwrap_err().is_invalid_argument());
    assert!(
        q.enqueue(&["ok", ""], 0.0, None, None)
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(
        q.enqueue(&["ok"], f64::NAN, None, None)
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(
        q.dequeue(b"ok", f64::INFINITY, None, None)
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(q.ack(b"", "r").unwrap_err().is_invalid_argument());
    assert_eq!(db_size(), before, "no key touched");
    l.release().unwrap();
    // Odd but valid names work: "0", braces, newlines, non-UTF-8 bytes.
    for name in [
        &b"0"[..],
        b"{x}",
        b"}{",
        b"a\nb",
        b"\xff\xfe",
        "名字".as_bytes(),
    ] {
        let l = Lock::new(&c, name, lock_opts("names")).unwrap();
        assert!(l.try_acquire().unwrap());
        l.release().unwrap();
        q.enqueue(&[name], 0.0, None, None).unwrap();
    }
    assert_eq!(q.pop(10, Wait::Try, None, None).unwrap().len(), 6);
}

#[test]
fn redis_down_is_a_connection_error_within_the_timeout() {
    let port = free_port(); // nothing listens here
    let c = Client::new(
        Config::from_url(&format!(
            "redis://127.0.0.1:{port}/0?connect_timeout=0.5&timeout=0.5"
        ))
        .unwrap(),
    )
    .unwrap();
    let l = Lock::new(&c, b"x", LockOptions::default()).unwrap();
    let start = Instant::now();
    let err = l.try_acquire().unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("lock \"x\""), "{err}");
    assert!(start.elapsed() < Duration::from_secs(2));
    // A blocking acquire rides the outage out until its deadline, then
    // fails the same way, saying for how long it tried.
    let start = Instant::now();
    let err = l
        .acquire(Wait::For(Duration::from_millis(800)), None)
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("gave up after"), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(800));
    assert!(start.elapsed() < Duration::from_millis(800) + Duration::from_secs(2));
    // Waiting forever means forever: only the interrupt hook ends it.
    let start = Instant::now();
    let hook = || -> ferrolock::Result<()> {
        if start.elapsed() > Duration::from_millis(600) {
            Err(ferrolock::wait::interrupted("test"))
        } else {
            Ok(())
        }
    };
    let err = l.acquire(Wait::Forever, Some(&hook)).unwrap_err();
    assert!(err.is_interrupted(), "{err}");
    // Unroutable address: the connect timeout bounds it.
    let c =
        Client::new(Config::from_url("redis://10.255.255.1:6379/0?connect_timeout=0.3").unwrap())
            .unwrap();
    let start = Instant::now();
    assert!(
        Lock::new(&c, b"x", LockOptions::default())
            .unwrap()
            .try_acquire()
            .is_err()
    );
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_stalled_redis_is_a_timeout_and_a_restarted_one_works_again() {
    let mut server = RedisServer::start();
    let c = Client::new(
        Config::from_url(&server.url_with("?timeout=0.3&connect_timeout=0.5")).unwrap(),
    )
    .unwrap();
    let l = Lock::new(&c, b"x", LockOptions::default()).unwrap();
    assert!(l.try_acquire().unwrap());
    l.release().unwrap();
    // Stall the server longer than the command timeout.
    let mut admin = server.conn();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("ALL")
        .query(&mut admin)
        .unwrap();
    let start = Instant::now();
    let err = l.try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(start.elapsed() < Duration::from_millis(900));
    std::thread::sleep(Duration::from_millis(800));
    // Restart: the pooled connections are dead; the same objects work again.
    server.restart();
    assert!(l.try_acquire().unwrap());
    l.release().unwrap();
    server.stop();
    assert!(l.try_acquire().unwrap_err().is_connection());
    server.restart();
    assert!(l.try_acquire().unwrap());
}

#[test]
fn auth_errors_are_clear() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let good = Client::new(
        Config::from_url(&format!("redis://:s3cret@127.0.0.1:{}/0", server.port())).unwrap(),
    )
    .unwrap();
    let l = Lock::new(&good, b"x", LockOptions::default()).unwrap();
    assert!(l.try_acquire().unwrap());
    let bad = Client::new(
        Config::from_url(&format!("redis://:nope@127.0.0.1:{}/0", server.port())).unwrap(),
    )
    .unwrap();
    let err = Lock::new(&bad, b"x", LockOptions::default())
        .unwrap()
        .try_acquire()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(
        !err.to_string().contains("nope"),
        "password not leaked: {err}"
    );
}

/// A restart, a failover or SCRIPT FLUSH empties the server's script cache:
/// every call loads its script again and goes on, including a release sent
/// behind a PING (the one after a wait).
#[test]
fn scripts_are_loaded_again_after_the_script_cache_is_flushed() {
    let (_server, c, mut r) = own_server();
    let mut flush = || {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut r).unwrap();
    };
    let opts = lock_opts("flush");
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = wait_in_thread(&c, opts);
    thread::sleep(Duration::from_millis(300));
    flush();
    holder.release().unwrap();
    let (waiter, ok, _) = waiter.join().unwrap();
    assert!(ok);
    flush();
    waiter.release().unwrap();
    assert!(!waiter.locked().unwrap());
    flush();
    assert!(holder.try_acquire().unwrap());
    holder.release().unwrap();
}

/// A server that refuses writes (here: too few replicas for
/// `min-replicas-to-write`; OOM under `noeviction` is the same) answers an
/// acquire with that error, busy lock or not, instead of a plain "no".
#[test]
fn a_server_refusing_writes_fails_the_acquire_with_its_error() {
    let (_server, c, mut r) = own_server();
    let opts = lock_opts("refused");
    let holder = Lock::new(&c, b"x", opts.clone()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(1)
        .query(&mut r)
        .unwrap();
    let other = Lock::new(&c, b"x", opts.clone()).unwrap();
    let busy = other.try_acquire().unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Redis, "{busy}");
    assert!(busy.to_string().contains("NOREPLICAS"), "{busy}");
    let fresh = Lock::new(&c, b"y", opts).unwrap();
    let free = fresh.try_acquire().unwrap_err();
    assert!(free.to_string().contains("NOREPLICAS"), "{free}");
    // Reads still work, and the holder keeps its lock.
    assert!(holder.locked().unwrap());
}

/// An ACL that does not let the client listen on its wake-up channel fails
/// a wait at once, naming the refusal, instead of waiting out its timeout.
#[test]
fn a_wait_refused_its_wake_up_channel_says_so_at_once() {
    let server = RedisServer::start();
    let mut admin = server.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg(&["on", ">pw", "~*", "resetchannels", "+@all"][..])
        .query(&mut admin)
        .unwrap();
    let c = Client::new(
        Config::from_url(&format!("redis://app:pw@127.0.0.1:{}/0", server.port())).unwrap(),
    )
    .unwrap();
    let holder = Lock::new(&c, b"x", LockOptions::default()).unwrap();
    assert!(holder.try_acquire().unwrap());
    let waiter = Lock::new(&c, b"x", LockOptions::default()).unwrap();
    let start = Instant::now();
    let err = waiter
        .acquire(Wait::For(Duration::from_secs(10)), None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(err.to_string().to_lowercase().contains("noperm"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

/// A server on a free port that answers every read with `reply` (an HTTP
/// server, or a fake Redis answering with one fixed error).
fn fake_server(reply: &'static [u8]) -> u16 {
    fake_server_with(move |_| reply)
}

/// A server on a free port that answers each read (one command: the
/// client writes each in one piece) with what `answer` gives for it.
fn fake_server_with(answer: impl Fn(&[u8]) -> &'static [u8] + Clone + Send + 'static) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let answer = answer.clone();
            thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(answer(&buf[..n])).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A peer that answers the connection's `INFO server` probe as a Redis 7
/// would and every command after it like an HTTP server: each connection's
/// first command fails to parse (not the handshake), the branch of a round
/// trip that drops a new connection. Each must give its place in the pool
/// back, or the 33rd call waits for one.
#[test]
fn a_peer_that_stops_speaking_redis_after_the_probe_leaks_no_pool_place() {
    let port = fake_server_with(|command| {
        if command.windows(4).any(|w| w.eq_ignore_ascii_case(b"INFO")) {
            b"$24\r\nredis_version:7.0.15\r\n\r\n\r\n"
        } else {
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
        }
    });
    let url = format!("redis://127.0.0.1:{port}/0?timeout=1");
    let c = Client::new(Config::from_url(&url).unwrap()).unwrap();
    let l = Lock::new(&c, b"x", LockOptions::default()).unwrap();
    let start = Instant::now();
    for call in 0..40 {
        let err = l.try_acquire().unwrap_err();
        assert!(err.is_connection(), "call {call}: {err}");
        assert!(!err.outcome_unknown(), "call {call}: nothing ran: {err}");
        assert!(
            err.to_string()
                .contains("does not speak the Redis protocol"),
            "call {call}: {err}"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "no call waited for a pool place: {:?}",
        start.elapsed()
    );
}

/// Issue 26.5: errors that name the problem, the server and the timeout.
#[test]
fn errors_name_the_problem_the_server_and_the_timeout() {
    // A URL pointing at an HTTP server.
    let port = fake_server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let url = format!("redis://127.0.0.1:{port}/0?timeout=1");
    let c = Client::new(Config::from_url(&url).unwrap()).unwrap();
    let l = Lock::new(&c, b"x", LockOptions::default()).unwrap();
    let start = Instant::now();
    let err = l.try_acquire().unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(!err.outcome_unknown(), "nothing ran: {err}");
    let text = err.to_string();
    assert!(text.contains("does not speak the Redis protocol"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "fails at once"
    );
    // Again and again: each failed connection gives its place in the pool
    // back (a place leaked per call would leave the 33rd waiting).
    for call in 0..40 {
        let err = l.try_acquire().unwrap_err();
        assert!(
            err.to_string()
                .contains("does not speak the Redis protocol"),
            "call {call}: {err}"
        );
    }
    // The same with a password (the handshake's AUTH gets the HTTP reply).
    let url = format!("redis://:secret@127.0.0.1:{port}/0?timeout=1");
    let c = Client::new(Config::from_url(&url).unwrap()).unwrap();
    let err = Lock::new(&c, b"x", LockOptions::default())
        .unwrap()
        .try_acquire()
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("Redis protocol"), "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");

    // A server still loading its data names itself.
    let port = fake_server(b"-LOADING Redis is loading the dataset in memory\r\n");
    let url = format!("redis://127.0.0.1:{port}/0");
    let c = Client::new(Config::from_url(&url).unwrap()).unwrap();
    let err = Lock::new(&c, b"x", LockOptions::default())
        .unwrap()
        .try_acquire()
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    let text = err.to_string();
    assert!(text.contains("loading") && text.contains(&url), "{text}");

    // A stall says which timeout struck, its value, and which server.
    let server = RedisServer::start();
    let url = server.url_with("?timeout=0.4&connect_timeout=0.3");
    let c = Client::new(Config::from_url(&url).unwrap()).unwrap();
    let l = Lock::new(&c, b"x", LockOptions::default()).unwrap();
    assert!(!l.locked().unwrap());
    server.pause();
    let text = l.locked().unwrap_err().to_string();
    assert!(
        text.contains("the command timeout") && text.contains("0.400 s") && text.contains(&url),
        "{text}"
    );
    server.resume();
    // A connect that gets no answer: a listener whose accept queue is full
    // (it never accepts) stands for a host that drops SYNs.
    let (listener, port) = full_listener();
    let url = format!("redis://127.0.0.1:{port}/0?connect_timeout=0.2");
    let c = Client::new(Config::from_url(&url).unwrap()).unwrap();
    let err = Lock::new(&c, b"x", LockOptions::default())
        .unwrap()
        .locked()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("the connect timeout") && text.contains("0.200 s") && text.contains(&url),
        "{text}"
    );
    drop(listener);
}

/// A loopback listener (backlog 0) whose accept queue is full: connecting
/// to its port gets no answer. Keep the returned sockets open.
fn full_listener() -> (Vec<std::net::TcpStream>, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a socket this function owns; the fd
    // is handed to a TcpStream, which closes it.
    let (fd, port) = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, std::ptr::from_ref(&addr).cast(), len), 0);
        assert_eq!(libc::listen(fd, 0), 0);
        let mut got = len;
        libc::getsockname(fd, std::ptr::from_mut(&mut addr).cast(), &mut got);
        (fd, u16::from_be(addr.sin_port))
    };
    let mut keep = vec![unsafe { std::net::TcpStream::from_raw_fd(fd) }];
    for _ in 0..4 {
        if let Ok(s) = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(50),
        ) {
            keep.push(s);
        }
    }
    (keep, port)
}
