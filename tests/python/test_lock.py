"""Lock behaviour through the Python API, against a real redis-server."""

from __future__ import annotations

import threading
import time

import pytest

import ferrolock
from ferrolock import Lock, LockLostError, LockNotOwnedError, LockTimeout
from tests.support.resp import Monitor


def key(name: str) -> str:
    return f"Lock:{name}"


def test_token_is_stored_and_cleared(url, r, name):
    lock = Lock(name)
    assert lock.token is None and lock.fencing_token is None
    assert lock.acquire()
    assert r.get(key(name)) == lock.token.encode()
    assert len(lock.token) == 32
    lock.release()
    assert lock.token is None
    assert r.get(key(name)) is None


def test_locked_and_owned_truth_table(url, name):
    a, b = Lock(name), Lock(name)
    assert (a.locked(), a.owned(), b.locked(), b.owned()) == (False, False, False, False)
    assert a.acquire(blocking=False)
    assert (a.locked(), a.owned(), b.locked(), b.owned()) == (True, True, True, False)
    a.release()
    assert b.acquire(blocking=False)
    assert (a.locked(), a.owned(), b.locked(), b.owned()) == (True, False, True, True)
    b.release()


def test_a_second_object_cannot_take_a_held_lock(url, name):
    a, b = Lock(name), Lock(name)
    assert a.acquire()
    assert not b.acquire(blocking=False)
    assert not b.acquire(timeout=0)
    assert not b.acquire(timeout=0.05)
    a.release()
    assert b.acquire(blocking=False)
    b.release()


def test_ttl_is_honoured(url, r, name):
    lock = Lock(name, ttl=10, auto_renew=False)
    assert lock.acquire()
    pttl = r("PTTL", key(name))
    assert 9000 < pttl <= 10000
    lock.release()
    short = Lock(name, ttl=0.2, auto_renew=False)
    assert short.acquire()
    time.sleep(0.35)
    assert not short.locked()
    with pytest.raises(LockNotOwnedError):
        short.release()


def test_blocking_timeout_returns_false_in_about_the_asked_time(url, name):
    a, b = Lock(name), Lock(name)
    assert a.acquire()
    start = time.monotonic()
    assert b.acquire(timeout=0.3) is False
    assert 0.28 <= time.monotonic() - start < 2.0
    b2 = Lock(name, timeout=0.2)
    start = time.monotonic()
    assert b2.acquire() is False  # the lock's own timeout
    assert 0.18 <= time.monotonic() - start < 2.0
    a.release()


def test_with_raises_lock_timeout(url, name):
    a = Lock(name)
    assert a.acquire()
    with pytest.raises(LockTimeout) as info:
        with Lock(name, timeout=0.1):
            pytest.fail("must not enter")
    assert isinstance(info.value, TimeoutError)
    assert name in str(info.value)
    a.release()
    with Lock(name, timeout=0.1) as held:
        assert held.owned()
    assert not a.locked()


def test_release_of_unheld_or_overwritten_lock_raises(url, r, name):
    lock = Lock(name)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lock.acquire()
    r("SET", key(name), "someone-else")
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert r.get(key(name)) == b"someone-else", "another owner's key untouched"
    assert lock.lost
    with pytest.raises(LockNotOwnedError):
        lock.extend()
    r("DEL", key(name))


def test_lock_lost_inside_with_raises_at_exit(url, r, name):
    with pytest.raises(LockLostError):
        with Lock(name, auto_renew=False):
            r("DEL", key(name))
    # Another exception propagating wins over LockLostError.
    with pytest.raises(KeyError):
        with Lock(name, auto_renew=False):
            r("DEL", key(name))
            raise KeyError("boom")


def test_release_inside_with_is_not_reported_as_lost(url, r, name):
    with pytest.raises(LockNotOwnedError) as caught:
        with Lock(name) as lock:
            lock.release()
    assert not isinstance(caught.value, LockLostError), caught.value
    assert not lock.lost and r("EXISTS", key(name)) == 0


def test_extend_replaces_the_ttl(url, r, name):
    lock = Lock(name, ttl=10, auto_renew=False)
    assert lock.acquire()
    lock.extend(100)
    assert 99000 < r("PTTL", key(name)) <= 100000
    lock.extend(2)
    assert 1000 < r("PTTL", key(name)) <= 2000
    lock.extend()
    assert r("PTTL", key(name)) > 9000
    lock.release()


def test_fencing_tokens_increase(url, name):
    seen = []
    for _ in range(20):
        with Lock(name) as lock:
            seen.append(lock.fencing_token)
    assert all(isinstance(f, int) for f in seen)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)


def test_fencing_token_is_drawn_only_while_held(url, r, name):
    late = Lock(name, auto_renew=False)
    assert late.acquire()
    r("DEL", key(name))  # as if it expired
    with Lock(name) as other:
        # The first read draws the token, and finds late's hold gone: an
        # error, not None, which a store might take for "unfenced".
        with pytest.raises(LockLostError, match="fencing token"):
            _ = late.fencing_token
        assert late.lost
        assert isinstance(other.fencing_token, int)
        assert other.fencing_token == other.fencing_token
    with pytest.raises(LockNotOwnedError):
        late.release()


def test_decorator_form(url, name):
    calls = []

    @Lock(name, timeout=5)
    def critical(x: int) -> int:
        """Doc kept."""
        calls.append(Lock(name).locked())
        return x * 2

    assert critical(21) == 42
    assert calls == [True]
    assert critical.__name__ == "critical" and critical.__doc__ == "Doc kept."
    assert not Lock(name).locked()
    with pytest.raises(TypeError):
        Lock(name)(42)


def test_bad_arguments_name_the_argument(url):
    with pytest.raises(ValueError, match="lock name"):
        Lock("")
    with pytest.raises(TypeError, match="name"):
        Lock(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Lock(None)  # type: ignore[arg-type]
    for bad in (-1, 0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            Lock("x", ttl=bad)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            Lock("x", timeout=bad)
        with pytest.raises(ValueError, match="timeout"):
            Lock("x").acquire(timeout=bad)
    with pytest.raises(ValueError, match="URL"):
        Lock("x", url="http://nope")
    with pytest.raises(ValueError, match="ttl"):
        Lock("x").extend(-5)


def test_reentrant_counts_and_touches_redis_twice(url, redis_server, name):
    lock = Lock(name, reentrant=True)
    lock.locked()  # connect first: connection set-up sends commands too
    with Monitor(redis_server.port) as mon:
        assert lock.acquire() and lock.acquire() and lock.acquire()
        lock.release()
        lock.release()
        lock.release()
    sent = [c for c in mon.commands if name in c]
    assert [c.split()[0] for c in sent] == ['"SET"', '"EVALSHA"'], sent  # SET NX PX, then the release
    plain = Lock(name)
    assert plain.acquire()
    assert not plain.acquire(blocking=False), "non-reentrant locks do not nest"
    plain.release()


@pytest.mark.parametrize(("kwargs", "keys"), [
    ({}, 6),  # the default prefix Lock: shares the lock with legacy pollers
    ({"legacy_interop": False}, 4),
    ({"prefix": "App:"}, 4),
    ({"prefix": "App:", "legacy_interop": True}, 6),
])
def test_legacy_interop_follows_the_prefix_unless_set(url, redis_server, name, kwargs, keys):
    """The release passes the keys of the legacy pollers' turns (6 keys, not
    4) only while legacy interop is on."""
    lock = Lock(name, **kwargs)
    assert lock.acquire(blocking=False)
    with Monitor(redis_server.port) as mon:
        lock.release()
        until = time.monotonic() + 5  # the release's line, read by the monitor's thread
        while not any("EVALSHA" in c and name in c for c in mon.commands) and time.monotonic() < until:
            time.sleep(0.01)
    # (Twice when the server did not know the script yet: NOSCRIPT, load, again.)
    sent = [c.split() for c in mon.commands if name in c]
    assert sent and {c[0] for c in sent} == {'"EVALSHA"'}, sent
    assert {c[2] for c in sent} == {f'"{keys}"'}, sent


def test_mutual_exclusion_8_threads_x_500(url, r, name):
    counter = f"{name}:value"
    r("SET", counter, 0)
    barrier = threading.Barrier(8)
    errors = []

    def work():
        lock = Lock(name, timeout=60)
        raw = type(r)(int(url.rsplit(":", 1)[1].split("/")[0]))
        barrier.wait()
        try:
            for _ in range(500):
                with lock:
                    v = int(raw.get(counter))
                    raw("SET", counter, v + 1)
        except Exception as e:
            errors.append(e)
        finally:
            raw.close()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert int(r.get(counter)) == 4000


def test_connection_error_is_clear_and_bounded(name):
    from tests.support.servers import free_port

    lock = Lock(name, url=f"redis://127.0.0.1:{free_port()}/0?connect_timeout=0.5")
    start = time.monotonic()
    with pytest.raises(ferrolock.ConnectionError) as info:
        lock.acquire(blocking=False)
    assert isinstance(info.value, ConnectionError)
    assert isinstance(info.value, ferrolock.FerrolockError)
    assert name in str(info.value)
    assert time.monotonic() - start < 2
    # A wait keeps trying until its timeout, then says for how long it did.
    start = time.monotonic()
    with pytest.raises(ferrolock.ConnectionError, match="gave up after") as info:
        lock.acquire(timeout=1)
    assert name in str(info.value)
    assert 1 <= time.monotonic() - start < 3


def test_repr_and_properties(url, name):
    lock = Lock(name, ttl=7, timeout=3)
    assert lock.name == name and lock.ttl == 7.0 and lock.timeout == 3.0
    assert "not held" in repr(lock)
