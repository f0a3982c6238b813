"""Redis restarting, stalling, refusing credentials, speaking TLS; hostile input."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ferrolock
from ferrolock import Lock, LockLostError, Queue
from tests.support.resp import RespError
from tests.support.servers import RedisServer, TlsRedisServer, make_tls_files


def test_redis_restart_fails_fast_then_recovers_with_the_same_objects():
    with RedisServer() as server:
        url = server.url + "?timeout=1&connect_timeout=1"
        lock, queue = Lock("restart", url=url, auto_renew=False), Queue("restart", url=url)
        assert lock.acquire(blocking=False)
        lock.release()
        queue.enqueue("a")
        server.stop()
        for op in (lambda: lock.acquire(blocking=False), queue.pop, lambda: queue.enqueue("b"),
                   lambda: len(queue)):
            start = time.monotonic()
            with pytest.raises(ferrolock.ConnectionError):
                op()
            assert time.monotonic() - start < 3, "bounded by the configured timeouts"
        # A wait keeps trying until its timeout (the server may come back),
        # then fails saying so: within the timeout plus one command timeout.
        for op in (lambda: lock.acquire(timeout=1.5), lambda: queue.pop(wait=1.5)):
            start = time.monotonic()
            with pytest.raises(ferrolock.ConnectionError, match="gave up after"):
                op()
            assert 1.5 <= time.monotonic() - start < 1.5 + 1 + 1
        server.start()
        assert lock.acquire(blocking=False)
        lock.release()
        assert queue.enqueue("c") == 1 and queue.pop().id == "c"


def test_a_stalled_redis_makes_a_held_lock_lost():
    with RedisServer("--enable-debug-command", "local") as server:
        url = server.url + "?timeout=0.5"
        lock = Lock("stall", url=url, ttl=1.0)  # renewed every ~0.33 s
        lock.acquire()
        admin = server.client()
        sleeper = threading.Thread(target=lambda: admin("DEBUG", "SLEEP", "2.5"))
        sleeper.start()
        sleeper.join()
        admin.close()
        deadline = time.monotonic() + 3
        while not lock.lost:
            assert time.monotonic() < deadline, "the watchdog did not report the loss"
            time.sleep(0.05)
        assert not lock.owned()
        with pytest.raises(LockLostError):
            lock.__exit__(None, None, None)


def test_a_signal_during_a_round_trip_neither_fails_the_call_nor_loses_its_effect(url, r, name):
    # Python installs handlers without SA_RESTART: a signal arriving while a
    # call waits for its reply interrupts the read (EINTR). Redis has run the
    # script by then, so failing the call would lose a popped task or leave
    # the lock held by a token nobody knows.
    previous = signal.signal(signal.SIGALRM, lambda *_: None)  # a timer, a profiler...
    try:
        queue, lock = Queue(name), Lock(name, auto_renew=False)
        queue.enqueue("a")
        assert lock.acquire(blocking=False)
        lock.release()
        for call in (queue.pop, lambda: lock.acquire(blocking=False)):
            r("CLIENT", "PAUSE", "400", "WRITE")  # the reply takes 0.4 s
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            got = call()
            assert got is True or getattr(got, "id", None) == "a", got
        assert lock.owned()
        lock.release()
        assert queue.pop() is None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_wait_on_a_subscriber_connection_the_server_closed_reconnects():
    with RedisServer() as server, server.client() as r:
        lock, queue = Lock("sub", url=server.url), Queue("sub", url=server.url)
        r("SET", "Lock:sub", "other", "EX", "60")
        assert lock.acquire(timeout=0.2) is False  # its subscriber connection is pooled
        assert queue.reserve(wait=0.2) is None
        r("CLIENT", "KILL", "SKIPME", "yes")  # a restart, `timeout`, a proxy's idle cut
        r("SET", "Lock:sub", "other", "PX", "300")
        assert lock.acquire(timeout=5) is True
        lock.release()
        threading.Timer(0.3, lambda: server.cmd("ZADD", "Queue:sub", "1", "t")).start()
        r("CLIENT", "KILL", "SKIPME", "yes")
        task = queue.reserve(wait=5)
        assert task is not None and task.id == "t"


def test_a_server_lost_mid_wait_names_the_lock_and_the_server():
    with RedisServer() as server:
        server.cmd("SET", "Lock:mid-wait", "other", "EX", "60")
        lock = Lock("mid-wait", url=server.url)
        threading.Timer(0.3, server.stop).start()
        # A wait goes on asking for a server that went away until its deadline: 4 s (was 10)
        # still outlasts the 0.3 s before the server stops by far.
        with pytest.raises(ferrolock.ConnectionError) as caught:
            lock.acquire(timeout=4)
        message = str(caught.value)
        assert 'lock "mid-wait"' in message and server.url in message, message


def test_waits_survive_their_subscription_connection_being_closed():
    with RedisServer() as server:
        holder = Lock("cut", url=server.url)
        assert holder.acquire(blocking=False)
        got = {}

        def wait_for_lock():
            got["lock"] = Lock("cut", url=server.url).acquire(timeout=10)

        def wait_for_task():
            got["task"] = Queue("cut", url=server.url).pop(wait=10)

        threads = [threading.Thread(target=wait_for_lock), threading.Thread(target=wait_for_task)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        server.cmd("CLIENT", "KILL", "TYPE", "pubsub")  # a proxy's idle cut, say
        time.sleep(0.5)
        holder.release()
        Queue("cut", url=server.url).enqueue("x")
        for t in threads:
            t.join(timeout=15)
        assert got["lock"] is True and got["task"].id == "x", got


def test_password_and_wrong_password():
    with RedisServer(password="s3cr3t") as server:
        good = Lock("auth", url=server.url)
        assert good.acquire(blocking=False)
        good.release()
        bad = Lock("auth", url=server.url.replace("s3cr3t", "nope"))
        with pytest.raises(ferrolock.ConnectionError) as info:
            bad.acquire(blocking=False)
        assert "auth" in str(info.value).lower() or "password" in str(info.value).lower()
        assert "nope" not in str(info.value), "the password is not echoed"


ACL_RULES = [
    "on", ">app-pass", "resetkeys", "~Lock:*", "~Queue:*", "~{*}Lock:*", "~{*}Queue:*",
    "resetchannels", "&fl:w:*", "-@all",
    # Commands sent by the client ...
    "+evalsha", "+script|load", "+get", "+exists", "+pttl", "+zcard", "+ping", "+hello",
    "+subscribe",
    # ... and run inside the scripts.
    "+time", "+set", "+del", "+pexpire", "+zadd", "+zrem", "+zrange", "+zrangebyscore", "+zscore",
    "+hget", "+hset", "+hdel", "+publish", "+pubsub|numsub", "+hmget", "+zmscore", "+zcount", "+sadd",
    "+sismember",
]


def test_acl_user_restricted_to_the_needed_commands_and_keys():
    with RedisServer() as server:
        admin = server.client()
        admin("ACL", "SETUSER", "app", *ACL_RULES)
        admin.close()
        url = f"redis://app:app-pass@127.0.0.1:{server.port}/0"
        holder, waiter = Lock("acl", url=url), Lock("acl", url=url, fair=True)
        assert holder.acquire()
        threading.Timer(0.2, holder.release).start()
        assert waiter.acquire(timeout=5), "waiting (subscribe, publish) works under the ACL"
        waiter.release()
        with Lock("acl-renewed", url=url, ttl=0.3, reentrant=True) as renewed:  # watchdog
            with renewed:
                time.sleep(0.5)
            assert renewed.owned() and renewed.locked() and renewed.fencing_token
            renewed.extend(1)
        queue = Queue("acl", url=url, visibility=0.1, backoff=0, max_attempts=2)
        queue.enqueue(["a", "b", "c"])
        with queue.reserve() as task:
            assert task.id == "a" and task.touch()
        lapsed = queue.reserve()
        time.sleep(0.2)
        assert [t.id for t in queue.top(5)] == ["c", lapsed.id], "reclaimed by top, due again at once"
        assert queue.reserve().nack(delay=0), "c goes back, due now: behind b"
        assert queue.top().ack(), "b dequeued"
        assert queue.pop().id == "c" and len(queue) == 0
        queue.enqueue({"p": b"payload"})
        queue.reserve().nack()
        queue.reserve().nack()  # its last attempt: dead
        assert [t.payload for t in queue.dead()] == [b"payload"]
        assert queue.retry_dead() == 1 and queue.stats()["due"] == 1
        assert queue.work(lambda t: None, wait=0) == 1
        threading.Timer(0.2, lambda: Queue("acl", url=url).enqueue("d")).start()
        assert queue.pop(wait=5).id == "d", "waiting for work works under the ACL"
        with pytest.raises(ferrolock.ConnectionError, match=r"(?i)noperm|permission"):
            Lock("x", url=url, prefix="Other:").acquire(blocking=False)


def test_tls_with_a_self_signed_ca(tmp_path):
    files = make_tls_files(tmp_path)
    with TlsRedisServer(files) as server:
        url = f"rediss://localhost:{server.tls_port}/0?tls_ca={files['ca']}"
        lock = Lock("tls", url=url)
        holder = Lock("tls", url=url)
        assert holder.acquire()
        threading.Timer(0.2, holder.release).start()
        assert lock.acquire(timeout=5), "notifications over TLS"
        lock.release()
        q = Queue("tls", url=url)
        q.enqueue("a")
        assert q.pop().id == "a"
        with pytest.raises(ferrolock.ConnectionError, match=r"(?i)certificate|issuer"):
            Lock("tls", url=f"rediss://localhost:{server.tls_port}/0").acquire(blocking=False)
        with pytest.raises(ferrolock.ConnectionError):
            Lock("tls", url=f"redis://127.0.0.1:{server.tls_port}/0?timeout=1").acquire(blocking=False)


def test_tokens_are_random_and_distinct(url, name):
    tokens = set()
    for _ in range(200):
        with Lock(name) as lock:
            tokens.add(lock.token)
    assert len(tokens) == 200 and all(len(t) == 32 for t in tokens)


HOSTILE_NAMES = ["", "x" * (1 << 20), "名字", "{braces}", "}{", "new\nline", "\x00nul", "\udcff-lone-surrogate"]
HOSTILE_NUMBERS = [-1.0, -0.0, 0.0, float("nan"), float("inf"), -float("inf"), 1e300, 1e-9, 2**63]


@pytest.mark.parametrize("hostile", HOSTILE_NAMES)
def test_hostile_names(url, r, hostile):
    before = r("DBSIZE")
    try:
        lock = Lock(hostile, ttl=5, auto_renew=False)
    except ValueError as e:
        assert "name" in str(e)
        assert r("DBSIZE") == before
        return
    assert lock.acquire(blocking=False)
    assert lock.owned()
    lock.release()
    q = Queue(hostile)
    q.enqueue(hostile)
    assert q.pop().id == hostile


def test_out_of_range_integers_are_value_errors_naming_the_argument(url, name):
    with pytest.raises(ValueError, match="min_replicas"):
        Lock(name, min_replicas=-1)
    with pytest.raises(ValueError, match="count"):
        Queue(name).pop(-1)


@pytest.mark.parametrize("number", HOSTILE_NUMBERS)
def test_hostile_numbers(url, r, name, number):
    """Each call either works or raises ValueError/OverflowError; none crashes."""
    holder = Lock(name)
    calls = [lambda: Lock(name, ttl=number), lambda: Lock(name, timeout=number),
             lambda: holder.acquire(timeout=number), lambda: Queue(name, visibility=number),
             lambda: Queue(name).enqueue("a", delay=number), lambda: Queue(name).pop(wait=min(number, 0.1)),
             lambda: Queue(name).dequeue("a", number), lambda: Lock(name).extend(number)]
    for call in calls:
        try:
            call()
        except (ValueError, OverflowError) as e:
            assert str(e)
        except ferrolock.LockNotOwnedError:
            pass  # extend of a lock not held, with a valid ttl
    if holder.token is not None:
        holder.release()


@pytest.mark.parametrize("bad", [None, 1, 1.5, b"bytes", ["list"], object()])
def test_wrong_types_are_type_errors(url, bad):
    with pytest.raises(TypeError):
        Lock(bad)
    with pytest.raises(TypeError):
        Queue(bad)
    if not isinstance(bad, list):
        with pytest.raises(TypeError):
            Queue("x").enqueue(bad)
    if not isinstance(bad, (int, float)):
        with pytest.raises(TypeError):
            Lock("x", ttl=bad if bad is not None else "1")
        with pytest.raises(TypeError):
            Lock("x").acquire(timeout=bad if bad is not None else "1")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=40), ttl=st.floats(allow_nan=True, allow_infinity=True),
       timeout=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
def test_property_arguments_are_accepted_or_rejected_cleanly(url, r, name, ttl, timeout):
    """Any name/ttl/timeout either works or raises ValueError naming the
    argument; nothing is written for rejected input."""
    # Keys of this test only: other tests' keys may expire meanwhile (DBSIZE would change).
    before = r("KEYS", "*Prop:*")
    try:
        lock = Lock(name, ttl=ttl, timeout=timeout, auto_renew=False, prefix="Prop:")
    except ValueError as e:
        assert any(w in str(e) for w in ("name", "ttl", "timeout")), str(e)
        assert r("KEYS", "*Prop:*") == before
        return
    assert 0 < ttl <= ferrolock_max_seconds()
    assert name != ""
    if lock.acquire(blocking=False):
        lock.release()
    for k in r("KEYS", "*Prop:*"):
        r("DEL", k)


def ferrolock_max_seconds() -> float:
    return 10 * 365 * 24 * 3600.0


def test_resp_errors_are_raised_by_the_helper(r):
    with pytest.raises(RespError):
        r("NOSUCHCOMMAND")
