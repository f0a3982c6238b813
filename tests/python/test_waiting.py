"""Notification-driven waiting, fair mode, watchdog: behaviour, not timing budgets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ferrolock import Lock, LockLostError
from tests.support.resp import Monitor

HOLD_OR_WAIT = r"""
import sys, time
from ferrolock import Lock
name, mode, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
lock = Lock(name, ttl=ttl, fair=True)
assert lock.acquire(timeout=60)
print("acquired", flush=True)
time.sleep(600 if mode == "hold" else 0)
"""


def spawn(url: str, name: str, mode: str, ttl: float = 30.0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HOLD_OR_WAIT, name, mode, str(ttl)],
                            env={**os.environ, "REDIS_URL": url}, stdout=subprocess.PIPE, text=True)


def waiters(r, name: str) -> int:
    keys = r("KEYS", f"*Lock:{name}:waiters")
    return r("ZCARD", keys[0]) if keys else 0


def wait_until(cond, timeout: float = 10.0) -> None:
    until = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < until, "condition not reached"
        time.sleep(0.01)


def test_fair_mode_grants_in_arrival_order(url, r, name):
    holder = Lock(name, fair=True)
    assert holder.acquire()
    order: list[int] = []

    def waiter(i: int) -> None:
        lock = Lock(name, fair=True)
        assert lock.acquire(timeout=30)
        order.append(i)
        time.sleep(0.01)
        lock.release()

    threads = []
    for i in range(6):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda i=i: waiters(r, name) == i + 1)
    assert not Lock(name, fair=True).acquire(blocking=False), "no barging in fair mode"
    holder.release()
    for t in threads:
        t.join()
    assert order == list(range(6))


def test_a_killed_waiter_does_not_stall_the_line(url, r, name):
    holder = Lock(name, fair=True)
    assert holder.acquire()
    dead = spawn(url, name, "wait")
    wait_until(lambda: waiters(r, name) == 1)
    got: list[float] = []

    def second() -> None:
        lock = Lock(name, fair=True)
        assert lock.acquire(timeout=30)
        got.append(time.monotonic())
        lock.release()

    t = threading.Thread(target=second)
    t.start()
    wait_until(lambda: waiters(r, name) == 2)
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    dead.stdout.close()
    released = time.monotonic()
    holder.release()
    t.join(30)
    assert got, "the live waiter got the lock"
    # The dead head is detected at release (its subscription is gone): no lease wait.
    assert got[0] - released < 1.0


def test_a_killed_holders_waiters_proceed_after_the_ttl(url, name):
    holder = spawn(url, name, "hold", ttl=1.0)
    assert holder.stdout.readline().strip() == "acquired"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    holder.stdout.close()
    killed = time.monotonic()
    lock = Lock(name, fair=True)
    assert lock.acquire(timeout=30)
    assert time.monotonic() - killed < 1.0 + 1.0, "within TTL + 1 s"
    lock.release()


def test_watchdog_keeps_the_lock_past_3x_ttl_and_reports_loss(url, r, name):
    lock = Lock(name, ttl=0.6)  # auto_renew is the default; renewals every 0.2 s
    assert lock.acquire()
    time.sleep(2.0)
    assert lock.owned() and not lock.lost
    r("DEL", f"Lock:{name}")
    wait_until(lambda: lock.lost, timeout=3)
    try:
        with lock:
            pass
    except Exception:
        pass
    # LockLostError at the end of a with block whose lock was lost.
    try:
        with Lock(name, ttl=0.3) as held:
            r("DEL", f"Lock:{name}")
            wait_until(lambda: held.lost, timeout=3)
        raise AssertionError("expected LockLostError")
    except LockLostError:
        pass


def test_watchdog_wakes_early_for_a_shorter_lease(url, name):
    # The watchdog thread sleeps until the first renewal is due (here ~10 s
    # away); a lock with a shorter TTL registered meanwhile must wake it.
    with Lock(f"{name}-long", ttl=30):
        time.sleep(0.1)
        with Lock(name, ttl=0.6) as short:
            time.sleep(2.0)
            assert short.owned() and not short.lost


def watchdog_switches() -> int:
    """Voluntary context switches of this process's watchdog thread (Linux)."""
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        status = (task / "status").read_text()
        if status.startswith("Name:\tferrolock-watch"):
            return int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    raise AssertionError("no watchdog thread")


def test_acquire_release_does_not_wake_the_watchdog_each_time(url, name):
    lock = Lock(name, ttl=30)  # auto_renew is the default
    with lock:
        pass  # the thread exists, and sleeps until a renewal is due
    before = watchdog_switches()
    started = time.monotonic()
    for _ in range(300):
        with lock:
            pass
    busy = watchdog_switches() - before
    # Leases of earlier tests still held in this process fall due meanwhile:
    # count the switches of an idle period as long as the loop, and compare.
    before = watchdog_switches()
    time.sleep(time.monotonic() - started)
    idle = watchdog_switches() - before
    # Once per renewal due at most: none for the loop's 300 acquires (a little
    # slack for renewals falling due in one period and not the other).
    assert busy - idle < 10, (busy, idle)


def test_a_waiter_does_not_poll_redis(url, redis_server, name):
    holder = Lock(name)
    assert holder.acquire()
    waiter = Lock(name)
    with Monitor(redis_server.port) as mon:
        assert waiter.acquire(timeout=2.0) is False
    sent = [c for c in mon.commands if name in c or "SUBSCRIBE" in c.upper()]
    # A try, the subscription, a registering attempt, ~2 re-checks, the leave script.
    assert len(sent) <= 10, sent
    holder.release()


def test_release_wakes_the_waiter_fast(url, name):
    holder = Lock(name)
    assert holder.acquire()
    woke: list[float] = []

    def waiter() -> None:
        lock = Lock(name)
        assert lock.acquire(timeout=10)
        woke.append(time.monotonic())
        lock.release()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    released = time.monotonic()
    holder.release()
    t.join()
    # Below the 1 s re-check: it was the hand-over. The benchmark measures the real figure.
    assert woke[0] - released < 0.9
