//! Fencing tokens against a real redis-server: strictly increasing, drawn on
//! first read while held, and the acquire script where SET has no GET option.

use crate::common::{client, lock_opts, raw};
use ferrolock::{ErrorKind, Lock};
use redis::Commands;

#[test]
fn fencing_tokens_strictly_increase_across_holders() {
    let c = client();
    let opts = lock_opts("fence");
    let locks: Vec<_> = (0..3)
        .map(|_| Lock::new(&c, b"x", opts.clone()).unwrap())
        .collect();
    let mut last = 0;
    for round in 0..50 {
        let l = &locks[round % 3];
        assert!(l.try_acquire().unwrap());
        let f = l.fencing_token().unwrap().unwrap();
        assert!(f > last, "{f} after {last}");
        last = f;
        l.release().unwrap();
        assert_eq!(l.fencing_token().unwrap(), None);
    }
    // Still increasing after the fence key itself was deleted (server clock).
    // (Only this test's keys: the tests share one server.)
    let pattern = format!("*{}x:fence", String::from_utf8_lossy(&opts.prefix));
    let mut r = raw();
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut r).unwrap();
    for k in keys {
        let _: () = r.del(k).unwrap();
    }
    assert!(locks[0].try_acquire().unwrap());
    let after_loss = locks[0].fencing_token().unwrap().unwrap();
    assert!(after_loss > last);
    locks[0].release().unwrap();
    // A counter ahead of the server clock (the clock stepped back): one more
    // than the last token, each time.
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut r).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ahead = after_loss + 3_600_000_000; // an hour of µs
    let _: () = r.set(&keys[0], ahead).unwrap();
    for expected in [ahead + 1, ahead + 2] {
        assert!(locks[1].try_acquire().unwrap());
        assert_eq!(locks[1].fencing_token().unwrap(), Some(expected));
        locks[1].release().unwrap();
    }
}

/// An uncontended acquire is a plain SET NX PX: its fencing token is drawn
/// on first read, inside the hold, and only while the lock is still ours.
#[test]
fn fencing_token_is_drawn_on_first_read_while_held() {
    let c = client();
    let opts = lock_opts("lazy-fence");
    let mut r = raw();
    let a = Lock::new(&c, b"x", opts.clone()).unwrap();
    let b = Lock::new(&c, b"x", opts.clone()).unwrap();
    let fence_keys = |r: &mut redis::Connection| -> Vec<String> {
        let pattern = format!("*{}x:fence", String::from_utf8_lossy(&opts.prefix));
        redis::cmd("KEYS").arg(pattern).query(r).unwrap()
    };
    assert!(a.try_acquire().unwrap());
    assert_eq!(
        fence_keys(&mut r),
        Vec::<String>::new(),
        "no token drawn yet"
    );
    // a's hold ends (deleted here, as if it expired) and b takes the lock
    // and reads its token.
    let _: () = r.del(a.key()).unwrap();
    assert!(b.try_acquire().unwrap());
    let fb = b.fencing_token().unwrap().unwrap();
    let fence = fence_keys(&mut r).pop().unwrap();
    assert_eq!(r.get::<_, i64>(&fence).unwrap(), fb);
    // Too late for a: no token, and a now knows it lost the lock.
    assert!(!a.lost());
    assert_eq!(a.fencing_token().unwrap_err().kind(), ErrorKind::Lost);
    assert!(a.lost());
    assert_eq!(a.release().unwrap_err().kind(), ErrorKind::NotOwned);
    // A hold keeps the token it drew, without asking Redis again.
    let _: () = r.set(&fence, fb + 1_000).unwrap();
    assert_eq!(b.fencing_token().unwrap(), Some(fb));
    b.release().unwrap();
    // This process has read tokens of "x": its acquires draw one at once.
    assert!(a.try_acquire().unwrap());
    assert!(!a.lost());
    let drawn: i64 = r.get(&fence).unwrap();
    assert!(drawn > fb + 1_000, "{drawn}");
    let _: () = r.del(&fence).unwrap();
    assert_eq!(a.fencing_token().unwrap(), Some(drawn));
    a.release().unwrap();
}

/// An acquire that finds the lock already its own (a retry whose first reply
/// was lost, a waiter that missed its hand-over message) draws a new token:
/// the counter may hold the previous holder's, since a hold taken by a plain
/// SET NX draws none.
#[test]
fn an_acquire_that_finds_the_lock_its_own_draws_a_new_token() {
    let script = redis::Script::new(include_str!(concat!(
        env!("OUT_DIR"),
        "/scripts/lock_acquire-5.lua"
    )));
    let prefix = String::from_utf8_lossy(&lock_opts("own-again").prefix).into_owned();
    let (key, fence) = (format!("{{t}}{prefix}x"), format!("{{t}}{prefix}x:fence"));
    let mut r = raw();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut r).unwrap();
    let previous = secs * 1_000_000 + micros + 3_600_000_000; // ahead of the clock, too
    let _: () = r.set(&fence, previous).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("mine")
        .arg("PX")
        .arg(1_000)
        .query(&mut r)
        .unwrap();
    let token: String = script
        .key(&key)
        .key(&fence)
        .arg("mine")
        .arg(30_000)
        .invoke(&mut r)
        .unwrap();
    assert_eq!(token.parse::<i64>().unwrap(), previous + 1);
    assert!(
        r.pttl::<_, i64>(&key).unwrap() > 1_000,
        "the TTL starts again"
    );
}

/// Redis 6.0 and 6.1 refuse SET's GET option. The acquire script, run here
/// as built but with a `redis` whose `call` and `pcall` refuse `SET … GET`
/// as they do, takes the lock and issues its token with GET and SET instead.
#[test]
fn fencing_works_where_set_has_no_get_option() {
    let built = include_str!(concat!(env!("OUT_DIR"), "/scripts/lock_acquire-5.lua"));
    let as_redis_6_0 = r#"
local function refused(args) return args[1] == 'SET' and args[#args] == 'GET' end
local redis = setmetatable({
  call = function(...)
    if refused({...}) then error({err = 'ERR syntax error'}) end
    return redis.call(...)
  end,
  pcall = function(...)
    if refused({...}) then return {err = 'ERR syntax error'} end
    return redis.pcall(...)
  end,
}, {__index = redis})
"#;
    let script = redis::Script::new(&format!("{as_redis_6_0}{built}"));
    let opts = lock_opts("no-set-get");
    let prefix = String::from_utf8_lossy(&opts.prefix).into_owned();
    let (lock, fence) = (format!("{prefix}x"), format!("{prefix}x:fence"));
    let mut r = raw();
    let acquire = |r: &mut redis::Connection, token: &str| -> redis::Value {
        script
            .key(&lock)
            .key(&fence)
            .arg(token)
            .arg(30_000)
            .invoke(r)
            .unwrap()
    };
    let redis::Value::BulkString(first) = acquire(&mut r, "a") else {
        panic!("not taken")
    };
    let first: i64 = String::from_utf8(first).unwrap().parse().unwrap();
    let stored: i64 = r.get(&fence).unwrap();
    assert_eq!(stored, first);
    assert!(r.pttl::<_, i64>(&fence).unwrap() > 30_000);
    // Busy: the holder's PTTL.
    assert!(matches!(
        acquire(&mut r, "b"),
        redis::Value::Int(29_000..=30_000)
    ));
    // Ahead of the clock: one more than the last.
    let _: () = r.del(&lock).unwrap();
    let ahead = first + 3_600_000_000;
    let _: () = r.set(&fence, ahead).unwrap();
    let next = (ahead + 1).to_string().into_bytes();
    assert_eq!(acquire(&mut r, "c"), redis::Value::BulkString(next));
    assert_eq!(r.get::<_, i64>(&fence).unwrap(), ahead + 1);
}
