"""Locks when a reply is lost: Redis paused (SIGSTOP, CLIENT PAUSE, DEBUG SLEEP)
past the client's timeout in the middle of an acquire, a wait or a release, and
a network that holds a command back or cuts a reply. Afterwards no lock is held
by a token nobody has, and a fresh acquire succeeds at once (issues 18, 26)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

import ferrolock
from ferrolock import Lock, LockError
from tests.support.proxy import Proxy
from tests.support.servers import RedisServer


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer("--enable-debug-command", "local") as s:
        yield s


def nothing_left(server: RedisServer, name: str, url: str | None = None) -> None:
    """No key is left under a token nobody has once the server answers again,
    and a fresh lock (of another client) acquires at once."""
    time.sleep(0.3)  # what the server received while paused runs first
    key = f"Lock:{name}"
    until = time.monotonic() + 10
    with server.client() as r:
        while r("EXISTS", key):
            assert time.monotonic() < until, f"{key} is still held by {r('GET', key)!r}"
            time.sleep(0.02)
    fresh = Lock(name, url=url or server.url, auto_renew=False)
    assert fresh.acquire(blocking=False), "a fresh lock acquires at once"
    fresh.release()


def in_thread(fn: Callable[[], object]) -> Callable[[], tuple[object, float]]:
    """Runs `fn` in a thread; the returned join gives (result or exception, seconds)."""
    out: dict[str, object] = {}
    start = time.monotonic()

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as e:  # reported to the test
            out["result"] = e
        out["took"] = time.monotonic() - start

    t = threading.Thread(target=run)
    t.start()

    def join() -> tuple[object, float]:
        t.join(30)
        assert not t.is_alive(), "the call hung"
        return out["result"], out["took"]  # type: ignore[return-value]

    return join


def test_a_try_lost_in_a_pause_leaves_no_hold_behind(server, name):
    lock = Lock(name, url=server.url + "?timeout=0.3")
    assert not lock.locked()  # warm the pool
    server.pause()
    try:
        start = time.monotonic()
        with pytest.raises(ferrolock.ConnectionError, match="undone"):
            lock.acquire(blocking=False)
        assert time.monotonic() - start < 0.3 + 0.5, "within one command timeout"
        assert lock.token is None
    finally:
        server.resume()
    nothing_left(server, name)


@pytest.mark.parametrize("fault", ["sigstop", "client-pause", "debug-sleep"])
def test_a_wait_through_a_pause_ends_in_time_and_leaves_nothing(server, name, fault):
    holder = Lock(name, url=server.url, auto_renew=False)
    assert holder.acquire(blocking=False)
    waiter = Lock(name, url=server.url + "?timeout=0.3&connect_timeout=0.3")
    join = in_thread(lambda: waiter.acquire(timeout=1.5))
    time.sleep(0.4)  # waiting now
    admin = server.client()
    if fault == "sigstop":
        server.pause()
        time.sleep(2.5)
        result, took = join()
        server.resume()
    elif fault == "client-pause":
        admin("CLIENT", "PAUSE", "2500", "ALL")
        result, took = join()
    else:
        sleeper = threading.Thread(target=lambda: server.cmd("DEBUG", "SLEEP", "2.5"))
        sleeper.start()
        result, took = join()
        sleeper.join()
    admin.close()
    assert result is not True, result
    assert took < 1.5 + 0.3 + 0.7, f"within its timeout plus one command timeout: {took:.2f} s ({result!r})"
    holder.release()
    nothing_left(server, name)


def test_an_acquire_waiting_through_a_short_pause_gets_the_lock(server, name):
    # The wait rides out the pause: its attempts' replies are lost, the same
    # token is tried again, and the holder's release reaches it afterwards.
    holder = Lock(name, url=server.url, auto_renew=False)
    assert holder.acquire(blocking=False)
    waiter = Lock(name, url=server.url + "?timeout=0.3&connect_timeout=0.3", auto_renew=False)
    join = in_thread(lambda: waiter.acquire(timeout=6))
    time.sleep(0.3)
    server.pause()
    time.sleep(1.0)
    server.resume()
    time.sleep(0.3)
    holder.release()
    result, _ = join()
    assert result is True, result
    with server.client() as r:
        assert r("GET", f"Lock:{name}") == waiter.token.encode()
    waiter.release()
    nothing_left(server, name)


def test_a_release_lost_in_a_pause_forgets_the_hold_and_is_completed_later(server, name):
    lock = Lock(name, url=server.url + "?timeout=0.3", ttl=30)  # renewed
    assert lock.acquire(blocking=False)
    server.pause()
    try:
        with pytest.raises(ferrolock.ConnectionError, match="completed in the background"):
            lock.release()
        assert lock.token is None, "no longer held: no renewal goes on"
    finally:
        server.resume()
    nothing_left(server, name)
    assert lock.acquire(blocking=False), "the same object acquires again at once"
    lock.release()


def test_network_faults_through_a_proxy(server, name):
    with Proxy(server.port) as proxy:
        url = proxy.url("?timeout=0.3")
        lock = Lock(name, url=url, auto_renew=False)
        # A reply cut after the command ran: the acquire finds its own hold,
        # the release reports success (not "not owned").
        proxy.cut_replies(1)
        assert lock.acquire(blocking=False)
        with server.client() as r:
            assert r("GET", f"Lock:{name}") == lock.token.encode()
        proxy.cut_replies(1)
        lock.release()
        assert not lock.lost
        # A command held back by the network past the caller's timeout and
        # delivered after the caller gave up: the ghost it sets is cleared by
        # the next contender at once.
        assert not lock.locked()
        proxy.stall()
        with pytest.raises(ferrolock.ConnectionError):
            lock.acquire(blocking=False)
        with server.client() as r:  # the abandonment is settled on a new connection
            until = time.monotonic() + 10
            while not any(r("SCARD", k) for k in r("KEYS", f"*Lock:{name}:ghosts")):
                assert time.monotonic() < until, "the abandoned token was recorded"
                time.sleep(0.01)
        proxy.resume()
        with server.client() as r:
            until = time.monotonic() + 5
            while not r("EXISTS", f"Lock:{name}"):
                assert time.monotonic() < until, "the late SET arrived"
                time.sleep(0.01)
            ghost = r("GET", f"Lock:{name}")
        other = Lock(name, url=server.url, auto_renew=False)
        assert other.acquire(blocking=False), "the ghost is cleared by the next contender"
        assert other.token.encode() != ghost
        other.release()


def test_a_redis_py_lock_without_expiry_is_waited_for_not_taken(server, name):
    r = redis.Redis(port=server.port)
    theirs = r.lock(name, timeout=None, thread_local=False)  # no TTL: redis-py's default
    assert theirs.acquire(blocking=False)
    ours = Lock(name, url=server.url, prefix="", auto_renew=False, ttl=2)
    assert not ours.acquire(blocking=False)
    assert not ours.acquire(timeout=0.5)
    assert r.pttl(name) == -1, "never given a TTL"
    assert theirs.owned(), "never taken over"
    threading.Timer(0.3, theirs.release).start()
    assert ours.acquire(timeout=5), "taken once redis-py released it"
    ours.release()
    r.close()


def test_a_thread_reacquiring_its_non_reentrant_lock_gets_lock_error(url, name):
    lock = Lock(name)
    assert lock.acquire()
    with pytest.raises(LockError, match="reentrant"):
        lock.acquire()  # would wait for itself forever (the watchdog renews)
    with pytest.raises(LockError):
        lock.acquire(timeout=5)
    with pytest.raises(LockError):
        with lock:
            pass
    assert lock.acquire(blocking=False) is False, "a try-once finds it busy"
    got = {}
    other = threading.Thread(target=lambda: got.setdefault("ok", lock.acquire(timeout=0.3)))
    other.start()
    other.join()
    assert got["ok"] is False, "another thread sharing the object waits"
    lock.release()


def test_errors_name_the_problem_the_server_and_the_timeout(server, name):
    # A URL pointing at an HTTP server.
    http = socket.create_server(("127.0.0.1", 0))
    port = http.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = http.accept()
            except OSError:
                return
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        with pytest.raises(ferrolock.ConnectionError, match="does not speak the Redis protocol") as caught:
            Lock(name, url=f"redis://127.0.0.1:{port}/0").acquire(blocking=False)
        assert f"127.0.0.1:{port}" in str(caught.value)
    finally:
        http.close()
    # A stall names the timeout that struck, its value, and the server.
    url = server.url + "?timeout=0.4"
    lock = Lock(name, url=url)
    assert not lock.locked()
    server.pause()
    try:
        with pytest.raises(ferrolock.ConnectionError) as caught:
            lock.locked()
    finally:
        server.resume()
    message = str(caught.value)
    assert "command timeout" in message and "0.400 s" in message and url in message, message

