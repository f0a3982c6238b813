"""Waits at scale and under faults: one subscription per process, a bounded
pool that shrinks, waits that ride out a killed and restarted server
(issue 26.3 and 26.4)."""

from __future__ import annotations

import threading
import time

import pytest

from ferrolock import Lock, LockNotOwnedError, Queue
from tests.support.servers import RedisServer


def clients(server: RedisServer) -> list[dict[str, str]]:
    """The server's client connections but the one asking."""
    listing = server.cmd("CLIENT", "LIST").decode()
    out = []
    for line in listing.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("cmd") not in ("client|list", "client"):
            out.append(fields)
    return out


def wait_until(cond, timeout: float, what: str) -> None:
    until = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < until, what
        time.sleep(0.05)


def test_500_waiting_threads_use_one_subscription_and_a_bounded_pool_that_shrinks():
    with RedisServer() as server:
        url = server.url
        holder = Lock("crowd", url=url, auto_renew=False)
        assert holder.acquire()
        done = []

        def waiter() -> None:
            lock = Lock("crowd", url=url, auto_renew=False)
            assert lock.acquire(timeout=120)
            time.sleep(0.001)
            lock.release()
            done.append(1)

        threads = [threading.Thread(target=waiter) for _ in range(500)]
        for t in threads:
            t.start()
        def registered() -> int:
            keys = server.cmd("KEYS", "*Lock:crowd:waiters")
            return server.cmd("ZCARD", keys[0]) if keys else 0

        wait_until(lambda: registered() == 500, 60, "500 waiters registered")
        waiting = clients(server)
        subscribers = [c for c in waiting if int(c.get("sub", 0)) + int(c.get("ssub", 0)) > 0]
        print(f"500 threads waiting: {len(waiting)} connections, {len(subscribers)} subscribed")
        assert len(subscribers) == 1, subscribers
        assert len(waiting) <= 1 + 32 + 1, f"one subscription and at most 32 pooled: {len(waiting)}"
        holder.release()
        for t in threads:
            t.join(timeout=120)
        assert len(done) == 500
        busy = len(clients(server))
        # Idle connections close after 5 s (all but two); the subscription
        # after 10 s without waiters.
        wait_until(lambda: len(clients(server)) <= 3, 30, "the pool shrank")
        print(f"after: {busy} connections at once, {len(clients(server))} a few seconds later")


def test_waits_ride_out_a_kill_and_a_restart_of_the_server():
    with RedisServer() as server:
        url = server.url + "?timeout=1&connect_timeout=0.5"
        holder = Lock("restart", url=url, auto_renew=False)
        assert holder.acquire()
        queue = Queue("restart", url=url)
        results: dict[str, object] = {}
        got = []

        def waiter(i: int) -> None:
            lock = Lock("restart", url=url, auto_renew=False)
            try:
                ok = lock.acquire(timeout=10)
            except Exception as e:
                results[f"waiter {i}"] = e
                return
            got.append(ok)
            if ok:
                time.sleep(0.01)
                lock.release()

        def consumer() -> None:
            try:
                results["task"] = queue.reserve(wait=40)
            except Exception as e:
                results["task"] = e

        threads = [threading.Thread(target=waiter, args=(i,)) for i in range(50)]
        threads.append(threading.Thread(target=consumer))
        for t in threads:
            t.start()
        time.sleep(0.5)  # all waiting
        server.stop()  # kill -9
        time.sleep(2)
        server.start()  # empty: the holder's lock is gone
        restarted = time.monotonic()
        queue.enqueue("job")
        for t in threads:
            t.join(timeout=60)
        errors = {k: v for k, v in results.items() if isinstance(v, Exception)}
        assert not errors, errors
        assert got == [True] * 50
        assert results["task"] is not None and results["task"].id == "job"
        print(f"50 waiters and a consumer done {time.monotonic() - restarted:.2f} s after the restart")
        with pytest.raises(LockNotOwnedError):
            holder.release()  # its hold died with the server


def test_a_wait_fails_at_its_deadline_if_the_server_stays_away():
    with RedisServer() as server:
        url = server.url + "?timeout=0.5&connect_timeout=0.5"
        holder = Lock("away", url=url, auto_renew=False)
        assert holder.acquire()
        lock = Lock("away", url=url, auto_renew=False)
        failure: list[BaseException] = []

        def wait() -> None:
            try:
                lock.acquire(timeout=3)
            except BaseException as e:
                failure.append(e)

        t = threading.Thread(target=wait)
        start = time.monotonic()
        t.start()
        time.sleep(0.3)
        server.stop()
        t.join(timeout=10)
        took = time.monotonic() - start
        assert failure, "the wait failed"
        message = str(failure[0])
        assert "gave up after" in message and "did not answer" in message, message
        assert 3 <= took < 3 + 0.5 + 1.5, f"within the timeout and one command timeout: {took:.2f} s"
